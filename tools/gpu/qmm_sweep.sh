#!/usr/bin/env bash
# A/B sweep of one qmm tuning variable on the GPU machine, from the bundle (no criterion runs).
#   tools/gpu/qmm_sweep.sh VAR "v1 v2 ..." "filter1;filter2;..." [tag]
# e.g. tools/gpu/qmm_sweep.sh FLASHTREE_QMM_L2AHEAD "0 2 4" "Q4_K 5120->17408;F16 17408->5120"
# Writes $OUT/sweep-<tag>-<VAR>=<v>.tsv (the bench summary format) and prints n = 1 / 22 lines.
set -euo pipefail
var="$1"; values="$2"; filters="$3"; tag="${4:-s}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
b="$here/.gpu-bundle/bin"
out="${OUT:-$here/.gpu-bundle/out}"
mkdir -p "$out"
if [ -z "${FLASHTREE_COPY_GBPS:-}" ]; then
  FLASHTREE_COPY_GBPS="$("$b/flashtree" info --bench --quiet | sed -n 's/^copy_gbps=//p')"
  export FLASHTREE_COPY_GBPS
fi
echo "copy ceiling ${FLASHTREE_COPY_GBPS} GB/s"
IFS=';' read -r -a fs <<< "$filters"
for v in $values; do
  tsv="$out/sweep-$tag-$v.tsv"
  : > "$tsv"
  for f in "${fs[@]}"; do
    env "$var=$v" FLASHTREE_BENCH_FILTER="$f" FLASHTREE_BENCH_SUMMARY="$tsv" \
      "$b/bench-qmm" --bench no-criterion-case > /dev/null
  done
  echo "== $var=$v"
  awk -F'\t' '$1=="qmm-mm" && ($2 ~ / n=1$/ || $2 ~ / n=22$/) {printf "%-34s %9s us %6s\n", $2, $3, $5}' "$tsv"
done
