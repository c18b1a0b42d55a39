#!/usr/bin/env bash
# s24 r08: the round's four small uploads (the verify's node batch + replay schedule, the commit
# path, the draft's context and block batches) through page-locked staging buffers
# (`gpu::PinnedUpload`): the GPU tests on this build, then `engine_check.sh ab` against
# e42518f's `flashtree` (.gpu-bundle/old-flashtree.xz; the same kernels); oracle AL 8, 128
# tokens, two rounds.
set -u
B=.gpu-bundle/bin
[ -d $B ] || tar -xJf .gpu-bundle/bin.tar.xz -C .gpu-bundle
OUT="${OUT:-.gpu-bundle/out}"; mkdir -p "$OUT"
date
FLASHTREE_REQUIRE_GPU=1 timeout 240 $B/gpu-tests --test-threads=4 > "$OUT/gpu-tests.log" 2>&1
echo "== gpu-tests exit $?"; grep -E "^test result|FAILED|panicked" "$OUT/gpu-tests.log" | head -12
bash tools/gpu/engine_check.sh ab 2>&1 | tail -30
grep -E '^==|waiting for the host' "$OUT/ab-old-new.txt"
