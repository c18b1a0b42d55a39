mkdir -p /tmp/b && tar -xJf .gpu-pack/bin.tar.xz -C /tmp/b; B=/tmp/b/bin
export FLASHTREE_REQUIRE_GPU=1
$B/gpu-tests --test-threads=4 2>&1 | grep -v "^test .* ok$" > $OUT/tests.log
grep -E "test result|FAILED|panicked" $OUT/tests.log | head
unset FLASHTREE_REQUIRE_GPU
mkdir -p $OUT/suite
$B/flashtree bench --backend gpu --prompts .gpu-pack/bench_he.jsonl --prompts .gpu-pack/bench_gsm.jsonl --prompts .gpu-pack/bench_math.jsonl --tokens 128 --out $OUT/suite > $OUT/suite/table.txt 2>&1; echo "suite rc $?"; tail -16 $OUT/suite/table.txt
printf 'def fibonacci(n):\n/stats\n' | timeout 60 $B/flashtree chat --backend gpu --mode tree > $OUT/chat.txt 2>&1; echo "chat rc $?"; tail -6 $OUT/chat.txt
