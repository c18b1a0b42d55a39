#!/usr/bin/env bash
# Stages llama.cpp's ggml for the GPU machine: downloads the llama-cpp-python 0.3.36 sdist from PyPI with pip
# (or takes the path of one already downloaded) and writes .peer/llama_cpp_python-0.3.36-ggml.tar.gz holding
# only vendor/llama.cpp/ggml (the whole sdist, ~77 MB, is over the 64 MiB the device tool carries).
# Nothing here is committed: /.peer/ belongs in .git/info/exclude. Run from the repository root:
#
#   tools/peer/llamacpp/stage.sh [path/to/llama_cpp_python-0.3.36.tar.gz]
set -euo pipefail
ROOT="$(pwd)"
VER=0.3.36
mkdir -p "$ROOT/.peer"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

SDIST="${1:-}"
if [[ -z "$SDIST" ]]; then
    # pip prepares the sdist's metadata even for `download`; with build isolation and --no-binary it would
    # build cmake from source, so give it scikit-build-core in a scratch venv and skip isolation.
    python3 -m venv "$TMP/venv"
    "$TMP/venv/bin/pip" -q install scikit-build-core
    "$TMP/venv/bin/pip" download --no-deps --no-build-isolation --no-binary :all: \
        "llama-cpp-python==$VER" -d "$TMP/dl"
    SDIST="$TMP/dl/llama_cpp_python-$VER.tar.gz"
fi
[[ -f "$SDIST" ]] || { echo "stage.sh: no sdist at $SDIST" >&2; exit 1; }

tar -xzf "$SDIST" -C "$TMP" --wildcards "llama_cpp_python-$VER/vendor/llama.cpp/ggml/*" \
    "llama_cpp_python-$VER/vendor/llama.cpp/LICENSE" "llama_cpp_python-$VER/LICENSE.md"
tar -czf "$ROOT/.peer/llama_cpp_python-$VER-ggml.tar.gz" -C "$TMP" "llama_cpp_python-$VER"
{
    echo "source: llama-cpp-python==$VER sdist from PyPI"
    echo "sdist sha256: $(sha256sum "$SDIST" | cut -d' ' -f1)"
    echo "staged: vendor/llama.cpp/ggml, licenses"
} > "$ROOT/.peer/SOURCE.txt"
ls -la "$ROOT/.peer"
