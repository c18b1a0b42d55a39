set -u
mkdir -p /tmp/b && tar -xJf .gpu-pack/bin.tar.xz -C /tmp/b; B=/tmp/b/bin
timeout 200 ncu --clock-control none -k regex:gdn_recur_dk128 --launch-skip 970 -c 1 --set full -o /tmp/recur $B/bench-deltanet --bench > /tmp/ncu-run.log 2>&1
tail -2 /tmp/ncu-run.log
ncu -i /tmp/recur.ncu-rep --page details --print-details all > /tmp/recur-details.txt 2>&1; xz -9 -c /tmp/recur-details.txt > $OUT/recur-details.txt.xz
ncu -i /tmp/recur.ncu-rep --page source --csv --print-source sass > /tmp/recur-sass.csv 2>&1; xz -9 -c /tmp/recur-sass.csv > $OUT/recur-sass.csv.xz
grep -E "Duration|Warp Cycles Per Issued|Issue Slots Busy|Achieved Active Warps|Executed Instructions  |Stall (Long|Short|Wait|Barrier|Not Sel|No Inst|Branch)|Grid Size|Dynamic Shared" /tmp/recur-details.txt | head -20
