#!/usr/bin/env bash
# s23 r07 (nvidia-h200): set_capture keeping the graphs when the layers are unchanged — `ab` against
# r06's flashtree (old-flashtree.xz), oracle AL 8, 128 tokens (16 rounds, where the first rounds
# weigh most), two interleaved rounds; then the engine and spec GPU tests.
set -u
B=.gpu-bundle/bin
[ -d $B ] || tar -xJf .gpu-bundle/bin.tar.xz -C .gpu-bundle
bash tools/gpu/engine_check.sh ab
FLASHTREE_REQUIRE_GPU=1 timeout 200 $B/gpu-tests --test-threads=4 engine spec draft > "$OUT/gpu-tests-engine-spec-draft.log" 2>&1
echo "== gpu-tests engine spec draft: exit $?"; grep -E "^test result|FAILED|panicked" "$OUT/gpu-tests-engine-spec-draft.log" | head -6
