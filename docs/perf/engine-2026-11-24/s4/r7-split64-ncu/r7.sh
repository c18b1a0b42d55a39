set -u
mkdir -p /tmp/b && tar -xJf .gpu-pack/bin.tar.xz -C /tmp/b; B=/tmp/b/bin
xz -dk .gpu-pack/qwen3_6.tiktoken.xz
M=/tmp/m27/qwen3.5-27b-q4_k_m.gguf; D=/tmp/m27/qwen3.5-27b-dflash
( $B/flashtree synth --preset qwen3.5-27b --seed 1 --out /tmp/m27 --tiktoken .gpu-pack/qwen3_6.tiktoken > $OUT/synth.log 2>&1
  $B/flashtree convert --input $D --output /tmp/m27/draft-q8_0.gguf --outtype q8_0 --target $M > $OUT/convert.log 2>&1; echo prep-done >> $OUT/synth.log ) &
ncu --clock-control none -k regex:gdn_recur_dk128 --launch-skip 970 -c 2 --set full $B/bench-deltanet --bench > $OUT/ncu-recur-n22.txt 2>&1
grep -E "gdn_recur|Duration|Warp Cycles Per Issued|Issue Slots Busy|Achieved Occupancy|stalled waiting|represents about" $OUT/ncu-recur-n22.txt | head -20
wait; tail -1 $OUT/synth.log
for v in 128 64 128b 64b; do
  export FLASHTREE_ATTN_SPLIT_KEYS=${v%b}
  $B/flashtree bench --model $M --draft /tmp/m27/draft-q8_0.gguf --mode tree --prompt-tokens 512 --tokens 128 > $OUT/bench-split$v.txt 2>&1
  echo "== $v"; grep -E "AR decode|forward of|  attention|rror" $OUT/bench-split$v.txt | head -6
done
for v in 128 64; do
  export FLASHTREE_ATTN_SPLIT_KEYS=$v
  $B/flashtree bench --model $M --mode ar --prompt-tokens 2048 --tokens 64 > $OUT/bench-2k-split$v.txt 2>&1
  echo "== 2K $v"; grep -E "AR decode|forward of|rror" $OUT/bench-2k-split$v.txt | head -4
done
