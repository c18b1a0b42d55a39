//! Warp shuffles (`shfl.sync`, full mask) and the reductions built from them.

use core::arch::asm;

/// `shfl.sync.bfly.b32`: value of lane `lane ^ mask`.
#[inline(always)]
pub fn shfl_xor_u32(v: u32, mask: u32) -> u32 {
    let r: u32;
    unsafe {
        asm!("shfl.sync.bfly.b32 {0}, {1}, {2}, 0x1f, 0xffffffff;",
             out(reg32) r, in(reg32) v, in(reg32) mask, options(nomem, nostack))
    };
    r
}

/// `shfl.sync.bfly.b32` on an f32.
#[inline(always)]
pub fn shfl_xor_f32(v: f32, mask: u32) -> f32 {
    f32::from_bits(shfl_xor_u32(v.to_bits(), mask))
}

/// `shfl.sync.idx.b32`: value of lane `src`.
#[inline(always)]
pub fn shfl_idx_u32(v: u32, src: u32) -> u32 {
    let r: u32;
    unsafe {
        asm!("shfl.sync.idx.b32 {0}, {1}, {2}, 0x1f, 0xffffffff;",
             out(reg32) r, in(reg32) v, in(reg32) src, options(nomem, nostack))
    };
    r
}

/// `match.any.sync.b32` (full mask): the lanes whose `v` equals this lane's.
#[inline(always)]
pub fn match_any_u32(v: u32) -> u32 {
    let r: u32;
    unsafe { asm!("match.any.sync.b32 {0}, {1}, 0xffffffff;", out(reg32) r, in(reg32) v, options(nomem, nostack)) };
    r
}

/// `redux.sync.add.u32` over the lanes of `group` (which must hold this lane, and every lane of
/// the group must pass the same `group`, e.g. from [`match_any_u32`]): the group's sum.
#[inline(always)]
pub fn group_sum_u32(v: u32, group: u32) -> u32 {
    let r: u32;
    unsafe {
        asm!("redux.sync.add.u32 {0}, {1}, {2};", out(reg32) r, in(reg32) v, in(reg32) group, options(nomem, nostack))
    };
    r
}

/// The sum over the lanes of `group` (as [`group_sum_u32`]) of values below 2^48: three 16-bit
/// slices summed with `redux` (each slice sum < 2^21), so the result is exact.
#[inline(always)]
pub fn group_sum_u48(v: u64, group: u32) -> u64 {
    let s0 = group_sum_u32((v & 0xffff) as u32, group) as u64;
    let s1 = group_sum_u32(((v >> 16) & 0xffff) as u32, group) as u64;
    let s2 = group_sum_u32((v >> 32) as u32, group) as u64;
    s0 + (s1 << 16) + (s2 << 32)
}

/// `shfl.sync.down.b32`: value of lane `lane + delta` (own value past the end).
#[inline(always)]
pub fn shfl_down_u32(v: u32, delta: u32) -> u32 {
    let r: u32;
    unsafe {
        asm!("shfl.sync.down.b32 {0}, {1}, {2}, 0x1f, 0xffffffff;",
             out(reg32) r, in(reg32) v, in(reg32) delta, options(nomem, nostack))
    };
    r
}

/// Butterfly sum over the 32 lanes; every lane gets the same total. The order of additions is
/// fixed (xor 16, 8, 4, 2, 1), so the result is deterministic.
#[inline(always)]
pub fn warp_sum_f32(mut v: f32) -> f32 {
    v += shfl_xor_f32(v, 16);
    v += shfl_xor_f32(v, 8);
    v += shfl_xor_f32(v, 4);
    v += shfl_xor_f32(v, 2);
    v += shfl_xor_f32(v, 1);
    v
}

/// `shfl.sync.up.b32`: value of lane `lane − delta` (own value for lanes below `delta`).
#[inline(always)]
pub fn shfl_up_u32(v: u32, delta: u32) -> u32 {
    let r: u32;
    unsafe {
        asm!("shfl.sync.up.b32 {0}, {1}, {2}, 0x0, 0xffffffff;",
             out(reg32) r, in(reg32) v, in(reg32) delta, options(nomem, nostack))
    };
    r
}

/// Inclusive prefix sum over the 32 lanes (Hillis–Steele: lane `l` gets `Σ_{i ≤ l} v_i`).
#[inline(always)]
pub fn warp_inclusive_scan_u32(mut v: u32) -> u32 {
    let lane = super::lane_id();
    let mut d = 1;
    while d < 32 {
        let o = shfl_up_u32(v, d);
        if lane >= d {
            v += o;
        }
        d <<= 1;
    }
    v
}

/// Maximum over the 32 lanes (order-free); every lane gets it.
#[inline(always)]
pub fn warp_max_u32(mut v: u32) -> u32 {
    let mut m = 16;
    while m > 0 {
        v = v.max(shfl_xor_u32(v, m));
        m >>= 1;
    }
    v
}

/// [`shfl_xor_u32`] on a u64 (two shuffles).
#[inline(always)]
pub fn shfl_xor_u64(v: u64, mask: u32) -> u64 {
    ((shfl_xor_u32((v >> 32) as u32, mask) as u64) << 32) | shfl_xor_u32(v as u32, mask) as u64
}

/// [`shfl_up_u32`] on a u64 (two shuffles).
#[inline(always)]
pub fn shfl_up_u64(v: u64, delta: u32) -> u64 {
    ((shfl_up_u32((v >> 32) as u32, delta) as u64) << 32) | shfl_up_u32(v as u32, delta) as u64
}

/// Sum over the 32 lanes (integer: exact, any order); every lane gets it.
#[inline(always)]
pub fn warp_sum_u64(mut v: u64) -> u64 {
    let mut m = 16;
    while m > 0 {
        v = v.wrapping_add(shfl_xor_u64(v, m));
        m >>= 1;
    }
    v
}

/// Inclusive prefix sum of a u64 over the 32 lanes (lane `l` gets `Σ_{i ≤ l} v_i`).
#[inline(always)]
pub fn warp_inclusive_scan_u64(mut v: u64) -> u64 {
    let lane = super::lane_id();
    let mut d = 1;
    while d < 32 {
        let o = shfl_up_u64(v, d);
        if lane >= d {
            v = v.wrapping_add(o);
        }
        d <<= 1;
    }
    v
}
