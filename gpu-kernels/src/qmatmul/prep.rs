//! `qmm_prep_x`: activations f32 `[n, in]` → the tensor-core input format (see the module doc).
//!
//! Launch: grid `(n, ⌈in / 1024⌉)`, 256 threads. Block `(c, b)` first finds `max |x[c, :]|`
//! over the whole column (every block of the column reads it, 16-byte loads, mostly L2 hits;
//! the max is order-independent, so every block gets the same scale), then writes its 1024
//! elements (32 units of 32, four per warp, lane `i` = element `i`): scaled by the exact power
//! of two `1 / s_c`, rounded to f16 at its fragment position, optionally also as bf16 hi + lo,
//! and the unit sum `S[unit][c] = Σ_i f16(x̂_i)` (f32, butterfly order — fixed, so it is the same
//! for every launch), and after the `units × 32` f32 sums the same sums as f16 hi + lo of
//! `S / 64` in groups of 8 units ([`group_sum_slot`]); the f16 values also go to the core-matrix
//! plane of the warpgroup kernels ([`core_matrix_slot`]). Padding columns `c ≥ n` are not written: the matmul never reads them.
//! Traffic: reads `n·in·4·⌈in/1024⌉` bytes (L2), writes `n·in·(2 or 6) + n·in/8` bytes.

use kernel_abi::{QmmPrepParams, QMM_MAX_N, QMM_PREP_CHUNK as PREP_CHUNK};

use crate::device::convert::{f16_to_f32, f32_to_bf16, f32_to_f16};
use crate::device::griddep::{grid_dependency_wait, launch_dependents};
use crate::device::load::{ld_v4, U32x4};
use crate::device::shared::Shared;
use crate::device::sync::sync_threads;
use crate::device::warp::{shfl_xor_f32, shfl_xor_u32};
use crate::device::*;

/// Where element `e` (0..32) of a 32-element block is stored: lane `t = e / 8` of a fragment
/// quad owns elements `8t .. 8t+8`; within them, k16 step `h = (e % 8) / 4` and the order
/// `[e0, e2, e1, e3]` makes the lane's 4-byte words exactly the B registers
/// `b0 = (k 2t, 2t+1)`, `b1 = (k 2t+8, 2t+9)` of step `h`.
#[inline(always)]
pub const fn position_in_block(e: u32) -> u32 {
    let t = e / 8;
    let r = e % 8;
    let i = r % 4;
    let swapped = if i == 1 {
        2
    } else if i == 2 {
        1
    } else {
        i
    };
    8 * t + 4 * (r / 4) + swapped
}

/// Index (in u16) of the f16 `hi` part of unit `unit`'s sum for column `c` in the group-sum
/// area (`lo` is 2 further on). Units are grouped by 8 (one K-quant super-block); a group holds,
/// per column, 16 halves in the B-fragment order of a k16 step over the group's units: lane `t`
/// of a quad reads 8 bytes at `4t`: `hi(S_2t), hi(S_2t+1), lo(S_2t), lo(S_2t+1)` — the `b0`
/// (k = 2t, 2t+1: the hi parts) and `b1` (k = 2t+8, 2t+9: the lo parts) registers.
#[inline(always)]
pub const fn group_sum_slot(unit: usize, c: usize) -> usize {
    let (group, j) = (unit / 8, unit % 8);
    (group * QMM_MAX_N as usize + c) * 16 + 4 * (j / 2) + j % 2
}

/// Index (in u16) of element `e` (0..32) of unit `unit`, column `c`, in the core-matrix plane
/// that the warpgroup kernels (`qmatmul::tile_wg`) copy into shared memory unchanged, for a
/// matrix of `steps = in / 16` k16 steps. Tile-major: the 8-column group `j = c / 8` holds its
/// steps contiguously, step `s = 2·unit + h` at `256·(j·steps + s)` bytes, then k half `kk` at
/// `+ 128·kk`, column `c % 8` at `+ 16·(c % 8)`: one 16-byte row of an 8 × 8 core matrix, holding
/// the four fragment words `(2h + kk)` of the lane quad positions `t = 0..4` (so `2t + half`),
/// where `position_in_block(e) = 8t + 2·(2h + kk) + half`. A chunk of steps of one tile is one
/// contiguous run (one bulk copy per tile and chunk).
#[inline(always)]
pub const fn core_matrix_slot(unit: usize, e: u32, c: usize, steps: usize) -> usize {
    let pos = position_in_block(e) as usize;
    let (t, word, half) = (pos / 8, (pos % 8) / 2, pos % 2);
    let (h, kk) = (word / 2, word % 2);
    ((c / 8) * steps + 2 * unit + h) * 128 + kk * 64 + (c % 8) * 8 + 2 * t + half
}

#[link_section = ".shared"]
static PREP_MAX: Shared<[u32; 8]> = Shared::uninit();

/// `2^k` as f32 for `k ∈ [-126, 127]`.
#[inline(always)]
fn pow2(k: i32) -> f32 {
    f32::from_bits(((k + 127) as u32) << 23)
}

#[no_mangle]
#[link_section = "nvvm:maxntid=256;minctasm=1"]
pub unsafe extern "ptx-kernel" fn qmm_prep_x(
    x: *const f32,
    xh: *mut u16,
    xb_hi: *mut u16,
    xb_lo: *mut u16,
    xcm: *mut u16,
    xscale: *mut f32,
    xsum: *mut f32,
    p: QmmPrepParams,
) {
    // Chained launches (see `device::griddep`): let the matmul that follows start loading its
    // weights, and touch nothing before the previous kernel (which wrote x, and may still read
    // the prepared buffers) has finished.
    launch_dependents();
    let c = block_x();
    if c >= p.n {
        return;
    }
    grid_dependency_wait();
    let k = p.in_features as usize;
    let t = thread_x() as usize;
    let base = c as usize * k;
    // Pass 1: max |x| over the column (as bits: for non-negative floats the integer order is the
    // float order; NaN bits sort above +inf, so a NaN column gets a NaN scale and NaN results).
    // `in` is a multiple of 32, so the column is whole 16-byte vectors.
    let col = x.add(base) as *const U32x4;
    let vecs = k / 4;
    let mut m = 0u32;
    let mut i = t;
    while i + 3 * 256 < vecs {
        let (a, b) = (ld_v4(col.add(i)).0, ld_v4(col.add(i + 256)).0);
        let (c, d) = (ld_v4(col.add(i + 512)).0, ld_v4(col.add(i + 768)).0);
        let mut e = 0;
        while e < 4 {
            m = m.max(a[e] & 0x7fff_ffff).max(b[e] & 0x7fff_ffff).max(c[e] & 0x7fff_ffff).max(d[e] & 0x7fff_ffff);
            e += 1;
        }
        i += 4 * 256;
    }
    while i < vecs {
        let a = ld_v4(col.add(i)).0;
        m = m.max(a[0] & 0x7fff_ffff).max(a[1] & 0x7fff_ffff).max(a[2] & 0x7fff_ffff).max(a[3] & 0x7fff_ffff);
        i += 256;
    }
    let mut s = 16;
    while s > 0 {
        m = m.max(shfl_xor_u32(m, s));
        s >>= 1;
    }
    let maxes = PREP_MAX.as_mut_ptr() as *mut u32;
    if lane_id() == 0 {
        *maxes.add(warp_id() as usize) = m;
    }
    sync_threads();
    let mut m = 0u32;
    let mut w = 0;
    while w < 8 {
        m = m.max(*maxes.add(w));
        w += 1;
    }
    // s_c = 2^(E - 14) where E = floor(log2(max)), so max / s_c ∈ [2^14, 2^15).
    let (scale, inv) = if m == 0 || m >= 0x7f80_0000 {
        (if m > 0x7f80_0000 { f32::NAN } else { 1.0 }, 1.0)
    } else {
        let e = ((m >> 23) as i32 - 127).max(-126);
        let k2 = (e - 14).clamp(-126, 127);
        (pow2(k2), pow2((-k2).clamp(-126, 127)))
    };
    if t == 0 && block_y() == 0 {
        *xscale.add(c as usize) = scale;
    }
    // Pass 2: this block's units, four per warp; lane = element.
    let lane = lane_id();
    let units = k / 32;
    let mut j = 0;
    while j < 4 {
        let unit = (block_y() * PREP_CHUNK) as usize / 32 + warp_id() as usize * 4 + j;
        if unit < units {
            let e = unit * 32 + lane as usize;
            let v = *x.add(base + e) * inv;
            let h = f32_to_f16(v);
            let dst = base + unit * 32 + position_in_block(lane) as usize;
            *xh.add(dst) = h;
            // The same value in the warpgroup kernels' plane (see `core_matrix_slot`).
            *xcm.add(core_matrix_slot(unit, lane, c as usize, 2 * units)) = h;
            if p.pairs != 0 {
                let hi = f32_to_bf16(v);
                let lo = f32_to_bf16(v - f32::from_bits((hi as u32) << 16));
                *xb_hi.add(dst) = hi;
                *xb_lo.add(dst) = lo;
            }
            let mut sum = f16_to_f32(h);
            let mut s = 1;
            while s < 32 {
                sum += shfl_xor_f32(sum, s);
                s <<= 1;
            }
            if lane == 0 {
                *xsum.add(unit * QMM_MAX_N as usize + c as usize) = sum;
                // The same sum for the K-quant kernels' correction products: `S / 64` (a
                // power of two, so `|S/64| < 2^15` fits f16) as f16 hi + lo, at its B-fragment
                // slot of the unit's group of 8 (see `group_sum_slot`).
                let s64 = sum * 0.015625;
                let hi = f32_to_f16(s64);
                let lo = f32_to_f16(s64 - f16_to_f32(hi));
                let sums_h = xsum.add(units * QMM_MAX_N as usize) as *mut u16;
                let at = group_sum_slot(unit, c as usize);
                *sums_h.add(at) = hi;
                *sums_h.add(at + 2) = lo;
            }
        }
        j += 1;
    }
}
