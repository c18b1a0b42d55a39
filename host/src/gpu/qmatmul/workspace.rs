//! [`QmmWorkspace`]: the device scratch every `qmm` product uses — the activations converted
//! once per input ([`QmmWorkspace::prepare`], `prep.rs`) and the K-split partial sums and
//! counters of the products — and what it holds now, checked by every product.

use cudarc::driver::CudaSlice;
use kernel_abi::{QMM_MAX_N, QMM_ROWS_PER_BLOCK};

use crate::gpu::{Gpu, GpuError};

/// Reusable scratch of the `qmm` products sized for at most `QMM_MAX_N` tokens, `max_in`
/// inputs and `max_out` product rows.
pub struct QmmWorkspace {
    pub(super) xh: CudaSlice<u16>,
    pub(super) xb_hi: CudaSlice<u16>,
    pub(super) xb_lo: CudaSlice<u16>,
    /// The same f16 values as `xh` in the warpgroup kernels' core-matrix plane, all
    /// `QMM_MAX_N` columns (zero until written; padding columns are read but never stored).
    pub(super) xcm: CudaSlice<u16>,
    pub(super) xscale: CudaSlice<f32>,
    pub(super) xsum: CudaSlice<f32>,
    pub(super) partial: CudaSlice<f32>,
    pub(super) counters: CudaSlice<u32>,
    pub(super) max_in: usize,
    pub(super) max_out: usize,
    /// What the activation buffers hold now: `(n, in, with bf16 pairs)`.
    pub(super) prepared: Option<(usize, usize, bool)>,
    /// Whether a caller preparing activations for several matrices must write the bf16 pair
    /// (some matrix is F32); the engine sets it once from its weights.
    pub pairs_needed: bool,
}

impl QmmWorkspace {
    pub fn new(gpu: &Gpu, max_in: usize, max_out: usize) -> Result<Self, GpuError> {
        let n_pad = QMM_MAX_N as usize;
        let x = n_pad.checked_mul(max_in).ok_or_else(|| GpuError::shape("qmm", "workspace size overflows"))?;
        let partial = 16usize
            .checked_mul(n_pad)
            .and_then(|v| v.checked_mul(max_out))
            .ok_or_else(|| GpuError::shape("qmm", "workspace size overflows"))?;
        Ok(QmmWorkspace {
            xh: gpu.zeros(x)?,
            xb_hi: gpu.zeros(x)?,
            xb_lo: gpu.zeros(x)?,
            xcm: gpu.zeros(x)?,
            xscale: gpu.zeros(n_pad)?,
            // Unit sums: `units × QMM_MAX_N` f32, then the f16 hi/lo group sums (16 halves per
            // group of 8 units and column = 8 f32 slots).
            xsum: gpu.zeros(n_pad * (max_in.div_ceil(32) + 8 * max_in.div_ceil(256)).max(1))?,
            partial: gpu.zeros(partial)?,
            counters: gpu.zeros(max_out.div_ceil(QMM_ROWS_PER_BLOCK as usize).max(1))?,
            max_in,
            max_out,
            prepared: None,
            pairs_needed: false,
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
