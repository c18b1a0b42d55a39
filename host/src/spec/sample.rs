//! The host sampler behind [`super::DecodingRule`]: the argmax, the temperature / top-k / top-p /
//! min-p filter (definitions and order in [`super::DecodingRule::Sample`]'s docs) and the
//! counter-based random stream. One row costs `O(V)` for the scaling plus a sort of the kept
//! candidates (`O(V log V)` without top-k, `O(V + k log k)` with it), all in f64.

use flashtree_reference::sample::argmax;

use super::SpecError;

/// The argmax of `logits` (ties: lowest id; NaN never wins); all-NaN or empty logits are an error.
pub fn greedy(logits: &[f32]) -> Result<u32, SpecError> {
    match argmax(logits).0 {
        u32::MAX => Err(SpecError::Config("target logits are all NaN".into())),
        t => Ok(t),
    }
}

/// splitmix64's finaliser: a bijection of u64 with full avalanche.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The stream's uniform for `(seed, position)`: `mix(mix(seed + γ) ^ mix(position + 2γ))`
/// (γ = 2⁶⁴/φ, splitmix64's increment), its top 53 bits scaled to [0, 1). Nothing is carried
/// between calls: the same pair always gives the same value, and different positions of one seed
/// are independent draws for all statistical purposes.
pub fn uniform(seed: u64, position: u64) -> f64 {
    const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;
    let z = mix(mix(seed.wrapping_add(GAMMA)) ^ mix(position.wrapping_add(GAMMA.wrapping_mul(2))));
    (z >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// The candidates the filter keeps: `(token, weight)` in order (weight descending, ties by id
/// ascending), weights `exp(z − z_max)` (the first is 1), not normalised. See
/// [`super::DecodingRule::Sample`] for the steps; `temperature` must be > 0 and finite.
pub fn filtered(
    logits: &[f32],
    temperature: f32,
    top_k: usize,
    top_p: f32,
    min_p: f32,
) -> Result<Vec<(u32, f64)>, SpecError> {
    let t = temperature as f64;
    let mut cand: Vec<(u32, f64)> = logits
        .iter()
        .enumerate()
        .filter(|(_, &l)| !l.is_nan() && l != f32::NEG_INFINITY)
        .map(|(i, &l)| (i as u32, l as f64 / t))
        .collect();
    if cand.is_empty() {
        return Err(SpecError::Config("target logits have no finite entry to sample from".into()));
    }
    let order = |a: &(u32, f64), b: &(u32, f64)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
    if top_k > 0 && top_k < cand.len() {
        cand.select_nth_unstable_by(top_k - 1, order);
        cand.truncate(top_k);
    }
    cand.sort_unstable_by(order);
    let zmax = cand[0].1;
    for c in &mut cand {
        // +∞ logits share the mass equally; everything below them gets none.
        c.1 = if zmax == f64::INFINITY { f64::from(u8::from(c.1 == zmax)) } else { (c.1 - zmax).exp() };
    }
    if top_p < 1.0 {
        let total: f64 = cand.iter().map(|c| c.1).sum();
        let need = top_p as f64 * total;
        let mut acc = 0.0;
        let keep = cand
            .iter()
            .position(|c| {
                acc += c.1;
                acc >= need
            })
            .map_or(cand.len(), |i| i + 1);
        cand.truncate(keep);
    }
    if min_p > 0.0 {
        let keep = cand.iter().take_while(|c| c.1 >= min_p as f64).count().max(1);
        cand.truncate(keep);
    }
    Ok(cand)
}

/// The first of `kept` (non-empty) whose cumulative weight exceeds `u · Σ weight` (`u ∈ [0, 1)`).
pub fn draw(kept: &[(u32, f64)], u: f64) -> u32 {
    let total: f64 = kept.iter().map(|c| c.1).sum();
    let target = u * total;
    let mut acc = 0.0;
    for &(t, w) in kept {
        acc += w;
        if acc > target {
            return t;
        }
    }
    // Rounding left `target` at the total: the last token with weight.
    kept.iter().rev().find(|c| c.1 > 0.0).unwrap_or(&kept[0]).0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(v: &[(u32, f64)]) -> Vec<u32> {
        v.iter().map(|c| c.0).collect()
    }

    #[test]
    fn filter_order_and_definitions() {
        // p ∝ e^{l}: ids 1 and 3 tie (ordered by id), then 2, 0, 4; NaN and −∞ never kept.
        let l = [0.0, 2.0, 1.0, 2.0, -1.0, f32::NAN, f32::NEG_INFINITY];
        assert_eq!(ids(&filtered(&l, 1.0, 0, 1.0, 0.0).unwrap()), vec![1, 3, 2, 0, 4]);
        assert_eq!(ids(&filtered(&l, 1.0, 3, 1.0, 0.0).unwrap()), vec![1, 3, 2]);
        // top-p over the top-3: weights 1, 1, e^-1 (total 2.37): 0.5 of it is reached by the first.
        assert_eq!(ids(&filtered(&l, 1.0, 3, 0.42, 0.0).unwrap()), vec![1]);
        assert_eq!(ids(&filtered(&l, 1.0, 3, 0.43, 0.0).unwrap()), vec![1, 3]);
        // min-p relative to the top: e^-1 = 0.368 ≥ 0.3, e^-2 = 0.135 < 0.3.
        assert_eq!(ids(&filtered(&l, 1.0, 0, 1.0, 0.3).unwrap()), vec![1, 3, 2]);
        // Temperature sharpens before the filters: at T = 0.5, e^-2 = 0.135 < 0.3.
        assert_eq!(ids(&filtered(&l, 0.5, 0, 1.0, 0.3).unwrap()), vec![1, 3]);
        let w = filtered(&l, 0.5, 0, 1.0, 0.0).unwrap();
        assert!((w[2].1 - (-2.0f64).exp()).abs() < 1e-15 && w[0].1 == 1.0);
        assert!(filtered(&[f32::NAN, f32::NEG_INFINITY], 1.0, 0, 1.0, 0.0).is_err());
        assert_eq!(ids(&filtered(&[f32::INFINITY, 3.0, f32::INFINITY], 1.0, 0, 1.0, 0.0).unwrap())[..2], [0, 2]);
    }

    #[test]
    fn draw_follows_cumulative_weights() {
        let kept = [(7, 1.0), (3, 0.5), (9, 0.5)];
        assert_eq!(draw(&kept, 0.0), 7);
        assert_eq!(draw(&kept, 0.49), 7);
        assert_eq!(draw(&kept, 0.5), 3);
        assert_eq!(draw(&kept, 0.74), 3);
        assert_eq!(draw(&kept, 0.76), 9);
        assert_eq!(draw(&kept, 1.0 - f64::EPSILON), 9);
    }

    #[test]
    fn the_stream_is_a_function_of_seed_and_position_and_looks_uniform() {
        assert_eq!(uniform(5, 17), uniform(5, 17));
        assert_ne!(uniform(5, 17), uniform(5, 18));
        assert_ne!(uniform(5, 17), uniform(6, 17));
        // 10 bins over 20 000 draws of consecutive positions and of consecutive seeds: each bin
        // within 5 σ (σ = √(n p (1 − p)) = 42.4) of 2000.
        for by_seed in [false, true] {
            let mut bins = [0usize; 10];
            for i in 0..20_000u64 {
                let u = if by_seed { uniform(i, 9) } else { uniform(9, i) };
                assert!((0.0..1.0).contains(&u));
                bins[(u * 10.0) as usize] += 1;
            }
            assert!(bins.iter().all(|&b| b.abs_diff(2000) < 212), "{bins:?}");
        }
    }
}
