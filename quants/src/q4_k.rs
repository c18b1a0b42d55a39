//! Q4_K: 256 elements in 144 bytes — `d: f16`, `dmin: f16`, `scales: [u8; 12]` (six-bit
//! `sc`/`m` per 32-element sub-block, packed as in [`super::k_scales`]), `qs: [u8; 128]`.
//!
//! `x_e = (d·sc[s])·q_e − (dmin·m[s])`, `s = e/32`, `q_e ∈ [0, 15]` is nibble `s % 2` (low for
//! even `s`) of `qs[32·(s/2) + e%32]`.
//!
//! Quantizer: the min/max fit of [`super::k_scales::fit_asymmetric`] (not ggml's iterative
//! search). Round trip: `|x − x̂| ≤ d·sc[s]/2` per sub-block, and since `d·sc[s]` is at most
//! `(range_s + dmin)/15 + d`, at most ≈ `max|x|·(2/15)/2·(1 + 2⁻¹⁰) + d` overall.

use super::f16_le;
use super::k_scales::{fit_asymmetric, pack, scale_min};

/// Element `e`'s quant `q_e ∈ [0, 15]` of the 144-byte block `b`.
#[inline]
pub(crate) fn quant(b: &[u8], e: usize) -> u8 {
    (b[16 + 32 * (e / 64) + e % 32] >> (4 * ((e / 32) % 2))) & 0x0f
}

/// 144 bytes → 256 f32.
pub fn dequantize_block(b: &[u8], out: &mut [f32]) {
    let d = f16_le(&b[0..2]);
    let dmin = f16_le(&b[2..4]);
    let scales = &b[4..16];
    for s in 0..8 {
        let (sc, m) = scale_min(scales, s);
        let d1 = d * sc as f32;
        let m1 = dmin * m as f32;
        for (l, o) in out[32 * s..32 * s + 32].iter_mut().enumerate() {
            *o = d1 * quant(b, 32 * s + l) as f32 - m1;
        }
    }
}

/// 256 f32 → 144 bytes.
pub fn quantize_block(x: &[f32], out: &mut [u8]) {
    let (d, dmin, sc, m, q) = fit_asymmetric(x, 15);
    out[0..2].copy_from_slice(&d.to_bits().to_le_bytes());
    out[2..4].copy_from_slice(&dmin.to_bits().to_le_bytes());
    pack(&sc, &m, &mut out[4..16]);
    let qs = &mut out[16..144];
    for c in 0..4 {
        for l in 0..32 {
            qs[32 * c + l] = q[64 * c + l] | (q[64 * c + 32 + l] << 4);
        }
    }
}
