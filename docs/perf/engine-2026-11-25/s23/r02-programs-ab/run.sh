#!/usr/bin/env bash
# s23 r02 (nvidia-h200): the three GPU tests r01 could not run (the demo pair's files had been
# left out of the carry), then the engine A/B at oracle AL 8: the session's starting build
# (`1bdc9c8`'s flashtree with e4f46f1's kernels: old), this build with one replay program
# (mid) and with the default two (new), two interleaved rounds.
set -u
B=.gpu-bundle/bin
[ -d $B ] || tar -xJf .gpu-bundle/bin.tar.xz -C .gpu-bundle
FLASHTREE_REQUIRE_GPU=1 timeout 200 $B/gpu-tests --test-threads=3 demo_pair serve > "$OUT/gpu-tests-demo-serve.log" 2>&1
echo "== gpu-tests demo_pair serve: exit $?"; grep -E "^test result|FAILED|panicked" "$OUT/gpu-tests-demo-serve.log" | head -6
AB_MID_ENV="FLASHTREE_GDN_PROGRAMS=1" bash tools/gpu/engine_check.sh ab
