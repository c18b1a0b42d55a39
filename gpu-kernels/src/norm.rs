//! `norm`: RMSNorm over rows, the fused residual add + RMSNorm, and per-head RMSNorm.
//!
//! Math (all three kernels): `y[r, c] = x[r, c] · w[c] / sqrt(Σ_c x[r, c]² / cols + eps)`, f32 in and
//! out, f32 accumulation. The weight already holds any `1 + w` offset (the converter folds it).
//!
//! Invariant (batch invariance): row `r`'s result depends only on row `r` and `w`; the
//! reduction order is fixed by `cols` and the block shape, never by `rows`.

use kernel_abi::RmsNormParams;

use crate::device::griddep::{grid_dependency_wait, launch_dependents};
use crate::device::math::{div_rn, fma, sqrt_rn};
use crate::device::shared::Shared;
use crate::device::sync::sync_threads;
use crate::device::warp::warp_sum_f32;
use crate::device::*;

/// Strides of a row whose loads one thread issues together (a 5120-wide row on 256 threads is
/// 20 strides: three batches, so three memory latencies per pass instead of twenty).
const NORM_BATCH: usize = 8;

#[link_section = ".shared"]
static NORM_PARTIALS: Shared<[f32; 32]> = Shared::uninit();

/// `1 / sqrt(mean + eps)` with correctly rounded sqrt and division.
#[inline(always)]
pub(crate) fn inv_rms(sum_sq: f32, cols: u32, eps: f32) -> f32 {
    div_rn(1.0, sqrt_rn(div_rn(sum_sq, cols as f32) + eps))
}

/// One row of `rms_norm_rows` / `add_rms_norm_rows` on a block of 256 threads. With `ADD`,
/// `x[c] += a[c]` first (stored back: `x` is the residual stream `h`), and the sum of squares
/// is taken over the sums. Thread `t` accumulates `x[c]²` for `c = t, t+256, …` in order; warps
/// reduce by butterfly; the 8 warp sums are added in warp order. The reduction is the same with
/// and without `ADD`, so `add_rms_norm_rows` with `a = 0` is `rms_norm_rows` bit for bit (for
/// `h` without `−0`, which `+ 0` turns into `+0`).
#[inline(always)]
unsafe fn norm_row<const ADD: bool>(x: *mut f32, a: *const f32, w: *const f32, y: *mut f32, p: RmsNormParams) {
    let row = block_x();
    if row >= p.rows {
        return;
    }
    let off = row as usize * p.cols as usize;
    let xr = x.add(off);
    let yr = y.add(off);
    let t = thread_x();
    let stride = block_dim_x();
    // Loads are issued `NORM_BATCH` strides at a time before any is used (the in-place store of
    // the sums may alias the next loads as far as the compiler knows, so a plain loop waits one
    // memory latency per element); the fma order is unchanged: `c = t, t+256, …`.
    let mut acc = 0.0f32;
    let mut base = t;
    while base < p.cols {
        let mut v = [0.0f32; NORM_BATCH];
        let mut k = 0;
        while k < NORM_BATCH {
            let c = base + k as u32 * stride;
            if c < p.cols {
                v[k] = *xr.add(c as usize);
                if ADD {
                    v[k] += *a.add(off + c as usize);
                }
            }
            k += 1;
        }
        let mut k = 0;
        while k < NORM_BATCH {
            let c = base + k as u32 * stride;
            if c < p.cols {
                if ADD {
                    *xr.add(c as usize) = v[k];
                }
                acc = fma(v[k], v[k], acc);
            }
            k += 1;
        }
        base += NORM_BATCH as u32 * stride;
    }
    let acc = warp_sum_f32(acc);
    let partials = NORM_PARTIALS.as_mut_ptr() as *mut f32;
    if lane_id() == 0 {
        *partials.add(warp_id() as usize) = acc;
    }
    sync_threads();
    let warps = block_dim_x() / 32;
    let mut total = 0.0f32;
    let mut i = 0;
    while i < warps {
        total += *partials.add(i as usize);
        i += 1;
    }
    let s = inv_rms(total, p.cols, p.eps);
    // Each thread reads back only the values it wrote itself (same `c`), so no barrier is needed
    // between the in-place update and this pass. Batched like the first pass.
    let mut base = t;
    while base < p.cols {
        let mut v = [0.0f32; NORM_BATCH];
        let mut k = 0;
        while k < NORM_BATCH {
            let c = base + k as u32 * stride;
            if c < p.cols {
                v[k] = *xr.add(c as usize) * s * *w.add(c as usize);
            }
            k += 1;
        }
        let mut k = 0;
        while k < NORM_BATCH {
            let c = base + k as u32 * stride;
            if c < p.cols {
                *yr.add(c as usize) = v[k];
            }
            k += 1;
        }
        base += NORM_BATCH as u32 * stride;
    }
}

/// RMSNorm of long rows (hidden size). One block of 256 threads per row (`grid = rows`); the
/// reduction order is that of [`norm_row`]. Traffic: reads `x` twice (second from L1/L2), `w`
/// once, writes `y`: ≈ `(2·rows + 1)·cols·4` bytes. Chainable (programmatic dependent launch).
#[no_mangle]
#[link_section = "nvvm:maxntid=256;minctasm=1"]
pub unsafe extern "ptx-kernel" fn rms_norm_rows(x: *const f32, w: *const f32, y: *mut f32, p: RmsNormParams) {
    launch_dependents();
    grid_dependency_wait();
    norm_row::<false>(x as *mut f32, core::ptr::null(), w, y, p);
}

/// Fused residual add + RMSNorm: `h[r, c] += a[r, c]` (in place), then
/// `y[r, c] = h[r, c] · w[c] / sqrt(Σ_c h[r, c]² / cols + eps)`, one block of 256 threads per
/// row (`grid = rows`), the reduction order of [`norm_row`] (so `a = 0` gives `rms_norm_rows`'s
/// bits). `a` and `y` must not overlap `h`. Traffic: reads `h`, `a`, `w`, writes `h` and `y`
/// (the second read of `h` is the block's own writes, from L1/L2): ≈ `(4·rows + 1)·cols·4`
/// bytes. Chainable.
#[no_mangle]
#[link_section = "nvvm:maxntid=256;minctasm=1"]
pub unsafe extern "ptx-kernel" fn add_rms_norm_rows(
    h: *mut f32,
    a: *const f32,
    w: *const f32,
    y: *mut f32,
    p: RmsNormParams,
) {
    launch_dependents();
    grid_dependency_wait();
    norm_row::<true>(h, a, w, y, p);
}

/// Per-head RMSNorm (q/k norm): `rows` = tokens × heads vectors of `cols` = head_dim values, one
/// weight of `head_dim` shared by all heads. One warp per vector, 8 vectors per 256-thread block
/// (`grid = ceil(rows / 8)`). Lane `l` accumulates `c = l, l+32, …` in order, then a butterfly.
/// Chainable (programmatic dependent launch).
#[no_mangle]
#[link_section = "nvvm:maxntid=256;minctasm=1"]
pub unsafe extern "ptx-kernel" fn rms_norm_heads(x: *const f32, w: *const f32, y: *mut f32, p: RmsNormParams) {
    launch_dependents();
    grid_dependency_wait();
    let row = block_x() * (block_dim_x() / 32) + warp_id();
    if row >= p.rows {
        return;
    }
    let xr = x.add(row as usize * p.cols as usize);
    let yr = y.add(row as usize * p.cols as usize);
    let lane = lane_id();
    let mut acc = 0.0f32;
    let mut c = lane;
    while c < p.cols {
        let v = *xr.add(c as usize);
        acc = fma(v, v, acc);
        c += 32;
    }
    let s = inv_rms(warp_sum_f32(acc), p.cols, p.eps);
    let mut c = lane;
    while c < p.cols {
        *yr.add(c as usize) = *xr.add(c as usize) * s * *w.add(c as usize);
        c += 32;
    }
}
