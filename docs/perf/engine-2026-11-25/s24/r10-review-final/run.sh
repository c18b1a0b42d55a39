#!/usr/bin/env bash
# s24 r10: the review build (e104689: the draft's stacking decided once; kernels' PTX unchanged):
# the GPU tests, then `engine_check.sh bench` (every mode at oracle AL 8 on the 27B pair, 256
# tokens, each checked equal to AR; the step breakdowns).
set -u
B=.gpu-bundle/bin
[ -d $B ] || tar -xJf .gpu-bundle/bin.tar.xz -C .gpu-bundle
OUT="${OUT:-.gpu-bundle/out}"; mkdir -p "$OUT"
date
FLASHTREE_REQUIRE_GPU=1 timeout 200 $B/gpu-tests --test-threads=4 > "$OUT/gpu-tests.log" 2>&1
echo "== gpu-tests exit $?"; grep -E "^test result|FAILED|panicked" "$OUT/gpu-tests.log" | head -12
bash tools/gpu/engine_check.sh bench 2>&1 | tail -40
