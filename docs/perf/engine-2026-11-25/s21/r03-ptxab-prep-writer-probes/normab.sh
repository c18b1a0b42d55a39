B=.gpu-bundle/bin; OUT=.gpu-bundle/out; mkdir -p $OUT; : > $OUT/norm-ab.txt
for r in 1 2; do for v in bundle probe-prep-no-writer probe-prep-no-sums; do
  e=(); [ $v = bundle ] || e=(FLASHTREE_PTX=/tmp/ptx-$v.ptx)
  echo "== round $r, $v" >> $OUT/norm-ab.txt
  env "${e[@]}" timeout 60 $B/bench-norm --bench no-criterion-case 2>&1 | grep -E "qmm_prep_norm" >> $OUT/norm-ab.txt
done; done
cat $OUT/norm-ab.txt
