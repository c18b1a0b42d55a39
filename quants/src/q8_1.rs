//! Q8_1: 32 elements in 36 bytes — `d: f16`, `s: f16`, `qs: [i8; 32]`; `x_i = d · qs[i]`.
//! The activation format of the GPU matmuls: `s` carries the block sum used to fold the weight
//! offsets of Q4_0-like formats.
//!
//! Quantizer (ggml `quantize_row_q8_1_ref`): `d = max|x| / 127`, `q = round_half_away(x/d)`
//! (0 when `d = 0`), `s = d · Σ q` (the reference CPU convention; llama.cpp's CUDA quantizer
//! stores `Σ x` instead — the two differ by the rounding error only). Round trip as Q8_0:
//! `|x − x̂| ≤ 0.57·d`.

use super::{amax, f16_le, put_f16, round_half_away};

/// The scale `d` and sum field `s` of a block.
pub fn scales(b: &[u8]) -> (f32, f32) {
    (f16_le(&b[0..2]), f16_le(&b[2..4]))
}

/// 36 bytes → 32 f32 (`s` is not needed to dequantize).
pub fn dequantize_block(b: &[u8], out: &mut [f32]) {
    let d = f16_le(&b[0..2]);
    for (o, &q) in out.iter_mut().zip(&b[4..36]) {
        *o = d * (q as i8) as f32;
    }
}

/// 32 f32 → 36 bytes.
pub fn quantize_block(x: &[f32], out: &mut [u8]) {
    let d = amax(x) / 127.0;
    let id = if d == 0.0 { 0.0 } else { 1.0 / d };
    let mut sum = 0i32;
    for (o, &v) in out[4..36].iter_mut().zip(x) {
        let q = (round_half_away(v * id) as i32).clamp(-128, 127);
        sum += q;
        *o = q as i8 as u8;
    }
    put_f16(&mut out[0..2], d);
    put_f16(&mut out[2..4], d * sum as f32);
}
