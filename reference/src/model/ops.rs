//! Pointwise and per-vector ops shared by the target and the draft.

/// `y = x / sqrt(mean(x²) + eps) ⊙ w` over one vector (statistics in f64). `w` is the
/// multiplicative weight as stored in GGUF (HF's `1 + w` for the Qwen3.5 target norms).
pub fn rms_norm(x: &[f32], w: &[f32], eps: f32) -> Vec<f32> {
    debug_assert_eq!(x.len(), w.len());
    let s = inv_rms(x, eps);
    x.iter().zip(w).map(|(&v, &wc)| (v as f64 * s) as f32 * wc).collect()
}

/// RMSNorm applied to each `w.len()`-sized head of `x` in place.
pub fn rms_norm_heads_in_place(x: &mut [f32], w: &[f32], eps: f32) {
    for head in x.chunks_exact_mut(w.len()) {
        let y = rms_norm(head, w, eps);
        head.copy_from_slice(&y);
    }
}

/// `1 / sqrt(mean(x²) + eps)` in f64.
pub fn inv_rms(x: &[f32], eps: f32) -> f64 {
    let ss: f64 = x.iter().map(|&v| v as f64 * v as f64).sum();
    1.0 / (ss / x.len() as f64 + eps as f64).sqrt()
}

/// L2 normalisation as HF does it: `x · rsqrt(Σx² + eps)` (eps = 1e-6 in HF's `l2norm`).
pub fn l2_normalize_in_place(x: &mut [f32], eps: f64) {
    let ss: f64 = x.iter().map(|&v| v as f64 * v as f64).sum();
    let s = 1.0 / (ss + eps).sqrt();
    for v in x.iter_mut() {
        *v = (*v as f64 * s) as f32;
    }
}

/// `1 / (1 + e^{−x})`.
pub fn sigmoid(x: f32) -> f32 {
    (1.0 / (1.0 + (-(x as f64)).exp())) as f32
}

/// `x · sigmoid(x)`.
pub fn silu(x: f32) -> f32 {
    (x as f64 / (1.0 + (-(x as f64)).exp())) as f32
}

/// `ln(1 + eˣ)`, returning `x` for `x > 20` as PyTorch does (threshold 20, beta 1).
pub fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        (x as f64).exp().ln_1p() as f32
    }
}

/// Numerically stable log-softmax of one row, in f64.
pub fn log_softmax(x: &[f32]) -> Vec<f64> {
    let m = x.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v as f64));
    let lse = m + x.iter().map(|&v| (v as f64 - m).exp()).sum::<f64>().ln();
    x.iter().map(|&v| v as f64 - lse).collect()
}

/// The `k` largest entries of `row` as `(index, log-prob)`, best first (ties: lower index first).
pub fn top_k_log_probs(row: &[f32], k: usize) -> Vec<(u32, f32)> {
    let lp = log_softmax(row);
    let mut idx: Vec<usize> = (0..row.len()).collect();
    idx.sort_by(|&a, &b| lp[b].partial_cmp(&lp[a]).unwrap_or(std::cmp::Ordering::Equal).then(a.cmp(&b)));
    idx.into_iter().take(k).map(|i| (i as u32, lp[i] as f32)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn softplus_matches_log1p_exp_and_is_identity_past_20() {
        assert!((softplus(0.0) - std::f32::consts::LN_2).abs() < 1e-7);
        assert_eq!(softplus(25.0), 25.0);
    }

    #[test]
    fn top_k_is_sorted_and_normalised() {
        let t = top_k_log_probs(&[0.0, 2.0, 1.0, 2.0], 3);
        assert_eq!(t.iter().map(|p| p.0).collect::<Vec<_>>(), vec![1, 3, 2]);
        let total: f64 = log_softmax(&[0.0, 2.0, 1.0, 2.0]).iter().map(|l| l.exp()).sum();
        assert!((total - 1.0).abs() < 1e-12);
    }
}
