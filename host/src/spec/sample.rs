//! The host sampler behind [`super::DecodingRule`]: the argmax, and the seeded temperature /
//! top-k / top-p / min-p draw of [`flashtree_reference::sample::draw`] — one definition for the
//! CPU backend and the GPU kernel (`sample_rows`), so both pick the same token bit for bit. One
//! row costs `O(V)` weights plus a sort of the candidates (`O(V log V)` without top-k,
//! `O(V + k log k)` with it).

use flashtree_reference::sample::argmax;
use flashtree_reference::sample::draw::{self, SampleError, SampleRule};
use kernel_abi::sampling::{uniform_bits, WEIGHT_ONE};

use super::SpecError;

/// The argmax of `logits` (ties: lowest id; NaN never wins); all-NaN or empty logits are an error.
pub fn greedy(logits: &[f32]) -> Result<u32, SpecError> {
    match argmax(logits).0 {
        u32::MAX => Err(SpecError::Config("target logits are all NaN".into())),
        t => Ok(t),
    }
}

/// The stream's uniform for `(seed, position)` in [0, 1): the 53 bits of
/// [`kernel_abi::sampling::uniform_bits`] (`mix(mix(seed + γ) ^ mix(position + 2γ)) >> 11`, γ =
/// 2⁶⁴/φ) times 2^-53. Nothing is carried between calls: the same pair always gives the same
/// value, and different positions of one seed are independent draws for all statistical purposes.
pub fn uniform(seed: u64, position: u64) -> f64 {
    uniform_bits(seed, position) as f64 * (1.0 / (1u64 << 53) as f64)
}

fn sample_error(e: SampleError) -> SpecError {
    SpecError::Config(e.to_string())
}

/// The rule's parameters as the shared definition takes them.
pub fn sample_rule(temperature: f32, top_k: usize, top_p: f32, min_p: f32, seed: u64) -> SampleRule {
    SampleRule { temperature, top_k, top_p, min_p, seed }
}

/// The candidates the filter keeps: `(token, weight)` in order (logit descending, ties by id
/// ascending), weights relative to the most likely token (`W / 2^44`: the first is 1), not
/// normalised. See [`super::DecodingRule::Sample`]; `temperature` must be > 0 and finite.
pub fn filtered(
    logits: &[f32],
    temperature: f32,
    top_k: usize,
    top_p: f32,
    min_p: f32,
) -> Result<Vec<(u32, f64)>, SpecError> {
    let kept = draw::kept(logits, &sample_rule(temperature, top_k, top_p, min_p, 0)).map_err(sample_error)?;
    Ok(kept.into_iter().map(|(t, w)| (t, w as f64 / WEIGHT_ONE as f64)).collect())
}

/// The token `rule` draws from `logits` for absolute `position`
/// ([`flashtree_reference::sample::draw::sample_row`]: the device kernel's definition too).
pub fn sample(logits: &[f32], rule: &SampleRule, position: u64) -> Result<u32, SpecError> {
    draw::sample_row(logits, rule, position).map_err(sample_error)
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
        // top-p over the top-3: weights 1, 1, e^-1 (total 2.37): 0.42 of it is reached by the first.
        assert_eq!(ids(&filtered(&l, 1.0, 3, 0.42, 0.0).unwrap()), vec![1]);
        assert_eq!(ids(&filtered(&l, 1.0, 3, 0.43, 0.0).unwrap()), vec![1, 3]);
        // min-p relative to the top: e^-1 = 0.368 ≥ 0.3, e^-2 = 0.135 < 0.3.
        assert_eq!(ids(&filtered(&l, 1.0, 0, 1.0, 0.3).unwrap()), vec![1, 3, 2]);
        // Temperature sharpens before the filters: at T = 0.5, e^-2 = 0.135 < 0.3.
        assert_eq!(ids(&filtered(&l, 0.5, 0, 1.0, 0.3).unwrap()), vec![1, 3]);
        let w = filtered(&l, 0.5, 0, 1.0, 0.0).unwrap();
        // Fixed point: within 2^-44 of e^-2.
        assert!((w[2].1 - (-2.0f64).exp()).abs() < 1e-13 && w[0].1 == 1.0);
        assert!(filtered(&[f32::NAN, f32::NEG_INFINITY], 1.0, 0, 1.0, 0.0).is_err());
        assert_eq!(ids(&filtered(&[f32::INFINITY, 3.0, f32::INFINITY], 1.0, 0, 1.0, 0.0).unwrap())[..2], [0, 2]);
    }

    #[test]
    fn the_draw_is_the_shared_definition() {
        let l = [0.3, -1.0, 2.5, 2.5, 0.0];
        let r = sample_rule(0.8, 3, 0.9, 0.05, 11);
        for pos in 0..100 {
            assert_eq!(sample(&l, &r, pos).unwrap(), draw::sample_row(&l, &r, pos).unwrap());
        }
        assert!(sample(&l, &sample_rule(0.0, 0, 1.0, 0.0, 0), 0).unwrap_err().to_string().contains("temperature"));
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
