tar -xJf .gpu-bundle/bin.tar.xz -C .gpu-bundle; B=.gpu-bundle/bin
xz -dk .gpu-pack/qwen3_6.tiktoken.xz
M=/tmp/m27/qwen3.5-27b-q4_k_m.gguf; D=/tmp/m27/qwen3.5-27b-dflash
( $B/flashtree synth --preset qwen3.5-27b --seed 1 --out /tmp/m27 --tiktoken .gpu-pack/qwen3_6.tiktoken > $OUT/synth.log 2>&1
  $B/flashtree convert --input $D --output /tmp/m27/draft-q8_0.gguf --outtype q8_0 --target $M > $OUT/convert.log 2>&1; echo prep-done >> $OUT/synth.log ) &
export FLASHTREE_REQUIRE_GPU=1
$B/gpu-tests --test-threads=4 2>&1 | grep -v "^test .* ok$" > $OUT/tests.log
grep -E "test result|FAILED|panicked" $OUT/tests.log | sort | uniq -c | head
wait; tail -1 $OUT/synth.log
$B/flashtree bench --model $M --draft /tmp/m27/draft-q8_0.gguf --mode tree --oracle-depths 3,7,15 --prompt-tokens 512 --tokens 256 > $OUT/bench-tree-q8-512.txt 2>&1
grep -E "AR decode|22-node|draft context|draft step|budget 22" $OUT/bench-tree-q8-512.txt | head -12
$B/flashtree bench --model $M --draft /tmp/m27/draft-q8_0.gguf --mode tree --oracle-depths 7 --prompt-tokens 8192 --tokens 128 > $OUT/bench-tree-q8-8k.txt 2>&1
grep -E "AR decode|22-node|draft context|draft step|budget 22" $OUT/bench-tree-q8-8k.txt | head
