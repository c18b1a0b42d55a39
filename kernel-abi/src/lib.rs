//! Launch parameters and geometry constants shared by `gpu-kernels` (nvptx64) and the host.
//!
//! Everything here is `#[repr(C)]` plain data or a `const`, so that both sides agree on layout
//! by construction. The crate is `no_std` and dependency-free so it builds for both targets.
#![no_std]

/// Threads per block of the row-wise reductions (`norm`, `sample::argmax`).
pub const ROW_BLOCK_THREADS: u32 = 256;

/// Threads per block of the GEMV kernels (`qmatmul::*_n1`): 8 warps, one output row per warp.
pub const GEMV_BLOCK_THREADS: u32 = 256;
/// Warps per block of the GEMV kernels.
pub const GEMV_WARPS_PER_BLOCK: u32 = GEMV_BLOCK_THREADS / 32;

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
    /// Warps per output row (1, 2, 4 or 8): a function of `[out, in]` only.
    pub split: u32,
}

/// Warps per output row of the GEMV kernels for a `[out, in]` matrix: the smallest power of two
/// that gives at least 16 384 warps (enough to cover every warp slot of a 132-SM GPU twice),
/// capped so that every warp keeps at least 8 chunk loads per lane, and at 8.
pub const fn gemv_split(out_features: u32, in_features: u32) -> u32 {
    let mut split = 1;
    while split < 8
        && (out_features as u64) * (split as u64) < 16_384
        && (in_features as u64) / (split as u64 * 2) >= 32 * 8 * 8
    {
        split *= 2;
    }
    split
}

/// Parameters of the argmax kernels over `rows` rows of `cols` f32 values.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ArgmaxParams {
    pub rows: u32,
    pub cols: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gemv_split_depends_on_shape_and_stays_in_range() {
        assert_eq!(gemv_split(28672, 4096), 1);
        assert_eq!(gemv_split(17408, 5120), 1);
        assert_eq!(gemv_split(5120, 17408), 4);
        assert_eq!(gemv_split(8, 100_000), 8);
        assert_eq!(gemv_split(10, 1000), 1);
        for out in [1u32, 7, 100, 5000, 20000] {
            for inp in [1u32, 300, 4096, 17408, 1 << 20] {
                let s = gemv_split(out, inp);
                assert!(matches!(s, 1 | 2 | 4 | 8), "{out}x{inp} → {s}");
            }
        }
    }
}
