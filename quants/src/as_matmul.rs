//! The weights as the GPU's tensor-core matmul (`qmm`, `gpu-kernels/src/qmatmul/formats.rs`)
//! multiplies them, for the references that emulate the device's roundings: its A operands are
//! f16, so the K-quants' dequantized values are rounded the way the kernels compute them. Every
//! rounding below is one IEEE round-to-nearest-even of an exactly representable f32 product (the
//! kernels' `fma.f16x2` / `mul.f16x2` round once), subnormals included.
//!
//! * Q4_K, Q5_K: `ŵ_e = f16(q_e·s_u)` with `s_u = f16(d·sc_u)` for even sub-blocks `u` and
//!   `16·f16(d·sc_u/16)` for odd ones, plus the mins step's `μ_u/64`, `μ_u = f16(−64·dmin·m_u)`
//!   (its B operand, the unit sum of the rounded inputs, carries them to 2^-22: not modelled).
//! * Q6_K: `ŵ_e = f16((q_e − 32)·f16(d·sc_g))`.
//! * Every other type: [`crate::dequantize`] (Q8_0 and F16 are exact; BF16 is exact down to
//!   `2^-31` of its row's largest value).

use crate::k_scales::scale_min;
use crate::{dequantize, f16_le, GgmlType, QuantError};
use half::f16;

/// `f16(x)` as f32 (round to nearest even).
fn r16(x: f32) -> f32 {
    f16::from_f32(x).to_f32()
}

/// The effective weights of one Q4_K/Q5_K block: `q(b, e)` is element `e`'s quant.
fn k_block(b: &[u8], out: &mut [f32], q: fn(&[u8], usize) -> u8) {
    let d = f16_le(&b[0..2]);
    let dmin = f16_le(&b[2..4]);
    let neg_min64 = r16(-64.0 * dmin);
    for s in 0..8 {
        let (sc, m) = scale_min(&b[4..16], s);
        let scale = if s % 2 == 0 { r16(d * sc as f32) } else { 16.0 * r16(d * (sc as f32 / 16.0)) };
        let mins = r16(m as f32 * neg_min64) / 64.0;
        for (l, o) in out[32 * s..32 * s + 32].iter_mut().enumerate() {
            *o = r16(q(b, 32 * s + l) as f32 * scale) + mins;
        }
    }
}

/// 144 bytes of Q4_K → 256 weights as `qmm` multiplies them.
pub fn q4_k_block(b: &[u8], out: &mut [f32]) {
    k_block(b, out, crate::q4_k::quant);
}

/// 176 bytes of Q5_K → 256 weights as `qmm` multiplies them.
pub fn q5_k_block(b: &[u8], out: &mut [f32]) {
    k_block(b, out, crate::q5_k::quant);
}

/// 210 bytes of Q6_K → 256 weights as `qmm` multiplies them.
pub fn q6_k_block(b: &[u8], out: &mut [f32]) {
    let d = f16_le(&b[208..210]);
    for (e, o) in out.iter_mut().enumerate().take(256) {
        let (q, sc) = crate::q6_k::quant_scale(b, e);
        *o = r16(q as f32 * r16(d * sc as f32));
    }
}

/// Whole blocks of `ty` → the weights as the GPU matmul multiplies them (see the module doc).
pub fn dequantize_as_matmul(ty: GgmlType, src: &[u8]) -> Result<Vec<f32>, QuantError> {
    let block: fn(&[u8], &mut [f32]) = match ty {
        GgmlType::Q4_K => q4_k_block,
        GgmlType::Q5_K => q5_k_block,
        GgmlType::Q6_K => q6_k_block,
        _ => return dequantize(ty, src),
    };
    let n = src.len() / ty.type_size() * ty.block_size();
    crate::check_lengths(ty, src.len(), n)?;
    let mut out = vec![0.0; n];
    for (b, o) in src.chunks_exact(ty.type_size()).zip(out.chunks_exact_mut(256)) {
        block(b, o);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quantize;

    /// Within the kernels' rounding of the exact values, and bit-exact where the hand math says.
    #[test]
    fn as_matmul_is_the_exact_dequantization_rounded_to_f16() {
        let x: Vec<f32> = (0..1024).map(|i| ((i * 37 % 101) as f32 - 50.0) / 400.0).collect();
        for ty in [GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q8_0] {
            let raw = quantize(ty, &x).unwrap();
            let (exact, dev) = (dequantize(ty, &raw).unwrap(), dequantize_as_matmul(ty, &raw).unwrap());
            let max = exact.iter().fold(0f32, |m, v| m.max(v.abs()));
            for (e, d) in exact.iter().zip(&dev) {
                assert!((e - d).abs() <= 2f32.powi(-9) * max, "{ty:?}: {e} vs {d}");
            }
            if ty == GgmlType::Q8_0 {
                assert_eq!(exact, dev);
            } else {
                assert_ne!(exact, dev, "{ty:?}: some value rounds");
            }
        }
        // One Q4_K block by hand: d = 0.1, dmin = 0.01, every sc = 3, m = 5, every q = 7.
        let mut b = vec![0u8; 144];
        b[0..2].copy_from_slice(&f16::from_f32(0.1).to_le_bytes());
        b[2..4].copy_from_slice(&f16::from_f32(0.01).to_le_bytes());
        crate::k_scales::pack(&[3; 8], &[5; 8], &mut b[4..16]);
        b[16..144].fill(0x77);
        let w = dequantize_as_matmul(GgmlType::Q4_K, &b).unwrap();
        let d = f16::from_f32(0.1).to_f32();
        let dmin = f16::from_f32(0.01).to_f32();
        let even = r16(7.0 * r16(d * 3.0)) + r16(5.0 * r16(-64.0 * dmin)) / 64.0;
        let odd = r16(7.0 * 16.0 * r16(d * 3.0 / 16.0)) + r16(5.0 * r16(-64.0 * dmin)) / 64.0;
        assert_eq!((w[0], w[32]), (even, odd));
    }
}
