set -u
mkdir -p /tmp/b && tar -xJf .gpu-pack/bin.tar.xz -C /tmp/b; B=/tmp/b/bin
for k in 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16; do
  FLASHTREE_QMM_KSPLIT=$k FLASHTREE_BENCH_FILTER="Q4_K 17408->5120" timeout 40 $B/bench-qmm 2>&1 | grep -E "INFO qmm-cluster" >> $OUT/residency.txt
done
cut -c1-140 $OUT/residency.txt
