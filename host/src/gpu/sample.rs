//! Launchers of `sample` (`gpu-kernels/src/sample.rs`): argmax over rows of logits.

use cudarc::driver::{CudaSlice, LaunchConfig, PushKernelArg};
use kernel_abi::{ArgmaxParams, ARGMAX_SPLITS, ROW_BLOCK_THREADS};

use super::error::{DriverContext, GpuError};
use super::{Gpu, Param};

/// Scratch and outputs of [`argmax`] for up to `rows` rows.
pub struct ArgmaxBuffers {
    part_val: CudaSlice<f32>,
    part_idx: CudaSlice<u32>,
    /// Index of each row's maximum (`u32::MAX` for an all-NaN row).
    pub idx: CudaSlice<u32>,
    /// Each row's maximum.
    pub val: CudaSlice<f32>,
    rows: usize,
}

impl ArgmaxBuffers {
    pub fn new(gpu: &Gpu, rows: usize) -> Result<Self, GpuError> {
        let parts = rows * ARGMAX_SPLITS as usize;
        Ok(ArgmaxBuffers {
            part_val: gpu.zeros(parts)?,
            part_idx: gpu.zeros(parts)?,
            idx: gpu.zeros(rows)?,
            val: gpu.zeros(rows)?,
            rows,
        })
    }
}

/// Argmax of each of `rows` rows of `cols` logits (lowest index wins ties; NaN never wins).
pub fn argmax(
    gpu: &Gpu,
    x: &CudaSlice<f32>,
    rows: usize,
    cols: usize,
    out: &mut ArgmaxBuffers,
) -> Result<(), GpuError> {
    if rows == 0 || cols == 0 || rows > out.rows {
        return Err(GpuError::shape("argmax", format!("{rows} rows of {cols} (buffers hold {} rows)", out.rows)));
    }
    let need = rows.checked_mul(cols).ok_or_else(|| GpuError::shape("argmax", "rows × cols overflows"))?;
    if x.len() < need {
        return Err(GpuError::shape("argmax", format!("{rows} × {cols} logits need {need} values, have {}", x.len())));
    }
    let p = ArgmaxParams {
        rows: u32::try_from(rows).map_err(|_| GpuError::shape("argmax", "too many rows"))?,
        cols: u32::try_from(cols).map_err(|_| GpuError::shape("argmax", "row too long"))?,
    };
    if p.rows > 65_535 {
        return Err(GpuError::shape("argmax", "at most 65535 rows per launch"));
    }
    let pp = Param(p);
    let f = gpu.function("argmax_partial")?;
    let cfg = LaunchConfig {
        grid_dim: (ARGMAX_SPLITS, p.rows, 1),
        block_dim: (ROW_BLOCK_THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    let mut b = gpu.stream().launch_builder(&f);
    b.arg(x).arg(&mut out.part_val).arg(&mut out.part_idx).arg(&pp);
    unsafe { b.launch(cfg) }.while_(|| "launching argmax_partial".into())?;

    let f = gpu.function("argmax_finish")?;
    let cfg = LaunchConfig {
        grid_dim: (p.rows.div_ceil(ROW_BLOCK_THREADS / 32), 1, 1),
        block_dim: (ROW_BLOCK_THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    let mut b = gpu.stream().launch_builder(&f);
    b.arg(&out.part_val).arg(&out.part_idx).arg(&mut out.idx).arg(&mut out.val).arg(&pp);
    unsafe { b.launch(cfg) }.while_(|| "launching argmax_finish".into())?;
    Ok(())
}
