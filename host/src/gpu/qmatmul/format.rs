//! Which tensor-core kernel family a weight type uses and what its packed matrix looks like:
//! the block geometry, whether x is staged, which kernels are warpgroup kernels, row-scaled
//! types, the activation pair F32 needs, and the packed size. Pure functions of the type and
//! the shape (no device).

use flashtree_quants::GgmlType;
use kernel_abi::{qmm_is_wgmma, qmm_row_scaled, qmm_xs_smem_bytes, QMM_ROWS_PER_BLOCK};

use crate::gpu::GpuError;

/// The tensor-core kernel family of a weight type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QmmFamily {
    /// Kernel name prefix (`qmm_q4k` → `qmm_q4k_nt1` … `_nt4`).
    pub prefix: &'static str,
    /// `(elements, bytes, blocks per stage)` of one weight block (`kernel_abi::qmm_format`).
    pub geometry: (u32, u32, u32),
    /// Whether its multi-tile `mma.sync` kernels stage x in shared memory
    /// (`kernel_abi::qmm_stages_x`).
    pub stages_x: bool,
    /// Which of its multi-tile kernels are warpgroup kernels (`kernel_abi::qmm_wgmma`; they always
    /// stage x).
    pub wgmma: u32,
}

impl QmmFamily {
    /// Dynamic shared memory of its kernel of `tiles` tiles (the staged x chunk, or 0).
    pub fn smem_bytes(&self, tiles: u32) -> u32 {
        qmm_xs_smem_bytes(tiles, self.stages_x || qmm_is_wgmma(self.wgmma, tiles))
    }
}

/// The tensor-core kernel family of `ty`, or `None` if it has none.
pub fn qmm_format(ty: GgmlType) -> Option<QmmFamily> {
    use kernel_abi::{qmm_format as f, qmm_stages_x as s, qmm_wgmma as w};
    let (prefix, geometry, stages_x, wgmma) = match ty {
        GgmlType::Q4_K => ("qmm_q4k", f::Q4_K, s::Q4_K, w::Q4_K),
        GgmlType::Q5_K => ("qmm_q5k", f::Q5_K, s::Q5_K, w::Q5_K),
        GgmlType::Q6_K => ("qmm_q6k", f::Q6_K, s::Q6_K, w::Q6_K),
        GgmlType::Q8_0 => ("qmm_q8_0", f::Q8_0, s::Q8_0, w::Q8_0),
        GgmlType::F16 => ("qmm_f16", f::F16, s::F16, w::F16),
        GgmlType::BF16 => ("qmm_bf16", f::BF16, s::BF16, w::BF16),
        GgmlType::F32 => ("qmm_f32", f::F32, s::F32, w::F32),
        _ => return None,
    };
    Some(QmmFamily { prefix, geometry, stages_x, wgmma })
}

/// Whether `ty` is packed as f16 values with one power-of-two scale per row
/// (`kernel_abi::qmm_row_scaled`; see [`super::pack::bf16_rows_to_scaled_f16`]).
pub fn qmm_is_row_scaled(ty: GgmlType) -> bool {
    ty == GgmlType::BF16 && qmm_row_scaled::BF16
}

/// Whether weights of `ty` need the bf16 hi + lo activation pair (F32 weights; BF16 weights
/// also did before they were packed as row-scaled f16): the `pairs` argument of
/// [`super::QmmWorkspace::prepare`].
pub fn qmm_needs_pairs(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::F32) || (ty == GgmlType::BF16 && !qmm_is_row_scaled(ty))
}

/// Bytes of W `[out, in]` of type `ty` in the packed layout of the `qmm_*` kernels
/// ([`super::PackedWeight`]): `⌈out/128⌉·128` rows, the rows past `out` zero, and for row-scaled
/// types one f32 scale per packed row after them. Every warp of a kernel block loads its 16 rows
/// unconditionally (a bounds check costs the tightest kernels a register), so the last block's
/// rows must exist.
pub fn qmm_packed_bytes(ty: GgmlType, out: usize, inp: usize) -> Result<usize, GpuError> {
    let (elems, bytes, _) = family_for(ty, out, inp)?.geometry;
    let rows = QMM_ROWS_PER_BLOCK as usize;
    let scales = if qmm_is_row_scaled(ty) { 4 } else { 0 };
    out.div_ceil(rows)
        .checked_mul(rows * bytes as usize)
        .and_then(|v| v.checked_mul(inp / elems as usize))
        .and_then(|v| v.checked_add(out.div_ceil(rows) * rows * scales))
        .ok_or_else(|| GpuError::shape("qmm", format!("W {ty:?} [{out}, {inp}] size overflows")))
}

/// Rows of the interleaved gate/up matrix of `ff` features ([`super::PackedWeight::pack_gate_up`]):
/// `16·⌈ff/8⌉`.
pub fn qmm_swiglu_rows(ff: usize) -> usize {
    16 * ff.div_ceil(8)
}

/// [`qmm_swiglu_rows`] of a checked feature count (`1 ≤ ff < 2^30`, so the rows fit a `u32`).
pub(super) fn swiglu_rows(ff: usize) -> Result<usize, GpuError> {
    if ff == 0 || ff > u32::MAX as usize / 4 {
        return Err(GpuError::shape("qmm_swiglu", format!("ff = {ff} features: must be 1..2^30")));
    }
    Ok(qmm_swiglu_rows(ff))
}

/// The kernel family and block geometry of `ty` for a `[out, in]` matrix, or why there is none.
pub(super) fn family_for(ty: GgmlType, out: usize, inp: usize) -> Result<QmmFamily, GpuError> {
    let family = qmm_format(ty)
        .ok_or_else(|| GpuError::shape("qmm", format!("weight type {ty:?} has no tensor-core kernel")))?;
    let elems = family.geometry.0 as usize;
    if out == 0 || inp == 0 || !inp.is_multiple_of(elems) {
        return Err(GpuError::shape(
            "qmm",
            format!("[{out}, {inp}]: in must be a positive multiple of {elems} for {ty:?}"),
        ));
    }
    Ok(family)
}

/// `v` as a `u32` kernel parameter; the error names `what`.
pub(super) fn to_u32(v: usize, what: &str) -> Result<u32, GpuError> {
    u32::try_from(v).map_err(|_| GpuError::shape("qmm", format!("{what} too large")))
}
