set -u
mkdir -p /tmp/b && tar -xJf .gpu-pack/bin.tar.xz -C /tmp/b; B=/tmp/b/bin
for f in "Q4_K 6144->5120" "Q4_K 17408->5120" "Q6_K 17408->5120" "Q4_K 5120->12288"; do
  for k in def 2 3 4 5 6; do
    for c in 1 0; do
      if [ $k = def ]; then unset FLASHTREE_QMM_KSPLIT; else export FLASHTREE_QMM_KSPLIT=$k; fi
      FLASHTREE_QMM_CLUSTER=$c FLASHTREE_BENCH_FILTER="$f" timeout 60 $B/bench-qmm 2>&1 | grep -E "BENCH qmm-mm |INFO qmm-cluster" | grep -E "n=(1|22)( |:)" | sed "s/^/k=$k c=$c /" >> $OUT/sweep.txt
    done
  done
done
unset FLASHTREE_QMM_KSPLIT
grep INFO $OUT/sweep.txt | grep "c=1" | awk '{print $1, $5, $6, $7, $9, $11, $16, $17}'
grep BENCH $OUT/sweep.txt | awk '{print $1, $2, $5, $6, $7, $8, $11}'
