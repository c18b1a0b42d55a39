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

/// `lg2.approx.ftz.f32`: log2(x), max absolute error ≈ 2^-22 (relative 2^-22 away from 1).
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
