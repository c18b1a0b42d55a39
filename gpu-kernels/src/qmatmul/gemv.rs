//! `qmatmul`: `y[n, out] = W[out, in] · x[n, in]` with W in its storage type.
//!
//! This first version covers one token (GEMV) for F32 and BF16 weights; x and y are f32.
//!
//! Geometry: 256-thread blocks; `split` warps (1, 2, 4 or 8, chosen by the host from the shape
//! `[out, in]` only) share one output row, so a block covers `8 / split` rows
//! (`grid = ceil(out · split / 8)`). Lane `l` of part `q` takes the 16-byte weight chunks
//! `l + 32q, l + 32q + 32·split, …` of its row, loading `GEMV_UNROLL` chunks before using any
//! (that many 16-byte loads in flight per lane), with `ld.global.nc.L1::no_allocate` for the
//! weights (read once) and the read-only path for x (re-read by every warp, served from L1).
//! Each lane accumulates with `fma` in chunk order, then a butterfly (xor 16, 8, 4, 2, 1), then
//! the `split` partials are added in part order — a fixed order that depends on the shape only.
//! `split > 1` is for short, wide matrices (e.g. 5120 × 17408) that would leave warp slots
//! idle with one warp per row.
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
use crate::device::shared::Shared;
use crate::device::sync::sync_threads;
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

/// Streams the 16-byte chunks `first, first + stride, …` of one row (`stride = 32 · split`),
/// `GEMV_UNROLL` loads in flight.
#[inline(always)]
unsafe fn row_chunks(
    row: *const U32x4,
    chunks: usize,
    first: usize,
    stride: usize,
    x: *const f32,
    dot: unsafe fn(U32x4, *const f32, usize, f32) -> f32,
) -> f32 {
    let mut acc = 0.0f32;
    let mut c = first;
    while c + stride * (GEMV_UNROLL - 1) < chunks {
        let mut w = [U32x4::default(); GEMV_UNROLL];
        let mut u = 0;
        while u < GEMV_UNROLL {
            w[u] = ld_stream_v4(row.add(c + stride * u));
            u += 1;
        }
        let mut u = 0;
        while u < GEMV_UNROLL {
            acc = dot(w[u], x, c + stride * u, acc);
            u += 1;
        }
        c += stride * GEMV_UNROLL;
    }
    while c < chunks {
        acc = dot(ld_stream_v4(row.add(c)), x, c, acc);
        c += stride;
    }
    acc
}

#[link_section = ".shared"]
static GEMV_PARTIALS: Shared<[f32; 8]> = Shared::uninit();

/// Which row this warp works on and which slice of it: with `split` warps per row, warp `w` of
/// the block serves row `block · (8 / split) + w / split`, part `w % split`.
#[inline(always)]
fn row_and_part(split: u32) -> (u32, u32) {
    let split = split.max(1); // never 0: keeps the division free of a panic path
    let w = warp_id();
    (block_x() * (block_dim_x() / 32 / split) + w / split, w % split)
}

/// Adds the `split` warp partials of each row in part order (fixed) and stores `y[row]`.
/// Every warp of the block must call this (it holds a barrier).
#[inline(always)]
unsafe fn finish_row(acc: f32, split: u32, row: u32, part: u32, out: u32, y: *mut f32) {
    let total = warp_sum_f32(acc);
    if split == 1 {
        if lane_id() == 0 && row < out {
            *y.add(row as usize) = total;
        }
        return;
    }
    let parts = GEMV_PARTIALS.as_mut_ptr() as *mut f32;
    if lane_id() == 0 {
        *parts.add(warp_id() as usize) = total;
    }
    sync_threads();
    if part == 0 && lane_id() == 0 && row < out {
        let mut s = *parts.add(warp_id() as usize);
        let mut k = 1;
        while k < split {
            s += *parts.add((warp_id() + k) as usize);
            k += 1;
        }
        *y.add(row as usize) = s;
    }
}

/// The GEMV body for BF16 (`BF16 = true`, 8 weights per 16-byte chunk) or F32 weights (4 per
/// chunk); rows whose length is not a whole number of chunks take the scalar path.
#[inline(always)]
unsafe fn gemv<const BF16: bool>(w: *const u8, x: *const f32, y: *mut f32, p: GemvParams) {
    let (per_chunk, elem_bytes) = if BF16 { (8, 2) } else { (4, 4) };
    let split = p.split.max(1);
    let (row, part) = row_and_part(split);
    let lane = lane_id() as usize;
    let k = p.in_features as usize;
    let mut acc = 0.0f32;
    if row < p.out_features {
        let wr = w.add(row as usize * k * elem_bytes);
        let first = lane + 32 * part as usize;
        let stride = 32 * split as usize;
        acc = if k % per_chunk == 0 {
            let dot = if BF16 { dot_bf16_chunk } else { dot_f32_chunk };
            row_chunks(wr as *const U32x4, k / per_chunk, first, stride, x, dot)
        } else {
            let mut acc = 0.0f32;
            let mut i = first;
            while i < k {
                let wv = if BF16 {
                    f32::from_bits((ld_nc_u16((wr as *const u16).add(i)) as u32) << 16)
                } else {
                    ld_nc_f32((wr as *const f32).add(i))
                };
                acc = fma(wv, ld_nc_f32(x.add(i)), acc);
                i += stride;
            }
            acc
        };
    }
    finish_row(acc, split, row, part, p.out_features, y);
}

/// GEMV, BF16 weights `[out, in]`, f32 `x[in]` → f32 `y[out]`.
#[no_mangle]
#[link_section = "nvvm:maxntid=256;minctasm=1"]
pub unsafe extern "ptx-kernel" fn gemv_bf16(w: *const u16, x: *const f32, y: *mut f32, p: GemvParams) {
    gemv::<true>(w as *const u8, x, y, p)
}

/// GEMV, F32 weights `[out, in]`, f32 `x[in]` → f32 `y[out]`.
#[no_mangle]
#[link_section = "nvvm:maxntid=256;minctasm=1"]
pub unsafe extern "ptx-kernel" fn gemv_f32(w: *const f32, x: *const f32, y: *mut f32, p: GemvParams) {
    gemv::<false>(w as *const u8, x, y, p)
}
