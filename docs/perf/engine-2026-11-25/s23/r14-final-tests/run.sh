#!/usr/bin/env bash
# s23 r14 (nvidia-h200): the last build (two replay programs from 8 nodes) — every GPU test, and the
# 5-, 8- and 23-node forwards.
set -u
B=.gpu-bundle/bin
[ -d $B ] || tar -xJf .gpu-bundle/bin.tar.xz -C .gpu-bundle
bash tools/gpu/engine_check.sh tests
M=/tmp/m27/qwen3.5-27b-q4_k_m.gguf
[ -f /tmp/qwen3_6.tiktoken ] || xz -dc .gpu-bundle/qwen3_6.tiktoken.xz > /tmp/qwen3_6.tiktoken
[ -f $M ] || $B/flashtree synth --preset qwen3.5-27b --seed 1 --out /tmp/m27 --tiktoken /tmp/qwen3_6.tiktoken > /tmp/synth.log 2>&1
: > "$OUT/trees.txt"
for n in 5 8 23; do
  timeout 60 $B/flashtree bench --model $M --mode ar --prompt-tokens 512 --tokens 8 --tree-nodes $n > /tmp/x.txt 2>&1
  echo "n $n: $(grep -E 'forward of a' /tmp/x.txt | head -1)" >> "$OUT/trees.txt"
done
cat "$OUT/trees.txt"
