//! Reference of `qmatmul`: `y[n, out] = W[out, in] · x[n, in]` in f64 on dequantized weights.

use half::bf16;

/// `y[o] = Σ_i w[o, i] · x[i]` (f64 accumulation), `w` row-major `[out, in]` as f32.
pub fn gemv_f32(w: &[f32], x: &[f32]) -> Vec<f64> {
    let k = x.len();
    assert!(k > 0 && w.len().is_multiple_of(k), "w is not [out, {k}]");
    w.chunks_exact(k).map(|row| row.iter().zip(x).map(|(&a, &b)| a as f64 * b as f64).sum()).collect()
}

/// `Σ_i |w[o, i] · x[i]|` per row: the scale of the rounding error of any summation order.
pub fn gemv_abs_f32(w: &[f32], x: &[f32]) -> Vec<f64> {
    let k = x.len();
    w.chunks_exact(k).map(|row| row.iter().zip(x).map(|(&a, &b)| (a as f64 * b as f64).abs()).sum()).collect()
}

/// BF16 bits → f32 (exact).
pub fn bf16_to_f32(bits: &[u16]) -> Vec<f32> {
    bits.iter().map(|&b| bf16::from_bits(b).to_f32()).collect()
}

/// `y = W · x` for BF16 weights (given as raw bits).
pub fn gemv_bf16(w: &[u16], x: &[f32]) -> Vec<f64> {
    gemv_f32(&bf16_to_f32(w), x)
}

/// `silu(g) · u = g / (1 + e^-g) · u` in f64: the SwiGLU activation of an MLP's gate and up
/// products (the fused epilogue of the `qmm_*_swiglu` kernels).
pub fn swiglu(g: f64, u: f64) -> f64 {
    g / (1.0 + (-g).exp()) * u
}

/// `|d silu/dg| ≤ SILU_SLOPE_MAX` for every g (the maximum, ≈ 1.0998, is at g ≈ 2.40; the
/// minimum, ≈ −0.0998, at g ≈ −2.40): how far an error in g can move `silu(g)`.
pub const SILU_SLOPE_MAX: f64 = 1.1;

/// The fused MLP input `h[f] = silu(gate[f]·x) · (up[f]·x)` (f64 accumulation), `gate` and
/// `up` row-major `[ff, in]` as f32.
pub fn gate_up_swiglu_f32(gate: &[f32], up: &[f32], x: &[f32]) -> Vec<f64> {
    gemv_f32(gate, x).into_iter().zip(gemv_f32(up, x)).map(|(g, u)| swiglu(g, u)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn swiglu_by_hand_and_against_the_model_silu() {
        assert_eq!(swiglu(0.0, 5.0), 0.0);
        assert!((swiglu(1.0, 2.0) - 2.0 / (1.0 + (-1f64).exp())).abs() < 1e-15);
        // Saturation: silu(g) → g for large g, → −0 for very negative g.
        assert_eq!(swiglu(800.0, 1.0), 800.0);
        assert_eq!(swiglu(-800.0, 1.0), 0.0);
        for i in -400..400 {
            let g = i as f32 / 37.0;
            let model = crate::model::ops::silu(g) as f64 * 0.75;
            assert!((swiglu(g as f64, 0.75) - model).abs() <= 1e-6 * (1.0 + model.abs()), "{g}");
        }
    }

    #[test]
    fn silu_slope_bound_holds() {
        let silu = |g: f64| g / (1.0 + (-g).exp());
        let max = (-20000..20000)
            .map(|i| {
                let g = i as f64 / 1000.0;
                ((silu(g + 1e-6) - silu(g - 1e-6)) / 2e-6).abs()
            })
            .fold(0f64, f64::max);
        assert!(max > 1.09 && max <= SILU_SLOPE_MAX, "{max}");
    }

    #[test]
    fn gate_up_swiglu_is_silu_of_gate_times_up() {
        let (gate, up, x) = ([1.0, 0.0, 0.0, -1.0], [2.0, 1.0, 0.5, 0.5], [1.0, 2.0]);
        let h = gate_up_swiglu_f32(&gate, &up, &x);
        assert_eq!(h, vec![swiglu(1.0, 4.0), swiglu(-2.0, 1.5)]);
    }

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
