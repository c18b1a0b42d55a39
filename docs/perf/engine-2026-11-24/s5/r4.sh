set -u
mkdir -p /tmp/b && tar -xJf .gpu-pack/bin.tar.xz -C /tmp/b; B=/tmp/b/bin
xz -dc .gpu-pack/attn2.ptx.xz > /tmp/attn2.ptx
FLASHTREE_REQUIRE_GPU=1 $B/gpu-tests both_attention_merges --nocapture > $OUT/r4.log 2>&1
grep -E "error|panicked|test result" $OUT/r4.log | head
echo "== default"; $B/bench-attention 2>&1 | grep BENCH | tee -a $OUT/r4.log
echo "== minctasm2"; FLASHTREE_PTX=/tmp/attn2.ptx $B/bench-attention 2>&1 | grep BENCH | tee -a $OUT/r4.log
