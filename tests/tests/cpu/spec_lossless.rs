//! The speculative loop is lossless: chain and tree output equal greedy AR output token for token,
//! on a toy target with real KV / recurrent / conv state to roll back (tests/src/toy.rs), with a
//! model-like draft and with an oracle draft whose corruption rate controls the acceptance length.

use flashtree::spec::{generate, DecodingRule, GenerateConfig, Mode, SpecError, Stats, VerifyBatch};
use flashtree_tests::toy::{ar_reference, corrupted, Bug, Corruption, OracleDraft, ToyDraft, ToyModel, ToyTarget};
use std::ops::ControlFlow;

const L: usize = 15;

fn prompt(seed: u64, vocab: u32) -> Vec<u32> {
    (0..9).map(|i| ((seed * 31 + i * 17) % vocab as u64) as u32).collect()
}

fn run(m: ToyModel, mode: Mode, budget: usize, max: usize, bug: Option<Bug>) -> (Vec<u32>, Stats) {
    let mut target = ToyTarget::new(m);
    target.bug = bug;
    let mut draft = ToyDraft::new(m, L);
    let cfg = GenerateConfig { mode, budget, max_tokens: max, eos: vec![], rule: DecodingRule::Greedy };
    let mut streamed = Vec::new();
    let (out, stats) = generate(&mut target, Some(&mut draft), &prompt(m.seed, m.vocab), &cfg, |t| {
        streamed.extend_from_slice(t);
        ControlFlow::Continue(())
    })
    .unwrap();
    assert_eq!(streamed, out, "streamed tokens differ from the result");
    (out, stats)
}

/// ≥ 200 tokens, 3 seeds, budgets 0/1/4/22/64, chain, DDTree and the anchor variant: all equal AR.
#[test]
fn spec_output_equals_ar_output_for_every_mode_seed_and_budget() {
    let n = 220;
    for seed in 0..3u64 {
        let m = ToyModel { seed, vocab: 64 };
        let want = ar_reference(&m, &prompt(seed, 64), n);
        let (ar, ar_stats) = run(m, Mode::Ar, 22, n, None);
        assert_eq!(ar, want, "AR mode differs from the sequential reference, seed {seed}");
        assert_eq!(ar_stats.acceptance_length(), 1.0);
        for budget in [0, 1, 4, 22, 64] {
            for mode in [Mode::Chain, Mode::Tree, Mode::AnchorTree] {
                let (out, stats) = run(m, mode, budget, n, None);
                assert_eq!(out, want, "{mode:?} budget {budget} seed {seed} differs from AR");
                assert_eq!(stats.generated, n);
                if budget >= 4 {
                    assert!(stats.acceptance_length() > 1.2, "{mode:?} B={budget}: AL {}", stats.acceptance_length());
                }
            }
        }
    }
}

/// Each injected rollback bug (KV rows not compacted, wrong recurrent state adopted, conv window
/// gathered in flat order) breaks the output, so the test above can fail.
#[test]
fn rollback_bugs_are_detected_by_the_lossless_comparison() {
    let n = 220;
    for bug in [Bug::KvFlatOrder, Bug::StateOfLastFlatNode, Bug::ConvWindowFlatOrder] {
        let broken = (0..3u64).any(|seed| {
            let m = ToyModel { seed, vocab: 64 };
            let want = ar_reference(&m, &prompt(seed, 64), n);
            run(m, Mode::Tree, 22, n, Some(bug)).0 != want
        });
        assert!(broken, "{bug:?} went unnoticed");
    }
}

/// Generation stops right after the first EOS, identically in every mode; max_tokens is exact.
#[test]
fn eos_and_max_tokens_stop_every_mode_at_the_same_token() {
    let m = ToyModel { seed: 5, vocab: 64 };
    let p = prompt(5, 64);
    let ar = ar_reference(&m, &p, 300);
    let eos = ar[57];
    let first = ar.iter().position(|&t| t == eos).unwrap();
    for mode in [Mode::Ar, Mode::Chain, Mode::Tree] {
        let mut target = ToyTarget::new(m);
        let mut draft = ToyDraft::new(m, L);
        let cfg = GenerateConfig { mode, budget: 22, max_tokens: 300, eos: vec![eos], rule: DecodingRule::Greedy };
        let (out, _) = generate(&mut target, Some(&mut draft), &p, &cfg, |_| ControlFlow::Continue(())).unwrap();
        assert_eq!(out, ar[..=first], "{mode:?}");
        for max in [1, 2, 3, 17] {
            let cfg = GenerateConfig { mode, budget: 22, max_tokens: max, eos: vec![], rule: DecodingRule::Greedy };
            let mut target = ToyTarget::new(m);
            let mut draft = ToyDraft::new(m, L);
            let (out, _) = generate(&mut target, Some(&mut draft), &p, &cfg, |_| ControlFlow::Continue(())).unwrap();
            assert_eq!(out, ar[..max], "{mode:?} max {max}");
        }
    }
}

/// Speculative modes refuse to run without a draft; AR needs none.
#[test]
fn modes_that_draft_require_a_draft_model() {
    let m = ToyModel { seed: 1, vocab: 64 };
    let cfg = GenerateConfig { mode: Mode::Tree, budget: 4, max_tokens: 5, eos: vec![], rule: DecodingRule::Greedy };
    let r = generate::<_, ToyDraft>(&mut ToyTarget::new(m), None, &[1, 2], &cfg, |_| ControlFlow::Continue(()));
    assert!(matches!(r, Err(SpecError::MissingDraft { .. })));
    let cfg = GenerateConfig { mode: Mode::Ar, ..cfg };
    let (out, _) =
        generate::<_, ToyDraft>(&mut ToyTarget::new(m), None, &[1, 2], &cfg, |_| ControlFlow::Continue(())).unwrap();
    assert_eq!(out, ar_reference(&m, &[1, 2], 5));
}

struct OracleRun {
    out: Vec<u32>,
    stats: Stats,
    want: Vec<u32>,
}

fn oracle_run(seed: u64, vocab: u32, mode: Mode, budget: usize, rate: f64, how: Corruption, n: usize) -> OracleRun {
    let m = ToyModel { seed, vocab };
    let p = prompt(seed, vocab);
    let want = ar_reference(&m, &p, n);
    let mut seq = p.clone();
    seq.extend(ar_reference(&m, &p, n + L + 2));
    let mut draft = OracleDraft::new(seq, vocab, L, rate, seed ^ 0xABCD, how);
    let mut target = ToyTarget::new(m);
    let cfg = GenerateConfig { mode, budget, max_tokens: n, eos: vec![], rule: DecodingRule::Greedy };
    let (out, stats) = generate(&mut target, Some(&mut draft), &p, &cfg, |_| ControlFlow::Continue(())).unwrap();
    OracleRun { out, stats, want }
}

/// The accepted-depth histogram a chain must produce: each round accepts the run of uncorrupted
/// positions after its root (capped at L), then the root moves past them and the bonus.
fn predicted_chain_histogram(seed: u64, prompt_len: usize, rate: f64, n: usize) -> Vec<u64> {
    let mut hist = vec![0u64; L + 1];
    let (mut s, mut generated) = (prompt_len, 1);
    while generated < n {
        let a = (1..=L).take_while(|d| !corrupted(seed ^ 0xABCD, s + d, rate)).count();
        hist[a] += 1;
        generated += a + 1;
        s += a + 1;
    }
    hist
}

/// The oracle drives AL from 1 (every position corrupted) to 16 (none), the chain's histogram
/// equals the one the corruption pattern predicts exactly, the mean matches the formula
/// E[τ] = Σ_{d=0..L} (1−ε)^d, and the output always equals AR.
#[test]
fn spec_output_equals_ar_output_with_oracle_draft_and_al_matches_corruption_rate() {
    for (rate, n) in [(1.0, 200), (0.0, 200), (0.1, 1500), (0.3, 1500), (0.6, 600)] {
        let r = oracle_run(11, 256, Mode::Chain, 22, rate, Corruption::Absent, n);
        assert_eq!(r.out, r.want, "chain, rate {rate}");
        let mut hist = r.stats.accepted_depth.clone();
        hist.resize(L + 1, 0);
        assert_eq!(hist, predicted_chain_histogram(11, 9, rate, n), "histogram at rate {rate}");
        let al = r.stats.acceptance_length();
        // Per-round τ = 1 + a with P(a) = (1−ε)^a ε for a < L and (1−ε)^L for a = L; rounds are
        // independent (each inspects fresh positions), so the mean of R rounds has standard error
        // σ/√R. Allow 4 standard errors (a false alarm < 1e-4); ε ∈ {0, 1} is deterministic.
        let pa = |a: usize| (1.0 - rate).powi(a as i32) * if a < L { rate } else { 1.0 };
        let formula: f64 = (0..=L).map(|a| (a + 1) as f64 * pa(a)).sum();
        let var: f64 = (0..=L).map(|a| ((a + 1) as f64 - formula).powi(2) * pa(a)).sum();
        let tol = 4.0 * var.sqrt() / (r.stats.steps as f64).sqrt();
        if rate == 0.0 {
            // The last round may be cut short by max_tokens: at most one round off by ≤ 15.
            assert!((al - formula).abs() <= 15.0 / r.stats.steps as f64, "AL {al}");
        } else {
            assert!((al - formula).abs() <= tol, "rate {rate}: AL {al} vs formula {formula} (tol {tol})");
        }
        if rate == 1.0 {
            assert_eq!(al, 1.0);
        }
        if rate == 0.0 {
            // Every full round accepts all 15 drafts; only the last may be cut by max_tokens.
            assert!(r.stats.accepted_depth[L] as usize >= r.stats.steps - 1);
        }
    }
}

/// With the true token at rank 1 where corrupted, DDTree recovers through sibling branches
/// (deep branches, rollbacks of rejected siblings), beats the chain's AL, stays equal to AR.
#[test]
fn tree_recovers_second_ranked_truths_through_branches_and_stays_lossless() {
    for budget in [4, 22, 64] {
        let chain = oracle_run(3, 256, Mode::Chain, budget, 0.3, Corruption::SecondRank, 600);
        let tree = oracle_run(3, 256, Mode::Tree, budget, 0.3, Corruption::SecondRank, 600);
        let anchor = oracle_run(3, 256, Mode::AnchorTree, budget, 0.3, Corruption::SecondRank, 600);
        for r in [&chain, &tree, &anchor] {
            assert_eq!(r.out, r.want, "budget {budget}");
        }
        assert!(tree.stats.off_spine_rounds > 0, "no branch was ever accepted at B={budget}");
        assert!(
            tree.stats.acceptance_length() > chain.stats.acceptance_length(),
            "B={budget}: tree AL {} ≤ chain AL {}",
            tree.stats.acceptance_length(),
            chain.stats.acceptance_length()
        );
        if budget == 64 {
            // Deep branches: some rounds accept ≥ 8 drafts although 30% of positions are corrupted.
            let deep: u64 = tree.stats.accepted_depth.iter().skip(8).sum();
            assert!(deep > 0, "no deep acceptance");
        }
    }
}

/// A target that verifies at most a few nodes: a DDTree budget that would exceed it is refused
/// before any work, naming both numbers; a budget within it runs and stays lossless.
#[test]
fn a_budget_over_the_targets_node_limit_is_refused() {
    struct Limited(ToyTarget);
    impl flashtree::spec::Target for Limited {
        type Features = <ToyTarget as flashtree::spec::Target>::Features;
        fn max_nodes(&self) -> usize {
            5
        }
        fn committed(&self) -> usize {
            self.0.committed()
        }
        fn reset(&mut self) -> Result<(), SpecError> {
            self.0.reset()
        }
        fn extend(&mut self, t: &[u32], r: DecodingRule) -> Result<(u32, Self::Features), SpecError> {
            self.0.extend(t, r)
        }
        fn verify(&mut self, b: &VerifyBatch, r: DecodingRule) -> Result<Vec<u32>, SpecError> {
            self.0.verify(b, r)
        }
        fn commit(&mut self, b: &VerifyBatch, path: &[usize]) -> Result<Self::Features, SpecError> {
            self.0.commit(b, path)
        }
    }
    let m = ToyModel { seed: 3, vocab: 64 };
    let p = prompt(3, 64);
    let mut draft = ToyDraft::new(m, L);
    let mut target = Limited(ToyTarget::new(m));
    let cfg = GenerateConfig { mode: Mode::Tree, budget: 5, max_tokens: 20, eos: vec![], rule: DecodingRule::Greedy };
    let err = generate(&mut target, Some(&mut draft), &p, &cfg, |_| ControlFlow::Continue(())).unwrap_err().to_string();
    assert!(err.contains("budget 5") && err.contains("at most 5"), "{err}");
    let cfg = GenerateConfig { mode: Mode::Tree, budget: 4, max_tokens: 40, eos: vec![], rule: DecodingRule::Greedy };
    let (out, _) =
        generate(&mut Limited(ToyTarget::new(m)), Some(&mut draft), &p, &cfg, |_| ControlFlow::Continue(())).unwrap();
    assert_eq!(out, ar_reference(&m, &p, 40));
}
