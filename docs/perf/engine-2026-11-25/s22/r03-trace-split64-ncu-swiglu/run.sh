#!/usr/bin/env bash
# s22 r03: chain traces (64 tokens) with the default attention split rule and with
# FLASHTREE_ATTN_SPLIT_KEYS=64, twice each, interleaved; ncu of the engine's gate/up kernel
# (qmm_q4k_swiglu_accum_nt3, bench-qmm's SwiGLU accumulating site at n = 22: the only n of that
# case that takes nt3), details + SASS-level source counters.
set -u
B=.gpu-bundle/bin
[ -d $B ] || tar -xJf .gpu-bundle/bin.tar.xz -C .gpu-bundle
OUT="${OUT:-.gpu-bundle/out}"; mkdir -p "$OUT"
M=/tmp/m27/qwen3.5-27b-q4_k_m.gguf; D=/tmp/m27/qwen3.5-27b-dflash; DQ=/tmp/m27/draft-q8_0.gguf
date
xz -dc .gpu-bundle/qwen3_6.tiktoken.xz > /tmp/qwen3_6.tiktoken
$B/flashtree synth --preset qwen3.5-27b --seed 1 --out /tmp/m27 --tiktoken /tmp/qwen3_6.tiktoken > /tmp/synth.log 2>&1
$B/flashtree convert --input $D --output $DQ --outtype q8_0 --target $M > /tmp/convert.log 2>&1
date
xz -dc .gpu-bundle/trace.ptx.xz > /tmp/trace.ptx
for r in 1 2; do
  for v in default split64; do
    e=(); [ $v = split64 ] && e=(FLASHTREE_ATTN_SPLIT_KEYS=64)
    env "${e[@]}" FLASHTREE_PTX=/tmp/trace.ptx timeout 100 $B/flashtree bench --model $M --draft $DQ --prompt-tokens 512 --tokens 64 --chain-trace > "$OUT/trace-$v-$r.txt" 2>&1
    echo "== $v $r"; grep -E "AR decode|forward of a 22|attn_tree|attention  " "$OUT/trace-$v-$r.txt" | head -12
  done
done
date
if command -v ncu > /dev/null; then
  k=qmm_q4k_swiglu_accum_nt3
  FLASHTREE_BENCH_FILTER="accum swiglu Q4_K 5120->2x17408" timeout 200 ncu --clock-control none -k "regex:^$k\$" --launch-skip 4 -c 1 --set full \
    --import-source no -o /tmp/$k $B/bench-qmm --bench no-criterion-case > /tmp/ncu-$k.log 2>&1
  tail -3 /tmp/ncu-$k.log
  ncu -i /tmp/$k.ncu-rep --page details --print-details all > "$OUT/ncu-$k.txt" 2>&1
  ncu -i /tmp/$k.ncu-rep --page source --csv --print-source sass 2> /dev/null | xz -9 > "$OUT/ncu-source-$k.csv.xz"
  grep -E "Duration|Warp Cycles Per Issued|Issue Slots Busy|DRAM Throughput|L2 Cache Throughput|Stall (Long|Wait|Barrier|Not Sel|Dispatch|Membar|Math|GMMA|Short)|Grid Size|Registers Per" "$OUT/ncu-$k.txt" | head -30
fi
date
