#!/usr/bin/env bash
# Builds ggml from the llama-cpp-python 0.3.36 sdist staged in .peer/ (never committed) and runs our
# MUL_MAT harness against it. Run from the repository root:
#
#   tools/peer/llamacpp/run.sh [--build-only] [harness options...]
#
# Environment:
#   PEER_BACKEND  cuda (default) or cpu  — cpu builds ggml's CPU backend only (for checking the harness)
#   PEER_WORK     build folder (default target/peer-llamacpp: git-ignored, kept on a warm machine)
#   PEER_JOBS     parallel build jobs (default: all cores)
#   OUT           where llamacpp_mul_mat.csv is written (default $PEER_WORK/out)
# Harness options (see --help) go to the benchmark; by default it runs every issue-6 case.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(pwd)"
BACKEND="${PEER_BACKEND:-cuda}"
WORK="${PEER_WORK:-$ROOT/target/peer-llamacpp}"
JOBS="${PEER_JOBS:-$(nproc)}"
OUT="${OUT:-$WORK/out}"
BUILD_ONLY=0
if [[ "${1:-}" == "--build-only" ]]; then
    BUILD_ONLY=1
    shift
fi

# The staged source: the trimmed ggml tarball from stage.sh, or the whole sdist.
SDIST=""
for cand in "$ROOT"/.peer/llama_cpp_python-0.3.36-ggml.tar.gz "$ROOT"/.peer/llama_cpp_python-0.3.36.tar.gz; do
    if [[ -f "$cand" ]]; then SDIST="$cand"; break; fi
done
if [[ -z "$SDIST" ]]; then
    echo "run.sh: no .peer/llama_cpp_python-0.3.36{-ggml,}.tar.gz (run tools/peer/llamacpp/stage.sh, carry .peer)" >&2
    exit 1
fi

mkdir -p "$WORK" "$OUT"
SUM="$(sha256sum "$SDIST" | cut -c1-16)"
SRC="$WORK/src-$SUM"
GGML="$SRC/llama_cpp_python-0.3.36/vendor/llama.cpp/ggml"
if [[ ! -f "$GGML/CMakeLists.txt" ]]; then
    rm -rf "$SRC.tmp" && mkdir -p "$SRC.tmp"
    tar -xzf "$SDIST" -C "$SRC.tmp" --wildcards 'llama_cpp_python-0.3.36/vendor/llama.cpp/ggml/*'
    rm -rf "$SRC" && mv "$SRC.tmp" "$SRC"
fi

GENERATOR=Ninja
command -v ninja >/dev/null || GENERATOR="Unix Makefiles"
CMAKE_ARGS=(-G "$GENERATOR" -DCMAKE_BUILD_TYPE=Release "-DGGML_SRC=$GGML"
            -DGGML_NATIVE=OFF -DGGML_CCACHE=OFF -DGGML_OPENMP=OFF -DGGML_LLAMAFILE=OFF -DGGML_BLAS=OFF)
if [[ "$BACKEND" == cuda ]]; then
    if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
        export PATH="/usr/local/cuda/bin:$PATH"
    fi
    # sm_90 only; CUDA graphs on as llama.cpp builds ggml; no flash-attention kernels or NCCL (unused here).
    CMAKE_ARGS+=(-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_CUDA_GRAPHS=ON -DGGML_CUDA_FA=OFF
                 -DGGML_CUDA_NCCL=OFF)
elif [[ "$BACKEND" != cpu ]]; then
    echo "run.sh: PEER_BACKEND must be cuda or cpu, not '$BACKEND'" >&2
    exit 1
fi
BUILD="$WORK/build-$BACKEND-$SUM"

echo "== llama.cpp peer: ggml from $(basename "$SDIST") (sha256 $SUM...), backend $BACKEND, $JOBS jobs"
SECONDS=0
cmake -S "$HERE" -B "$BUILD" "${CMAKE_ARGS[@]}" > "$WORK/configure-$BACKEND.log" 2>&1 \
    || { tail -40 "$WORK/configure-$BACKEND.log"; exit 1; }
grep -E 'CUDA Toolkit|CUDA_ARCHITECTURES|ggml version|ggml commit' "$WORK/configure-$BACKEND.log" || true
cmake --build "$BUILD" -j "$JOBS" --target llamacpp_mul_mat > "$WORK/build-$BACKEND.log" 2>&1 \
    || { tail -60 "$WORK/build-$BACKEND.log"; exit 1; }
echo "== build (configure + compile) took ${SECONDS} s"
if [[ "$BUILD_ONLY" == 1 ]]; then
    exit 0
fi

if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv || true
fi
ARGS=()
if [[ "$BACKEND" == cpu ]]; then ARGS+=(--backend cpu); else ARGS+=(--backend cuda); fi
SECONDS=0
set +e
"$BUILD/bin/llamacpp_mul_mat" "${ARGS[@]}" --csv "$OUT/llamacpp_mul_mat.csv" "$@"
rc=$?
set -e
echo "== benchmark took ${SECONDS} s, exit $rc; CSV: $OUT/llamacpp_mul_mat.csv"
exit $rc
