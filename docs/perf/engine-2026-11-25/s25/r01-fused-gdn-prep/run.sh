#!/usr/bin/env bash
# s25 r01: gdn_prep's conv/norm step inside the DeltaNet replay block (gdn_recur_prep_dk*):
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
