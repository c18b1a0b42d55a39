//! Launch parameters and geometry constants shared by `gpu-kernels` (nvptx64) and the host.
//!
//! Everything here is `#[repr(C)]` plain data or a `const`, so that both sides agree on layout
//! by construction. The crate is `no_std` and dependency-free so it builds for both targets.
#![no_std]

/// Threads per block of the row-wise reductions (`norm`, `sample::argmax`).
pub const ROW_BLOCK_THREADS: u32 = 256;

/// Threads per block of the GEMV kernels (`qmatmul::*_n1`): 8 warps, one output row per warp.
pub const GEMV_BLOCK_THREADS: u32 = 256;
/// Output rows computed by one block of the GEMV kernels (one per warp).
pub const GEMV_ROWS_PER_BLOCK: u32 = GEMV_BLOCK_THREADS / 32;

/// Blocks per row of the first argmax pass; each writes one `(value, index)` partial.
/// Fixed (never derived from the batch) so every row's reduction order is the same
/// whatever the number of rows.
pub const ARGMAX_SPLITS: u32 = 64;

/// Parameters of `rms_norm_rows` and `rms_norm_heads`.
///
/// `y[r, c] = x[r, c] / sqrt(mean_c(x[r, :]^2) + eps) * w[c]` over `rows` rows of `cols` values;
/// row `r` of `x` starts at `r * cols`, and the weight has `cols` values (shared by all rows).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RmsNormParams {
    pub rows: u32,
    pub cols: u32,
    pub eps: f32,
}

/// Parameters of the GEMV kernels: `y[o] = sum_i W[o, i] * x[i]`, `W` row-major `[out, in]`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GemvParams {
    pub out_features: u32,
    pub in_features: u32,
}

/// Parameters of the argmax kernels over `rows` rows of `cols` f32 values.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ArgmaxParams {
    pub rows: u32,
    pub cols: u32,
}
