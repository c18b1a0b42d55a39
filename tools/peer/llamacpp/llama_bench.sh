#!/usr/bin/env bash
# llama.cpp's own `llama-bench` (tg/pp tokens per second for a whole GGUF model) built from a trimmed
# llama.cpp source staged in .peer/ (never committed). Run from the repository root:
#
#   llama_bench.sh stage [path/to/llama_cpp_python-0.3.36.tar.gz]   # workstation: write the tarball
#   llama_bench.sh build            # GPU machine: unpack, configure, build llama-bench only (incremental)
#   llama_bench.sh start            # the same build, detached and niced, log in $PEER_WORK/build.log
#   llama_bench.sh wait             # block until a started build has finished; its exit status
#   llama_bench.sh spec [llama-speculative-simple options...]   # the DFlash chain loop (builds first)
#   llama_bench.sh run -m FILE [llama-bench options...]
#                                   # builds first if needed (waits for a started build), then runs
#                                   # llama-bench; default options: -n 128 -p 512 -r 3 -ngl 99 -o md
#
# `run` passes every option to llama-bench; the defaults above are added only for the options not given
# (e.g. `run -m FILE -d 0,8192` also measures at a depth of 8192 tokens).
#
# Environment:
#   PEER_WORK       work folder (default target/peer-llamacpp-bench: git-ignored, kept on a warm machine)
#   PEER_TARBALL    source tarball (default .peer/llamacpp-src.tar.gz)
#   PEER_JOBS       parallel build jobs (default: all cores)
#   PEER_BACKEND    cuda (default) or cpu (CPU-only build, to check the script without a GPU)
#   PEER_CUDA_ARCH  CMAKE_CUDA_ARCHITECTURES (default 90a: H100/H200)
#   PEER_CONFIGURE_ONLY=1   stop `build` after the cmake configure step
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(pwd)"
WORK="${PEER_WORK:-$ROOT/target/peer-llamacpp-bench}"
TARBALL="${PEER_TARBALL:-$ROOT/.peer/llamacpp-src.tar.gz}"
JOBS="${PEER_JOBS:-$(nproc)}"
BACKEND="${PEER_BACKEND:-cuda}"
CUDA_ARCH="${PEER_CUDA_ARCH:-90a}"
# The llama.cpp commit the tarball holds (llama-cpp-python 0.3.36 vendors it; CHANGELOG.md says
# "update llama.cpp to ggml-org/llama.cpp@0c1e57098"). Shown by llama-bench as its build commit.
LLAMA_COMMIT=0c1e57098bba43ac29e6e3b677cdceebdd22334f
LLAMA_BUILD_NUMBER=11312
TOP="llama.cpp-${LLAMA_COMMIT:0:9}"

die() { echo "llama_bench.sh: $*" >&2; exit 1; }

# ---------------------------------------------------------------------------------------------------------
# stage (workstation): trimmed source, only what llama-bench needs with the CPU and CUDA backends
# ---------------------------------------------------------------------------------------------------------
stage() {
    local ver=0.3.36 sdist="${1:-}"
    STAGE_TMP="$(mktemp -d)"
    trap 'rm -rf "$STAGE_TMP"' EXIT
    local tmp="$STAGE_TMP"
    if [[ -z "$sdist" ]]; then
        # As stage.sh: pip prepares the sdist's metadata even for `download`, which needs cmake.
        python3 -m venv "$tmp/venv"
        "$tmp/venv/bin/pip" -q install scikit-build-core cmake
        PATH="$tmp/venv/bin:$PATH" "$tmp/venv/bin/pip" download -q --no-deps --no-build-isolation \
            --no-binary :all: "llama-cpp-python==$ver" -d "$tmp/dl"
        sdist="$tmp/dl/llama_cpp_python-$ver.tar.gz"
    fi
    [[ -f "$sdist" ]] || die "no sdist at $sdist"
    tar -xzf "$sdist" -C "$tmp" "llama_cpp_python-$ver/vendor/llama.cpp" "llama_cpp_python-$ver/CHANGELOG.md"
    grep -q "ggml-org/llama.cpp@${LLAMA_COMMIT:0:9}" "$tmp/llama_cpp_python-$ver/CHANGELOG.md" \
        || die "the sdist's CHANGELOG does not name llama.cpp@${LLAMA_COMMIT:0:9}; update LLAMA_COMMIT"
    local src="$tmp/llama_cpp_python-$ver/vendor/llama.cpp" dst="$tmp/$TOP"
    grep -q '"qwen35"' "$src/src/llama-arch.cpp" || die "this llama.cpp has no qwen35 architecture"
    mkdir -p "$dst/ggml/src" "$dst/tools"
    cp -a "$src"/{CMakeLists.txt,LICENSE,licenses,cmake,include,src,common,vendor} "$dst/"
    cp -a "$src"/ggml/{CMakeLists.txt,cmake,include} "$dst/ggml/"
    # ggml/src: the core files plus the CPU and CUDA backends (the others are add_subdirectory'd only
    # when enabled).
    find "$src/ggml/src" -maxdepth 1 -type f -exec cp -a {} "$dst/ggml/src/" \;
    cp -a "$src"/ggml/src/{ggml-cpu,ggml-cuda} "$dst/ggml/src/"
    # tools/CMakeLists.txt adds most tools unconditionally, so keep them (small); ui, cli and server
    # are added only with LLAMA_BUILD_SERVER, which stays OFF.
    cp -a "$src/tools/CMakeLists.txt" "$dst/tools/"
    local t
    for t in "$src"/tools/*/; do
        t="$(basename "$t")"
        case "$t" in ui|cli|server) ;; *) cp -a "$src/tools/$t" "$dst/tools/" ;; esac
    done
    # examples/: only speculative-simple (the DFlash chain loop, llamacpp-dflash.md §5), behind a
    # one-line examples/CMakeLists.txt; LLAMA_BUILD_EXAMPLES also adds pocs/, staged empty.
    mkdir -p "$dst/examples" "$dst/pocs"
    cp -a "$src/examples/speculative-simple" "$dst/examples/"
    echo "add_subdirectory(speculative-simple)" > "$dst/examples/CMakeLists.txt"
    echo "# staged empty by llama_bench.sh" > "$dst/pocs/CMakeLists.txt"
    {
        echo "repo: https://github.com/ggml-org/llama.cpp"
        echo "commit: $LLAMA_COMMIT (build b$LLAMA_BUILD_NUMBER, dated 2026-10-01 by public reports of b11312)"
        echo "via: llama-cpp-python==$ver sdist from PyPI, vendor/llama.cpp (CHANGELOG: llama.cpp@${LLAMA_COMMIT:0:9})"
        echo "sdist sha256: $(sha256sum "$sdist" | cut -d' ' -f1)"
        echo "staged: $(date -u +%Y-%m-%dT%H:%M:%SZ) by tools/peer/llamacpp/llama_bench.sh stage"
        echo "trimmed to: CMakeLists.txt cmake/ include/ src/ common/ vendor/ licenses/ LICENSE ggml/ (core, CPU, CUDA) tools/ (no ui, cli, server) examples/speculative-simple"
    } > "$dst/PEER_SOURCE.txt"
    mkdir -p "$ROOT/.peer"
    tar -czf "$ROOT/.peer/llamacpp-src.tar.gz" -C "$tmp" "$TOP"
    { cat "$dst/PEER_SOURCE.txt"; echo "tarball sha256: $(sha256sum "$ROOT/.peer/llamacpp-src.tar.gz" | cut -d' ' -f1)"; } \
        > "$ROOT/.peer/LLAMACPP_SOURCE.txt"
    ls -la "$ROOT/.peer/llamacpp-src.tar.gz"
    cat "$ROOT/.peer/LLAMACPP_SOURCE.txt"
}

# ---------------------------------------------------------------------------------------------------------
# build (GPU machine)
# ---------------------------------------------------------------------------------------------------------
BUILD="$WORK/build-$BACKEND"
BIN="$BUILD/bin/llama-bench"
SPEC_BIN="$BUILD/bin/llama-speculative-simple"
# Tarballs staged before examples/speculative-simple was added build llama-bench alone.
EXAMPLES=OFF
TARGETS=(llama-bench)
LOCK="$WORK/build.lock"

do_build() {
    [[ -f "$TARBALL" ]] || die "no $TARBALL (run tools/peer/llamacpp/llama_bench.sh stage here; carry .peer)"
    mkdir -p "$WORK"
    local sum src
    sum="$(sha256sum "$TARBALL" | cut -c1-16)"
    src="$WORK/src-$sum/$TOP"
    if [[ ! -f "$src/CMakeLists.txt" ]]; then
        rm -rf "$WORK/src-$sum.tmp" && mkdir -p "$WORK/src-$sum.tmp"
        tar -xzf "$TARBALL" -C "$WORK/src-$sum.tmp"
        rm -rf "$WORK/src-$sum" && mv "$WORK/src-$sum.tmp" "$WORK/src-$sum"
    fi
    [[ -f "$src/CMakeLists.txt" ]] || die "the tarball does not hold $TOP/ (staged for another commit?)"
    if [[ -f "$src/examples/speculative-simple/CMakeLists.txt" ]]; then
        EXAMPLES=ON
        TARGETS=(llama-bench llama-speculative-simple)
    fi

    local gen=Ninja
    command -v ninja >/dev/null || gen="Unix Makefiles"
    # Only what llama-bench needs: libllama, llama-common, ggml (CPU + CUDA). Tests, examples, server,
    # the unified app binary and OpenSSL are off; tools stay ON because llama-bench is one of them, but
    # only the llama-bench target is built. GGML_NATIVE=OFF still enables AVX2/FMA/F16C on x86 (the CPU
    # backend hardly runs with -ngl 99). Flash-attention kernels are built (llama-bench's -fa defaults
    # to auto, which uses them on this GPU) and CUDA graphs are on, as llama.cpp builds by default.
    local args=(-G "$gen" -DCMAKE_BUILD_TYPE=Release
                -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES="$EXAMPLES" -DLLAMA_BUILD_SERVER=OFF
                -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_COMMON=ON
                -DLLAMA_OPENSSL=OFF -DLLAMA_TOOLS_INSTALL=OFF
                "-DLLAMA_BUILD_COMMIT=${LLAMA_COMMIT:0:9}" "-DLLAMA_BUILD_NUMBER=$LLAMA_BUILD_NUMBER"
                -DGGML_NATIVE=OFF -DGGML_CCACHE=OFF -DGGML_RPC=OFF -DGGML_BLAS=OFF)
    if [[ "$BACKEND" == cuda ]]; then
        if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
            export PATH="/usr/local/cuda/bin:$PATH"
        fi
        args+=(-DGGML_CUDA=ON "-DCMAKE_CUDA_ARCHITECTURES=$CUDA_ARCH" -DGGML_CUDA_NCCL=OFF)
    elif [[ "$BACKEND" != cpu ]]; then
        die "PEER_BACKEND must be cuda or cpu, not '$BACKEND'"
    fi

    echo "== llama-bench: llama.cpp ${LLAMA_COMMIT:0:9} from $(basename "$TARBALL") (sha256 $sum...), backend $BACKEND, $JOBS jobs"
    SECONDS=0
    # Configure once per source and option set (a second `build` or `run` goes straight to ninja).
    local stamp="$src ${args[*]}"
    if [[ ! -f "$BUILD/CMakeCache.txt" || "$(cat "$BUILD/peer-configured.txt" 2>/dev/null)" != "$stamp" ]]; then
        rm -f "$BUILD/peer-configured.txt"
        cmake -S "$src" -B "$BUILD" "${args[@]}" > "$WORK/configure-$BACKEND.log" 2>&1 \
            || { tail -40 "$WORK/configure-$BACKEND.log"; die "configure failed (log: $WORK/configure-$BACKEND.log)"; }
        echo "$stamp" > "$BUILD/peer-configured.txt"
        grep -E 'CUDA Toolkit|CUDA_ARCHITECTURES|llama.cpp version|ggml version' \
            "$WORK/configure-$BACKEND.log" || true
        echo "== configure took ${SECONDS} s"
    fi
    if [[ "${PEER_CONFIGURE_ONLY:-0}" == 1 ]]; then return 0; fi
    cmake --build "$BUILD" -j "$JOBS" --target "${TARGETS[@]}" > "$WORK/build-$BACKEND.log" 2>&1 \
        || { tail -60 "$WORK/build-$BACKEND.log"; die "build failed (log: $WORK/build-$BACKEND.log)"; }
    echo "== build (configure + compile) took ${SECONDS} s: ${TARGETS[*]} in $BUILD/bin"
}

# The build runs under an exclusive lock, so a second `build` or a `run` waits for one in progress
# instead of compiling the same tree twice; ninja is incremental, so a build killed by a time limit
# resumes where it stopped.
build_locked() {
    mkdir -p "$WORK"
    exec 9>"$LOCK"
    if ! flock -n 9; then
        echo "== llama-bench: a build is in progress; waiting for it"
        flock 9
    fi
    do_build
    flock -u 9
}

cmd="${1:-}"
[[ $# -gt 0 ]] && shift
case "$cmd" in
    stage)
        stage "$@"
        ;;
    build)
        build_locked
        ;;
    start)
        mkdir -p "$WORK"
        rm -f "$WORK/build.rc"
        # Detached (setsid) and niced so that GPU work timed meanwhile keeps the CPU it needs for launches.
        setsid nohup nice -n 19 bash -c '"$1" build > "$2/build.log" 2>&1; echo $? > "$2/build.rc"' \
            _ "$HERE/llama_bench.sh" "$WORK" < /dev/null > /dev/null 2>&1 &
        echo "== llama-bench: build started in the background (pid $!), log $WORK/build.log"
        ;;
    wait)
        sleep 2
        while [[ ! -f "$WORK/build.rc" ]]; do
            # Neither finished nor holding the lock: no build was started (or it was killed).
            if (exec 9>"$LOCK"; flock -n 9) 2>/dev/null && [[ ! -f "$WORK/build.rc" ]]; then
                die "no build in progress and no $WORK/build.rc (run \`llama_bench.sh start\` or \`build\`)"
            fi
            sleep 5
        done
        cat "$WORK/build.log"
        exit "$(cat "$WORK/build.rc")"
        ;;
    run)
        have() { local o; for o in "${ARGS[@]}"; do for a in "$@"; do [[ "$o" == "$a" ]] && return 0; done; done; return 1; }
        ARGS=("$@")
        have -m --model || die "run needs -m FILE (a GGUF model)"
        build_locked
        # Defaults for the options not given.
        DEF=()
        have -n --n-gen || DEF+=(-n 128)
        have -p --n-prompt || DEF+=(-p 512)
        have -r --repetitions || DEF+=(-r 3)
        have -ngl --n-gpu-layers || DEF+=(-ngl 99)
        have -o --output || DEF+=(-o md)
        if command -v nvidia-smi >/dev/null; then
            nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,clocks.max.sm,clocks.max.mem \
                --format=csv || true
        fi
        echo "== $BIN ${DEF[*]} ${ARGS[*]}"
        SECONDS=0
        set +e
        "$BIN" "${DEF[@]}" "${ARGS[@]}"
        rc=$?
        set -e
        echo "== llama-bench took ${SECONDS} s, exit $rc"
        exit $rc
        ;;
    spec)
        # llama-speculative-simple (DFlash chain): every option passed through, e.g.
        #   spec -m T -md D --spec-type draft-dflash --spec-draft-n-max 15 -ngl 99 -ngld 99 -fa on \
        #        -c 4096 -f prompt.txt -n 256 --temp 0 --top-k 1 --seed 42 -lv 4
        build_locked
        [[ -x "$SPEC_BIN" ]] || die "no $SPEC_BIN: the tarball was staged without examples/speculative-simple (restage)"
        echo "== $SPEC_BIN $*"
        SECONDS=0
        set +e
        "$SPEC_BIN" "$@"
        rc=$?
        set -e
        echo "== llama-speculative-simple took ${SECONDS} s, exit $rc"
        exit $rc
        ;;
    *)
        sed -n '2,23p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
        [[ -z "$cmd" || "$cmd" == -h || "$cmd" == --help ]] || exit 2
        ;;
esac
