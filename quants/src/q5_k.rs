//! Q5_K: 256 elements in 176 bytes — `d: f16`, `dmin: f16`, `scales: [u8; 12]` (as Q4_K),
//! `qh: [u8; 32]`, `qs: [u8; 128]`.
//!
//! `x_e = (d·sc[s])·q_e − (dmin·m[s])` with `q_e = low | hi << 4 ∈ [0, 31]`: `low` is the Q4_K
//! nibble of `qs`, `hi = (qh[e%32] >> s) & 1`, `s = e/32`.
//!
//! Quantizer: [`super::k_scales::fit_asymmetric`] with 31 levels. Round trip:
//! `|x − x̂| ≤ d·sc[s]/2` per sub-block (≈ `max|x|·(2/31)/2` overall).

use super::f16_le;
use super::k_scales::{fit_asymmetric, pack, scale_min};

/// Element `e`'s quant `q_e ∈ [0, 31]` of the 176-byte block `b`.
#[inline]
pub(crate) fn quant(b: &[u8], e: usize) -> u8 {
    let (s, l) = (e / 32, e % 32);
    let low = (b[48 + 32 * (s / 2) + l] >> (4 * (s % 2))) & 0x0f;
    low | (((b[16 + l] >> s) & 1) << 4)
}

/// 176 bytes → 256 f32.
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

/// 256 f32 → 176 bytes.
pub fn quantize_block(x: &[f32], out: &mut [u8]) {
    let (d, dmin, sc, m, q) = fit_asymmetric(x, 31);
    out[0..2].copy_from_slice(&d.to_bits().to_le_bytes());
    out[2..4].copy_from_slice(&dmin.to_bits().to_le_bytes());
    pack(&sc, &m, &mut out[4..16]);
    let (qh, qs) = out[16..176].split_at_mut(32);
    qh.fill(0);
    for c in 0..4 {
        for l in 0..32 {
            let a = q[64 * c + l];
            let b = q[64 * c + 32 + l];
            qs[32 * c + l] = (a & 0x0f) | ((b & 0x0f) << 4);
            qh[l] |= ((a >> 4) << (2 * c)) | ((b >> 4) << (2 * c + 1));
        }
    }
}
