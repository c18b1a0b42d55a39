use super::*;
use kernel_abi::sampling::{exp, uniform_bits, weight, WEIGHT_ONE};

fn rule(temperature: f32, top_k: usize, top_p: f32, min_p: f32) -> SampleRule {
    SampleRule { temperature, top_k, top_p, min_p, seed: 1 }
}

fn ids(row: &[f32], r: SampleRule) -> Vec<u32> {
    kept(row, &r).unwrap().iter().map(|t| t.0).collect()
}

/// `⌊e^d · 2^44⌋` in f64 from the host's exp (a different implementation: may differ by one).
fn approx_weight(d: f64) -> u64 {
    (d.exp() * WEIGHT_ONE as f64) as u64
}

#[test]
fn filters_apply_in_order_with_their_definitions() {
    // Weights ∝ e^{l}: ids 1 and 3 tie (ordered by id), then 2, 0, 4; NaN and −∞ never kept.
    let l = [0.0, 2.0, 1.0, 2.0, -1.0, f32::NAN, f32::NEG_INFINITY];
    assert_eq!(ids(&l, rule(1.0, 0, 1.0, 0.0)), vec![1, 3, 2, 0, 4]);
    assert_eq!(ids(&l, rule(1.0, 3, 1.0, 0.0)), vec![1, 3, 2]);
    // top-p over the top-3 (mass 2 + e^-1 = 2.368): 0.42 of it (0.995) is reached by the first
    // token, 0.43 of it (1.018) needs the second.
    assert_eq!(ids(&l, rule(1.0, 3, 0.42, 0.0)), vec![1]);
    assert_eq!(ids(&l, rule(1.0, 3, 0.43, 0.0)), vec![1, 3]);
    // Without top-k the mass is 2 + e^-1 + e^-2 + e^-3 = 2.553: 0.42 of it is 1.072.
    assert_eq!(ids(&l, rule(1.0, 0, 0.42, 0.0)), vec![1, 3]);
    // min-p relative to the top: e^-1 = 0.368 ≥ 0.3 > e^-2 = 0.135.
    assert_eq!(ids(&l, rule(1.0, 0, 1.0, 0.3)), vec![1, 3, 2]);
    assert_eq!(ids(&l, rule(1.0, 0, 1.0, 1.0)), vec![1, 3], "min_p = 1 keeps the ties of the top");
    // Temperature sharpens before the filters: at T = 0.5 token 2 has e^-2 < 0.3.
    assert_eq!(ids(&l, rule(0.5, 0, 1.0, 0.3)), vec![1, 3]);
    // The three cuts combine as the shortest prefix, whichever is shortest.
    assert_eq!(ids(&l, rule(1.0, 2, 0.99, 0.01)), vec![1, 3]);
    assert_eq!(ids(&l, rule(1.0, 4, 0.5, 0.01)), vec![1, 3]);
    assert_eq!(ids(&l, rule(1.0, 4, 0.99, 0.2)), vec![1, 3, 2]);
    // Weights: the top is 2^44 exactly, the others ⌊e^d · 2^44⌋ (to the last unit).
    let k = kept(&l, &rule(0.5, 0, 1.0, 0.0)).unwrap();
    assert_eq!((k[0].1, k[1].1), (WEIGHT_ONE, WEIGHT_ONE));
    assert!(k[2].1.abs_diff(approx_weight(-2.0)) <= 1 && k[3].1.abs_diff(approx_weight(-4.0)) <= 1, "{k:?}");
}

#[test]
fn top_p_and_min_p_thresholds_are_exact_at_their_boundaries() {
    // Two equal tokens: mass 2^45. top_p = 0.5 needs exactly 2^44 (one token); a hair more
    // needs both.
    let l = [3.0, 3.0];
    assert_eq!(ids(&l, rule(1.0, 0, 0.5, 0.0)), vec![0]);
    assert_eq!(ids(&l, rule(1.0, 0, f32::from_bits(0.5f32.to_bits() + 1), 0.0)), vec![0, 1]);
    assert_eq!(sampling::top_p_need(1.0, 5), 5);
    assert_eq!(sampling::top_p_need(0.5, 5), 3, "⌈2.5⌉");
    // min-p compares integers: the threshold ⌈min_p · 2^44⌉.
    assert_eq!(sampling::min_p_threshold(0.5), WEIGHT_ONE / 2);
    assert_eq!(sampling::min_p_threshold(1.0), WEIGHT_ONE);
    // A token at exactly half the top's probability passes min_p = 0.5 (ln 0.5 is exact
    // enough at T = 1: its weight rounds to 2^43 or one below; both are checked).
    let half = [0.0, -std::f32::consts::LN_2];
    let w = weights(&half, 1.0).unwrap().0[1];
    assert_eq!(ids(&half, rule(1.0, 0, 1.0, 0.5)).len(), if w >= WEIGHT_ONE / 2 { 2 } else { 1 });
}

#[test]
fn ties_go_by_token_id_and_plus_zero_precedes_minus_zero() {
    assert_eq!(ids(&[0.5; 5], rule(1.0, 2, 1.0, 0.0)), vec![0, 1]);
    assert_eq!(ids(&[0.5, 1.0, 0.5, 0.5, 1.0], rule(1.0, 3, 1.0, 0.0)), vec![1, 4, 0]);
    assert_eq!(ids(&[-0.0, 0.0], rule(1.0, 1, 1.0, 0.0)), vec![1]);
    // Same weight for ±0.
    let k = kept(&[-0.0, 0.0], &rule(1.0, 0, 1.0, 0.0)).unwrap();
    assert_eq!(k, vec![(1, WEIGHT_ONE), (0, WEIGHT_ONE)]);
}

#[test]
fn nan_and_infinities() {
    let nothing = [f32::NAN, f32::NEG_INFINITY, -f32::NAN];
    assert_eq!(sample_row(&nothing, &rule(1.0, 0, 1.0, 0.0), 0), Err(SampleError::NothingToDraw));
    // +∞ entries share the mass; everything else (even a large finite logit) gets none.
    let l = [f32::INFINITY, 3.0e38, f32::INFINITY, f32::NAN];
    let k = kept(&l, &rule(1.0, 0, 1.0, 0.0)).unwrap();
    assert_eq!(k, vec![(0, WEIGHT_ONE), (2, WEIGHT_ONE), (1, 0)]);
    for pos in 0..200 {
        assert_ne!(sample_row(&l, &rule(0.7, 0, 1.0, 0.0), pos).unwrap(), 1);
    }
    // A single drawable token is always drawn.
    let one = [f32::NAN, f32::NEG_INFINITY, -5.0];
    assert!((0..50).all(|p| sample_row(&one, &rule(2.0, 0, 0.3, 0.9), p) == Ok(2)));
    // Far below the top (d < −32): weight 0, never drawn, but still counted by top-k.
    let far = [0.0, -40.0, -40.0];
    assert_eq!(kept(&far, &rule(1.0, 2, 1.0, 0.0)).unwrap(), vec![(0, WEIGHT_ONE), (1, 0)]);
}

#[test]
fn ranges_are_checked_and_zero_temperature_is_not_sampling() {
    let row = [0.0, 1.0];
    for (t, p, m, field) in [
        (0.0, 1.0, 0.0, "temperature"),
        (-1.0, 1.0, 0.0, "temperature"),
        (f32::INFINITY, 1.0, 0.0, "temperature"),
        (f32::NAN, 1.0, 0.0, "temperature"),
        (1.0, 0.0, 0.0, "top_p"),
        (1.0, 1.5, 0.0, "top_p"),
        (1.0, 1.0, -0.1, "min_p"),
        (1.0, 1.0, 1.1, "min_p"),
    ] {
        let e = sample_row(&row, &rule(t, 0, p, m), 0).unwrap_err().to_string();
        assert!(e.contains(field), "{e}");
    }
    assert_eq!(sample_row(&[], &rule(1.0, 0, 1.0, 0.0), 0), Err(SampleError::Vocab(0)));
}

#[test]
fn top_k_beyond_the_vocabulary_keeps_everything() {
    let l = [0.1, 0.3, -0.2];
    assert_eq!(ids(&l, rule(1.0, 100, 1.0, 0.0)), ids(&l, rule(1.0, 0, 1.0, 0.0)));
    assert_eq!(ids(&l, rule(1.0, usize::MAX, 1.0, 0.0)), vec![1, 0, 2]);
}

#[test]
fn exp_is_within_a_few_ulp_of_the_libm_exp() {
    assert_eq!(exp(0.0, fma), 1.0);
    assert_eq!(exp(-0.0, fma), 1.0);
    let check = |d: f64| {
        let (a, b) = (exp(d, fma), d.exp());
        let ulp = f64::from_bits(b.to_bits() + 1) - b;
        assert!((a - b).abs() <= 3.0 * ulp, "exp({d}) = {a}, libm {b}");
    };
    for i in -700_000..=700_000 {
        check(i as f64 * 1e-3);
    }
    // Pseudo-random points over [−708, 709] and near 0.
    let mut z = 1u64;
    for _ in 0..200_000 {
        z = sampling::mix(z);
        let u = (z >> 11) as f64 / (1u64 << 53) as f64;
        check(-708.0 + 1417.0 * u);
        check((u - 0.5) * 1e-6);
    }
}

#[test]
fn weights_are_fixed_point_exponentials() {
    assert_eq!(weight(1.5, 1.5, 1.0, fma), WEIGHT_ONE);
    assert_eq!(weight(0.0, 40.0, 1.0, fma), 0, "d = −40 < −32");
    assert_eq!(weight(0.0, 32.0, 1.0, fma), (exp(-32.0, fma) * WEIGHT_ONE as f64) as u64);
    for d in [-0.5, -1.0, -7.25, -20.0, -31.9] {
        assert!(weight(d as f32, 0.0, 1.0, fma).abs_diff(approx_weight(d)) <= 1, "{d}");
    }
    // 1/T is one factor: T = 0.25 quadruples d.
    assert!(weight(-1.0, 0.0, 4.0, fma).abs_diff(approx_weight(-4.0)) <= 1);
}

#[test]
fn the_draw_walks_token_ids_and_splits_the_53_bits_at_the_weights() {
    // By id: 3 (weight 1), 7 (2), 9 (1); total 4, so target = bits >> 51.
    let kept = [(7, 2), (3, 1), (9, 1)];
    let at = |target: u64| target << 51;
    assert_eq!(draw(&kept, 0), 3);
    assert_eq!(draw(&kept, at(1) - 1), 3);
    assert_eq!(draw(&kept, at(1)), 7);
    assert_eq!(draw(&kept, at(3) - 1), 7);
    assert_eq!(draw(&kept, at(3)), 9);
    assert_eq!(draw(&kept, (1 << 53) - 1), 9);
    // Zero weights are never drawn, wherever they sit.
    let kept = [(0, 0), (1, 5), (2, 0), (3, 3), (4, 0)];
    for b in [0, 1 << 40, (5u64 << 53) / 8 - 1, (5u64 << 53) / 8, (1 << 53) - 1] {
        assert!([1, 3].contains(&draw(&kept, b)));
    }
    assert_eq!(sampling::draw_target((1 << 53) - 1, u64::MAX), u64::MAX - (u64::MAX >> 53) - 1);
}

#[test]
fn the_stream_depends_on_seed_and_position_only_and_draws_follow_the_weights() {
    assert_eq!(uniform_bits(5, 17), uniform_bits(5, 17));
    assert_ne!(uniform_bits(5, 17), uniform_bits(5, 18));
    assert_ne!(uniform_bits(5, 17), uniform_bits(6, 17));
    assert!(uniform_bits(u64::MAX, u64::MAX) < 1 << 53);
    // Weights 1 : 1/2 : 1/4 (logits 0, −ln 2, −2 ln 2): 40 000 draws over positions, each count
    // within 5σ of n·p.
    let l = [-std::f32::consts::LN_2, 0.0, -2.0 * std::f32::consts::LN_2];
    let r = SampleRule { temperature: 1.0, top_k: 0, top_p: 1.0, min_p: 0.0, seed: 42 };
    let n = 40_000;
    let mut count = [0usize; 3];
    for pos in 0..n {
        count[sample_row(&l, &r, pos).unwrap() as usize] += 1;
    }
    for (c, p) in count.iter().zip([2.0 / 7.0, 4.0 / 7.0, 1.0 / 7.0]) {
        let (mean, sd) = (n as f64 * p, (n as f64 * p * (1.0 - p)).sqrt());
        assert!((*c as f64 - mean).abs() < 5.0 * sd, "{count:?}");
    }
}

#[test]
fn rows_are_sampled_independently_at_their_positions() {
    let logits = [0.0, 1.0, 2.0, 2.0, 1.0, 0.0];
    let r = rule(1.0, 0, 1.0, 0.0);
    let out = sample_rows(&logits, 3, &r, &[4, 9]).unwrap();
    assert_eq!(out, vec![sample_row(&logits[..3], &r, 4).unwrap(), sample_row(&logits[3..], &r, 9).unwrap()]);
    assert!(sample_rows(&logits, 4, &r, &[0]).is_err());
    assert!(sample_rows(&logits, 3, &r, &[0]).is_err());
}
