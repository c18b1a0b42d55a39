set -u
mkdir -p /tmp/b && tar -xJf .gpu-pack/bin.tar.xz -C /tmp/b; B=/tmp/b/bin
xz -dc .gpu-pack/flashtree-old.xz > /tmp/flashtree-old; chmod +x /tmp/flashtree-old
xz -dc .gpu-pack/bench-deltanet-old.xz > /tmp/bench-deltanet-old; chmod +x /tmp/bench-deltanet-old
xz -dkf .gpu-pack/qwen3_6.tiktoken.xz; xz -dc .gpu-pack/trace.ptx.xz > /tmp/trace.ptx
M=/tmp/m27/qwen3.5-27b-q4_k_m.gguf; D=/tmp/m27/qwen3.5-27b-dflash; DQ=/tmp/m27/draft-q8_0.gguf
date
[ -f $M ] || $B/flashtree synth --preset qwen3.5-27b --seed 1 --out /tmp/m27 --tiktoken .gpu-pack/qwen3_6.tiktoken > /tmp/synth.log 2>&1
[ -f $DQ ] || $B/flashtree convert --input $D --output $DQ --outtype q8_0 --target $M > /tmp/convert.log 2>&1
date
for v in new old new old; do
  D2=$B/bench-deltanet; [ $v = old ] && D2=/tmp/bench-deltanet-old
  echo "== deltanet $v: $(timeout 60 $D2 --bench 2>&1 | grep -E '^BENCH deltanet gdn_forward' | awk '{print $3, $4, $5, $6}' | tr '\n' ' ')" | tee -a $OUT/ab.txt
done
for r in 1; do
  for v in new old; do
    F=$B/flashtree; [ $v = old ] && F=/tmp/flashtree-old
    for t in 22 23; do
      timeout 60 $F bench --model $M --prompt-tokens 512 --tokens 32 --tree-nodes $t --seed $r > /tmp/x.txt 2>&1
      echo "== $v $t r$r: $(grep -E 'forward of a' /tmp/x.txt) | $(grep -E '^  dn recur' /tmp/x.txt | tail -1)" | tee -a $OUT/ab.txt
    done
  done
done
date
timeout 150 $B/flashtree bench --model $M --draft $DQ --mode tree --oracle-depths 7 --prompt-tokens 512 --tokens 256 > $OUT/bench-tree-512.txt 2>&1
grep -E "AR decode|forward of|draft step|8.31|oracle depth 7|own proposals|rror" $OUT/bench-tree-512.txt | head -12
FLASHTREE_PTX=/tmp/trace.ptx timeout 100 $B/flashtree bench --model $M --prompt-tokens 512 --tokens 64 --chain-trace > $OUT/trace-512.txt 2>&1
grep -E "forward of|rror|^  sum|gdn_recur" $OUT/trace-512.txt | head -8
date
FLASHTREE_REQUIRE_GPU=1 timeout 300 $B/gpu-tests --test-threads=4 > $OUT/tests.log 2>&1; echo "tests rc $?"
grep -E "test result|FAILED|panicked" $OUT/tests.log | head
date
