set -u
mkdir -p /tmp/b && tar -xJf .gpu-pack/bin.tar.xz -C /tmp/b; B=/tmp/b/bin
xz -dkf .gpu-pack/qwen3_6.tiktoken.xz; xz -dc .gpu-pack/trace.ptx.xz > /tmp/trace.ptx
M=/tmp/m27/qwen3.5-27b-q4_k_m.gguf; D=/tmp/m27/qwen3.5-27b-dflash; DQ=/tmp/m27/draft-q8_0.gguf
date
[ -f $M ] || $B/flashtree synth --preset qwen3.5-27b --seed 1 --out /tmp/m27 --tiktoken .gpu-pack/qwen3_6.tiktoken > /tmp/synth.log 2>&1
[ -f $DQ ] || $B/flashtree convert --input $D --output $DQ --outtype q8_0 --target $M > /tmp/convert.log 2>&1
date
FLASHTREE_PTX=/tmp/trace.ptx timeout 150 $B/flashtree bench --model $M --draft $DQ --prompt-tokens 512 --tokens 256 --chain-trace > $OUT/trace-draft.txt 2>&1
echo "rc $?"
sed -n '/chain trace of one draft/,/chain trace of one AR/p' $OUT/trace-draft.txt | head -60
grep -E "rror|draft step" $OUT/trace-draft.txt | head
date
