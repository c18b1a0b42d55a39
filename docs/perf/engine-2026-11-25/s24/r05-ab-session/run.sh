#!/usr/bin/env bash
# s24 r05: the session's net effect, interleaved on one machine: `engine_check.sh ab` with
# old = this build's `flashtree` under the twenty-third session's kernels (.gpu-bundle/ptx-head.ptx.xz,
# 72b3faa = f4e79bc's kernels) and one context k/v product per draft layer (the s23 behaviour),
# new = this build (two sums, every layer's context k/v in one product); oracle AL 8, 128
# tokens, two rounds.
set -u
xz -dc .gpu-bundle/ptx-head.ptx.xz > /tmp/s23.ptx
AB_OLD_ENV="FLASHTREE_PTX=/tmp/s23.ptx FLASHTREE_DRAFT_CONTEXT_KV=per-layer" bash tools/gpu/engine_check.sh ab
