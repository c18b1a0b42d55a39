//! F16: IEEE binary16, little-endian. Quantization rounds to nearest even (numpy's
//! `astype(float16)`); relative round-trip error ≤ 2⁻¹¹ in the normal range, absolute ≤ 2⁻²⁵
//! in the subnormal range; values beyond ±65504 (after rounding) become ±inf.

/// 2 bytes → one f32 (exact).
pub fn dequantize_block(b: &[u8], out: &mut [f32]) {
    out[0] = super::f16_le(b);
}

/// One f32 → 2 bytes.
pub fn quantize_block(x: &[f32], out: &mut [u8]) {
    super::put_f16(out, x[0]);
}
