//! Q6_K: 256 elements in 210 bytes — `ql: [u8; 128]` (low 4 bits), `qh: [u8; 64]` (high 2
//! bits), `scales: [i8; 16]` (one per 16 elements), `d: f16`.
//!
//! For element `e`: `h = e/128`, `r = e%128`, `t = r/32`, `l = r%32`;
//! `low = ql[64h + 32·(t%2) + l]` nibble `t/2` (low nibble for `t < 2`),
//! `high = (qh[32h + l] >> 2t) & 3`, `q = (low | high << 4) − 32 ∈ [−32, 31]`,
//! `x_e = (d·scales[e/16])·q`.
//!
//! Quantizer: per 16-element group a step `amax_g/31` (so `q ∈ [−31, 31]` never clamps), `d =
//! max step / 127` rounded up to f16, `scales[g] = ceil(step_g / d)`. Round trip:
//! `|x − x̂| ≤ d·scales[g]/2 ≤ (amax_g/31 + d)/2`.

use super::{f16_le, f16_round_up};

/// Element `e`'s quant `q_e ∈ [−32, 31]` and scale `scales[e/16]` of the 210-byte block `b`.
#[inline]
pub(crate) fn quant_scale(b: &[u8], e: usize) -> (i32, i8) {
    let (h, r) = (e / 128, e % 128);
    let (t, l) = (r / 32, r % 32);
    let byte = b[64 * h + 32 * (t % 2) + l];
    let low = if t < 2 { byte & 0x0f } else { byte >> 4 };
    let high = (b[128 + 32 * h + l] >> (2 * t)) & 3;
    ((low | (high << 4)) as i32 - 32, b[192 + e / 16] as i8)
}

/// 210 bytes → 256 f32.
pub fn dequantize_block(b: &[u8], out: &mut [f32]) {
    let d = f16_le(&b[208..210]);
    for (e, o) in out.iter_mut().enumerate().take(256) {
        let (q, sc) = quant_scale(b, e);
        *o = (d * sc as f32) * q as f32;
    }
}

/// 256 f32 → 210 bytes.
pub fn quantize_block(x: &[f32], out: &mut [u8]) {
    let mut step_needed = [0.0f32; 16];
    for (g, s) in step_needed.iter_mut().enumerate() {
        *s = super::amax(&x[16 * g..16 * g + 16]) / 31.0;
    }
    let max_step = step_needed.iter().fold(0.0f32, |a, &v| a.max(v));
    let d = if max_step > 0.0 { f16_round_up(max_step / 127.0) } else { half::f16::ZERO };
    let df = d.to_f32();
    let mut sc = [0i8; 16];
    let mut q = [0u8; 256];
    for g in 0..16 {
        if df > 0.0 {
            sc[g] = (step_needed[g] / df).ceil().clamp(0.0, 127.0) as i8;
        }
        let step = df * sc[g] as f32;
        for i in 0..16 {
            let e = 16 * g + i;
            let v = if step > 0.0 { (x[e] / step).round() } else { 0.0 };
            q[e] = (v.clamp(-32.0, 31.0) as i32 + 32) as u8;
        }
    }
    let (ql, rest) = out.split_at_mut(128);
    let (qh, rest) = rest.split_at_mut(64);
    let (scales, dbytes) = rest.split_at_mut(16);
    ql.fill(0);
    qh.fill(0);
    for (e, &qe) in q.iter().enumerate() {
        let (h, r) = (e / 128, e % 128);
        let (t, l) = (r / 32, r % 32);
        let idx = 64 * h + 32 * (t % 2) + l;
        ql[idx] |= if t < 2 { qe & 0x0f } else { (qe & 0x0f) << 4 };
        qh[32 * h + l] |= (qe >> 4) << (2 * t);
    }
    for (s, &v) in scales.iter_mut().zip(&sc) {
        *s = v as u8;
    }
    dbytes.copy_from_slice(&d.to_bits().to_le_bytes());
}
