//! BF16: the upper 16 bits of an f32 (`f32_bits = bf16_bits << 16`). Quantization rounds to
//! nearest even on bit 16 and forces NaNs quiet — gguf-py's `BF16.quantize` exactly. Relative
//! round-trip error ≤ 2⁻⁸.

/// Round-to-nearest-even truncation of an f32 to its upper 16 bits, NaN → quiet NaN.
pub fn f32_to_bf16_bits(v: f32) -> u16 {
    let mut n = v.to_bits();
    if n & 0x7fff_ffff > 0x7f80_0000 {
        n = (n & 0xffff_0000) | (64 << 16);
    }
    (n.wrapping_add(0x7fff + ((n >> 16) & 1)) >> 16) as u16
}

/// BF16 bits → f32 (exact).
pub fn bf16_bits_to_f32(b: u16) -> f32 {
    f32::from_bits((b as u32) << 16)
}

/// 2 bytes → one f32.
pub fn dequantize_block(b: &[u8], out: &mut [f32]) {
    out[0] = bf16_bits_to_f32(u16::from_le_bytes([b[0], b[1]]));
}

/// One f32 → 2 bytes.
pub fn quantize_block(x: &[f32], out: &mut [u8]) {
    out[..2].copy_from_slice(&f32_to_bf16_bits(x[0]).to_le_bytes());
}
