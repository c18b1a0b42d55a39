//! `qmatmul`: `y[n, out] = W[out, in] · x[n, in]` with W in its storage type.
//!
//! * [`gemv`] — one token, F32/BF16 weights, f32 arithmetic (CUDA cores).
//! * [`prep`] + [`tile`] — 1…32 tokens, every weight type, tensor cores (`mma.sync.m16n8k16`);
//!   also fused with an MLP's SwiGLU (`silu(gate·x) ⊙ (up·x)` from gate and up interleaved).
//! * [`tile_wg`] — the same products for the multi-tile kernels listed in `kernel_abi::qmm_wgmma`,
//!   as Hopper warpgroup products (`wgmma.mma_async`; same bits as `mma.sync`).
//!
//! # Activation format of the tensor-core path
//!
//! `qmm_prep_x` rewrites each token column `x[c, :]` once per call as
//! `x[c, i] = s_c · x̂[c, i]` with a power-of-two `s_c` chosen so that `max_i |x̂[c, i]| ∈
//! [2^14, 2^15)`, and `x̂` rounded to f16 (one rounding, relative error ≤ 2^-11; values under
//! `2^-14 · s_c` become f16 subnormals, absolute error ≤ 2^-25 · s_c). For F32 weights the
//! column is also written as a pair of bf16 (`x̂ = hi + lo + r`, `|r| ≤ 2^-16 |x̂|`), used with
//! bf16 tensor-core products. (BF16 weights used that pair until v11; they are now packed as
//! row-scaled f16 — `formats::Half` — and use the f16 column: their own 8-bit significands are
//! coarser than the 2^-11 of x̂.) Inside each 32-element block the elements are stored in
//! the fragment order of `mma.m16n8k16` (see [`prep::position_in_block`]), so one 16-byte load
//! gives a lane the B fragments of two k16 steps. It also writes the sum of each 32-element unit
//! of `x̂` (`S[unit][c]`, as f16 hi + lo of `S / 64`: [`prep::group_sum_slot`]), which the K-quant
//! formats' mins steps need (see [`formats`]), and the same f16 values in the tile-major
//! core-matrix plane the warpgroup kernels copy into shared memory unchanged
//! ([`prep::core_matrix_slot`]). Columns `c ≥ n` are never written: the `mma.sync`
//! kernels load column `n − 1` in their place, the warpgroup kernels read whatever the
//! zero-initialised plane holds there (zeros or an earlier call's columns); a product column
//! depends only on its own B column, and padding columns' results are never stored.
//!
//! # Batch invariance
//!
//! Column `c` of the result is computed by the same instructions in the same order whatever the
//! number of tokens: the tile `c / 8` and lane position `c % 8` are fixed, a tensor-core result
//! element depends only on its own row of A and column of B, and the K split (`ksplit`) and the
//! order in which split partials are added depend on the matrix shape and the device only
//! (`kernel_abi::qmm_ksplit`: SM count and occupancy), never on n.

/// A `qmm_*` kernel entry point: the parameter list every matmul kernel shares (the host's
/// `qmm` launch passes W, the four activation planes of `qmm_prep_x`, the scales, the sums, the
/// split partials, the counters, y, the SwiGLU row maxima `ymax` (`epilogue::store`; the plain
/// kernels never touch it) and the parameters, in this order), named by the caller so a kernel
/// can leave the planes it does not read as `_`-prefixed.
macro_rules! qmm_entry {
    ($name:ident, $sect:literal,
     ($w:ident, $xh:ident, $xb_hi:ident, $xb_lo:ident, $xcm:ident, $xscale:ident, $xsum:ident,
      $partial:ident, $counters:ident, $y:ident, $ymax:ident, $p:ident) => $body:expr) => {
        #[no_mangle]
        #[link_section = $sect]
        pub unsafe extern "ptx-kernel" fn $name(
            $w: *const u8,
            $xh: *const u16,
            $xb_hi: *const u16,
            $xb_lo: *const u16,
            $xcm: *const u16,
            $xscale: *const f32,
            $xsum: *const f32,
            $partial: *mut f32,
            $counters: *mut u32,
            $y: *mut f32,
            $ymax: *mut u32,
            $p: QmmParams,
        ) {
            $body
        }
    };
}

pub mod epilogue;
pub mod formats;
pub mod gemv;
pub mod prep;
pub mod tile;
pub mod tile_wg;
