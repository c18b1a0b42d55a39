//! Rotary position embedding, NeoX ("rotate half") pairing over the first `n_rot` dims of a head.

/// Rotates the first `n_rot` dims of every `head_dim`-sized head of `x` for position `pos`:
/// for `i < n_rot/2`, `θ = pos · theta^(−2i/n_rot)`,
/// `x'[i] = x[i]cosθ − x[i+n_rot/2]sinθ`, `x'[i+n_rot/2] = x[i+n_rot/2]cosθ + x[i]sinθ`.
/// Dims `n_rot..head_dim` pass through (partial rotary). Angles are computed in f64.
pub fn rope_neox_in_place(x: &mut [f32], head_dim: usize, n_rot: usize, pos: usize, theta: f64) {
    let half = n_rot / 2;
    for head in x.chunks_exact_mut(head_dim) {
        for i in 0..half {
            // HF computes inv_freq in f32 then the angle in f32; f64 here differs by ~1e-7 relative.
            let inv_freq = theta.powf(-2.0 * i as f64 / n_rot as f64);
            let (s, c) = (pos as f64 * inv_freq).sin_cos();
            let (a, b) = (head[i] as f64, head[i + half] as f64);
            head[i] = (a * c - b * s) as f32;
            head[i + half] = (b * c + a * s) as f32;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn position_zero_is_identity_and_tail_dims_untouched() {
        let mut x: Vec<f32> = (0..16).map(|i| i as f32).collect();
        let orig = x.clone();
        rope_neox_in_place(&mut x, 8, 4, 0, 1e4);
        assert_eq!(x, orig);
        rope_neox_in_place(&mut x, 8, 4, 7, 1e4);
        assert_eq!(x[4..8], orig[4..8]);
        assert_eq!(x[12..16], orig[12..16]);
        // rotation preserves the norm of each rotated pair
        let n0 = orig[0].powi(2) + orig[2].powi(2);
        let n1 = x[0].powi(2) + x[2].powi(2);
        assert!((n0 - n1).abs() < 1e-4);
    }
}
