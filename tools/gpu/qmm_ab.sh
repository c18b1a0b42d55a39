# A/B of PTX variants (same binaries): ab.sh "v1 v2 ..." "filter1;filter2" tag
set -u
P=$PWD/.gpu-bundle/ptx
export FLASHTREE_COPY_GBPS="$(.gpu-bundle/bin/flashtree info --bench --quiet | sed -n 's/^copy_gbps=//p')"
echo "copy $FLASHTREE_COPY_GBPS"
IFS=';' read -r -a fs <<< "$2"
for v in $1; do
  tsv=$OUT/ab-$3-$v.tsv; : > $tsv
  for f in "${fs[@]}"; do
    FLASHTREE_PTX=$P/$v.ptx FLASHTREE_BENCH_FILTER="$f" FLASHTREE_BENCH_SUMMARY=$tsv .gpu-bundle/bin/bench-qmm --bench no-criterion-case > /dev/null
  done
done
for v in $1; do echo "== $v"; awk -F'\t' '$1=="qmm-mm" && $2 !~ / n=1$/ && $2 !~ / n=8$/ {printf "%-30s %9s %6s | ", $2, $3, $5} NR%6==0 {print ""}' $OUT/ab-$3-$v.tsv; echo; done
