#!/usr/bin/env bash
# s25 r05: for the next session's long-context work — ncu of the tree attention's split pass
# (`attn_tree_mma_hd256`, 27B: 24 heads, 4 KV heads, head dim 256) at n_past 8192, one node and 22
# nodes (bench-attention's 4th and 5th... cases: 200 launches of the kernel per case, so skip 420 /
# 620), `--set full`, clock not locked.
set -u
B=.gpu-bundle/bin
[ -d $B ] || tar -xJf .gpu-bundle/bin.tar.xz -C .gpu-bundle
OUT="${OUT:-.gpu-bundle/out}"; mkdir -p "$OUT"
for c in "n1:420" "n22:620"; do
  name="${c%%:*}"; skip="${c#*:}"
  timeout 280 ncu --clock-control none -k "regex:^attn_tree_mma_hd256\$" --launch-skip "$skip" -c 1 --set full \
    -o "/tmp/attn-$name" $B/bench-attention --bench > "/tmp/ncu-attn-$name.log" 2>&1
  echo "== attn_tree_mma_hd256 8K $name (launch-skip $skip)" >> "$OUT/ncu-attn-8k.txt"
  ncu -i "/tmp/attn-$name.ncu-rep" --page details --print-details all >> "$OUT/ncu-attn-8k.txt" 2>&1
done
grep -E "^== |Grid Size|Registers Per|Duration|Achieved Occupancy|Theoretical Occupancy|Warp Cycles Per Issued|Issue Slots Busy|DRAM Throughput|L2 Cache Throughput|Block Limit|Stall|Tensor|Executed Ipc A" "$OUT/ncu-attn-8k.txt" | head -70
