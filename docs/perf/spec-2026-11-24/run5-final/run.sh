tar -xJf .gpu-bundle/bin.tar.xz -C .gpu-bundle; B=.gpu-bundle/bin
export FLASHTREE_REQUIRE_GPU=1
$B/gpu-tests --test-threads=4 2>&1 | grep -v "^test .* ok$" > $OUT/tests-4threads.log
grep -E "test result|FAILED|panicked" $OUT/tests-4threads.log | sort | uniq -c | head
$B/gpu-tests --test-threads=8 qmm 2>&1 | grep -E "test result|FAILED" | head -3
$B/flashtree generate --prompt "def fibonacci(n):" --max-tokens 64 2> $OUT/first-command.err | head -c 400; echo; tail -6 $OUT/first-command.err
