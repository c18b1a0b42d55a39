set -u
mkdir -p /tmp/b && tar -xJf .gpu-pack/bin.tar.xz -C /tmp/b; B=/tmp/b/bin
xz -dkf .gpu-pack/qwen3_6.tiktoken.xz; xz -dc .gpu-pack/trace.ptx.xz > /tmp/trace.ptx
M=/tmp/m27/qwen3.5-27b-q4_k_m.gguf; D=/tmp/m27/qwen3.5-27b-dflash; DQ=/tmp/m27/draft-q8_0.gguf
[ -f $M ] || $B/flashtree synth --preset qwen3.5-27b --seed 1 --out /tmp/m27 --tiktoken .gpu-pack/qwen3_6.tiktoken > /tmp/synth.log 2>&1
[ -f $DQ ] || $B/flashtree convert --input $D --output $DQ --outtype q8_0 --target $M > /tmp/convert.log 2>&1
timeout 150 $B/flashtree bench --model $M --draft $DQ --mode tree --oracle-depths 7 --prompt-tokens 512 --tokens 256 > $OUT/bench-tree-512.txt 2>&1
grep -E "AR decode|forward of|draft step|6.14|7.04|8.31|oracle depth 7|own proposals|rror|per round" $OUT/bench-tree-512.txt | head -16
sed -n '/breakdown of one tree/,/sum/p' $OUT/bench-tree-512.txt
for a in "--mode tree --budget 32" "--mode tree --budget 4" "--mode chain --budget 15" "--mode anchor-tree --budget 22"; do
  timeout 100 $B/flashtree bench --model $M --draft $DQ $a --oracle-depths 7 --prompt-tokens 512 --tokens 256 > /tmp/x.txt 2>&1
  echo "== $a"; grep -E "own proposals|oracle depth 7|rror" /tmp/x.txt; cat /tmp/x.txt >> $OUT/bench-modes.txt
done
timeout 150 $B/flashtree bench --model $M --draft $DQ --mode tree --oracle-depths 7 --prompt-tokens 8192 --tokens 64 > $OUT/bench-tree-8k.txt 2>&1
echo "== 8K"; grep -E "AR decode|forward of|draft step|8.31|oracle depth 7|rror|draft context" $OUT/bench-tree-8k.txt | head -10
FLASHTREE_PTX=/tmp/trace.ptx timeout 150 $B/flashtree bench --model $M --draft $DQ --prompt-tokens 512 --tokens 256 --chain-trace > $OUT/trace-512.txt 2>&1
grep -E "AR decode|forward of|rror|qmm in the chain|^  sum" $OUT/trace-512.txt | head -10
sed -n "/chain trace of one draft/,/largest/p" $OUT/trace-512.txt
