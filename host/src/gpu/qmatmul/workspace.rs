//! [`QmmWorkspace`]: the device scratch every `qmm` product uses — the activations converted
//! once per input ([`QmmWorkspace::prepare`], `prep.rs`), the K-split partial sums and
//! counters of the products, and the per-column row-group maxima of the last fused SwiGLU
//! product (read by [`QmmWorkspace::prepare_swiglu`]) — and what it holds now, checked by every
//! product.
//!
//! The kernels take at most [`QMM_MAX_N`] columns. The activations of up to `MAX_NODES` tokens
//! are kept as `⌈MAX_NODES / QMM_MAX_N⌉ = 2` planes of `QMM_MAX_N` columns each (plane `c`: tokens
//! `32c .. 32c + 32`, each plane laid out exactly as a lone launch's activations), and a
//! product over more than `QMM_MAX_N` tokens is one launch per plane (`kernels.rs`).

use cudarc::driver::CudaSlice;
use kernel_abi::{MAX_NODES, QMM_MAX_N, QMM_ROWS_PER_BLOCK};

use crate::gpu::chain::{ChainedLaunch, LaunchArgs};
use crate::gpu::{DevSpan, Gpu, GpuError};

/// Chunk `c`'s first column and column count in a product over `n` tokens (`c < ⌈n / 32⌉`).
pub(super) fn chunk_cols(n: usize, c: usize) -> (usize, usize) {
    let first = c * QMM_MAX_N as usize;
    (first, (n - first).min(QMM_MAX_N as usize))
}

/// One activation plane of the workspace: the kernels' x arguments for up to `QMM_MAX_N` columns.
#[derive(Clone, Copy)]
pub(crate) struct XPlane {
    pub xh: DevSpan<u16>,
    pub xb_hi: DevSpan<u16>,
    pub xb_lo: DevSpan<u16>,
    pub xcm: DevSpan<u16>,
    pub xscale: DevSpan<f32>,
    pub xsum: DevSpan<f32>,
}

/// The plane as every prep and product kernel takes it: `xh, xb_hi, xb_lo, xcm, xscale, xsum`.
impl LaunchArgs for XPlane {
    fn append(&self, l: &mut ChainedLaunch<'_>) {
        l.span(self.xh).span(self.xb_hi).span(self.xb_lo).span(self.xcm).span(self.xscale).span(self.xsum);
    }
}

/// Reusable scratch of the `qmm` products sized for at most `MAX_NODES` tokens (in
/// two activation planes of `QMM_MAX_N` columns; fewer with
/// [`QmmWorkspace::with_columns`]), `max_in` inputs and `max_out` product rows.
pub struct QmmWorkspace {
    pub(super) xh: CudaSlice<u16>,
    pub(super) xb_hi: CudaSlice<u16>,
    pub(super) xb_lo: CudaSlice<u16>,
    /// The same f16 values as `xh` in the warpgroup kernels' core-matrix plane, all
    /// `QMM_MAX_N` columns of each plane (zero until written; padding columns are read but never
    /// stored).
    pub(super) xcm: CudaSlice<u16>,
    pub(super) xscale: CudaSlice<f32>,
    pub(super) xsum: CudaSlice<f32>,
    pub(super) partial: CudaSlice<f32>,
    pub(super) counters: CudaSlice<u32>,
    /// The fused SwiGLU epilogue's `max |y|` bits per column and row group: column `c` (global,
    /// `< MAX_NODES`) at `c · parts ..`, `parts = ⌈rows / 128⌉` of that product.
    pub(super) ymax: CudaSlice<u32>,
    /// What `ymax` holds: the last fused SwiGLU product's `(y address, n, ff, parts)`; `None`
    /// after any other product (it may have overwritten that `y`).
    pub(super) ymax_of: Option<(u64, usize, usize, usize)>,
    pub(super) max_in: usize,
    pub(super) max_out: usize,
    /// Activation planes (`QMM_MAX_N` columns each).
    planes: usize,
    /// What the activation buffers hold now: `(n, in, with bf16 pairs)`.
    pub(super) prepared: Option<(usize, usize, bool)>,
    /// Whether a caller preparing activations for several matrices must write the bf16 pair
    /// (some matrix is F32); the engine sets it once from its weights.
    pub pairs_needed: bool,
    /// The accumulator pairs of accumulated products (`accum.rs`), once enabled.
    pub(super) accum: Option<super::accum::Accumulators>,
    /// The accumulator pairs of fused SwiGLU products' split tails (`accum.rs`), once enabled.
    pub(super) swiglu_tail: Option<super::accum::Accumulators>,
    /// How accumulated products split K (`accum.rs`).
    pub(super) accum_plan: super::accum::AccumPlan,
}

impl QmmWorkspace {
    /// Scratch for products of up to `MAX_NODES` tokens.
    pub fn new(gpu: &Gpu, max_in: usize, max_out: usize) -> Result<Self, GpuError> {
        Self::with_columns(gpu, max_in, max_out, MAX_NODES as usize)
    }

    /// Scratch for products of up to `max_n` tokens (`1..=MAX_NODES`; one activation plane per
    /// 32): the DFlash draft's 32-row passes need one.
    pub fn with_columns(gpu: &Gpu, max_in: usize, max_out: usize, max_n: usize) -> Result<Self, GpuError> {
        if max_n == 0 || max_n > MAX_NODES as usize {
            return Err(GpuError::shape("qmm", format!("a workspace for {max_n} tokens: 1..={MAX_NODES}")));
        }
        let chunks = max_n.div_ceil(QMM_MAX_N as usize);
        let n_pad = QMM_MAX_N as usize;
        let x = n_pad.checked_mul(max_in).ok_or_else(|| GpuError::shape("qmm", "workspace size overflows"))?;
        // The K-split partials serve one launch (one plane) at a time.
        let partial = 16usize
            .checked_mul(n_pad)
            .and_then(|v| v.checked_mul(max_out))
            .ok_or_else(|| GpuError::shape("qmm", "workspace size overflows"))?;
        let planes =
            |len: usize| len.checked_mul(chunks).ok_or_else(|| GpuError::shape("qmm", "workspace size overflows"));
        Ok(QmmWorkspace {
            xh: gpu.zeros(planes(x)?)?,
            xb_hi: gpu.zeros(planes(x)?)?,
            xb_lo: gpu.zeros(planes(x)?)?,
            xcm: gpu.zeros(planes(x)?)?,
            xscale: gpu.zeros(planes(n_pad)?)?,
            // Unit sums: `units × QMM_MAX_N` f32, then the f16 hi/lo group sums (16 halves per
            // group of 8 units and column = 8 f32 slots), per plane.
            xsum: gpu.zeros(planes(Self::xsum_plane_len(max_in))?)?,
            partial: gpu.zeros(partial)?,
            counters: gpu.zeros(Self::row_groups(max_out))?,
            ymax: gpu.zeros(planes(n_pad * Self::row_groups(max_out))?)?,
            ymax_of: None,
            max_in,
            max_out,
            planes: chunks,
            prepared: None,
            pairs_needed: false,
            accum: None,
            swiglu_tail: None,
            accum_plan: super::accum::accum_plan_from_env(),
        })
    }

    /// Row groups (blocks of `QMM_ROWS_PER_BLOCK` rows) of a product of up to `out` rows (≥ 1).
    pub(super) fn row_groups(out: usize) -> usize {
        out.div_ceil(QMM_ROWS_PER_BLOCK as usize).max(1)
    }

    /// The SwiGLU row maxima of columns `first .. first + cols` of a product with `parts` row
    /// groups (`parts ≤ row_groups(max_out)`, `first + cols ≤` the workspace's columns).
    pub(super) fn ymax_span(
        &self,
        gpu: &Gpu,
        first: usize,
        cols: usize,
        parts: usize,
    ) -> Result<DevSpan<u32>, GpuError> {
        DevSpan::of(gpu, &self.ymax).sub(first * parts, cols * parts, "qmm ymax")
    }

    /// f32 words of one plane's group sums for up to `max_in` inputs: per 8 units (256
    /// inputs) one k16 step of f16 hi + lo for `QMM_MAX_N` columns, 1 KiB (`gpu-kernels`
    /// `qmatmul::prep::group_sum_slot`).
    fn xsum_plane_len(max_in: usize) -> usize {
        (QMM_MAX_N as usize * 8 * max_in.div_ceil(256)).max(1)
    }

    /// The most tokens one product takes (32 per activation plane).
    pub fn max_columns(&self) -> usize {
        self.planes * QMM_MAX_N as usize
    }

    /// Activation plane `c` (`c <` the planes): columns `32c .. 32c + 32`.
    pub(super) fn plane(&self, gpu: &Gpu, c: usize) -> Result<XPlane, GpuError> {
        let n_pad = QMM_MAX_N as usize;
        let x = n_pad * self.max_in;
        let xs = Self::xsum_plane_len(self.max_in);
        Ok(XPlane {
            xh: DevSpan::of(gpu, &self.xh).sub(c * x, x, "qmm x plane")?,
            xb_hi: DevSpan::of(gpu, &self.xb_hi).sub(c * x, x, "qmm x plane")?,
            xb_lo: DevSpan::of(gpu, &self.xb_lo).sub(c * x, x, "qmm x plane")?,
            xcm: DevSpan::of(gpu, &self.xcm).sub(c * x, x, "qmm x plane")?,
            xscale: DevSpan::of(gpu, &self.xscale).sub(c * n_pad, n_pad, "qmm x plane")?,
            xsum: DevSpan::of(gpu, &self.xsum).sub(c * xs, xs, "qmm x plane")?,
        })
    }

    /// Checks that a product of `out` rows over `inp` inputs fits the scratch (`op` names it).
    pub(super) fn check_fits(&self, op: &'static str, out: usize, inp: usize) -> Result<(), GpuError> {
        if inp > self.max_in || out > self.max_out {
            return Err(GpuError::shape(
                op,
                format!("[{out}, {inp}] (rows, in) exceeds the workspace ([{}, {}])", self.max_out, self.max_in),
            ));
        }
        Ok(())
    }

    /// Checks that the activations last prepared are `n` columns of `inp` values, with the bf16
    /// pair when `pairs` (the product's weights need it).
    pub(super) fn check_prepared(&self, op: &'static str, n: usize, inp: usize, pairs: bool) -> Result<(), GpuError> {
        match self.prepared {
            Some((pn, pin, has_pairs)) if pn == n && pin == inp && (has_pairs || !pairs) => Ok(()),
            other => Err(GpuError::shape(
                op,
                format!(
                    "the workspace holds activations {other:?} (n, in, pairs), not n = {n}, in = {inp}{}",
                    if pairs { " with pairs" } else { "" }
                ),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_the_columns_in_launches_of_at_most_32() {
        assert_eq!(chunk_cols(20, 0), (0, 20));
        assert_eq!(chunk_cols(32, 0), (0, 32));
        assert_eq!((chunk_cols(33, 0), chunk_cols(33, 1)), ((0, 32), (32, 1)));
        assert_eq!((chunk_cols(64, 0), chunk_cols(64, 1)), ((0, 32), (32, 32)));
        for n in 1..=MAX_NODES as usize {
            let cols: Vec<usize> = (0..n.div_ceil(32))
                .flat_map(|c| {
                    let (first, k) = chunk_cols(n, c);
                    first..first + k
                })
                .collect();
            assert_eq!(cols, (0..n).collect::<Vec<_>>());
        }
    }
}
