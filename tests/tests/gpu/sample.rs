//! `sample::argmax` vs `flashtree_reference::sample::argmax`: exact (index and value).
//!
//! `sample::topk_logprobs_rows` vs `flashtree_reference::sample::topk_logprobs`: the tokens and
//! their order exactly (random logits with planted ties: equal logits inside and across the
//! 4096-logit segments and at the k-th place; ties go to the lower id), the log-probs within
//! the bound derived in [`logprob_tolerance`].

use flashtree::gpu::sample::{argmax, topk_logprobs_rows, topk_max_vocab, topk_scratch_len, ArgmaxBuffers};
use flashtree::gpu::{DevSpan, Gpu};
use flashtree_reference::sample as reference;
use flashtree_tests::gpu::gpu_or_skip;
use flashtree_tests::tolerance::{gamma, U32};
use proptest::prelude::*;

fn logits(seed: u64, n: usize) -> Vec<f32> {
    let mut s = seed | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 40.0
        })
        .collect()
}

fn run(gpu: &Gpu, rows: usize, cols: usize, x: &[f32]) -> (Vec<u32>, Vec<f32>) {
    let dx = gpu.upload(x).unwrap();
    let mut out = ArgmaxBuffers::new(gpu, rows).unwrap();
    gpu.fill_bytes(&mut out.idx, 0xab).unwrap();
    argmax(gpu, &dx, rows, cols, &mut out).unwrap();
    (gpu.download(&out.idx).unwrap(), gpu.download(&out.val).unwrap())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Exact agreement, including planted ties (lowest index wins) and NaNs (never win).
    #[test]
    fn argmax_matches_reference_with_ties_and_nans(
        rows in 1usize..20,
        cols in prop_oneof![1usize..5000, Just(248_320usize), 248_000usize..248_400],
        ties in 0usize..4,
        nans in 0usize..4,
        seed in any::<u64>(),
    ) {
        let Some(gpu) = gpu_or_skip("argmax_matches_reference_with_ties_and_nans") else { return Ok(()) };
        let mut x = logits(seed, rows * cols);
        for r in 0..rows {
            let row = &mut x[r * cols..(r + 1) * cols];
            let (i, v) = reference::argmax(row);
            for t in 0..ties {
                let j = (seed as usize).wrapping_mul(t + 3) % cols;
                if i != u32::MAX { row[j] = v; }
            }
            for t in 0..nans {
                let j = (seed as usize >> 3).wrapping_mul(t + 7) % cols;
                row[j] = f32::NAN;
            }
        }
        let (idx, val) = run(gpu, rows, cols, &x);
        for r in 0..rows {
            let (wi, wv) = reference::argmax(&x[r * cols..(r + 1) * cols]);
            prop_assert_eq!(idx[r], wi, "row {}", r);
            if wi != u32::MAX {
                prop_assert_eq!(val[r].to_bits(), wv.to_bits(), "row {}", r);
            }
        }
    }
}

#[test]
fn argmax_of_all_nan_row_is_u32_max() {
    let Some(gpu) = gpu_or_skip("argmax_of_all_nan_row_is_u32_max") else { return };
    let (idx, _) = run(gpu, 2, 300, &[f32::NAN; 600]);
    assert_eq!(idx, vec![u32::MAX, u32::MAX]);
}

#[test]
fn argmax_rejects_more_rows_than_buffers() {
    let Some(gpu) = gpu_or_skip("argmax_rejects_more_rows_than_buffers") else { return };
    let x = gpu.zeros::<f32>(100).unwrap();
    let mut out = ArgmaxBuffers::new(gpu, 1).unwrap();
    assert!(argmax(gpu, &x, 2, 50, &mut out).is_err());
    assert!(argmax(gpu, &x, 1, 101, &mut out).is_err());
}

/// Largest error of `f32::ex2.approx`-based `exp_accurate` (relative) and of `lg2.approx`
/// (absolute) this test allows: twice the ≈ 2^-22 the PTX ISA states for each.
const EPS_EXP: f64 = 1.0 / (1u64 << 21) as f64;
const EPS_LG2: f64 = 1.0 / (1u64 << 21) as f64;

/// Bound on `|lp_gpu − lp_ref|` for every log-prob of `row`, from the kernels' arithmetic
/// (`gpu-kernels/src/sample.rs`), first order in `u = 2^-24` with a 1 % margin:
///
/// * `S = Σ_i e^{x_i − M}` (`M` = the row's max, exact on the GPU). Term `i` of segment `s` is
///   `exp_accurate(fl(x_i − m_s))`: relative error `u·|x_i − m_s|` (the rounded difference) `+
///   EPS_EXP`. Segment sums are chains of ≤ 16 + 5 + 8 positive terms (`γ_29`); each is scaled
///   by `exp_accurate(fl(m_s − M))` (`u·|m_s − M| + EPS_EXP`) with one product rounding (`u`),
///   and summed in chains of `⌈splits/256⌉ + 13`. As `|x_i − m_s| + |m_s − M| = |x_i − M|`, the
///   relative error of `S` is `ρ ≤ u·W + 2·EPS_EXP + u + γ_29 + γ_c`, `W = Σ_i e^{x_i − M}·|x_i − M| / S`.
/// * `ln S = lg2(S)·ln 2`: error `≤ ρ/(1 − ρ) + EPS_LG2 + 2u·|ln S|`.
/// * `lp = fl(fl(x − M) − ln S)`: adds `u·|x − M| + u·|lp|`.
fn logprob_tolerance(row: &[f32], x: f32, splits: usize) -> f64 {
    let m = row.iter().fold(f64::NEG_INFINITY, |a, &v| a.max(v as f64));
    let (mut s, mut sw) = (0.0f64, 0.0f64);
    for &v in row {
        let d = v as f64 - m;
        s += d.exp();
        sw += d.exp() * d.abs();
    }
    let rho = U32 * (sw / s) + 2.0 * EPS_EXP + U32 + gamma(29) + gamma(splits.div_ceil(256) + 13);
    let ln_s = s.ln();
    let lp = x as f64 - m - ln_s;
    let err = rho / (1.0 - rho) + EPS_LG2 + 2.0 * U32 * ln_s.abs() + U32 * (x as f64 - m).abs() + U32 * lp.abs();
    1.01 * err
}

/// Runs `topk_logprobs_rows`, outputs poisoned (`0xab…` tokens, NaN log-probs).
fn run_topk(gpu: &Gpu, x: &[f32], rows: usize, vocab: usize, k: usize) -> (Vec<u32>, Vec<f32>) {
    let dx = gpu.upload(x).unwrap();
    let scratch = gpu.zeros::<u32>(topk_scratch_len(rows, vocab, k)).unwrap();
    let mut tok = gpu.zeros::<u32>(rows * k).unwrap();
    let mut lp = gpu.zeros::<f32>(rows * k).unwrap();
    gpu.fill_bytes(&mut tok, 0xab).unwrap();
    gpu.fill_bytes(&mut lp, 0xff).unwrap();
    let (xs, ss) = (DevSpan::of(gpu, &dx), DevSpan::of(gpu, &scratch));
    topk_logprobs_rows(gpu, xs, rows, vocab, k, ss, DevSpan::of(gpu, &tok), DevSpan::of(gpu, &lp)).unwrap();
    (gpu.download(&tok).unwrap(), gpu.download(&lp).unwrap())
}

/// Plants ties in each row: the logit at rank `k − 1` (the boundary) copied to `ties` places,
/// the best logit to one more, all at pseudo-random positions anywhere in the row.
fn plant_ties(x: &mut [f32], rows: usize, vocab: usize, k: usize, ties: usize, seed: u64) {
    let mut s = seed | 1;
    let mut next = || {
        s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (s >> 33) as usize
    };
    for r in 0..rows {
        let row = &mut x[r * vocab..(r + 1) * vocab];
        let top = reference::topk_logprobs(row, k);
        let (boundary, best) = (row[top[k - 1].0 as usize], row[top[0].0 as usize]);
        for _ in 0..ties {
            let j = next() % vocab;
            row[j] = boundary;
        }
        let j = next() % vocab;
        row[j] = best;
    }
}

fn vocab_and_k() -> impl Strategy<Value = (usize, usize)> {
    (1usize..=64).prop_flat_map(|k| {
        let vocab = prop_oneof![
            1usize..5000,
            (1usize..40).prop_map(|s| 4096 * s),
            (1usize..40).prop_map(|s| 4096 * s + 1),
            Just(248_320usize),
            248_000usize..248_400,
        ];
        (vocab.prop_map(move |v| v.max(k).min(topk_max_vocab(k))), Just(k))
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Exact tokens and order (ties to the lower id), log-probs within the derived bound and
    /// non-increasing along each row.
    #[test]
    fn topk_matches_reference_with_planted_ties(
        rows in 1usize..6,
        (vocab, k) in vocab_and_k(),
        ties in 0usize..6,
        seed in any::<u64>(),
    ) {
        let Some(gpu) = gpu_or_skip("topk_matches_reference_with_planted_ties") else { return Ok(()) };
        let mut x = logits(seed, rows * vocab);
        plant_ties(&mut x, rows, vocab, k, ties, seed);
        let (tok, lp) = run_topk(gpu, &x, rows, vocab, k);
        let splits = vocab.div_ceil(4096);
        for r in 0..rows {
            let row = &x[r * vocab..(r + 1) * vocab];
            let want = reference::topk_logprobs(row, k);
            let got_tok = &tok[r * k..(r + 1) * k];
            let want_tok: Vec<u32> = want.iter().map(|t| t.0).collect();
            prop_assert_eq!(got_tok, &want_tok[..], "row {}", r);
            for (i, &(t, w)) in want.iter().enumerate() {
                let g = lp[r * k + i];
                let tol = logprob_tolerance(row, row[t as usize], splits);
                prop_assert!((g as f64 - w).abs() <= tol, "row {} rank {} token {}: {} vs {} (err {:e} > {:e})", r, i, t, g, w, (g as f64 - w).abs(), tol);
                if i > 0 {
                    prop_assert!(g <= lp[r * k + i - 1], "row {}: log-probs not sorted at rank {}", r, i);
                }
            }
        }
    }

    /// Batch invariance: a row's tokens and log-probs are bitwise the same alone or among others.
    #[test]
    fn topk_row_result_is_independent_of_the_other_rows(
        rows in 2usize..16,
        (vocab, k) in vocab_and_k(),
        pick in any::<prop::sample::Index>(),
        seed in any::<u64>(),
    ) {
        let Some(gpu) = gpu_or_skip("topk_row_result_is_independent_of_the_other_rows") else { return Ok(()) };
        let x = logits(seed, rows * vocab);
        let r = pick.index(rows);
        let (tok, lp) = run_topk(gpu, &x, rows, vocab, k);
        let (tok1, lp1) = run_topk(gpu, &x[r * vocab..(r + 1) * vocab], 1, vocab, k);
        prop_assert_eq!(&tok[r * k..(r + 1) * k], &tok1[..]);
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        prop_assert_eq!(bits(&lp[r * k..(r + 1) * k]), bits(&lp1));
    }
}

/// `+0` ranks before `−0` (`f32::total_cmp`), equal logits by id, across segments too.
#[test]
fn topk_orders_plus_zero_before_minus_zero_and_ties_by_id() {
    let Some(gpu) = gpu_or_skip("topk_orders_plus_zero_before_minus_zero_and_ties_by_id") else { return };
    let vocab = 3 * 4096 + 5;
    let mut x = vec![-1.0f32; vocab];
    for (j, v) in [(9000, 2.0), (17, 2.0), (12290, -0.0), (3, 0.0), (5000, -0.0), (4095, 2.0), (8192, 0.0)] {
        x[j] = v;
    }
    let (tok, lp) = run_topk(gpu, &x, 1, vocab, 8);
    assert_eq!(tok, vec![17, 4095, 9000, 3, 8192, 5000, 12290, 0]);
    let want = reference::topk_logprobs(&x, 8);
    assert_eq!(tok, want.iter().map(|t| t.0).collect::<Vec<_>>());
    for (i, (&g, &(t, w))) in lp.iter().zip(&want).enumerate() {
        let tol = logprob_tolerance(&x, x[t as usize], 4);
        assert!((g as f64 - w).abs() <= tol, "rank {i}: {g} vs {w}");
    }
}

#[test]
fn topk_rejects_bad_shapes() {
    let Some(gpu) = gpu_or_skip("topk_rejects_bad_shapes") else { return };
    let x = gpu.zeros::<f32>(300_000).unwrap();
    let scratch = gpu.zeros::<u32>(topk_scratch_len(1, 300_000, 64)).unwrap();
    let out = gpu.zeros::<u32>(64).unwrap();
    let lp = gpu.zeros::<f32>(64).unwrap();
    let (xs, ss, os, ls) =
        (DevSpan::of(gpu, &x), DevSpan::of(gpu, &scratch), DevSpan::of(gpu, &out), DevSpan::of(gpu, &lp));
    let err = |r: Result<(), flashtree::gpu::GpuError>| r.unwrap_err().to_string();
    assert!(err(topk_logprobs_rows(gpu, xs, 1, 100, 0, ss, os, ls)).contains("k = 0"));
    assert!(err(topk_logprobs_rows(gpu, xs, 1, 100, 65, ss, os, ls)).contains("k = 65"));
    assert!(err(topk_logprobs_rows(gpu, xs, 1, 10, 20, ss, os, ls)).contains("at most vocab"));
    assert!(err(topk_logprobs_rows(gpu, xs, 1, 300_000, 64, ss, os, ls)).contains("exceeds 262144"));
    assert!(err(topk_logprobs_rows(gpu, xs, 2, 200_000, 64, ss, os, ls)).contains("logits"));
    assert!(err(topk_logprobs_rows(gpu, xs, 1, 1000, 64, ss.sub(0, 10, "s").unwrap(), os, ls)).contains("scratch"));
    assert!(err(topk_logprobs_rows(gpu, xs, 2, 1000, 64, ss, os, ls)).contains("tokens"));
    assert!(topk_logprobs_rows(gpu, xs, 1, 1000, 64, ss, os, ls).is_ok());
}

/// The reference agrees with the CPU top-K the draft path uses (`flashtree::spec::topk_logprobs`:
/// same tokens, same order, log-probs equal up to its final f32 rounding). CPU only.
#[test]
fn reference_topk_agrees_with_the_draft_path_topk() {
    for (seed, vocab, k) in [(1u64, 1000usize, 16usize), (2, 5, 5), (3, 70_000, 64), (4, 4097, 1)] {
        let mut x = logits(seed, 3 * vocab);
        plant_ties(&mut x, 3, vocab, k, 4, seed);
        x[vocab / 2] = -0.0;
        x[vocab / 3] = 0.0;
        let draft = flashtree::spec::topk_logprobs(&x, vocab, k).unwrap();
        let (tok, lp) = reference::topk_logprobs_rows(&x, vocab, k);
        for r in 0..3 {
            for i in 0..k {
                assert_eq!(draft.token(r + 1, i), tok[r * k + i], "seed {seed} row {r} rank {i}");
                let (d, w) = (draft.logprob(r + 1, i) as f64, lp[r * k + i]);
                assert!((d - w).abs() <= U32 * w.abs() + 1e-300, "seed {seed} row {r} rank {i}: {d} vs {w}");
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Seeded sampling: `sample_rows` vs `flashtree_reference::sample::draw::sample_row`, token for
// token (the definition is integer arithmetic from shared code, so equality is exact or a bug).

use flashtree::gpu::sample::sample_rows;
use flashtree_reference::sample::draw::{sample_row, SampleRule};

/// Rows of logits at `scale` (0: all equal) with planted ties (copies of the row's largest
/// logits and of random entries), NaNs, −∞ and +∞.
fn sampling_logits(rows: usize, vocab: usize, scale: f32, plants: (usize, usize, usize, usize), seed: u64) -> Vec<f32> {
    let (ties, nans, neg_infs, pos_infs) = plants;
    let mut x: Vec<f32> = logits(seed, rows * vocab).iter().map(|v| v * scale).collect();
    let mut s = seed | 1;
    let mut next = |n: usize| {
        s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (s >> 33) as usize % n
    };
    for row in x.chunks_exact_mut(vocab) {
        let top = reference::argmax(row).0 as usize;
        for t in 0..ties {
            let from = if t % 2 == 0 { top } else { next(vocab) };
            let to = next(vocab);
            row[to] = row[from];
        }
        for _ in 0..nans {
            row[next(vocab)] = f32::NAN;
        }
        for _ in 0..neg_infs {
            row[next(vocab)] = f32::NEG_INFINITY;
        }
        for _ in 0..pos_infs {
            row[next(vocab)] = f32::INFINITY;
        }
    }
    x
}

fn run_sample(gpu: &Gpu, x: &[f32], vocab: usize, rule: &SampleRule, positions: &[u64]) -> Vec<u32> {
    let dx = gpu.upload(x).unwrap();
    let mut out = gpu.zeros::<u32>(positions.len()).unwrap();
    gpu.fill_bytes(&mut out, 0xab).unwrap();
    sample_rows(gpu, DevSpan::of(gpu, &dx), vocab, rule, positions, DevSpan::of(gpu, &out)).unwrap();
    gpu.download(&out).unwrap()
}

fn expected(x: &[f32], vocab: usize, rule: &SampleRule, positions: &[u64]) -> Vec<u32> {
    x.chunks_exact(vocab).zip(positions).map(|(row, &p)| sample_row(row, rule, p).unwrap_or(u32::MAX)).collect()
}

fn sample_rule() -> impl Strategy<Value = SampleRule> {
    (
        0.05f32..3.0,
        prop_oneof![Just(0usize), Just(1usize), 2usize..50, 1000usize..400_000, Just(usize::MAX)],
        prop_oneof![Just(1.0f32), 0.01f32..1.0],
        prop_oneof![Just(0.0f32), 0.0f32..0.5, Just(1.0f32)],
        any::<u64>(),
    )
        .prop_map(|(temperature, top_k, top_p, min_p, seed)| SampleRule { temperature, top_k, top_p, min_p, seed })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Tokens equal to the reference's exactly, over row counts, vocabularies (the 27B's,
    /// non-multiples of 4, tiny), logit scales (from all-equal to sharply peaked), planted
    /// ties / NaN / ±∞, and every rule shape.
    #[test]
    fn sample_rows_matches_reference_exactly(
        rows in 1usize..=32,
        vocab in prop_oneof![1usize..70, 70usize..20_000, Just(248_320usize), 200_000usize..300_000],
        scale in prop_oneof![Just(0.0f32), 0.01f32..1.0, 1.0f32..40.0],
        plants in (0usize..6, 0usize..4, 0usize..4, prop_oneof![4 => Just(0usize), 1 => 1usize..3]),
        rule in sample_rule(),
        seed in any::<u64>(),
        position in 0u64..1 << 40,
    ) {
        let Some(gpu) = gpu_or_skip("sample_rows_matches_reference_exactly") else { return Ok(()) };
        let x = sampling_logits(rows, vocab, scale, plants, seed);
        let positions: Vec<u64> = (0..rows as u64).map(|r| position + r).collect();
        let got = run_sample(gpu, &x, vocab, &rule, &positions);
        prop_assert_eq!(got, expected(&x, vocab, &rule, &positions), "{:?}", rule);
    }
}

/// The same rows give the same tokens sampled alone, inside batches of other sizes, and at
/// another offset of the batch (nothing of a row's draw depends on the launch).
#[test]
fn sample_rows_are_independent_of_the_batch() {
    let Some(gpu) = gpu_or_skip("sample_rows_are_independent_of_the_batch") else { return };
    let vocab = 248_320;
    let x = sampling_logits(32, vocab, 12.0, (3, 1, 1, 0), 77);
    for rule in [
        SampleRule { temperature: 0.7, top_k: 20, top_p: 0.95, min_p: 0.0, seed: 5 },
        SampleRule { temperature: 1.0, top_k: 0, top_p: 1.0, min_p: 0.0, seed: 6 },
        SampleRule { temperature: 2.5, top_k: 0, top_p: 0.5, min_p: 0.01, seed: 7 },
    ] {
        let positions: Vec<u64> = (100..132).collect();
        let all = run_sample(gpu, &x, vocab, &rule, &positions);
        assert_eq!(all, expected(&x, vocab, &rule, &positions), "{rule:?}");
        for (first, n) in [(0, 1), (5, 1), (3, 7), (10, 22), (31, 1)] {
            let part =
                run_sample(gpu, &x[first * vocab..(first + n) * vocab], vocab, &rule, &positions[first..first + n]);
            assert_eq!(part, all[first..first + n], "{rule:?}: rows {first}..{}", first + n);
        }
    }
}

/// All-NaN / −∞ rows give `u32::MAX`; a single +∞ entry is always drawn; shapes are checked.
#[test]
fn sample_rows_edge_rows_and_shapes() {
    let Some(gpu) = gpu_or_skip("sample_rows_edge_rows_and_shapes") else { return };
    let rule = SampleRule { temperature: 1.0, top_k: 0, top_p: 1.0, min_p: 0.0, seed: 1 };
    let mut x = vec![f32::NAN; 3 * 1001];
    x[1001..2002].fill(f32::NEG_INFINITY);
    x[2002..].fill(1.0);
    x[2002 + 500] = f32::INFINITY;
    assert_eq!(run_sample(gpu, &x, 1001, &rule, &[0, 1, 2]), vec![u32::MAX, u32::MAX, 500]);
    let dx = gpu.upload(&x).unwrap();
    let out = gpu.zeros::<u32>(40).unwrap();
    let (sx, so) = (DevSpan::of(gpu, &dx), DevSpan::of(gpu, &out));
    assert!(sample_rows(gpu, sx, 1001, &rule, &[0; 33], so).is_err(), "33 rows");
    assert!(sample_rows(gpu, sx, 2000, &rule, &[0, 1], so).is_err(), "logits too short");
    let greedy = SampleRule { temperature: 0.0, ..rule };
    assert!(sample_rows(gpu, sx, 1001, &greedy, &[0], so).is_err(), "T = 0 is not sampled");
}
