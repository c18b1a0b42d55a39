set -u
mkdir -p /tmp/b /tmp/l2 && tar -xJf .gpu-pack/bin.tar.xz -C /tmp/b; B=/tmp/b/bin
xz -dk .gpu-pack/qwen3_6.tiktoken.xz
for f in a0 a2 a4 a8 a4t; do xz -dc .gpu-pack/$f.ptx.xz > /tmp/l2/$f.ptx; done
M=/tmp/m27/qwen3.5-27b-q4_k_m.gguf; D=/tmp/m27/qwen3.5-27b-dflash; DQ=/tmp/m27/draft-q8_0.gguf
( $B/flashtree synth --preset qwen3.5-27b --seed 1 --out /tmp/m27 --tiktoken .gpu-pack/qwen3_6.tiktoken > /tmp/synth.log 2>&1
  $B/flashtree convert --input $D --output $DQ --outtype q8_0 --target $M > /tmp/convert.log 2>&1; echo prep-done >> /tmp/synth.log ) &
for a in a0 a2 a4 a8; do
  for f in "Q4_K 5120->17408" "Q4_K 17408->5120" "Q6_K 5120->248320"; do
    FLASHTREE_PTX=/tmp/l2/$a.ptx FLASHTREE_BENCH_FILTER="$f" $B/bench-qmm 2>&1 | grep -E "BENCH qmm-mm" | sed "s/^/$a /" >> $OUT/qmm.txt
  done
done
grep -E "n=(1|22) " $OUT/qmm.txt
wait; tail -1 /tmp/synth.log
for a in a0 a4 a2 a8 a0; do
  FLASHTREE_PTX=/tmp/l2/$a.ptx $B/flashtree bench --model $M --draft $DQ --mode tree --oracle-depths 7 --prompt-tokens 512 --tokens 128 > /tmp/bench-$a.txt 2>&1
  echo "== $a"; grep -E "AR decode|forward of|draft step|8.31|oracle depth 7|rror" /tmp/bench-$a.txt | head -8; cat /tmp/bench-$a.txt >> $OUT/bench.txt
done
for a in trace a4t; do
  P=/tmp/l2/$a.ptx; [ $a = trace ] && { xz -dc .gpu-pack/trace.ptx.xz > /tmp/trace.ptx; P=/tmp/trace.ptx; }
  FLASHTREE_PTX=$P $B/flashtree bench --model $M --prompt-tokens 512 --tokens 64 --chain-trace > $OUT/trace-$a.txt 2>&1
  echo "== trace $a"; grep -E "AR decode|forward of|rror|qmm in the chain|^  sum" $OUT/trace-$a.txt
done
