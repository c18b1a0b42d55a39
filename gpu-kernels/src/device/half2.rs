//! Packed f16x2 arithmetic and byte permutes (one PTX instruction each).

use core::arch::asm;

/// `sub.rn.f16x2`.
#[inline(always)]
pub fn hsub2(a: u32, b: u32) -> u32 {
    let r: u32;
    unsafe {
        asm!("sub.rn.f16x2 {0}, {1}, {2};", out(reg32) r, in(reg32) a, in(reg32) b, options(pure, nomem, nostack))
    };
    r
}

/// `mul.rn.f16x2`.
#[inline(always)]
pub fn hmul2(a: u32, b: u32) -> u32 {
    let r: u32;
    unsafe {
        asm!("mul.rn.f16x2 {0}, {1}, {2};", out(reg32) r, in(reg32) a, in(reg32) b, options(pure, nomem, nostack))
    };
    r
}

/// `fma.rn.f16x2`: `a · b + c` per half, one rounding.
#[inline(always)]
pub fn hfma2(a: u32, b: u32, c: u32) -> u32 {
    let r: u32;
    unsafe {
        asm!("fma.rn.f16x2 {0}, {1}, {2}, {3};", out(reg32) r, in(reg32) a, in(reg32) b, in(reg32) c,
             options(pure, nomem, nostack))
    };
    r
}

/// `prmt.b32 d, a, b, sel`: byte `k` of `d` is byte `sel[4k..4k+4]` of the 8-byte `{b, a}`.
#[inline(always)]
pub fn prmt(a: u32, b: u32, sel: u32) -> u32 {
    let r: u32;
    unsafe {
        asm!("prmt.b32 {0}, {1}, {2}, {3};", out(reg32) r, in(reg32) a, in(reg32) b, in(reg32) sel,
             options(pure, nomem, nostack))
    };
    r
}

/// `lop3.b32 d, a, b, c, 0xEA`: `(a & b) | c` in one instruction.
#[inline(always)]
pub fn and_or(a: u32, b: u32, c: u32) -> u32 {
    let r: u32;
    unsafe {
        asm!("lop3.b32 {0}, {1}, {2}, {3}, 0xEA;", out(reg32) r, in(reg32) a, in(reg32) b, in(reg32) c,
             options(pure, nomem, nostack))
    };
    r
}

/// `lop3.b32 d, a, b, c, 0x6A`: `(a & b) ^ c` in one instruction.
#[inline(always)]
pub fn and_xor(a: u32, b: u32, c: u32) -> u32 {
    let r: u32;
    unsafe {
        asm!("lop3.b32 {0}, {1}, {2}, {3}, 0x6A;", out(reg32) r, in(reg32) a, in(reg32) b, in(reg32) c,
             options(pure, nomem, nostack))
    };
    r
}

/// `fma.rn.f16x2` with `b` and `c` splatted from their half `H` (0: low, 1: high):
/// `a · (b_H, b_H) + (c_H, c_H)`, one rounding per half. Written as 16-bit moves so `ptxas`
/// can fold the splats into the instruction's operand selects instead of permuting registers.
#[inline(always)]
pub fn hfma2_splat<const H: u32>(a: u32, b: u32, c: u32) -> u32 {
    let r: u32;
    unsafe {
        if H == 0 {
            asm!("{{ .reg .b16 bl, bh, cl, ch; .reg .b32 b2, c2; mov.b32 {{bl, bh}}, {2}; mov.b32 {{cl, ch}}, {3}; \
                  mov.b32 b2, {{bl, bl}}; mov.b32 c2, {{cl, cl}}; fma.rn.f16x2 {0}, {1}, b2, c2; }}",
                 out(reg32) r, in(reg32) a, in(reg32) b, in(reg32) c, options(pure, nomem, nostack))
        } else {
            asm!("{{ .reg .b16 bl, bh, cl, ch; .reg .b32 b2, c2; mov.b32 {{bl, bh}}, {2}; mov.b32 {{cl, ch}}, {3}; \
                  mov.b32 b2, {{bh, bh}}; mov.b32 c2, {{ch, ch}}; fma.rn.f16x2 {0}, {1}, b2, c2; }}",
                 out(reg32) r, in(reg32) a, in(reg32) b, in(reg32) c, options(pure, nomem, nostack))
        }
    };
    r
}
