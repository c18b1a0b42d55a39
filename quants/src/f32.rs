//! F32: IEEE binary32, little-endian, one element per "block". Round trip is exact.

/// 4 bytes → one f32.
pub fn dequantize_block(b: &[u8], out: &mut [f32]) {
    out[0] = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
}

/// One f32 → 4 bytes.
pub fn quantize_block(x: &[f32], out: &mut [u8]) {
    out[..4].copy_from_slice(&x[0].to_le_bytes());
}
