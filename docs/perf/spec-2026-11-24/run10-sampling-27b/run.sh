mkdir -p /tmp/b && tar -xJf .gpu-pack/bin.tar.xz -C /tmp/b; B=/tmp/b/bin
xz -dk .gpu-pack/qwen3_6.tiktoken.xz
M=/tmp/m27/qwen3.5-27b-q4_k_m.gguf
$B/flashtree synth --preset qwen3.5-27b --seed 1 --out /tmp/m27 --no-draft --tiktoken .gpu-pack/qwen3_6.tiktoken > $OUT/synth.log 2>&1
P="$(python3 -c "print(' '.join(['the quick brown fox jumps over the lazy dog'] * 40))")"
for rule in "greedy" "--temperature 0.7" "--temperature 0.7 --top-k 20 --top-p 0.95" "--temperature 0.7 --top-p 0.8 --min-p 0.05"; do
  args=""; [ "$rule" != greedy ] && args="$rule --seed 3"
  $B/flashtree generate --backend gpu --model $M --mode ar --max-tokens 128 --prompt "$P" $args > /tmp/gen.out 2> $OUT/gen-$(echo $rule | tr ' .' '__').txt
  echo "$rule: $(grep -h 'decode:' $OUT/gen-$(echo $rule | tr ' .' '__').txt)"
done
