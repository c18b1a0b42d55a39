//! `qmm_prep_x`: activations f32 `[n, in]` → the tensor-core input format (see the module doc).
//!
//! Launch: one 256-thread block per padded column (`grid = n_pad`). Pass 1: `max |x|` over the
//! column (order-independent, so deterministic). Pass 2: every element scaled by the exact
//! power of two `1 / s_c`, rounded to f16 (and to bf16 hi + lo) and stored at its fragment
//! position. Columns `c ≥ n` are written as zeros with `s_c = 1`.
//! Traffic: reads `n·in·4` bytes twice (the second time from L1/L2), writes `n_pad·in·6` bytes.

use kernel_abi::QmmPrepParams;

use crate::device::convert::{f32_to_bf16, f32_to_f16};
use crate::device::shared::Shared;
use crate::device::sync::sync_threads;
use crate::device::warp::shfl_xor_u32;
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
    xscale: *mut f32,
    p: QmmPrepParams,
) {
    let c = block_x();
    if c >= p.n_pad {
        return;
    }
    let k = p.in_features as usize;
    let t = thread_x();
    let base = c as usize * k;
    let real = c < p.n;
    // Pass 1: max |x| (as bits: for non-negative floats the integer order is the float order;
    // NaN bits sort above +inf, so a NaN column gets a NaN scale and NaN results).
    let mut m = 0u32;
    if real {
        let mut i = t as usize;
        while i < k {
            let a = (*x.add(base + i)).to_bits() & 0x7fff_ffff;
            m = m.max(a);
            i += block_dim_x() as usize;
        }
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
    while w < block_dim_x() / 32 {
        m = m.max(*maxes.add(w as usize));
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
    if t == 0 {
        *xscale.add(c as usize) = scale;
    }
    // Pass 2: scale, round, permute.
    let mut i = t as usize;
    while i < k {
        let v = if real { *x.add(base + i) * inv } else { 0.0 };
        let h = f32_to_f16(v);
        let hi = f32_to_bf16(v);
        let lo = f32_to_bf16(v - f32::from_bits((hi as u32) << 16));
        let blk = i & !31;
        let dst = base + blk + position_in_block((i & 31) as u32) as usize;
        *xh.add(dst) = h;
        *xb_hi.add(dst) = hi;
        *xb_lo.add(dst) = lo;
        i += block_dim_x() as usize;
    }
}
