#!/usr/bin/env bash
# s23 r06 (nvidia-h200): the final build — every GPU test, then the bench phase (AR, 22/23-node
# verify, draft step, projections, oracle AL 8 with the loop's own tree alone; tree 32 / 4,
# chain 15, anchor-tree 22).
set -u
bash tools/gpu/engine_check.sh tests
bash tools/gpu/engine_check.sh bench
