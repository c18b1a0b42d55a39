set -u
mkdir -p /tmp/b && tar -xJf .gpu-pack/bin.tar.xz -C /tmp/b; B=/tmp/b/bin
xz -dk .gpu-pack/qwen3_6.tiktoken.xz
export PEER_WORK=/tmp/peer
bash tools/peer/llamacpp/llama_bench.sh start > $OUT/peer-start.log 2>&1
M=/tmp/m27/qwen3.5-27b-q4_k_m.gguf; D=/tmp/m27/qwen3.5-27b-dflash
( $B/flashtree synth --preset qwen3.5-27b --seed 1 --out /tmp/m27 --tiktoken .gpu-pack/qwen3_6.tiktoken > $OUT/synth.log 2>&1
  $B/flashtree convert --input $D --output /tmp/m27/draft-q8_0.gguf --outtype q8_0 --target $M > $OUT/convert.log 2>&1
  $B/flashtree convert --input $D --output /tmp/m27/draft-bf16.gguf --outtype bf16 --target $M >> $OUT/convert.log 2>&1; echo prep-done >> $OUT/synth.log ) &
export FLASHTREE_REQUIRE_GPU=1
$B/gpu-tests --test-threads=4 2>&1 | grep -v "^test .* ok$" > $OUT/tests.log
grep -E "test result|FAILED|panicked" $OUT/tests.log | sort | uniq -c | head
wait; tail -1 $OUT/synth.log
unset FLASHTREE_REQUIRE_GPU
$B/flashtree bench --model $M --draft /tmp/m27/draft-q8_0.gguf --mode tree --oracle-depths 7 --prompt-tokens 512 --tokens 256 > $OUT/bench-tree-q8-512.txt 2>&1
grep -E "AR decode|22-node|draft step|budget 22|equal" $OUT/bench-tree-q8-512.txt | head -12
$B/flashtree bench --model $M --draft /tmp/m27/draft-q8_0.gguf --mode chain --budget 15 --oracle-depths 15 --prompt-tokens 160 --tokens 128 > $OUT/bench-chain-q8-160.txt 2>&1
grep -E "AR decode|draft step|chain|equal" $OUT/bench-chain-q8-160.txt | head -12
python3 - <<'PY' > /tmp/prompt.txt
words = "the quick brown fox jumps over the lazy dog while the model decodes tokens one by one".split()
print(" ".join(words[i % len(words)] for i in range(150)))
PY
bash tools/peer/llamacpp/llama_bench.sh wait > $OUT/peer-build.log 2>&1; echo "peer build rc $?"; tail -3 $OUT/peer-build.log
for d in q8_0 bf16; do
  bash tools/peer/llamacpp/llama_bench.sh spec -m $M -md /tmp/m27/draft-$d.gguf --spec-type draft-dflash --spec-draft-n-max 15 \
    -ngl 99 -ngld 99 -fa on -c 4096 -f /tmp/prompt.txt -n 128 --temp 0 --top-k 1 --seed 42 -lv 4 > $OUT/llama-spec-$d.txt 2>&1
  echo "llama.cpp dflash $d: $(grep -E 'decoded|mean acc len' $OUT/llama-spec-$d.txt | tr '\n' ' ' | cut -c1-300)"
done
bash tools/peer/llamacpp/llama_bench.sh run -m $M -p 0 -n 128 -fa 1 > $OUT/llama-bench.txt 2>&1; grep tg128 $OUT/llama-bench.txt
