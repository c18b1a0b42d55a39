//! Fast math: fused multiply-add and the special-function unit.

use core::arch::asm;

/// `fma.rn.f32`: `a * b + c` with one rounding. (Plain `a*b + c` compiles to `mul.rn` + `add.rn`,
/// which ptxas will not fuse.)
#[inline(always)]
pub fn fma(a: f32, b: f32, c: f32) -> f32 {
    core::f32::math::mul_add(a, b, c)
}

/// `ex2.approx.ftz.f32`: 2^x, max relative error ≈ 2^-22.
#[inline(always)]
pub fn ex2(x: f32) -> f32 {
    let r: f32;
    unsafe { asm!("ex2.approx.ftz.f32 {0}, {1};", out(reg32) r, in(reg32) x, options(pure, nomem, nostack)) };
    r
}

/// e^x through `ex2(x · log2 e)`.
#[inline(always)]
pub fn exp_fast(x: f32) -> f32 {
    ex2(x * core::f32::consts::LOG2_E)
}

/// `lg2.approx.ftz.f32`: log2(x), max absolute error ≈ 2^-22 (relative 2^-22 away from 1; the
/// exponent part is exact). `tests/tests/gpu/sample.rs` allows 2^-21.
#[inline(always)]
pub fn lg2(x: f32) -> f32 {
    let r: f32;
    unsafe { asm!("lg2.approx.ftz.f32 {0}, {1};", out(reg32) r, in(reg32) x, options(pure, nomem, nostack)) };
    r
}

/// `rsqrt.approx.ftz.f32`: 1/√x, max relative error ≈ 2^-22.9.
#[inline(always)]
pub fn rsqrt(x: f32) -> f32 {
    let r: f32;
    unsafe { asm!("rsqrt.approx.ftz.f32 {0}, {1};", out(reg32) r, in(reg32) x, options(pure, nomem, nostack)) };
    r
}

/// `sqrt.rn.f32`: correctly rounded square root.
#[inline(always)]
pub fn sqrt_rn(x: f32) -> f32 {
    let r: f32;
    unsafe { asm!("sqrt.rn.f32 {0}, {1};", out(reg32) r, in(reg32) x, options(pure, nomem, nostack)) };
    r
}

/// `div.rn.f32`: correctly rounded division.
#[inline(always)]
pub fn div_rn(a: f32, b: f32) -> f32 {
    let r: f32;
    unsafe { asm!("div.rn.f32 {0}, {1}, {2};", out(reg32) r, in(reg32) a, in(reg32) b, options(pure, nomem, nostack)) };
    r
}

/// `fma.rn.f32` as an ordered (non-`pure`) statement (see `mma::mma_f16_16816_ordered`).
#[inline(always)]
pub fn fma_ordered(a: f32, b: f32, c: f32) -> f32 {
    let r: f32;
    unsafe {
        asm!("fma.rn.f32 {0}, {1}, {2}, {3};", out(reg32) r, in(reg32) a, in(reg32) b, in(reg32) c, options(nomem, nostack))
    };
    r
}

/// `rcp.approx.f32`: 1/x, max error 1 ulp (no flush of subnormals).
#[inline(always)]
pub fn rcp_approx(x: f32) -> f32 {
    let r: f32;
    unsafe { asm!("rcp.approx.f32 {0}, {1};", out(reg32) r, in(reg32) x, options(pure, nomem, nostack)) };
    r
}

/// `silu(x) = x · 1/(1 + e^-x)` with [`exp_fast`] and [`rcp_approx`]. Relative error ≤
/// `|x|·2^-23 + 2^-21`: the roundings of `log2 e` and of `−x·log2 e` move the exponent by
/// ≤ `1.5·|x|·log2 e·2^-24`, i.e. `e^-x` by ≤ `1.5·|x|·2^-24` relative, and `ex2.approx` adds
/// ≤ 2^-22 (both scaled by `e/(1+e) ≤ 1`); then the add (2^-24), the reciprocal (1 ulp) and the
/// product (2^-24). Saturates cleanly: `x → −∞` gives `−0`
/// (`e^-x = ∞`), `x > 88` gives `x` (`e^-x` flushes to 0). (A `div.rn` here made a register-tight
/// kernel spill.)
#[inline(always)]
pub fn silu(x: f32) -> f32 {
    x * rcp_approx(1.0 + exp_fast(-x))
}

/// `cvt.rni.f32.f32`: round to the nearest integer, ties to even.
#[inline(always)]
pub fn rint(x: f32) -> f32 {
    let r: f32;
    unsafe { asm!("cvt.rni.f32.f32 {0}, {1};", out(reg32) r, in(reg32) x, options(pure, nomem, nostack)) };
    r
}

/// ln 2 split for Cody–Waite reduction: `LN2_HI` has 15 significant bits (so `n·LN2_HI` is
/// exact for `|n| < 512`), `LN2_HI + LN2_LO = ln 2` to ≈ 2^-43.
const LN2_HI: f32 = f32::from_bits(0x3f31_7200);
const LN2_LO: f32 = f32::from_bits(0x35bf_be8e);

/// `e^d` for `d ≤ 88` with a relative error that does not grow with `|d|` (unlike
/// [`exp_fast`], whose rounding of `d·log2 e` costs `|d|·2^-24`): `d = n·ln 2 + r` with
/// `n = rint(d·log2 e)` and `r = (d − n·LN2_HI) − n·LN2_LO` by two fmas (`|r| ≤ 0.35`, rounding
/// ≤ 2^-24·|r|), then `e^r = ex2.approx(r·log2 e)` (≤ 2^-22 relative, plus ≤ 2^-25 from rounding
/// `r·log2 e`), times `2^n` exactly. So ≤ 2^-21 relative in all. `d < −87` gives 0 (an absolute
/// error < 2^-125); NaN gives NaN. Branch-free (a select), so loops over it unroll.
#[inline(always)]
pub fn exp_accurate(d: f32) -> f32 {
    let n = rint(d * core::f32::consts::LOG2_E);
    let r = fma(n, -LN2_HI, d);
    let r = fma(n, -LN2_LO, r);
    let e = ex2(r * core::f32::consts::LOG2_E);
    let v = e * f32::from_bits(((n as i32).wrapping_add(127) as u32) << 23);
    if d < -87.0 {
        0.0
    } else {
        v
    }
}
