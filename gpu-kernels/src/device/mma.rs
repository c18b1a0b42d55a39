//! Tensor cores: `ldmatrix` and `mma.sync` (sm_80+ warp-level MMA).
//!
//! Fragment layouts follow the PTX ISA "Matrix Fragments for mma.m16n8k16" tables: A is 16×16
//! row-major in 4 registers (bf16x2/f16x2 pairs), B is 16×8 column-major in 2 registers, C/D is
//! 16×8 f32 in 4 registers. For s8, `m16n8k32`: A 4 regs, B 2 regs, C/D 4 × s32.

use core::arch::asm;

/// `ldmatrix.sync.aligned.m8n8.x4.shared.b16`: four 8×8 b16 tiles; lane `i` supplies the row
/// address of row `i % 8` of tile `i / 8`.
#[inline(always)]
pub unsafe fn ldmatrix_x4(smem: u32) -> [u32; 4] {
    let (a, b, c, d): (u32, u32, u32, u32);
    asm!("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {{{0},{1},{2},{3}}}, [{4}];",
         out(reg32) a, out(reg32) b, out(reg32) c, out(reg32) d, in(reg32) smem, options(nostack));
    [a, b, c, d]
}

/// `ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16`: [`ldmatrix_x4`] with each 8×8 tile
/// transposed (lane `i` receives column `i / 4`, rows `2·(i % 4)`, `+1` of its tile).
#[inline(always)]
pub unsafe fn ldmatrix_x4_trans(smem: u32) -> [u32; 4] {
    let (a, b, c, d): (u32, u32, u32, u32);
    asm!("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {{{0},{1},{2},{3}}}, [{4}];",
         out(reg32) a, out(reg32) b, out(reg32) c, out(reg32) d, in(reg32) smem, options(nostack));
    [a, b, c, d]
}

/// `ldmatrix.sync.aligned.m8n8.x2.shared.b16`: two 8×8 b16 tiles (lanes 0..16 give addresses).
#[inline(always)]
pub unsafe fn ldmatrix_x2(smem: u32) -> [u32; 2] {
    let (a, b): (u32, u32);
    asm!("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {{{0},{1}}}, [{2}];",
         out(reg32) a, out(reg32) b, in(reg32) smem, options(nostack));
    [a, b]
}

/// `mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32`: `d = a · b + d`.
#[inline(always)]
pub fn mma_bf16_16816(d: &mut [f32; 4], a: [u32; 4], b: [u32; 2]) {
    unsafe {
        asm!("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {{{0},{1},{2},{3}}}, {{{4},{5},{6},{7}}}, {{{8},{9}}}, {{{0},{1},{2},{3}}};",
             inout(reg32) d[0], inout(reg32) d[1], inout(reg32) d[2], inout(reg32) d[3],
             in(reg32) a[0], in(reg32) a[1], in(reg32) a[2], in(reg32) a[3],
             in(reg32) b[0], in(reg32) b[1], options(pure, nomem, nostack));
    }
}

/// `mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32`: `d = a · b + d`.
#[inline(always)]
pub fn mma_f16_16816(d: &mut [f32; 4], a: [u32; 4], b: [u32; 2]) {
    unsafe {
        asm!("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {{{0},{1},{2},{3}}}, {{{4},{5},{6},{7}}}, {{{8},{9}}}, {{{0},{1},{2},{3}}};",
             inout(reg32) d[0], inout(reg32) d[1], inout(reg32) d[2], inout(reg32) d[3],
             in(reg32) a[0], in(reg32) a[1], in(reg32) a[2], in(reg32) a[3],
             in(reg32) b[0], in(reg32) b[1], options(pure, nomem, nostack));
    }
}

/// `mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32`: `d = a · b + d` (exact integer).
#[inline(always)]
pub fn mma_s8_16832(d: &mut [i32; 4], a: [u32; 4], b: [u32; 2]) {
    unsafe {
        asm!("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {{{0},{1},{2},{3}}}, {{{4},{5},{6},{7}}}, {{{8},{9}}}, {{{0},{1},{2},{3}}};",
             inout(reg32) d[0], inout(reg32) d[1], inout(reg32) d[2], inout(reg32) d[3],
             in(reg32) a[0], in(reg32) a[1], in(reg32) a[2], in(reg32) a[3],
             in(reg32) b[0], in(reg32) b[1], options(pure, nomem, nostack));
    }
}

/// `dp4a.s32.s32`: `c + Σ a.i8[k] · b.i8[k]`.
#[inline(always)]
pub fn dp4a_s32(a: u32, b: u32, c: i32) -> i32 {
    let r: i32;
    unsafe {
        asm!("dp4a.s32.s32 {0}, {1}, {2}, {3};", out(reg32) r, in(reg32) a, in(reg32) b, in(reg32) c, options(pure, nomem, nostack))
    };
    r
}

/// [`mma_f16_16816`] as an ordered (non-`pure`) statement: LLVM keeps it in program order with
/// other ordered statements, so a loop of "mma, then consume the result" does not get all its
/// products hoisted to the top (which keeps every unit's result live at once).
#[inline(always)]
pub fn mma_f16_16816_ordered(d: &mut [f32; 4], a: [u32; 4], b: [u32; 2]) {
    unsafe {
        asm!("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {{{0},{1},{2},{3}}}, {{{4},{5},{6},{7}}}, {{{8},{9}}}, {{{0},{1},{2},{3}}};",
             inout(reg32) d[0], inout(reg32) d[1], inout(reg32) d[2], inout(reg32) d[3],
             in(reg32) a[0], in(reg32) a[1], in(reg32) a[2], in(reg32) a[3],
             in(reg32) b[0], in(reg32) b[1], options(nomem, nostack));
    }
}

/// `d = a · b` (f16 inputs, f32 result) with a zero accumulator given as immediates, so no
/// registers are zeroed for it; ordered like [`mma_f16_16816_ordered`].
#[inline(always)]
pub fn mma_f16_16816_zero_ordered(a: [u32; 4], b: [u32; 2]) -> [f32; 4] {
    let d: [f32; 4];
    unsafe {
        let (d0, d1, d2, d3): (f32, f32, f32, f32);
        asm!("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {{{0},{1},{2},{3}}}, {{{4},{5},{6},{7}}}, {{{8},{9}}}, {{0f00000000,0f00000000,0f00000000,0f00000000}};",
             out(reg32) d0, out(reg32) d1, out(reg32) d2, out(reg32) d3,
             in(reg32) a[0], in(reg32) a[1], in(reg32) a[2], in(reg32) a[3],
             in(reg32) b[0], in(reg32) b[1], options(nomem, nostack));
        d = [d0, d1, d2, d3];
    }
    d
}
