//! Exact sampling through speculative trees, on a Markov target/draft whose next-token
//! distributions are exactly computable (`flashtree_tests::markov`).
//!
//! **The distribution test.** `N` runs (seeds `0..N`) of the real loop (`spec::generate`: DDTree
//! builder, walk, commit) generate 3 tokens after a 2-token prompt; the pair of generated tokens 2
//! and 3 (absolute positions 3 and 4: both decided inside one verify round when the draft is
//! accepted) is compared with its exact distribution under AR sampling, `J[a][b] = π₂[a] · M[a][b]`
//! (`M` the filtered transition matrix, `π₂ = e_last · M²`), by Pearson's chi-square over the
//! cells of nonzero probability (a sample in a zero cell fails outright). Threshold: the 0.999
//! quantile of χ²(df) (`flashtree_tests::stats`). Every expected count is ≥ 5 (asserted), so the
//! chi-square approximation holds; a correct sampler fails with probability 10⁻³ per
//! configuration for a random seed set — the seeds here are fixed, so the test is deterministic.
//!
//! **The planted bias.** [`Leviathan`] verifies the same chain trees with the textbook rule:
//! accept the drafted token `x` with probability `min(1, p(x)/q(x))` (`q` = the draft's marginal
//! at that depth), else sample the residual `max(0, p − q)`. The chain is built deterministically
//! (the draft's top-1), not sampled from `q`, so this rule is biased; the same statistic must
//! exceed the same threshold by far.

use std::ops::ControlFlow;

use flashtree::spec::sample::{filtered, uniform};
use flashtree::spec::{generate, DecodingRule, Draft, GenerateConfig, Mode, SpecError, Stats, Target, VerifyBatch};
use flashtree_tests::markov::{softmax_rows, step, MarkovDraft, MarkovTarget};
use flashtree_tests::stats::chi_square;

const V: usize = 4;
#[rustfmt::skip]
const TARGET: [f32; V * V] = [
    1.0, 0.2, -0.5, 0.6,
    0.1, 1.2, 0.4, -0.3,
    -0.2, 0.5, 0.9, 0.3,
    0.7, -0.4, 0.2, 1.1,
];
/// A good but imperfect draft: the target's table, perturbed.
#[rustfmt::skip]
const DRAFT: [f32; V * V] = [
    1.2, 0.1, -0.5, 0.5,
    0.0, 1.5, 0.3, -0.2,
    -0.3, 0.6, 1.0, 0.1,
    0.9, -0.5, 0.1, 1.0,
];
const PROMPT: [u32; 2] = [1, 0];
const RUNS: u64 = 4000;

/// The filtered next-token probabilities of one row, written from the rule's definition
/// independently of `spec::sample` (softmax, sort by probability then id, top-k, top-p prefix,
/// min-p, renormalise).
fn exact_row(row: &[f32], t: f32, top_k: usize, top_p: f32, min_p: f32) -> Vec<f64> {
    let p = softmax_rows(&row.iter().map(|&x| x / t).collect::<Vec<_>>(), row.len());
    let mut order: Vec<usize> = (0..row.len()).collect();
    order.sort_by(|&a, &b| p[b].total_cmp(&p[a]).then(a.cmp(&b)));
    if top_k > 0 {
        order.truncate(top_k);
    }
    let mass: f64 = order.iter().map(|&i| p[i]).sum();
    let mut acc = 0.0;
    let mut keep = 0;
    for &i in &order {
        keep += 1;
        acc += p[i] / mass;
        if acc >= top_p as f64 {
            break;
        }
    }
    order.truncate(keep);
    let pmax = p[order[0]];
    order.retain(|&i| p[i] >= min_p as f64 * pmax);
    let mass: f64 = order.iter().map(|&i| p[i]).sum();
    let mut out = vec![0.0; row.len()];
    for i in order {
        out[i] = p[i] / mass;
    }
    out
}

/// The exact joint distribution of generated tokens 2 and 3 after `PROMPT` (row-major `[V, V]`).
fn exact_joint(rule: DecodingRule) -> Vec<f64> {
    let DecodingRule::Sample { temperature, top_k, top_p, min_p, .. } = rule else { panic!("a sampling rule") };
    let m: Vec<f64> = TARGET.chunks_exact(V).flat_map(|r| exact_row(r, temperature, top_k, top_p, min_p)).collect();
    let mut pi = vec![0.0; V];
    pi[*PROMPT.last().unwrap() as usize] = 1.0;
    let pi2 = step(&step(&pi, &m), &m);
    (0..V * V).map(|c| pi2[c / V] * m[c]).collect()
}

fn with_seed(rule: DecodingRule, seed: u64) -> DecodingRule {
    match rule {
        DecodingRule::Sample { temperature, top_k, top_p, min_p, .. } => {
            DecodingRule::sample(temperature, top_k, top_p, min_p, seed).unwrap()
        }
        r => r,
    }
}

fn run_stats<T: Target<Features = Vec<u32>>>(
    target: &mut T,
    mode: Mode,
    budget: usize,
    rule: DecodingRule,
    n: usize,
) -> (Vec<u32>, Stats) {
    let mut draft = MarkovDraft::new(V, &DRAFT, 4);
    let cfg = GenerateConfig { mode, budget, max_tokens: n, eos: vec![], rule };
    let draft = (mode != Mode::Ar).then_some(&mut draft);
    generate(target, draft, &PROMPT, &cfg, |_| ControlFlow::Continue(())).unwrap()
}

fn run<T: Target<Features = Vec<u32>>>(
    target: &mut T,
    mode: Mode,
    budget: usize,
    rule: DecodingRule,
    n: usize,
) -> Vec<u32> {
    run_stats(target, mode, budget, rule, n).0
}

/// Counts of the (token 2, token 3) pairs over the seeded runs of `sample_run`.
fn joint_counts(mut sample_run: impl FnMut(u64) -> Vec<u32>) -> Vec<usize> {
    let mut counts = vec![0usize; V * V];
    for seed in 0..RUNS {
        let out = sample_run(seed);
        assert_eq!(out.len(), 3);
        counts[out[1] as usize * V + out[2] as usize] += 1;
    }
    counts
}

fn rules() -> [DecodingRule; 2] {
    [DecodingRule::sample(1.0, 0, 1.0, 0.0, 0).unwrap(), DecodingRule::sample(0.8, 3, 0.9, 0.1, 0).unwrap()]
}

#[test]
fn tree_and_chain_samples_follow_the_exact_ar_distribution() {
    for rule in rules() {
        let exact = exact_joint(rule);
        for (mode, budget) in [(Mode::Ar, 0), (Mode::Chain, 4), (Mode::Tree, 6), (Mode::Tree, 12)] {
            let mut ar = MarkovTarget::new(V, TARGET.to_vec());
            let mut target = MarkovTarget::new(V, TARGET.to_vec());
            let mut rounds = 0;
            let counts = joint_counts(|seed| {
                let r = with_seed(rule, seed);
                let (out, stats) = run_stats(&mut target, mode, budget, r, 3);
                rounds += stats.steps;
                // The same seed gives the same tokens as AR.
                assert_eq!(out, run(&mut ar, Mode::Ar, 0, r, 3), "{mode:?} B={budget} seed {seed}");
                out
            });
            // Tokens 2 and 3 take one round when the draft's token 2 is accepted: the trees matter.
            let per_run = rounds as f64 / RUNS as f64;
            assert!(mode == Mode::Ar || per_run < 1.8, "{mode:?}: {per_run} rounds per run");
            let (stat, limit) = chi_square(&counts, &exact, RUNS as usize).unwrap();
            eprintln!(
                "{rule:?} {mode:?} B={budget}: {per_run:.3} rounds per run, chi-square {stat:.2} (limit {limit:.2})"
            );
            assert!(stat < limit, "{rule:?} {mode:?} B={budget}: chi-square {stat:.2} ≥ {limit:.2}");
        }
    }
}

#[test]
fn the_textbook_acceptance_rule_on_a_deterministic_chain_fails_the_same_test() {
    for rule in rules() {
        let exact = exact_joint(rule);
        let mut target = Leviathan { inner: MarkovTarget::new(V, TARGET.to_vec()), q: MarkovDraft::new(V, &DRAFT, 4) };
        let counts = joint_counts(|seed| run(&mut target, Mode::Chain, 4, with_seed(rule, seed), 3));
        match chi_square(&counts, &exact, RUNS as usize) {
            Err(why) => eprintln!("{rule:?}: biased rule caught: {why}"),
            Ok((stat, limit)) => {
                eprintln!("{rule:?}: biased rule chi-square {stat:.2} (limit {limit:.2})");
                assert!(stat > 4.0 * limit, "the planted bias was not caught: {stat:.2} vs {limit:.2}");
            }
        }
    }
}

/// The planted bias: the Markov target verified by `min(1, p/q)` acceptance along a chain, with
/// residual resampling on rejection (and a plain sample of `p` after the last node).
struct Leviathan {
    inner: MarkovTarget,
    q: MarkovDraft,
}

impl Leviathan {
    /// The filtered target distribution after token `a` (dense, normalised).
    fn p(&self, a: u32, rule: DecodingRule) -> Result<Vec<f64>, SpecError> {
        let DecodingRule::Sample { temperature, top_k, top_p, min_p, .. } = rule else {
            return Err(SpecError::unsupported(rule, "the Leviathan test target"));
        };
        let kept = filtered(self.inner.row(a)?, temperature, top_k, top_p, min_p)?;
        let total: f64 = kept.iter().map(|c| c.1).sum();
        let mut p = vec![0.0; V];
        for (t, w) in kept {
            p[t as usize] = w / total;
        }
        Ok(p)
    }
}

/// A sample of the dense distribution `p` with uniform `u`: the first token whose cumulative
/// probability exceeds `u · Σ p` (the last one with mass when rounding leaves none).
fn sample_dense(p: &[f64], u: f64) -> u32 {
    let target = u * p.iter().sum::<f64>();
    let mut acc = 0.0;
    for (i, &w) in p.iter().enumerate() {
        acc += w;
        if acc > target {
            return i as u32;
        }
    }
    p.iter().rposition(|&w| w > 0.0).unwrap_or(0) as u32
}

impl Target for Leviathan {
    type Features = Vec<u32>;
    fn committed(&self) -> usize {
        self.inner.committed()
    }
    fn reset(&mut self) -> Result<(), SpecError> {
        self.inner.reset()
    }
    fn extend(&mut self, tokens: &[u32], rule: DecodingRule) -> Result<(u32, Vec<u32>), SpecError> {
        self.inner.extend(tokens, rule)
    }
    fn verify(&mut self, batch: &VerifyBatch, rule: DecodingRule) -> Result<Vec<u32>, SpecError> {
        let DecodingRule::Sample { seed, .. } = rule else {
            return Err(SpecError::unsupported(rule, "the Leviathan test target"));
        };
        let n = batch.len();
        if (1..n).any(|i| batch.parents()[i] != Some(i - 1)) {
            return Err(SpecError::Config("the Leviathan test target verifies chains only".into()));
        }
        let tokens = batch.tokens();
        let q = self.q.marginals(tokens[0]);
        let mut posterior = vec![0; n];
        for i in 0..n {
            let pos = batch.positions()[i] as u64 + 1;
            let p = self.p(tokens[i], rule)?;
            if i + 1 == n {
                posterior[i] = sample_dense(&p, uniform(seed, pos));
                break;
            }
            let x = tokens[i + 1] as usize;
            let qd = &q[i];
            if uniform(seed ^ 0x5EED, pos) < (p[x] / qd[x]).min(1.0) {
                posterior[i] = x as u32;
                continue;
            }
            let residual: Vec<f64> = p.iter().zip(qd).map(|(a, b)| (a - b).max(0.0)).collect();
            posterior[i] = sample_dense(&residual, uniform(seed, pos));
            break;
        }
        Ok(posterior)
    }
    fn commit(&mut self, batch: &VerifyBatch, path: &[usize]) -> Result<Vec<u32>, SpecError> {
        self.inner.commit(batch, path)
    }
}

#[test]
fn the_markov_draft_proposes_its_marginals() {
    let mut d = MarkovDraft::new(V, &DRAFT, 3);
    let top = d.propose(&vec![], 2, V).unwrap();
    let q = d.marginals(2);
    for (depth, row) in q.iter().enumerate() {
        assert!((row.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        let best = (0..V).max_by(|&a, &b| row[a].total_cmp(&row[b])).unwrap();
        assert_eq!(top.token(depth + 1, 0) as usize, best);
    }
}
