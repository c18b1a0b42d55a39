//! `qmatmul`: `y[n, out] = W[out, in] · x[n, in]` with W in its storage type.
//!
//! This first version covers one token (GEMV) for F32 and BF16 weights; x and y are f32.
//!
//! Geometry: 256-thread blocks, one warp per output row, 8 rows per block
//! (`grid = ceil(out / 8)`). Lane `l` takes the 16-byte weight chunks `l, l+32, l+64, …` of its
//! row, loading `GEMV_UNROLL` chunks before using any (that many 16-byte loads in flight per
//! lane), with `ld.global.nc.L1::no_allocate` for the weights (read once) and the read-only path
//! for x (re-read by every warp, served from L1). Each lane accumulates with `fma` in chunk
//! order, then a butterfly (xor 16, 8, 4, 2, 1) — a fixed order that depends on `in` only.
//!
//! Rows need 16-byte alignment for the vector path: `in % 8 == 0` (bf16) or `in % 4 == 0` (f32);
//! other shapes take the scalar path (lane `l` takes elements `l, l+32, …`).
//!
//! Traffic: `out·in·sizeof(W)` weight bytes (the roofline term), plus `in·4` (x, cached) and
//! `out·4` (y).

use kernel_abi::GemvParams;

use crate::device::convert::bf16x2_to_f32;
use crate::device::load::{ld_nc_f32, ld_nc_u16, ld_nc_v4, ld_stream_v4, U32x4};
use crate::device::math::fma;
use crate::device::warp::warp_sum_f32;
use crate::device::*;

/// 16-byte weight loads in flight per lane.
pub const GEMV_UNROLL: usize = 4;

#[inline(always)]
unsafe fn x4(x: *const f32, i: usize) -> [f32; 4] {
    let v = ld_nc_v4(x.add(i) as *const U32x4);
    [f32::from_bits(v.0[0]), f32::from_bits(v.0[1]), f32::from_bits(v.0[2]), f32::from_bits(v.0[3])]
}

/// Dot of one 16-byte bf16 chunk (8 weights) with `x[8c .. 8c+8]`, accumulated in order.
#[inline(always)]
unsafe fn dot_bf16_chunk(w: U32x4, x: *const f32, c: usize, mut acc: f32) -> f32 {
    let xa = x4(x, 8 * c);
    let xb = x4(x, 8 * c + 4);
    let (w0, w1) = bf16x2_to_f32(w.0[0]);
    let (w2, w3) = bf16x2_to_f32(w.0[1]);
    let (w4, w5) = bf16x2_to_f32(w.0[2]);
    let (w6, w7) = bf16x2_to_f32(w.0[3]);
    acc = fma(w0, xa[0], acc);
    acc = fma(w1, xa[1], acc);
    acc = fma(w2, xa[2], acc);
    acc = fma(w3, xa[3], acc);
    acc = fma(w4, xb[0], acc);
    acc = fma(w5, xb[1], acc);
    acc = fma(w6, xb[2], acc);
    fma(w7, xb[3], acc)
}

/// Dot of one 16-byte f32 chunk (4 weights) with `x[4c .. 4c+4]`.
#[inline(always)]
unsafe fn dot_f32_chunk(w: U32x4, x: *const f32, c: usize, mut acc: f32) -> f32 {
    let xa = x4(x, 4 * c);
    acc = fma(f32::from_bits(w.0[0]), xa[0], acc);
    acc = fma(f32::from_bits(w.0[1]), xa[1], acc);
    acc = fma(f32::from_bits(w.0[2]), xa[2], acc);
    fma(f32::from_bits(w.0[3]), xa[3], acc)
}

/// Streams the 16-byte chunks `lane, lane+32, …` of one row, `GEMV_UNROLL` loads in flight.
#[inline(always)]
unsafe fn row_chunks(
    row: *const U32x4,
    chunks: usize,
    lane: usize,
    x: *const f32,
    dot: unsafe fn(U32x4, *const f32, usize, f32) -> f32,
) -> f32 {
    let mut acc = 0.0f32;
    let mut c = lane;
    let step = 32 * GEMV_UNROLL;
    while c + 32 * (GEMV_UNROLL - 1) < chunks {
        let mut w = [U32x4::default(); GEMV_UNROLL];
        let mut u = 0;
        while u < GEMV_UNROLL {
            w[u] = ld_stream_v4(row.add(c + 32 * u));
            u += 1;
        }
        let mut u = 0;
        while u < GEMV_UNROLL {
            acc = dot(w[u], x, c + 32 * u, acc);
            u += 1;
        }
        c += step;
    }
    while c < chunks {
        acc = dot(ld_stream_v4(row.add(c)), x, c, acc);
        c += 32;
    }
    acc
}

/// GEMV, BF16 weights `[out, in]`, f32 `x[in]` → f32 `y[out]`.
#[no_mangle]
#[link_section = "nvvm:maxntid=256;minctasm=1"]
pub unsafe extern "ptx-kernel" fn gemv_bf16(w: *const u16, x: *const f32, y: *mut f32, p: GemvParams) {
    let row = block_x() * (block_dim_x() / 32) + warp_id();
    if row >= p.out_features {
        return;
    }
    let lane = lane_id() as usize;
    let k = p.in_features as usize;
    let wr = w.add(row as usize * k);
    let acc = if k % 8 == 0 {
        row_chunks(wr as *const U32x4, k / 8, lane, x, dot_bf16_chunk)
    } else {
        let mut acc = 0.0f32;
        let mut i = lane;
        while i < k {
            let wv = f32::from_bits((ld_nc_u16(wr.add(i)) as u32) << 16);
            acc = fma(wv, ld_nc_f32(x.add(i)), acc);
            i += 32;
        }
        acc
    };
    let total = warp_sum_f32(acc);
    if lane == 0 {
        *y.add(row as usize) = total;
    }
}

/// GEMV, F32 weights `[out, in]`, f32 `x[in]` → f32 `y[out]`.
#[no_mangle]
#[link_section = "nvvm:maxntid=256;minctasm=1"]
pub unsafe extern "ptx-kernel" fn gemv_f32(w: *const f32, x: *const f32, y: *mut f32, p: GemvParams) {
    let row = block_x() * (block_dim_x() / 32) + warp_id();
    if row >= p.out_features {
        return;
    }
    let lane = lane_id() as usize;
    let k = p.in_features as usize;
    let wr = w.add(row as usize * k);
    let acc = if k % 4 == 0 {
        row_chunks(wr as *const U32x4, k / 4, lane, x, dot_f32_chunk)
    } else {
        let mut acc = 0.0f32;
        let mut i = lane;
        while i < k {
            acc = fma(ld_nc_f32(wr.add(i)), ld_nc_f32(x.add(i)), acc);
            i += 32;
        }
        acc
    };
    let total = warp_sum_f32(acc);
    if lane == 0 {
        *y.add(row as usize) = total;
    }
}
