#!/usr/bin/env bash
# s23 r11 (nvidia-h200): the r06/r08 bench's 5-node tree forward measured 7.21–7.23 ms against
# 6.85–6.86 in s21/s22 — one or two replay programs at small trees: `flashtree bench --mode ar
# --tree-nodes N` for N = 4, 5, 8, 12, 16 with FLASHTREE_GDN_PROGRAMS=1 and 2, two rounds.
set -u
B=.gpu-bundle/bin
[ -d $B ] || tar -xJf .gpu-bundle/bin.tar.xz -C .gpu-bundle
M=/tmp/m27/qwen3.5-27b-q4_k_m.gguf
[ -f /tmp/qwen3_6.tiktoken ] || xz -dc .gpu-bundle/qwen3_6.tiktoken.xz > /tmp/qwen3_6.tiktoken
[ -f $M ] || $B/flashtree synth --preset qwen3.5-27b --seed 1 --out /tmp/m27 --tiktoken /tmp/qwen3_6.tiktoken > /tmp/synth.log 2>&1
[ -f $M ] || { echo "no 27B target"; exit 1; }
: > "$OUT/small-trees.txt"
for r in 1 2; do
  for n in 4 5 8 12 16; do
    for p in 1 2; do
      FLASHTREE_GDN_PROGRAMS=$p timeout 60 $B/flashtree bench --model $M --mode ar --prompt-tokens 512 --tokens 8 --tree-nodes $n > /tmp/x.txt 2>&1
      echo "round $r, n $n, programs $p: $(grep -E 'forward of a' /tmp/x.txt | head -1)" >> "$OUT/small-trees.txt"
    done
  done
done
cat "$OUT/small-trees.txt"
