set -u
mkdir -p /tmp/b && tar -xJf .gpu-pack/bin.tar.xz -C /tmp/b; B=/tmp/b/bin
ncu --clock-control none -k regex:gdn_recur_dk128 --launch-skip 970 -c 1 --set full -o /tmp/recur $B/bench-deltanet --bench > $OUT/ncu-run.log 2>&1
ncu -i /tmp/recur.ncu-rep --page details --print-details all > $OUT/recur-details.txt 2>&1
ncu -i /tmp/recur.ncu-rep --page source --csv --print-source sass > $OUT/recur-sass.csv 2>&1
grep -E "Duration|Warp Cycles Per Issued|Issue Slots Busy|Achieved Active Warps|Executed Instructions  " $OUT/recur-details.txt | head
ls -la $OUT; head -c 600 $OUT/recur-sass.csv
