#!/usr/bin/env bash
# A/B of bench-qmm binaries over every n (each binary embeds its own PTX and launch configuration),
# rounds interleaved so clock drift hits every binary alike:
#   tools/gpu/qmm_ab_all.sh "tagA=pathA tagB=pathB" "filter1;filter2" [rounds]
# Writes $OUT/abx-<tag>-r<round>.tsv and prints, per case, the best-of-rounds matmul-only fraction
# of each binary and the time ratio of each later binary to the first.
set -u
export FLASHTREE_COPY_GBPS="$(.gpu-bundle/bin/flashtree info --bench --quiet | sed -n 's/^copy_gbps=//p')"
echo "copy $FLASHTREE_COPY_GBPS GB/s"
IFS=';' read -r -a fs <<< "$2"
rounds="${3:-1}"
tags=""
for r in $(seq 1 "$rounds"); do
  for tb in $1; do
    tag="${tb%%=*}"; bin="${tb#*=}"
    [ "$r" = 1 ] && tags="$tags $tag"
    tsv="$OUT/abx-$tag-r$r.tsv"; : > "$tsv"
    for f in "${fs[@]}"; do
      FLASHTREE_BENCH_FILTER="$f" FLASHTREE_BENCH_SUMMARY="$tsv" "$bin" --bench no-criterion-case > /dev/null
    done
  done
done
python3 - "$OUT" "$rounds" $tags <<'PY'
import sys, glob, collections
out, rounds, tags = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
best = collections.defaultdict(dict)  # case -> tag -> (us, frac)
order = []
for tag in tags:
    for r in range(1, rounds + 1):
        for line in open(f"{out}/abx-{tag}-r{r}.tsv"):
            f = line.rstrip("\n").split("\t")
            if f[0] != "qmm-mm":
                continue
            us, frac = float(f[2]), float(f[4])
            if f[1] not in order:
                order.append(f[1])
            if tag not in best[f[1]] or us < best[f[1]][tag][0]:
                best[f[1]][tag] = (us, frac)
print("%-28s " % "case" + " ".join("%16s" % t for t in tags) + "   " + " ".join("%s/%s" % (t, tags[0]) for t in tags[1:]))
for c in order:
    b = best[c]
    row = " ".join("%8.1f %7.3f" % b[t] if t in b else "%16s" % "-" for t in tags)
    ratios = " ".join("%6.3f" % (b[t][0] / b[tags[0]][0]) for t in tags[1:] if t in b and tags[0] in b)
    print("%-28s %s   %s" % (c, row, ratios))
PY
