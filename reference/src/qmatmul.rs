//! Reference of `qmatmul`: `y[n, out] = W[out, in] · x[n, in]` in f64 on dequantized weights.

use half::bf16;

/// `y[o] = Σ_i w[o, i] · x[i]` (f64 accumulation), `w` row-major `[out, in]` as f32.
pub fn gemv_f32(w: &[f32], x: &[f32]) -> Vec<f64> {
    let k = x.len();
    assert!(k > 0 && w.len() % k == 0, "w is not [out, {k}]");
    w.chunks_exact(k)
        .map(|row| row.iter().zip(x).map(|(&a, &b)| a as f64 * b as f64).sum())
        .collect()
}

/// `Σ_i |w[o, i] · x[i]|` per row: the scale of the rounding error of any summation order.
pub fn gemv_abs_f32(w: &[f32], x: &[f32]) -> Vec<f64> {
    let k = x.len();
    w.chunks_exact(k)
        .map(|row| {
            row.iter()
                .zip(x)
                .map(|(&a, &b)| (a as f64 * b as f64).abs())
                .sum()
        })
        .collect()
}

/// BF16 bits → f32 (exact).
pub fn bf16_to_f32(bits: &[u16]) -> Vec<f32> {
    bits.iter().map(|&b| bf16::from_bits(b).to_f32()).collect()
}

/// `y = W · x` for BF16 weights (given as raw bits).
pub fn gemv_bf16(w: &[u16], x: &[f32]) -> Vec<f64> {
    gemv_f32(&bf16_to_f32(w), x)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_gemv_by_hand() {
        let w = [1.0, 2.0, 3.0, -1.0, 0.5, 4.0];
        let x = [1.0, 1.0, 2.0];
        assert_eq!(gemv_f32(&w, &x), vec![9.0, 7.5]);
        assert_eq!(gemv_abs_f32(&w, &x), vec![9.0, 9.5]);
    }

    #[test]
    fn bf16_weights_dequantize_exactly() {
        // 1.0 = 0x3f80, -2.0 = 0xc000, 0.5 = 0x3f00
        let w = [0x3f80u16, 0xc000, 0x3f00];
        assert_eq!(gemv_bf16(&w, &[2.0, 1.0, 4.0]), vec![2.0]);
    }
}
