//! Reference of `norm`: RMSNorm in f64.

/// `y[r, c] = x[r, c] · w[c] / sqrt(Σ_c x[r, c]² / cols + eps)`, rows of `w.len()` values.
/// Accumulates in f64; returns f64 so tests can measure the GPU's f32 error.
pub fn rms_norm_rows(x: &[f32], w: &[f32], eps: f32) -> Vec<f64> {
    let cols = w.len();
    assert!(
        cols > 0 && x.len() % cols == 0,
        "x is not a whole number of rows of {cols}"
    );
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
}
