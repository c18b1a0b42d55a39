//! Q8_0: 32 elements in 34 bytes — `d: f16`, `qs: [i8; 32]`; `x_i = d · qs[i]`.
//!
//! Quantizer (ggml `quantize_row_q8_0_ref` = gguf-py `Q8_0.quantize`): `d = max|x| / 127`,
//! `qs = round_half_away(x · (1/d))` (0 when `d = 0`), `d` stored as f16. Round trip:
//! `|x − x̂| ≤ d/2 + 127·|d − f16(d)| ≤ 0.57·d` (f16 rounding of `d` is ≤ 2⁻¹¹ relative).

use super::{amax, f16_le, put_f16, round_half_away};

/// Bytes per block.
pub const BLOCK_BYTES: usize = 34;

/// 34 bytes → 32 f32.
pub fn dequantize_block(b: &[u8], out: &mut [f32]) {
    let d = f16_le(&b[0..2]);
    for (o, &q) in out.iter_mut().zip(&b[2..34]) {
        *o = d * (q as i8) as f32;
    }
}

/// 32 f32 → 34 bytes.
pub fn quantize_block(x: &[f32], out: &mut [u8]) {
    let d = amax(x) / 127.0;
    let id = if d == 0.0 { 0.0 } else { 1.0 / d };
    put_f16(&mut out[0..2], d);
    for (o, &v) in out[2..34].iter_mut().zip(x) {
        *o = (round_half_away(v * id) as i32).clamp(-128, 127) as i8 as u8;
    }
}
