#!/usr/bin/env bash
# s24 r03: the super-block formats' products as two sums (even / odd units, a numerics change):
# the GPU tests on this build, then `engine_check.sh ptxab` — this bundle's kernels against the
# previous build's (.gpu-bundle/ptx-head.ptx.xz, 72b3faa's kernels), two interleaved rounds of
# bench-qmm Q4_K 5120->17408 and the engine's AR step, 22/23-node verify and draft step.
set -u
B=.gpu-bundle/bin
[ -d $B ] || tar -xJf .gpu-bundle/bin.tar.xz -C .gpu-bundle
OUT="${OUT:-.gpu-bundle/out}"; mkdir -p "$OUT"
date
FLASHTREE_REQUIRE_GPU=1 timeout 240 $B/gpu-tests --test-threads=4 > "$OUT/gpu-tests.log" 2>&1
echo "== gpu-tests exit $?"; grep -E "^test result|FAILED|panicked" "$OUT/gpu-tests.log" | head -12
PTXAB_FILTER="Q4_K 5120->17408" bash tools/gpu/engine_check.sh ptxab 2>&1 | tail -32
