tar -xJf .gpu-bundle/bin.tar.xz -C .gpu-bundle; B=.gpu-bundle/bin
xz -dk .gpu-pack/qwen3_6.tiktoken.xz
M=/tmp/m27/qwen3.5-27b-q4_k_m.gguf
$B/flashtree synth --preset qwen3.5-27b --seed 1 --out /tmp/m27 --no-draft --tiktoken .gpu-pack/qwen3_6.tiktoken > $OUT/synth.log 2>&1 &
export FLASHTREE_REQUIRE_GPU=1
$B/gpu-tests --test-threads=4 2>&1 | grep -v "^test .* ok$" > $OUT/tests.log
grep -E "test result|FAILED|panicked" $OUT/tests.log | sort | uniq -c | head
wait
for k in 128 256 512; do
  FLASHTREE_ATTN_SPLIT_KEYS=$k $B/flashtree bench --model $M --prompt-tokens 512 --tokens 96 > $OUT/bench-512-split$k.txt 2>&1
  echo "ctx 512, split keys $k: $(grep -h 'AR decode\|22-node' $OUT/bench-512-split$k.txt | tr '\n' ' ')"
done
FLASHTREE_ATTN_SPLIT_KEYS=256 $B/flashtree bench --model $M --prompt-tokens 8192 --tokens 48 > $OUT/bench-8k-split256.txt 2>&1
echo "ctx 8K, split keys 256: $(grep -h 'AR decode\|22-node' $OUT/bench-8k-split256.txt | tr '\n' ' ')"
