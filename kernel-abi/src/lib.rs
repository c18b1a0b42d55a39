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

/// Warps per block of the tensor-core `qmm_*` kernels; each warp owns 16 output rows.
pub const QMM_WARPS: u32 = 8;
/// Output rows per warp of the `qmm_*` kernels (the `m16` of `mma.m16n8k16`).
pub const QMM_ROWS_PER_WARP: u32 = 16;
/// Output rows per block of the `qmm_*` kernels.
pub const QMM_ROWS_PER_BLOCK: u32 = QMM_WARPS * QMM_ROWS_PER_WARP;
/// Most token columns one `qmm_*` launch takes (4 tiles of `n8`).
pub const QMM_MAX_N: u32 = 32;

/// Parameters of the tensor-core `qmm_*` kernels: `y[c, o] = Σ_i W[o, i] · x[c, i]` for
/// `c < n`, `o < out_features`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct QmmParams {
    pub out_features: u32,
    pub in_features: u32,
    /// Token columns computed (≤ [`QMM_MAX_N`], the column pitch of every activation and
    /// partial-sum buffer).
    pub n: u32,
    /// Splits of the K dimension over `blockIdx.y` (a function of the shape only).
    pub ksplit: u32,
}

/// Pipeline depth of the `qmm_*` kernels that fit two or more blocks per SM: each warp streams
/// its rows through this many shared-memory stages filled by bulk copies (3 in flight while one
/// is consumed).
pub const QMM_STAGES: u32 = 4;

/// Pipeline depth of the `qmm_*` kernel for blocks of `block_bytes` and `tiles` column tiles:
/// the kernels whose registers allow only one block per SM (`minctasm=1` in
/// `gpu-kernels/src/qmatmul/tile.rs`: Q4_K from 3 tiles, Q5_K with 4) use the shared
/// memory the second block would have had for a deeper ring (8 stages: 7 in flight).
pub const fn qmm_stages(block_bytes: u32, tiles: u32) -> u32 {
    let one_block_per_sm = match block_bytes {
        144 => tiles >= 3,
        176 => tiles >= 4,
        _ => false,
    };
    if one_block_per_sm {
        8
    } else {
        QMM_STAGES
    }
}

/// `(elements, bytes, blocks per stage)` of each weight format of the `qmm_*` kernels.
pub mod qmm_format {
    pub const Q4_K: (u32, u32, u32) = (256, 144, 1);
    pub const Q5_K: (u32, u32, u32) = (256, 176, 1);
    pub const Q6_K: (u32, u32, u32) = (256, 210, 1);
    pub const Q8_0: (u32, u32, u32) = (32, 34, 4);
    pub const F16: (u32, u32, u32) = (32, 64, 2);
    pub const BF16: (u32, u32, u32) = (32, 64, 2);
    pub const F32: (u32, u32, u32) = (32, 128, 1);
}

/// Shared-memory bytes of one warp's pipeline stage: `per_stage` blocks of 16 rows (W is
/// packed so that this is one contiguous span, see `host::gpu::qmatmul::qmm_pack_weights`).
pub const fn qmm_stage_bytes(block_bytes: u32, per_stage: u32) -> u32 {
    per_stage * QMM_ROWS_PER_WARP * block_bytes
}

/// Dynamic shared memory of one `qmm_*` block: the warps' stage rings, then one 8-byte
/// transaction barrier per warp and stage.
pub const fn qmm_smem_bytes(block_bytes: u32, per_stage: u32, tiles: u32) -> u32 {
    QMM_WARPS * qmm_stages(block_bytes, tiles) * (qmm_stage_bytes(block_bytes, per_stage) + 8)
}

/// Parameters of `qmm_prep_x`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct QmmPrepParams {
    pub n: u32,
    pub in_features: u32,
    /// Non-zero: also write the bf16 hi + lo pair (BF16 and F32 weights need it).
    pub pairs: u32,
}

/// Elements of one column written by one block of `qmm_prep_x` (grid `(n, ⌈in / this⌉)`).
pub const QMM_PREP_CHUNK: u32 = 1024;

/// K splits of the `qmm_*` kernels for `out_features` rows of `blocks_per_row` weight blocks:
/// the smallest power of two giving ≥ 512 blocks of 128 rows, at most 16, and keeping at least
/// 2 weight blocks per split. Depends on the shape only (never on the token count), so a
/// column's summation order is the same for every batch size.
pub const fn qmm_ksplit(out_features: u32, blocks_per_row: u32) -> u32 {
    let row_blocks = out_features.div_ceil(QMM_ROWS_PER_BLOCK) as u64;
    let mut s = 1u32;
    while s < 16 && row_blocks * (s as u64) < 512 && (blocks_per_row as u64) >= 4 * s as u64 {
        s *= 2;
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qmm_ksplit_depends_on_shape_and_keeps_two_blocks_per_split() {
        assert_eq!(qmm_ksplit(248_320, 20), 1);
        assert_eq!(qmm_ksplit(5120, 20), 8);
        assert_eq!(qmm_ksplit(5120, 68), 16);
        assert_eq!(qmm_ksplit(17408, 20), 4);
        for out in [1u32, 100, 5120, 17408, 248_320] {
            for bpr in [1u32, 2, 3, 20, 68, 544] {
                let s = qmm_ksplit(out, bpr);
                assert!(s.is_power_of_two() && s <= 16);
                assert!(s == 1 || bpr >= 2 * s, "{out} {bpr} {s}");
            }
        }
    }

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
