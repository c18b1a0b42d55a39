//! Conversions between f32 and bf16 / f16 (hardware `cvt`, round to nearest even).

use core::arch::asm;

/// bf16 bits → f32 (exact).
#[inline(always)]
pub fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

/// The two bf16 halves of a packed u32 → f32 (low half first).
#[inline(always)]
pub fn bf16x2_to_f32(v: u32) -> (f32, f32) {
    (f32::from_bits(v << 16), f32::from_bits(v & 0xffff_0000))
}

/// `cvt.rn.bf16.f32`.
#[inline(always)]
pub fn f32_to_bf16(x: f32) -> u16 {
    let r: u16;
    unsafe { asm!("cvt.rn.bf16.f32 {0}, {1};", out(reg16) r, in(reg32) x, options(pure, nomem, nostack)) };
    r
}

/// `cvt.rn.bf16x2.f32 d, hi, lo`: packs `lo` into bits 0..16 and `hi` into 16..32.
#[inline(always)]
pub fn pack_bf16x2(lo: f32, hi: f32) -> u32 {
    let r: u32;
    unsafe {
        asm!("cvt.rn.bf16x2.f32 {0}, {1}, {2};", out(reg32) r, in(reg32) hi, in(reg32) lo,
             options(pure, nomem, nostack))
    };
    r
}

/// `cvt.rn.f16x2.f32`: `lo` and `hi` rounded to f16, `lo` in the low half.
#[inline(always)]
pub fn pack_f16x2(lo: f32, hi: f32) -> u32 {
    let r: u32;
    unsafe {
        asm!("cvt.rn.f16x2.f32 {0}, {1}, {2};", out(reg32) r, in(reg32) hi, in(reg32) lo,
             options(pure, nomem, nostack))
    };
    r
}

/// `cvt.rn.f16.f32` (bits).
#[inline(always)]
pub fn f32_to_f16(x: f32) -> u16 {
    let r: u16;
    unsafe { asm!("cvt.rn.f16.f32 {0}, {1};", out(reg16) r, in(reg32) x, options(pure, nomem, nostack)) };
    r
}

/// `cvt.f32.f16` (exact).
#[inline(always)]
pub fn f16_to_f32(h: u16) -> f32 {
    let r: f32;
    unsafe { asm!("cvt.f32.f16 {0}, {1};", out(reg32) r, in(reg16) h, options(pure, nomem, nostack)) };
    r
}

/// `cvt.rni.s64.f32`: `x` rounded to the nearest integer (ties to even) as i64; out-of-range
/// values clamp to `i64::MIN`/`i64::MAX` and NaN gives 0 (PTX float → integer rules).
#[inline(always)]
pub fn f32_to_i64_rn(x: f32) -> i64 {
    let r: i64;
    unsafe { asm!("cvt.rni.s64.f32 {0}, {1};", out(reg64) r, in(reg32) x, options(pure, nomem, nostack)) };
    r
}

/// `cvt.rn.f32.s64`: `v` rounded to the nearest f32 (ties to even).
#[inline(always)]
pub fn i64_to_f32_rn(v: i64) -> f32 {
    let r: f32;
    unsafe { asm!("cvt.rn.f32.s64 {0}, {1};", out(reg32) r, in(reg64) v, options(pure, nomem, nostack)) };
    r
}
