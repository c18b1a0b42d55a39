//! Reference of `norm`: RMSNorm in f64, and the fused residual add + RMSNorm.

/// `y[r, c] = x[r, c] · w[c] / sqrt(Σ_c x[r, c]² / cols + eps)`, rows of `w.len()` values.
/// Accumulates in f64; returns f64 so tests can measure the GPU's f32 error.
pub fn rms_norm_rows(x: &[f32], w: &[f32], eps: f32) -> Vec<f64> {
    let cols = w.len();
    assert!(cols > 0 && x.len().is_multiple_of(cols), "x is not a whole number of rows of {cols}");
    let mut y = Vec::with_capacity(x.len());
    for row in x.chunks_exact(cols) {
        let ss: f64 = row.iter().map(|&v| v as f64 * v as f64).sum();
        let s = 1.0 / (ss / cols as f64 + eps as f64).sqrt();
        y.extend(row.iter().zip(w).map(|(&v, &wc)| v as f64 * s * wc as f64));
    }
    y
}

/// Per-head RMSNorm: the same function over vectors of `head_dim = w.len()` values.
pub fn rms_norm_heads(x: &[f32], w: &[f32], eps: f32) -> Vec<f64> {
    rms_norm_rows(x, w, eps)
}

/// Residual add + RMSNorm: `h[i] += a[i]` (one f32 addition, as the residual stream is f32),
/// then `rms_norm_rows(h, w, eps)` of the sums.
pub fn add_rms_norm_rows(h: &mut [f32], a: &[f32], w: &[f32], eps: f32) -> Vec<f64> {
    assert_eq!(h.len(), a.len(), "h and a differ in length");
    for (hv, &av) in h.iter_mut().zip(a) {
        *hv += av;
    }
    rms_norm_rows(h, w, eps)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_rms_row_is_scaled_by_weight_only() {
        // x = [1, -1, 1, -1] has mean square 1, so y = x · w (eps = 0).
        let y = rms_norm_rows(&[1.0, -1.0, 1.0, -1.0], &[2.0, 3.0, 4.0, 5.0], 0.0);
        assert_eq!(y, vec![2.0, -3.0, 4.0, -5.0]);
    }

    #[test]
    fn rows_are_independent() {
        let w = [1.0, 1.0];
        let a = rms_norm_rows(&[3.0, 4.0], &w, 1e-6);
        let ab = rms_norm_rows(&[3.0, 4.0, 100.0, -7.0], &w, 1e-6);
        assert_eq!(a[..], ab[..2]);
    }

    #[test]
    fn add_rms_norm_updates_h_and_normalizes_the_sum() {
        let mut h = vec![1.0, 2.0, 0.5, -4.0];
        let y = add_rms_norm_rows(&mut h, &[0.0, -3.0, 0.5, 3.0], &[1.0, 1.0], 0.0);
        assert_eq!(h, vec![1.0, -1.0, 1.0, -1.0]);
        assert_eq!(y, vec![1.0, -1.0, 1.0, -1.0]);
    }
}
