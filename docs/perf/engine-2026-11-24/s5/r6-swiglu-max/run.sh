set -u
mkdir -p /tmp/b && tar -xJf .gpu-pack/bin.tar.xz -C /tmp/b; B=/tmp/b/bin
xz -dk .gpu-pack/qwen3_6.tiktoken.xz; xz -dc .gpu-pack/trace.ptx.xz > /tmp/trace.ptx
M=/tmp/m27/qwen3.5-27b-q4_k_m.gguf; D=/tmp/m27/qwen3.5-27b-dflash; DQ=/tmp/m27/draft-q8_0.gguf
( $B/flashtree synth --preset qwen3.5-27b --seed 1 --out /tmp/m27 --tiktoken .gpu-pack/qwen3_6.tiktoken > /tmp/synth.log 2>&1
  $B/flashtree convert --input $D --output $DQ --outtype q8_0 --target $M > /tmp/convert.log 2>&1; echo prep-done >> /tmp/synth.log ) &
export FLASHTREE_REQUIRE_GPU=1
$B/gpu-tests --test-threads=4 --nocapture 2>&1 | grep -v "^test .* ok$" > $OUT/tests.log
grep -E "test result|FAILED|panicked at" $OUT/tests.log | sort | uniq -c | head -20
grep -E "panicked" -A3 $OUT/tests.log | head -20
unset FLASHTREE_REQUIRE_GPU
wait; tail -1 /tmp/synth.log
FLASHTREE_BENCH_FILTER="swiglu Q4_K" $B/bench-qmm 2>&1 | grep -E "BENCH.*(qmm-prep|qmm-swiglu)" > $OUT/bench-qmm-prep.txt; cat $OUT/bench-qmm-prep.txt
for v in on off; do
  E=""; [ $v = off ] && E="FLASHTREE_SWIGLU_MAX=0"
  env $E $B/flashtree bench --model $M --draft $DQ --mode tree --oracle-depths 7 --prompt-tokens 512 --tokens 256 > $OUT/bench-$v-512.txt 2>&1
  echo "== swiglu max $v"; grep -E "AR decode|forward of|draft step|8.31|oracle depth 7|own proposals|rror" $OUT/bench-$v-512.txt | head -10
done
FLASHTREE_PTX=/tmp/trace.ptx $B/flashtree bench --model $M --prompt-tokens 512 --tokens 64 --chain-trace > $OUT/trace-512.txt 2>&1
grep -E "AR decode|forward of|rror|qmm in the chain|^  prep|qmm_prep_x" $OUT/trace-512.txt
