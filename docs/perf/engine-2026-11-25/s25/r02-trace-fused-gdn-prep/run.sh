#!/usr/bin/env bash
# s25 r02: where r01's fused DeltaNet conv/norm lost in the chain — chain traces (the chain-trace
# build of r01's bundle, 08a54e0) of the AR step and the 22-node forward with the fused replay
# (default) and with the two launches (FLASHTREE_GDN_FUSED_PREP=0), two rounds interleaved.
set -u
B=.gpu-bundle/bin
[ -d $B ] || tar -xJf .gpu-bundle/bin.tar.xz -C .gpu-bundle
OUT="${OUT:-.gpu-bundle/out}"; mkdir -p "$OUT"
bash tools/gpu/engine_check.sh pair > /dev/null 2>&1
M=/tmp/m27/qwen3.5-27b-q4_k_m.gguf; DQ=/tmp/m27/draft-q8_0.gguf
xz -dc .gpu-bundle/trace.ptx.xz > /tmp/trace.ptx
for r in 1 2; do
  for side in two fused; do
    env=(); [ $side = two ] && env=(FLASHTREE_GDN_FUSED_PREP=0)
    env "${env[@]}" FLASHTREE_PTX=/tmp/trace.ptx timeout 150 $B/flashtree bench --model $M --draft $DQ \
      --prompt-tokens 512 --tokens 64 --chain-trace > "$OUT/trace-$side-$r.txt" 2>&1
    echo "== round $r, $side"
    grep -E "^chain trace of one (AR|tree)|^  (qmm|dn |attention|prep|norm)|^  sum|gdn_|qmm_q5k_nt|qmm_prep_norm_accum" "$OUT/trace-$side-$r.txt" | grep -v "draft" | head -40
  done
done
