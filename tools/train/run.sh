#!/usr/bin/env bash
# Trains the demo pair on a GPU machine (see README.md); work files in $WORK (default OUT/work),
# results (log, packed target and drafts) in OUT. Usage:
#   bash tools/train/run.sh OUT            both stages (≈ 10 min on one H200)
#   bash tools/train/run.sh OUT target     stage 1: corpus, tokenizer, target → OUT/target.tar.xz.part-*
#   bash tools/train/run.sh OUT draft      stage 2: drafts for the target in .whl/target.tar.xz (or OUT/target)
# Needs python3 with torch 2.11 (CUDA), tokenizers 0.23, safetensors; transformers 5.23.0 comes
# from .whl/transformers-5.23.0.tar.xz (the unpacked PyPI wheel) when the machine has another one.
set -euo pipefail
OUT=$1
STAGE=${2:-all}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
WORK=${WORK:-$OUT/work}
mkdir -p "$OUT" "$WORK"
trap 'cp "$WORK/log.txt" "$OUT/log.txt" 2>/dev/null || true; cp "$WORK/drafts.json" "$OUT/" 2>/dev/null || true' EXIT
if [ -f "$ROOT/.whl/transformers-5.23.0.tar.xz" ]; then
  mkdir -p /tmp/ft-site && tar xJf "$ROOT/.whl/transformers-5.23.0.tar.xz" -C /tmp/ft-site
  export PYTHONPATH=/tmp/ft-site${PYTHONPATH:+:$PYTHONPATH}
fi
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=true
cd "$ROOT/tools/train"
# the shipped pair's step counts (models/README.md); `--seconds S` instead budgets by time
TARGET_ARGS=${TARGET_ARGS:---steps 692}
DRAFT_ARGS=${DRAFT_ARGS:---steps 1213 --n-self 16384 --self-seconds 0}
if [ "$STAGE" = all ] || [ "$STAGE" = target ]; then
  python3 train_target.py --out "$WORK" $TARGET_ARGS
  # ≤ 16 MiB pieces (what a device call can bring back)
  (cd "$WORK" && tar cf - target | xz -T0 -6 | split -b 15M -d - "$OUT/target.tar.xz.part-")
fi
if [ "$STAGE" = all ] || [ "$STAGE" = draft ]; then
  if [ ! -d "$WORK/target" ]; then
    tar xJf "$ROOT/.whl/target.tar.xz" -C "$WORK"
  fi
  python3 train_draft.py --out "$WORK" --target "$WORK/target" $DRAFT_ARGS
  (cd "$WORK" && for d in draft-*/; do tar cf "$OUT/${d%/}.tar" "${d%/}"; done)
fi
