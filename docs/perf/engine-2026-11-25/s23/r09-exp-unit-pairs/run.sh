#!/usr/bin/env bash
# s23 r09 (nvidia-h200): the second machine session for the twenty-second session's probe
# `probe-kquant-unit-pairs` (one wgmma group per two units in the K-quant warpgroup kernels, same
# bits; s22 r12: 23-node verify −0.07 ms in one session): `exp` (the qmm, draft and engine GPU
# tests under it, then two interleaved rounds against this build's kernels).
set -u
bash tools/gpu/engine_check.sh exp probe-kquant-unit-pairs
