//! Launchers of the one-token GEMV kernels (`gemv_bf16`, `gemv_f32`): `y = W · x` with W F32 or
//! BF16 `[out, in]` row-major as stored, x and y f32. The first GPU matmul, kept beside the
//! tensor-core [`super::QWeight`] path as its simplest comparison point (tests and benches).

use cudarc::driver::{CudaSlice, LaunchConfig, PushKernelArg};
use kernel_abi::{gemv_split, GemvParams, GEMV_BLOCK_THREADS, GEMV_WARPS_PER_BLOCK};

use crate::gpu::error::{DriverContext, GpuError};
use crate::gpu::{Gpu, Param};

fn params<W>(
    kernel: &'static str,
    w: &CudaSlice<W>,
    x: &CudaSlice<f32>,
    y: &CudaSlice<f32>,
    out: usize,
    inp: usize,
) -> Result<GemvParams, GpuError> {
    if out == 0 || inp == 0 {
        return Err(GpuError::shape(kernel, format!("empty matrix [{out}, {inp}]")));
    }
    let need = out.checked_mul(inp).ok_or_else(|| GpuError::shape(kernel, "out × in overflows"))?;
    if w.len() < need || x.len() < inp || y.len() < out {
        return Err(GpuError::shape(
            kernel,
            format!(
                "W [{out}, {inp}] needs {need} values (has {}), x {inp} (has {}), y {out} (has {})",
                w.len(),
                x.len(),
                y.len()
            ),
        ));
    }
    let out_features = u32::try_from(out).map_err(|_| GpuError::shape(kernel, "out too large"))?;
    let in_features = u32::try_from(inp).map_err(|_| GpuError::shape(kernel, "in too large"))?;
    Ok(GemvParams { out_features, in_features, split: gemv_split(out_features, in_features) })
}

fn cfg(p: &GemvParams) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (p.out_features.div_ceil(GEMV_WARPS_PER_BLOCK / p.split), 1, 1),
        block_dim: (GEMV_BLOCK_THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// `y[o] = Σ_i W[o, i] · x[i]`, W BF16 (raw bits) `[out, in]` row-major.
pub fn gemv_bf16(
    gpu: &Gpu,
    w: &CudaSlice<u16>,
    x: &CudaSlice<f32>,
    y: &mut CudaSlice<f32>,
    out: usize,
    inp: usize,
) -> Result<(), GpuError> {
    let p = params("gemv_bf16", w, x, y, out, inp)?;
    let f = gpu.function("gemv_bf16")?;
    let mut b = gpu.stream().launch_builder(&f);
    let pp = Param(p);
    b.arg(w).arg(x).arg(y).arg(&pp);
    unsafe { b.launch(cfg(&p)) }.while_(|| "launching gemv_bf16".into())?;
    Ok(())
}

/// `y[o] = Σ_i W[o, i] · x[i]`, W F32 `[out, in]` row-major.
pub fn gemv_f32(
    gpu: &Gpu,
    w: &CudaSlice<f32>,
    x: &CudaSlice<f32>,
    y: &mut CudaSlice<f32>,
    out: usize,
    inp: usize,
) -> Result<(), GpuError> {
    let p = params("gemv_f32", w, x, y, out, inp)?;
    let f = gpu.function("gemv_f32")?;
    let mut b = gpu.stream().launch_builder(&f);
    let pp = Param(p);
    b.arg(w).arg(x).arg(y).arg(&pp);
    unsafe { b.launch(cfg(&p)) }.while_(|| "launching gemv_f32".into())?;
    Ok(())
}
