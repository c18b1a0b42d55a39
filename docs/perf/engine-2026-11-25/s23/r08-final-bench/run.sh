#!/usr/bin/env bash
# s23 r08 (nvidia-h200): the session's last build (`7e96b75`, r07's bundle): bench (every mode at
# oracle AL 8 over 256 tokens, projections) and long (8K context, chain traces).
set -u
bash tools/gpu/engine_check.sh bench
bash tools/gpu/engine_check.sh long
