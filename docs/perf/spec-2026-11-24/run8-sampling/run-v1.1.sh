mkdir -p /tmp/b && tar -xJf .gpu-pack/bin.tar.xz -C /tmp/b; B=/tmp/b/bin
FLASHTREE_REQUIRE_GPU=1 $B/gpu-tests --test-threads=4 sample 2>&1 | grep -v "^test .* ok$" > $OUT/tests-sample.log
grep -E "test result|FAILED|panicked" $OUT/tests-sample.log | head -10
$B/bench-sample --bench 2>&1 | grep -v "^$" > $OUT/bench-sample.txt; grep -E "sample_rows" $OUT/bench-sample.txt | head -12
