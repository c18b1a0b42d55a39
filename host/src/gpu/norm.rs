//! Launchers of `norm` (`gpu-kernels/src/norm.rs`): RMSNorm over rows, the fused residual add +
//! RMSNorm, and per-head RMSNorm.
//!
//! The `*_span` launchers (and [`add_rms_norm`]) take device views ([`DevSpan`]) and launch
//! through [`ChainedLaunch`], so the engine can chain them (programmatic dependent launch) and
//! capture them in a CUDA graph; the `CudaSlice` launchers are thin wrappers over them.

use cudarc::driver::{CudaSlice, LaunchConfig};
use kernel_abi::{RmsNormParams, ROW_BLOCK_THREADS};

use super::error::GpuError;
use super::{ChainedLaunch, DevSpan, Gpu, Param};

/// Checks `rows × cols` against `x` (named `x_name` in errors), `y` (`rows·cols` values) and `w`
/// (`cols` values).
#[allow(clippy::too_many_arguments)]
fn check(
    kernel: &'static str,
    x_name: &str,
    x: DevSpan<f32>,
    w: DevSpan<f32>,
    y: DevSpan<f32>,
    rows: usize,
    cols: usize,
    eps: f32,
) -> Result<RmsNormParams, GpuError> {
    if cols == 0 || rows == 0 {
        return Err(GpuError::shape(kernel, format!("empty input: {rows} rows of {cols}")));
    }
    let need = rows.checked_mul(cols).ok_or_else(|| GpuError::shape(kernel, "rows × cols overflows"))?;
    x.need(need, kernel, &format!("{x_name} ({rows} rows × {cols} cols)"))?;
    y.need(need, kernel, &format!("y ({rows} rows × {cols} cols)"))?;
    w.need(cols, kernel, "w")?;
    let rows = u32::try_from(rows).map_err(|_| GpuError::shape(kernel, "too many rows"))?;
    let cols = u32::try_from(cols).map_err(|_| GpuError::shape(kernel, "row too long"))?;
    Ok(RmsNormParams { rows, cols, eps })
}

/// Whether the first `a_len` values at `a` and the first `b_len` at `b` share any byte.
fn overlap(a: DevSpan<f32>, a_len: usize, b: DevSpan<f32>, b_len: usize) -> bool {
    let (a0, b0) = (a.ptr(), b.ptr());
    let (a1, b1) = (a0 + 4 * a_len as u64, b0 + 4 * b_len as u64);
    a0 < b1 && b0 < a1
}

/// `y[r] = rmsnorm(x[r]) ⊙ w` for `rows` rows of `cols` values (one block per row), chained.
/// `y` may be `x` (in place).
pub fn rms_norm_rows_span(
    gpu: &Gpu,
    x: DevSpan<f32>,
    w: DevSpan<f32>,
    y: DevSpan<f32>,
    rows: usize,
    cols: usize,
    eps: f32,
) -> Result<(), GpuError> {
    let p = check("rms_norm_rows", "x", x, w, y, rows, cols, eps)?;
    let cfg = LaunchConfig { grid_dim: (p.rows, 1, 1), block_dim: (ROW_BLOCK_THREADS, 1, 1), shared_mem_bytes: 0 };
    // Safety: the arguments match `rms_norm_rows(x, w, y, RmsNormParams)`, whose sizes are
    // checked above, and the kernel waits on the previous grid before touching memory.
    unsafe { ChainedLaunch::new(gpu, "rms_norm_rows").span(x).span(w).span(y).value(Param(p)).launch(cfg) }
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
    let (xs, ws, ys) = (DevSpan::of(gpu, x), DevSpan::of(gpu, w), DevSpan::of(gpu, y));
    rms_norm_rows_span(gpu, xs, ws, ys, rows, w.len(), eps)
}

/// Fused residual add + RMSNorm, chained: `h[r] += a[r]` in place (the residual stream), then
/// `y[r] = rmsnorm(h[r]) ⊙ w`, for `rows` rows of `cols` values, one block per row, with the
/// reduction order of [`rms_norm_rows_span`] (so `a = 0` gives its bits for an `h` without
/// `−0`). `a` and `y` must not overlap `h` (checked).
#[allow(clippy::too_many_arguments)]
pub fn add_rms_norm(
    gpu: &Gpu,
    h: DevSpan<f32>,
    a: DevSpan<f32>,
    w: DevSpan<f32>,
    y: DevSpan<f32>,
    rows: usize,
    cols: usize,
    eps: f32,
) -> Result<(), GpuError> {
    const K: &str = "add_rms_norm_rows";
    let p = check(K, "h", h, w, y, rows, cols, eps)?;
    let n = rows * cols;
    a.need(n, K, &format!("a ({rows} rows × {cols} cols)"))?;
    if overlap(h, n, a, n) || overlap(h, n, y, n) {
        return Err(GpuError::shape(K, "a and y must not overlap h (h is updated in place)"));
    }
    let cfg = LaunchConfig { grid_dim: (p.rows, 1, 1), block_dim: (ROW_BLOCK_THREADS, 1, 1), shared_mem_bytes: 0 };
    // Safety: the arguments match `add_rms_norm_rows(h, a, w, y, RmsNormParams)`, sizes checked.
    unsafe { ChainedLaunch::new(gpu, K).span(h).span(a).span(w).span(y).value(Param(p)).launch(cfg) }
}

/// Per-head RMSNorm, chained: `vectors` = tokens × heads vectors of `head_dim` values, one warp
/// per vector, one weight of `head_dim` values shared by all heads.
pub fn rms_norm_heads_span(
    gpu: &Gpu,
    x: DevSpan<f32>,
    w: DevSpan<f32>,
    y: DevSpan<f32>,
    vectors: usize,
    head_dim: usize,
    eps: f32,
) -> Result<(), GpuError> {
    let p = check("rms_norm_heads", "x", x, w, y, vectors, head_dim, eps)?;
    let per_block = ROW_BLOCK_THREADS / 32;
    let cfg = LaunchConfig {
        grid_dim: (p.rows.div_ceil(per_block), 1, 1),
        block_dim: (ROW_BLOCK_THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    // Safety: the arguments match `rms_norm_heads(x, w, y, RmsNormParams)`, sizes checked.
    unsafe { ChainedLaunch::new(gpu, "rms_norm_heads").span(x).span(w).span(y).value(Param(p)).launch(cfg) }
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
    let (xs, ws, ys) = (DevSpan::of(gpu, x), DevSpan::of(gpu, w), DevSpan::of(gpu, y));
    rms_norm_heads_span(gpu, xs, ws, ys, vectors, w.len(), eps)
}
