#!/usr/bin/env bash
# s25 r07: the review build (the two-sums accumulator choice through one helper, PTX byte-identical;
# the draft's top-k tokens kept in the downloaded vector): the GPU tests, then
# `engine_check.sh bench` (every mode at oracle AL 8 on the 27B pair, 256 tokens, each checked
# equal to AR; the step breakdowns).
set -u
B=.gpu-bundle/bin
[ -d $B ] || tar -xJf .gpu-bundle/bin.tar.xz -C .gpu-bundle
OUT="${OUT:-.gpu-bundle/out}"; mkdir -p "$OUT"
date
FLASHTREE_REQUIRE_GPU=1 timeout 200 $B/gpu-tests --test-threads=4 > "$OUT/gpu-tests.log" 2>&1
echo "== gpu-tests exit $?"; grep -E "^test result|FAILED|panicked" "$OUT/gpu-tests.log" | head -12
bash tools/gpu/engine_check.sh bench 2>&1 | tail -40
