//! Hopper warpgroup tensor-core products (`wgmma.mma_async`, sm_90a): A from registers, B from
//! shared memory through a matrix descriptor, f32 accumulators in registers.
//!
//! A warpgroup is 4 consecutive warps (`warp_id() / 4`); `m64nNk16` multiplies the 64 × 16 A
//! whose rows `16w .. 16w+16` come from warp `w % 4` — in exactly the register layout of
//! `mma.m16n8k16`'s A fragment — with the 16 × N B in shared memory, and accumulates into
//! `N / 2` f32 registers per thread laid out as `N / 8` `m16n8` C fragments (tile `j` = columns
//! `8j .. 8j+8`). Measured on nvidia-h200 (`tools/experiments/wgmma/`, 2026-11-21): for the same
//! operands the results are bitwise equal to `mma.sync.m16n8k16.f32.f16.f16.f32` tile by tile,
//! with a zero or an arbitrary accumulator, so a kernel may use either per tile count without
//! breaking batch invariance.
//!
//! B layout ("no swizzle", K-major): 8 × 8 core matrices of 8 columns × 16 bytes (8 k values),
//! 128 contiguous bytes each; [`b_desc`] gives the byte distance of K-adjacent core matrices
//! (`lbo`) and of N-adjacent ones (`sbo`).
//!
//! Ordering rules (PTX ISA "Asynchronous Warpgroup Level Matrix Multiply-Accumulate"):
//! [`fence`] before a product whose A or accumulator registers were touched by other
//! instructions; [`commit`] closes a group of products; [`wait`]`::<K>()` returns when at most
//! `K` groups are still pending. LLVM does not know that a product writes its accumulators
//! late, so after a `wait` the accumulators are passed through [`fence_operands`] (an empty
//! ordered statement that "redefines" them) and only that result is read.

use core::arch::asm;

/// Shared-memory matrix descriptor, no swizzle: start address `addr` (shared state space,
/// 16-byte aligned), K-direction core-matrix distance `lbo`, N-direction distance `sbo` (bytes,
/// multiples of 16, < 2^18).
#[inline(always)]
pub const fn b_desc(addr: u32, lbo: u32, sbo: u32) -> u64 {
    (((addr & 0x3_ffff) >> 4) as u64) | (((lbo >> 4) as u64) << 16) | (((sbo >> 4) as u64) << 32)
}

/// `wgmma.fence.sync.aligned`.
#[inline(always)]
pub fn fence() {
    unsafe { asm!("wgmma.fence.sync.aligned;", options(nostack)) }
}

/// `wgmma.commit_group.sync.aligned`.
#[inline(always)]
pub fn commit() {
    unsafe { asm!("wgmma.commit_group.sync.aligned;", options(nostack)) }
}

/// `wgmma.wait_group.sync.aligned K`: at most `K` committed groups still pending.
#[inline(always)]
pub fn wait<const K: u32>() {
    unsafe { asm!("wgmma.wait_group.sync.aligned {k};", k = const K, options(nostack)) }
}

/// Passes accumulators through an empty ordered statement after a [`wait`], so nothing reads
/// them before it (see the module doc).
#[inline(always)]
pub fn fence_operands<const T: usize>(d: &mut [[f32; 4]; T]) {
    let mut j = 0;
    while j < T {
        unsafe {
            asm!("/* wgmma operands {0} {1} {2} {3} */", inout(reg32) d[j][0], inout(reg32) d[j][1], inout(reg32) d[j][2],
                 inout(reg32) d[j][3], options(nostack));
        }
        j += 1;
    }
}

/// `d = a · B + (accumulate ? d : 0)` for `N = 8·T` columns (T = 2, 3, 4), f16 inputs, f32
/// accumulators in the `[tile][4]` C-fragment layout. Asynchronous: see the module doc.
#[inline(always)]
///
/// The B descriptor is passed as its two 32-bit words (`b_desc`: the low word holds the start
/// address and LBO, the high word SBO), so a kernel that steps through shared memory adds to
/// the low word only (one 32-bit add per product instead of 64-bit uniform arithmetic).
pub unsafe fn mma_f16<const T: usize>(d: &mut [[f32; 4]; T], a: [u32; 4], b: (u32, u32), accumulate: bool) {
    let s = accumulate as u32;
    macro_rules! wg {
        ($shape:literal, [$($j:literal),+], $acc:literal) => {
            asm!(
                concat!("{{ .reg .pred p; .reg .b64 bd; setp.ne.b32 p, {s}, 0; mov.b64 bd, {{{blo}, {bhi}}}; ",
                        "wgmma.mma_async.sync.aligned.", $shape,
                        ".f32.f16.f16 {{", $acc, "}}, {{{a0},{a1},{a2},{a3}}}, bd, p, 1, 1, 0; }}"),
                $(
                    inout(reg32) d[$j][0], inout(reg32) d[$j][1], inout(reg32) d[$j][2], inout(reg32) d[$j][3],
                )+
                a0 = in(reg32) a[0], a1 = in(reg32) a[1], a2 = in(reg32) a[2], a3 = in(reg32) a[3],
                blo = in(reg32) b.0, bhi = in(reg32) b.1, s = in(reg32) s,
                options(nostack)
            )
        };
    }
    match T {
        2 => wg!("m64n16k16", [0, 1], "{0},{1},{2},{3},{4},{5},{6},{7}"),
        3 => wg!("m64n24k16", [0, 1, 2], "{0},{1},{2},{3},{4},{5},{6},{7},{8},{9},{10},{11}"),
        4 => wg!("m64n32k16", [0, 1, 2, 3], "{0},{1},{2},{3},{4},{5},{6},{7},{8},{9},{10},{11},{12},{13},{14},{15}"),
        _ => {}
    }
}
