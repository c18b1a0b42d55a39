#!/usr/bin/env bash
# s25 r03: the fused DeltaNet conv/norm, v2 (raw rows in the slot region, the conv out of place two
# nodes at a time, the q/k sums by interleaved warp butterflies in gdn_prep's order):
# the GPU tests (108: the new bitwise test of the fused replay against the two launches), the
# deltanet bench (fused and two-launch lines), then the engine A/B — this bundle's `flashtree`
# with FLASHTREE_GDN_FUSED_PREP=0 (old: gdn_prep + gdn_recur) against the default (new: fused),
# two interleaved rounds, tree bench at oracle AL 8.
set -u
B=.gpu-bundle/bin
[ -d $B ] || tar -xJf .gpu-bundle/bin.tar.xz -C .gpu-bundle
OUT="${OUT:-.gpu-bundle/out}"; mkdir -p "$OUT"
date
FLASHTREE_REQUIRE_GPU=1 timeout 200 $B/gpu-tests --test-threads=4 > "$OUT/gpu-tests.log" 2>&1
echo "== gpu-tests exit $?"; grep -E "^test result|FAILED|panicked" "$OUT/gpu-tests.log" | head -12
timeout 60 $B/bench-deltanet --bench > "$OUT/bench-deltanet.txt" 2>&1
grep -E "gdn_forward" "$OUT/bench-deltanet.txt"
AB_OLD_ENV="FLASHTREE_GDN_FUSED_PREP=0" bash tools/gpu/engine_check.sh ab 2>&1 | tail -30
# Chain traces, one per side: the DeltaNet kernels' shares at one node and 22.
M=/tmp/m27/qwen3.5-27b-q4_k_m.gguf; DQ=/tmp/m27/draft-q8_0.gguf
xz -dc .gpu-bundle/trace.ptx.xz > /tmp/trace.ptx
for side in two fused; do
  env=(); [ $side = two ] && env=(FLASHTREE_GDN_FUSED_PREP=0)
  env "${env[@]}" FLASHTREE_PTX=/tmp/trace.ptx timeout 120 .gpu-bundle/bin/flashtree bench --model $M --draft $DQ \
    --prompt-tokens 512 --tokens 32 --chain-trace > "$OUT/trace-$side.txt" 2>&1
  echo "== trace, $side"; grep -E "^chain trace of one (AR|tree)|^  sum|    (gdn_|qmm_q5k_nt)" "$OUT/trace-$side.txt" | head -20
done
