#!/usr/bin/env bash
# s24 r02, phase 1 (`bash run.sh tests`): the GPU tests on this build; bench-sample (top-k)
# under the previous kernels (.gpu-bundle/old-ptx.ptx.xz, c36299f) and this build's, two
# interleaved rounds. Phase 2 (`bash run.sh ab`): engine_check.sh ab, both sides under the
# previous kernels — old = one context k/v product per layer, new = every layer's context k/v
# in one product; oracle AL 8.
set -u
B=.gpu-bundle/bin
[ -d $B ] || tar -xJf .gpu-bundle/bin.tar.xz -C .gpu-bundle
OUT="${OUT:-.gpu-bundle/out}"; mkdir -p "$OUT"
xz -dc .gpu-bundle/old-ptx.ptx.xz > /tmp/old.ptx
date
case "${1:-}" in
tests)
  FLASHTREE_REQUIRE_GPU=1 timeout 300 $B/gpu-tests --test-threads=4 > "$OUT/gpu-tests.log" 2>&1
  echo "== gpu-tests exit $?"; grep -E "^test result|FAILED|panicked" "$OUT/gpu-tests.log" | head -12
  : > "$OUT/bench-sample.txt"
  for r in 1 2; do
    for v in old new; do
      e=(); [ $v = old ] && e=(FLASHTREE_PTX=/tmp/old.ptx)
      echo "== round $r, $v" >> "$OUT/bench-sample.txt"
      env "${e[@]}" timeout 120 $B/bench-sample --bench no-criterion-case 2>&1 | grep -E "topk|argmax" >> "$OUT/bench-sample.txt"
    done
  done
  cat "$OUT/bench-sample.txt"
  ;;
ab)
  # (Phase 1 measured the top-k change slower: both sides run the previous kernels.)
  AB_OLD_ENV="FLASHTREE_PTX=/tmp/old.ptx FLASHTREE_DRAFT_CONTEXT_KV=per-layer" \
    AB_NEW_ENV="FLASHTREE_PTX=/tmp/old.ptx" bash tools/gpu/engine_check.sh ab
  ;;
esac
date
