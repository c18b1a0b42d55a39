set -u
mkdir -p /tmp/b && tar -xJf .gpu-pack/bin.tar.xz -C /tmp/b; B=/tmp/b/bin
date
FLASHTREE_REQUIRE_GPU=1 timeout 300 $B/gpu-tests --test-threads=4 > $OUT/tests.log 2>&1; echo "tests rc $?"
grep -E "test result|FAILED|panicked" $OUT/tests.log | head
timeout 60 $B/bench-deltanet --bench 2>&1 | grep -E "^BENCH deltanet gdn_forward" | tee $OUT/deltanet.txt
date
xz -dkf .gpu-pack/qwen3_6.tiktoken.xz
M=/tmp/m27/qwen3.5-27b-q4_k_m.gguf; D=/tmp/m27/qwen3.5-27b-dflash; DQ=/tmp/m27/draft-q8_0.gguf
[ -f $M ] || $B/flashtree synth --preset qwen3.5-27b --seed 1 --out /tmp/m27 --tiktoken .gpu-pack/qwen3_6.tiktoken > /tmp/synth.log 2>&1
[ -f $DQ ] || $B/flashtree convert --input $D --output $DQ --outtype q8_0 --target $M > /tmp/convert.log 2>&1
timeout 150 $B/flashtree bench --model $M --draft $DQ --mode tree --oracle-depths 7 --prompt-tokens 512 --tokens 256 --budget 31 > $OUT/bench-tree31.txt 2>&1
grep -E "AR decode|forward of|draft step|8.31|oracle depth 7|own proposals|rror" $OUT/bench-tree31.txt | head -12
date
