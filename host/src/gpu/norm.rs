//! Launchers of `norm` (`gpu-kernels/src/norm.rs`): RMSNorm over rows and per-head RMSNorm.

use cudarc::driver::{CudaSlice, LaunchConfig, PushKernelArg};
use kernel_abi::{RmsNormParams, ROW_BLOCK_THREADS};

use super::error::{DriverContext, GpuError};
use super::{Gpu, Param};

fn check(
    kernel: &'static str,
    x: &CudaSlice<f32>,
    w: &CudaSlice<f32>,
    y: &CudaSlice<f32>,
    rows: usize,
) -> Result<RmsNormParams, GpuError> {
    let cols = w.len();
    if cols == 0 || rows == 0 {
        return Err(GpuError::shape(kernel, format!("empty input: {rows} rows of {cols}")));
    }
    let need = rows.checked_mul(cols).ok_or_else(|| GpuError::shape(kernel, "rows × cols overflows"))?;
    if x.len() < need || y.len() < need {
        return Err(GpuError::shape(
            kernel,
            format!("{rows} rows × {cols} cols need {need} values, x has {} and y {}", x.len(), y.len()),
        ));
    }
    let rows = u32::try_from(rows).map_err(|_| GpuError::shape(kernel, "too many rows"))?;
    let cols = u32::try_from(cols).map_err(|_| GpuError::shape(kernel, "row too long"))?;
    Ok(RmsNormParams { rows, cols, eps: 0.0 })
}

/// `y[r] = rmsnorm(x[r]) ⊙ w` for `rows` rows of `w.len()` values (one block per row).
pub fn rms_norm_rows(
    gpu: &Gpu,
    x: &CudaSlice<f32>,
    w: &CudaSlice<f32>,
    y: &mut CudaSlice<f32>,
    rows: usize,
    eps: f32,
) -> Result<(), GpuError> {
    let p = RmsNormParams { eps, ..check("rms_norm_rows", x, w, y, rows)? };
    let cfg = LaunchConfig { grid_dim: (p.rows, 1, 1), block_dim: (ROW_BLOCK_THREADS, 1, 1), shared_mem_bytes: 0 };
    let f = gpu.function("rms_norm_rows")?;
    let mut b = gpu.stream().launch_builder(&f);
    let p = Param(p);
    b.arg(x).arg(w).arg(y).arg(&p);
    unsafe { b.launch(cfg) }.while_(|| "launching rms_norm_rows".into())?;
    Ok(())
}

/// Per-head RMSNorm: `vectors` = tokens × heads vectors of `head_dim = w.len()` values, one
/// warp per vector.
pub fn rms_norm_heads(
    gpu: &Gpu,
    x: &CudaSlice<f32>,
    w: &CudaSlice<f32>,
    y: &mut CudaSlice<f32>,
    vectors: usize,
    eps: f32,
) -> Result<(), GpuError> {
    let p = RmsNormParams { eps, ..check("rms_norm_heads", x, w, y, vectors)? };
    let per_block = ROW_BLOCK_THREADS / 32;
    let cfg = LaunchConfig {
        grid_dim: (p.rows.div_ceil(per_block), 1, 1),
        block_dim: (ROW_BLOCK_THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    let f = gpu.function("rms_norm_heads")?;
    let mut b = gpu.stream().launch_builder(&f);
    let p = Param(p);
    b.arg(x).arg(w).arg(y).arg(&p);
    unsafe { b.launch(cfg) }.while_(|| "launching rms_norm_heads".into())?;
    Ok(())
}
