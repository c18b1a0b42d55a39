#!/usr/bin/env bash
# A/B of two bench-qmm binaries (each embeds its own PTX and launch configuration):
#   tools/gpu/qmm_ab_bin.sh "tagA=pathA tagB=pathB" "filter1;filter2" [rounds]
# Writes $OUT/abbin-<tag>-r<round>.tsv and prints matmul-only fractions for n > 8.
set -u
export FLASHTREE_COPY_GBPS="$(.gpu-bundle/bin/flashtree info --bench --quiet | sed -n 's/^copy_gbps=//p')"
echo "copy $FLASHTREE_COPY_GBPS GB/s"
IFS=';' read -r -a fs <<< "$2"
rounds="${3:-1}"
for r in $(seq 1 "$rounds"); do
  for tb in $1; do
    tag="${tb%%=*}"; bin="${tb#*=}"
    tsv="$OUT/abbin-$tag-r$r.tsv"; : > "$tsv"
    for f in "${fs[@]}"; do
      FLASHTREE_BENCH_FILTER="$f" FLASHTREE_BENCH_SUMMARY="$tsv" "$bin" --bench no-criterion-case > /dev/null
    done
    echo "== $tag round $r"
    awk -F'\t' '$1=="qmm-mm" && $2 !~ / n=1$/ && $2 !~ / n=8$/ {printf "%-28s %8s %6s | ", $2, $3, $5; if (++k % 3 == 0) print ""}' "$tsv"
    echo
  done
done
