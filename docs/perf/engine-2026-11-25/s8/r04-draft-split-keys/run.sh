set -u
mkdir -p /tmp/b && tar -xJf .gpu-pack/bin.tar.xz -C /tmp/b; B=/tmp/b/bin
xz -dc .gpu-pack/flashtree-old.xz > /tmp/flashtree-old; chmod +x /tmp/flashtree-old
xz -dkf .gpu-pack/qwen3_6.tiktoken.xz; xz -dc .gpu-pack/trace.ptx.xz > /tmp/trace.ptx
M=/tmp/m27/qwen3.5-27b-q4_k_m.gguf; D=/tmp/m27/qwen3.5-27b-dflash; DQ=/tmp/m27/draft-q8_0.gguf
date
[ -f $M ] || $B/flashtree synth --preset qwen3.5-27b --seed 1 --out /tmp/m27 --tiktoken .gpu-pack/qwen3_6.tiktoken > /tmp/synth.log 2>&1
[ -f $DQ ] || $B/flashtree convert --input $D --output $DQ --outtype q8_0 --target $M > /tmp/convert.log 2>&1
date
for r in 1 2; do
  for v in new old; do
    F=$B/flashtree; [ $v = old ] && F=/tmp/flashtree-old
    timeout 150 $F bench --model $M --draft $DQ --mode tree --oracle-depths 7 --prompt-tokens 512 --tokens 256 > /tmp/x.txt 2>&1
    echo "== $v r$r" | tee -a $OUT/ab.txt; grep -E "AR decode|forward of a 2|draft step|8.31|oracle depth 7|own proposals|rror" /tmp/x.txt | tee -a $OUT/ab.txt
  done
done
date
timeout 150 $B/flashtree bench --model $M --draft $DQ --mode tree --oracle-depths 7 --prompt-tokens 8192 --tokens 64 > $OUT/bench-tree-8k.txt 2>&1
echo "== 8K new"; grep -E "AR decode|forward of|draft step|8.31|oracle depth 7|own proposals|rror" $OUT/bench-tree-8k.txt | head -10
FLASHTREE_PTX=/tmp/trace.ptx timeout 150 $B/flashtree bench --model $M --draft $DQ --prompt-tokens 512 --tokens 256 --chain-trace > $OUT/trace-draft.txt 2>&1
sed -n '/chain trace of one draft/,/largest/p' $OUT/trace-draft.txt; grep -E "attn_tree_mma|attn_tree_combine" $OUT/trace-draft.txt | head -4
date
FLASHTREE_REQUIRE_GPU=1 timeout 300 $B/gpu-tests --test-threads=4 > $OUT/tests.log 2>&1; echo "tests rc $?"
grep -E "test result|FAILED|panicked" $OUT/tests.log | head
date
