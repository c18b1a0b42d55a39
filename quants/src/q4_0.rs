//! Q4_0: 32 elements in 18 bytes — `d: f16`, `qs: [u8; 16]`. Element `j < 16` is the low nibble
//! of `qs[j]`, element `j + 16` its high nibble; `x = d · (q − 8)`.
//!
//! Quantizer (ggml `quantize_row_q4_0_ref` = gguf-py `Q4_0.quantize`): `m` = the element of
//! largest magnitude (with its sign), `d = m / −8`, `q = min(15, trunc(x/d + 8.5))`. Round trip:
//! `|x − x̂| ≤ |d|/2` except at the clamped end (`x` near `−m`), where it is ≤ `|d|`; plus the f16
//! rounding of `d` (≤ 8·2⁻¹¹·|d|).

use super::{f16_le, put_f16};

/// 18 bytes → 32 f32.
pub fn dequantize_block(b: &[u8], out: &mut [f32]) {
    let d = f16_le(&b[0..2]);
    for j in 0..16 {
        let byte = b[2 + j];
        out[j] = d * ((byte & 0x0f) as i32 - 8) as f32;
        out[j + 16] = d * ((byte >> 4) as i32 - 8) as f32;
    }
}

/// 32 f32 → 18 bytes.
pub fn quantize_block(x: &[f32], out: &mut [u8]) {
    let mut amax = 0.0f32;
    let mut max = 0.0f32;
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    let d = max / -8.0;
    let id = if d == 0.0 { 0.0 } else { 1.0 / d };
    put_f16(&mut out[0..2], d);
    let q = |v: f32| ((v * id + 8.5) as i32).clamp(0, 15) as u8;
    for j in 0..16 {
        out[2 + j] = q(x[j]) | (q(x[j + 16]) << 4);
    }
}
