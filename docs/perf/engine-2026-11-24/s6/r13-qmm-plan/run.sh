set -u
mkdir -p /tmp/b && tar -xJf .gpu-pack/bin.tar.xz -C /tmp/b; B=/tmp/b/bin
xz -dk .gpu-pack/qwen3_6.tiktoken.xz; xz -dc .gpu-pack/trace.ptx.xz > /tmp/trace.ptx
M=/tmp/m27/qwen3.5-27b-q4_k_m.gguf; D=/tmp/m27/qwen3.5-27b-dflash; DQ=/tmp/m27/draft-q8_0.gguf
( $B/flashtree synth --preset qwen3.5-27b --seed 1 --out /tmp/m27 --tiktoken .gpu-pack/qwen3_6.tiktoken > /tmp/synth.log 2>&1
  $B/flashtree convert --input $D --output $DQ --outtype q8_0 --target $M > /tmp/convert.log 2>&1; echo prep-done >> /tmp/synth.log ) &
export FLASHTREE_REQUIRE_GPU=1
timeout 330 $B/gpu-tests --test-threads=4 --nocapture 2>&1 | grep -v "^test .* ok$" > $OUT/tests.log
grep -E "test result|FAILED|panicked at" $OUT/tests.log | sort | uniq -c | head -20
grep -E "panicked" -A4 $OUT/tests.log | head -40
unset FLASHTREE_REQUIRE_GPU
for v in 1 0; do
  for f in "swiglu Q4_K" "Q6_K 5120->248320"; do
    FLASHTREE_QMM_FULL_WAVES=$v FLASHTREE_BENCH_FILTER="$f" $B/bench-qmm 2>&1 | grep -E "BENCH (qmm-mm|qmm-swiglu) " | grep -E "n=(1|22) " | sed "s/^/full=$v /" >> $OUT/qmm.txt
  done
done
cat $OUT/qmm.txt
wait; tail -1 /tmp/synth.log
for v in 1 0 1; do
  FLASHTREE_QMM_FULL_WAVES=$v $B/flashtree bench --model $M --draft $DQ --mode tree --oracle-depths 7 --prompt-tokens 512 --tokens 128 > /tmp/x.txt 2>&1
  echo "== full=$v 512"; grep -E "AR decode|forward of|draft step|8.31|oracle depth 7|own proposals|rror" /tmp/x.txt | head -8; cat /tmp/x.txt >> $OUT/bench-512-$v.txt
done
FLASHTREE_PTX=/tmp/trace.ptx $B/flashtree bench --model $M --prompt-tokens 512 --tokens 64 --chain-trace > $OUT/trace-512.txt 2>&1
grep -E "AR decode|forward of|rror|qmm in the chain|^  sum|swiglu" $OUT/trace-512.txt | head -20
