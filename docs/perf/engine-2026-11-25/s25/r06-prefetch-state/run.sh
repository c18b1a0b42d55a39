#!/usr/bin/env bash
# s25 r06: the DeltaNet conv/norm launch (gdn_prep / gdn_prep_pairs) asks L2 for the layer's
# committed state before its wait (prefetch.global.L2, one 128-byte line per thread in turn), so
# the replay's pre-wait state load hits L2: the GPU tests, then the engine A/B — this bundle's
# `flashtree` with FLASHTREE_GDN_PREFETCH_STATE=0 (old) against the default (new), two
# interleaved rounds, tree bench at oracle AL 8; then chain traces, one per side.
set -u
B=.gpu-bundle/bin
[ -d $B ] || tar -xJf .gpu-bundle/bin.tar.xz -C .gpu-bundle
OUT="${OUT:-.gpu-bundle/out}"; mkdir -p "$OUT"
date
FLASHTREE_REQUIRE_GPU=1 timeout 200 $B/gpu-tests --test-threads=4 > "$OUT/gpu-tests.log" 2>&1
echo "== gpu-tests exit $?"; grep -E "^test result|FAILED|panicked" "$OUT/gpu-tests.log" | head -12
AB_OLD_ENV="FLASHTREE_GDN_PREFETCH_STATE=0" bash tools/gpu/engine_check.sh ab 2>&1 | tail -30
M=/tmp/m27/qwen3.5-27b-q4_k_m.gguf; DQ=/tmp/m27/draft-q8_0.gguf
xz -dc .gpu-bundle/trace.ptx.xz > /tmp/trace.ptx
for side in off on; do
  env=(); [ $side = off ] && env=(FLASHTREE_GDN_PREFETCH_STATE=0)
  env "${env[@]}" FLASHTREE_PTX=/tmp/trace.ptx timeout 120 $B/flashtree bench --model $M --draft $DQ \
    --prompt-tokens 512 --tokens 32 --chain-trace > "$OUT/trace-$side.txt" 2>&1
  echo "== trace, prefetch $side"; grep -E "^chain trace of one (AR|tree)|^  sum [0-9.]* ms from|    (gdn_|qmm_q5k_nt)" "$OUT/trace-$side.txt" | head -20
done
