//! Exact sampling on the GPU engine (`GpuTarget` with a `DecodingRule::Sample`: one
//! `sample_rows` draw per node on the device), on the tiny synthetic pair:
//! - each node's token is exactly `flashtree_reference::sample::draw::sample_row` of the node's
//!   own logits (as the engine computed them) at the position after the node;
//! - the same seed gives the same tokens in AR, chain and tree at budgets 1, 4 and 22 (the
//!   engine's logits are batch-invariant bit for bit, and the stream is keyed by position);
//! - T = 0 is the greedy argmax, bit for bit;
//! - the distribution test: over `RUNS` seeds, tokens 2 and 3 generated in tree mode follow
//!   their exact AR distribution `P(b, c) = Σ_a P(a) P(b | a) P(c | a, b)` (each factor the
//!   sampler's kept weights on the engine's logits), by the chi-square test of
//!   `flashtree_tests::stats` (0.999 quantile; cells of expected count < 5 pooled).

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::OnceLock;

use flashtree::engine::{Engine, GpuTarget};
use flashtree::spec::cpu::CpuDraft;
use flashtree::spec::{generate, DecodingRule, GenerateConfig, HostDraft, Mode, Target, VerifyBatch};
use flashtree_reference::sample::draw::{kept, sample_row, SampleRule};
use flashtree_tests::stats::{chi_square, pool_small_cells};

use super::engine::{engine, tiny, tokens};

fn sample_rule(rule: DecodingRule) -> SampleRule {
    let DecodingRule::Sample { temperature, top_k, top_p, min_p, seed } = rule else { panic!("a sampling rule") };
    SampleRule { temperature, top_k, top_p, min_p, seed }
}

fn rules(seed: u64) -> [DecodingRule; 3] {
    [
        DecodingRule::sample(1.0, 0, 1.0, 0.0, seed).unwrap(),
        DecodingRule::sample(0.7, 20, 0.95, 0.0, seed).unwrap(),
        DecodingRule::sample(1.5, 0, 0.8, 0.05, seed).unwrap(),
    ]
}

/// The tiny pair's draft, loaded once.
fn draft_weights() -> &'static flashtree_reference::model::dflash::DFlashWeights {
    static D: OnceLock<flashtree_reference::model::dflash::DFlashWeights> = OnceLock::new();
    D.get_or_init(|| flashtree::convert::dflash::load_draft(&tiny().draft).expect("draft loads").1)
}

/// `n` tokens after `prompt` in `mode` (the CPU draft fed from the engine's features).
fn run(e: &mut Engine, mode: Mode, budget: usize, rule: DecodingRule, prompt: &[u32], n: usize) -> Vec<u32> {
    let t = tiny();
    let cfg = GenerateConfig { mode, budget, max_tokens: n, eos: vec![], rule };
    if mode == Mode::Ar {
        let mut target = GpuTarget::new(e);
        let none: Option<&mut HostDraft<CpuDraft, flashtree::engine::EngineFeatures>> = None;
        return generate(&mut target, none, prompt, &cfg, |_| ControlFlow::Continue(())).unwrap().0;
    }
    let dw = draft_weights();
    let mut target = GpuTarget::with_capture(e, &dw.hparams.target_layer_ids).unwrap();
    let mut draft = HostDraft::new(CpuDraft::new(dw, &t.cpu), target.feature_source().unwrap());
    generate(&mut target, Some(&mut draft), prompt, &cfg, |_| ControlFlow::Continue(())).unwrap().0
}

#[test]
fn each_node_draws_the_reference_token_of_its_own_logits_at_the_next_position() {
    let Some(mut e) = engine("each_node_draws_the_reference_token_of_its_own_logits_at_the_next_position", 256) else {
        return;
    };
    let v = e.cfg.vocab_size;
    let prompt = tokens(3, 9, v);
    for rule in rules(17) {
        e.reset().unwrap();
        let mut target = GpuTarget::new(&mut e);
        let (first, _) = target.prefill(&prompt, rule).unwrap();
        // The prefill's pick: the last prompt row at position 9.
        let committed = target.committed();
        let t = tokens(8, 6, v);
        let batch = VerifyBatch::new(
            committed,
            &[first, t[0], t[1], t[2], t[3], t[4]],
            &[None, Some(0), Some(0), Some(1), Some(3), Some(2)],
        )
        .unwrap();
        let got = target.verify(&batch, rule).unwrap();
        let logits = e.logits(batch.len()).unwrap();
        let r = sample_rule(rule);
        for (i, (row, &p)) in logits.chunks_exact(v).zip(batch.positions()).enumerate() {
            assert_eq!(got[i], sample_row(row, &r, p as u64 + 1).unwrap(), "{rule:?} node {i}");
        }
    }
}

#[test]
fn the_same_seed_gives_the_same_tokens_in_ar_chain_and_tree_at_every_budget() {
    let Some(mut e) = engine("the_same_seed_gives_the_same_tokens_in_ar_chain_and_tree_at_every_budget", 512) else {
        return;
    };
    let prompt = tokens(41, 11, e.cfg.vocab_size);
    let n = 120;
    for rule in rules(5) {
        let ar = run(&mut e, Mode::Ar, 0, rule, &prompt, n);
        assert_eq!(ar.len(), n);
        for (mode, budget) in [(Mode::Chain, 4), (Mode::Chain, 22), (Mode::Tree, 1), (Mode::Tree, 4), (Mode::Tree, 22)]
        {
            let out = run(&mut e, mode, budget, rule, &prompt, n);
            assert_eq!(out, ar, "{rule:?} {mode:?} budget {budget}: sampled output differs from AR sampling");
        }
        let other = run(&mut e, Mode::Ar, 0, rules(6)[0], &prompt, n);
        assert_ne!(other, run(&mut e, Mode::Ar, 0, rules(5)[0], &prompt, n), "another seed, another text");
    }
}

#[test]
fn zero_temperature_is_the_greedy_argmax() {
    let Some(mut e) = engine("zero_temperature_is_the_greedy_argmax", 512) else { return };
    let prompt = tokens(7, 13, e.cfg.vocab_size);
    let greedy = run(&mut e, Mode::Tree, 22, DecodingRule::Greedy, &prompt, 80);
    let t0 = DecodingRule::sample(0.0, 3, 0.5, 0.5, 9).unwrap();
    assert_eq!(run(&mut e, Mode::Tree, 22, t0, &prompt, 80), greedy);
    assert_eq!(run(&mut e, Mode::Ar, 0, t0, &prompt, 80), greedy);
}

/// The sampler's distribution after `context` on the engine: token → probability.
fn next_distribution(e: &mut Engine, context: &[u32], rule: &SampleRule) -> HashMap<u32, f64> {
    e.reset().unwrap();
    e.prefill(context).unwrap();
    let v = e.cfg.vocab_size;
    let n = (context.len() - 1) % 32 + 1;
    let logits = e.logits(n).unwrap();
    let k = kept(&logits[(n - 1) * v..n * v], rule).unwrap();
    let total: u64 = k.iter().map(|t| t.1).sum();
    k.into_iter().filter(|t| t.1 > 0).map(|(t, w)| (t, w as f64 / total as f64)).collect()
}

#[test]
fn tree_sampling_follows_the_exact_ar_distribution_on_the_gpu() {
    let Some(mut e) = engine("tree_sampling_follows_the_exact_ar_distribution_on_the_gpu", 256) else { return };
    const RUNS: u64 = 2000;
    let prompt = tokens(12, 10, e.cfg.vocab_size);
    // Few enough tokens (top-4) for every cell to hold samples; T = 1.5 flattens the tiny
    // model's rows.
    let rule = DecodingRule::sample(1.5, 4, 1.0, 0.0, 0).unwrap();
    let r = sample_rule(rule);
    // Exact joint of tokens 2 and 3.
    let mut exact: HashMap<(u32, u32), f64> = HashMap::new();
    let p1 = next_distribution(&mut e, &prompt, &r);
    for (&a, &pa) in &p1 {
        let ctx_a: Vec<u32> = prompt.iter().copied().chain([a]).collect();
        for (&b, &pb) in &next_distribution(&mut e, &ctx_a, &r) {
            let ctx_ab: Vec<u32> = ctx_a.iter().copied().chain([b]).collect();
            for (&c, &pc) in &next_distribution(&mut e, &ctx_ab, &r) {
                *exact.entry((b, c)).or_default() += pa * pb * pc;
            }
        }
    }
    let mut counts: HashMap<(u32, u32), usize> = HashMap::new();
    for seed in 0..RUNS {
        let rule = DecodingRule::sample(1.5, 4, 1.0, 0.0, seed).unwrap();
        let out = run(&mut e, Mode::Tree, 22, rule, &prompt, 3);
        *counts.entry((out[1], out[2])).or_default() += 1;
    }
    let mut cells: Vec<(u32, u32)> = exact.keys().chain(counts.keys()).copied().collect();
    cells.sort_unstable();
    cells.dedup();
    let c: Vec<usize> = cells.iter().map(|k| counts.get(k).copied().unwrap_or(0)).collect();
    let p: Vec<f64> = cells.iter().map(|k| exact.get(k).copied().unwrap_or(0.0)).collect();
    let (c, p) = pool_small_cells(&c, &p, RUNS as usize);
    let (stat, limit) = chi_square(&c, &p, RUNS as usize).unwrap();
    eprintln!("GPU tree B=22: {} cells, chi-square {stat:.2} (limit {limit:.2})", c.len());
    assert!(c.len() >= 4, "too few cells to test: {c:?}");
    assert!(stat < limit, "chi-square {stat:.2} ≥ {limit:.2}");
}
