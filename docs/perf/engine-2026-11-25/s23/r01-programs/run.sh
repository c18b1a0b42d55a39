#!/usr/bin/env bash
# s23 r01 (nvidia-h200): the GPU tests under the default (two programs from 4 to 24 nodes) and
# under four programs, then bench-deltanet's gdn_forward at 1 and 22 nodes for 1–4 programs,
# two interleaved rounds.
set -u
B=.gpu-bundle/bin
[ -d $B ] || tar -xJf .gpu-bundle/bin.tar.xz -C .gpu-bundle
bash tools/gpu/engine_check.sh tests
FLASHTREE_GDN_PROGRAMS=4 FLASHTREE_REQUIRE_GPU=1 timeout 200 $B/gpu-tests --test-threads=4 deltanet engine > "$OUT/gpu-tests-programs4.log" 2>&1
echo "== gpu-tests deltanet engine, 4 programs: exit $?"; grep -E "^test result|FAILED|panicked" "$OUT/gpu-tests-programs4.log" | head -6
: > "$OUT/bench-deltanet.txt"
for r in 1 2; do
  for p in 1 2 3 4; do
    echo "== round $r, programs $p" >> "$OUT/bench-deltanet.txt"
    FLASHTREE_GDN_PROGRAMS=$p timeout 60 $B/bench-deltanet --bench 2>&1 | grep -E "gdn_forward|gdn_commit|rror" >> "$OUT/bench-deltanet.txt"
  done
done
cat "$OUT/bench-deltanet.txt"
