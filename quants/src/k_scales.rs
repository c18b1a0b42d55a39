//! The 12-byte packing of eight 6-bit scales `sc[0..8]` and eight 6-bit mins `m[0..8]` shared by
//! Q4_K and Q5_K (ggml `get_scale_min_k4`):
//!
//! ```text
//! byte j   (j<4): bits 0-5 = sc[j],   bits 6-7 = sc[j+4] >> 4
//! byte j+4 (j<4): bits 0-5 = m[j],    bits 6-7 = m[j+4]  >> 4
//! byte j+8 (j<4): bits 0-3 = sc[j+4] & 15, bits 4-7 = m[j+4] & 15
//! ```

/// `(sc, m)` of sub-block `j` (0..8) from the packed 12 bytes.
#[inline]
pub fn scale_min(scales: &[u8], j: usize) -> (u8, u8) {
    if j < 4 {
        (scales[j] & 63, scales[j + 4] & 63)
    } else {
        ((scales[j + 4] & 0x0f) | ((scales[j - 4] >> 6) << 4), (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4))
    }
}

/// Packs eight 6-bit scales and mins (each < 64) into 12 bytes; inverse of [`scale_min`].
pub fn pack(sc: &[u8; 8], m: &[u8; 8], out: &mut [u8]) {
    for j in 0..4 {
        out[j] = (sc[j] & 63) | ((sc[j + 4] >> 4) << 6);
        out[j + 4] = (m[j] & 63) | ((m[j + 4] >> 4) << 6);
        out[j + 8] = (sc[j + 4] & 0x0f) | ((m[j + 4] & 0x0f) << 4);
    }
}

/// Fits the asymmetric 32-element sub-blocks of a 256-element super-block to
/// `x ≈ d·sc[s]·q − dmin·m[s]` with `q ∈ [0, levels]` and 6-bit `sc`, `m`.
///
/// Each sub-block's offset `dmin·m` is rounded *up* to cover its minimum (clamped at 0) and its
/// step `d·sc` rounded *up* to cover its maximum, and `d`, `dmin` are rounded up when stored as
/// f16, so no element is clamped: `|x − x̂| ≤ d·sc[s] / 2` for every element of sub-block `s`
/// (up to f32 rounding). Returns `(d, dmin, sc, m, q)`.
pub fn fit_asymmetric(x: &[f32], levels: u8) -> (half::f16, half::f16, [u8; 8], [u8; 8], [u8; 256]) {
    let lv = levels as f32;
    let mut min_needed = [0.0f32; 8];
    let mut hi = [0.0f32; 8];
    for s in 0..8 {
        let sub = &x[32 * s..32 * s + 32];
        let lo = sub.iter().fold(0.0f32, |a, &v| a.min(v));
        min_needed[s] = -lo;
        hi[s] = sub.iter().fold(f32::NEG_INFINITY, |a, &v| a.max(v));
    }
    let max_min = min_needed.iter().fold(0.0f32, |a, &v| a.max(v));
    let dmin = if max_min > 0.0 { super::f16_round_up(max_min / 63.0) } else { half::f16::ZERO };
    let dminf = dmin.to_f32();
    let mut m = [0u8; 8];
    let mut offset = [0.0f32; 8];
    let mut step_needed = [0.0f32; 8];
    for s in 0..8 {
        if dminf > 0.0 {
            m[s] = (min_needed[s] / dminf).ceil().clamp(0.0, 63.0) as u8;
        }
        offset[s] = dminf * m[s] as f32;
        step_needed[s] = ((hi[s] + offset[s]) / lv).max(0.0);
    }
    let max_step = step_needed.iter().fold(0.0f32, |a, &v| a.max(v));
    let d = if max_step > 0.0 { super::f16_round_up(max_step / 63.0) } else { half::f16::ZERO };
    let df = d.to_f32();
    let mut sc = [0u8; 8];
    let mut q = [0u8; 256];
    for s in 0..8 {
        if df > 0.0 {
            sc[s] = (step_needed[s] / df).ceil().clamp(0.0, 63.0) as u8;
        }
        let step = df * sc[s] as f32;
        if step > 0.0 {
            for l in 0..32 {
                let v = (x[32 * s + l] + offset[s]) / step;
                q[32 * s + l] = v.round().clamp(0.0, lv) as u8;
            }
        }
    }
    (d, dmin, sc, m, q)
}
