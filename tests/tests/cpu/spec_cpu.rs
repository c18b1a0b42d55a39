//! Lossless speculative decoding on real (tiny, random) qwen35 models with the CPU reference
//! backend: chain and DDTree output equal plain AR decoding (chain forward, token by token) for
//! ≥ 200 tokens over several seeds and budgets 0/1/4/22/64, with the real DFlash draft; an oracle
//! draft drives deep acceptance (deep KV compaction, DeltaNet state and conv window adoption).
//!
//! Models: `tests/fixtures/hf/a` (4 layers: 2 Gated DeltaNet + 2 attention, hidden 64, vocab 320)
//! with `draft-full` (2 layers, block 8, target layers 0 and 2), perturbed per seed.

use flashtree::convert::dflash::load_draft;
use flashtree::convert::qwen35::load_hf;
use flashtree::spec::cpu::{check_pair, CpuDraft, CpuTarget};
use flashtree::spec::{generate, DecodingRule, GenerateConfig, Mode, Session, Stats};
use flashtree_reference::model::dflash::DFlashWeights;
use flashtree_reference::model::{DeltaNetMode, ForwardOptions, Qwen35State, Qwen35Weights};
use flashtree_reference::sample::argmax;
use flashtree_tests::toy::{mix, Corruption, OracleDraft};
use std::ops::ControlFlow;
use std::path::PathBuf;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/hf").join(name)
}

/// Fixture model `a` and its draft; seed > 0 adds N(0, 0.5·σ)-ish noise to the embedding and
/// LM head so that each seed is a different model (and a different continuation).
fn models(seed: u64) -> (Qwen35Weights, DFlashWeights) {
    let (_, mut w) = load_hf(&fixture("a")).unwrap();
    let (_, d) = load_draft(&fixture("draft-full")).unwrap();
    if seed > 0 {
        let scale = w.token_embd.data.iter().map(|x| x.abs()).sum::<f32>() / w.token_embd.data.len() as f32;
        for (i, x) in w.token_embd.data.iter_mut().enumerate() {
            let u = (mix(seed ^ mix(i as u64)) >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
            *x += u * scale;
        }
    }
    check_pair(&w, &d).unwrap();
    (w, d)
}

/// Greedy AR by the plain chain forward: prompt (chunked DeltaNet, as the CPU target's prefill),
/// then one token at a time (recurrent) — no trees, no commit logic.
fn ar_reference(w: &Qwen35Weights, prompt: &[u32], n: usize) -> Vec<u32> {
    let mut st = Qwen35State::new(&w.hparams);
    let out = w.forward(&mut st, prompt, &ForwardOptions::default()).unwrap();
    let mut t = argmax(out.logits.last().unwrap()).0;
    let mut toks = vec![t];
    let step = ForwardOptions { capture_layers: vec![], deltanet: DeltaNetMode::Recurrent };
    while toks.len() < n {
        let out = w.forward(&mut st, &[t], &step).unwrap();
        t = argmax(&out.logits[0]).0;
        toks.push(t);
    }
    toks
}

const PROMPT: [u32; 7] = [3, 141, 59, 26, 53, 58, 97];

fn spec(w: &Qwen35Weights, d: &DFlashWeights, mode: Mode, budget: usize, n: usize) -> (Vec<u32>, Stats) {
    let mut target = CpuTarget::new(w, d.hparams.target_layer_ids.clone());
    let mut draft = CpuDraft::new(d, w);
    let cfg = GenerateConfig { mode, budget, max_tokens: n, eos: vec![], rule: DecodingRule::Greedy };
    generate(&mut target, Some(&mut draft), &PROMPT, &cfg, |_| ControlFlow::Continue(())).unwrap()
}

fn lossless_for_seed(seed: u64) {
    let n = 200;
    let (w, d) = models(seed);
    let want = ar_reference(&w, &PROMPT, n);
    let distinct = want.iter().collect::<std::collections::BTreeSet<_>>().len();
    assert!(distinct > 10, "degenerate continuation ({distinct} distinct tokens)");
    for (mode, budgets) in [(Mode::Ar, &[0][..]), (Mode::Chain, &[1, 4, 22]), (Mode::Tree, &[1, 4, 22, 64])] {
        for &b in budgets {
            let (out, stats) = spec(&w, &d, mode, b, n);
            assert_eq!(out, want, "seed {seed} {mode:?} budget {b}");
            eprintln!(
                "seed {seed} {mode:?} B={b}: AL {:.3}, off-spine rounds {}",
                stats.acceptance_length(),
                stats.off_spine_rounds
            );
        }
    }
}

#[test]
fn cpu_spec_equals_ar_on_tiny_qwen35_seed_0() {
    lossless_for_seed(0);
}

#[test]
fn cpu_spec_equals_ar_on_tiny_qwen35_seed_1() {
    lossless_for_seed(1);
}

#[test]
fn cpu_spec_equals_ar_on_tiny_qwen35_seed_2() {
    lossless_for_seed(2);
}

/// AR sampling by the plain chain forward (as [`ar_reference`]), each token picked by `rule` with
/// the stream of the position it occupies.
fn ar_sampled(w: &Qwen35Weights, prompt: &[u32], n: usize, rule: DecodingRule) -> Vec<u32> {
    let mut st = Qwen35State::new(&w.hparams);
    let out = w.forward(&mut st, prompt, &ForwardOptions::default()).unwrap();
    let mut t = rule.pick(out.logits.last().unwrap(), prompt.len()).unwrap();
    let mut toks = vec![t];
    let step = ForwardOptions { capture_layers: vec![], deltanet: DeltaNetMode::Recurrent };
    while toks.len() < n {
        let out = w.forward(&mut st, &[t], &step).unwrap();
        t = rule.pick(&out.logits[0], prompt.len() + toks.len()).unwrap();
        toks.push(t);
    }
    toks
}

/// Sampling on the tiny model with the real draft: T = 0 (whatever the other fields) is greedy
/// bit for bit in every mode; at T > 0 a seed gives the same tokens in AR, chain and DDTree at
/// budgets 1, 4 and 22, equal to plain sequential AR sampling; different seeds differ.
#[test]
fn cpu_sampling_is_greedy_at_zero_temperature_and_fixed_by_the_seed_in_every_mode() {
    let n = 40;
    let (w, d) = models(1);
    let run = |mode, budget, rule| {
        let mut target = CpuTarget::new(&w, d.hparams.target_layer_ids.clone());
        let mut draft = CpuDraft::new(&d, &w);
        let cfg = GenerateConfig { mode, budget, max_tokens: n, eos: vec![], rule };
        generate(&mut target, Some(&mut draft), &PROMPT, &cfg, |_| ControlFlow::Continue(())).unwrap()
    };
    let greedy = ar_reference(&w, &PROMPT, n);
    let t0 = DecodingRule::sample(0.0, 3, 0.5, 0.5, 99).unwrap();
    let seeds = [1u64, 2];
    let rules = seeds.map(|s| DecodingRule::sample(0.6, 40, 0.95, 0.02, s).unwrap());
    let want = rules.map(|r| ar_sampled(&w, &PROMPT, n, r));
    assert_ne!(want[0], want[1], "two seeds gave the same text");
    assert!(want.iter().all(|s| *s != greedy), "sampling gave the greedy text");
    let mut accepted = 0.0f64;
    for (mode, budgets) in [(Mode::Ar, &[0][..]), (Mode::Chain, &[1, 4, 22]), (Mode::Tree, &[1, 4, 22])] {
        for &b in budgets {
            assert_eq!(run(mode, b, DecodingRule::Greedy).0, greedy, "greedy {mode:?} B={b}");
            assert_eq!(run(mode, b, t0).0, greedy, "T = 0 {mode:?} B={b}");
            for (rule, want) in rules.iter().zip(&want) {
                let (out, stats) = run(mode, b, *rule);
                assert_eq!(&out, want, "{rule:?} {mode:?} B={b}");
                accepted = accepted.max(stats.acceptance_length());
            }
        }
    }
    eprintln!("best sampled acceptance length {accepted:.3}");
}

/// Oracle draft on the real target: acceptance up to the full block (AL → 8 at ε = 0) through
/// sibling branches (ε = 0.3, true token at rank 1), with output equal to AR.
#[test]
fn cpu_spec_with_oracle_draft_accepts_deep_branches_and_stays_lossless() {
    let n = 200;
    let (w, d) = models(0);
    let l = d.hparams.block_size - 1;
    let want = ar_reference(&w, &PROMPT, n + l + 2);
    let mut seq = PROMPT.to_vec();
    seq.extend(&want);
    let vocab = w.hparams.n_vocab as u32;
    for (mode, rate, how, min_al) in
        [(Mode::Chain, 0.0, Corruption::Absent, 7.5), (Mode::Tree, 0.3, Corruption::SecondRank, 2.5)]
    {
        let mut target = CpuTarget::new(&w, d.hparams.target_layer_ids.clone());
        let mut draft = OracleDraft::new(seq.clone(), vocab, l, rate, 77, how);
        let cfg = GenerateConfig { mode, budget: 22, max_tokens: n, eos: vec![], rule: DecodingRule::Greedy };
        let (out, stats) =
            generate(&mut target, Some(&mut draft), &PROMPT, &cfg, |_| ControlFlow::Continue(())).unwrap();
        assert_eq!(out, want[..n], "{mode:?} rate {rate}");
        assert!(stats.acceptance_length() >= min_al, "{mode:?}: AL {}", stats.acceptance_length());
        if mode == Mode::Tree {
            assert!(stats.off_spine_rounds > 0, "no branch accepted");
            assert!(stats.accepted_depth.iter().skip(4).sum::<u64>() > 0, "no deep acceptance");
        }
    }
}

/// Mismatched pairs are clear errors.
#[test]
fn mismatched_model_and_draft_are_rejected() {
    let (w, d) = models(0);
    let mut bad = d.clone();
    bad.hparams.target_layer_ids = vec![0, 9];
    assert!(check_pair(&w, &bad).unwrap_err().to_string().contains("target layer 9"));
    let mut bad = d.clone();
    bad.hparams.mask_token_id = 5000;
    assert!(check_pair(&w, &bad).unwrap_err().to_string().contains("mask token"));
    let mut bad = d;
    bad.hparams.n_embd = 32;
    assert!(check_pair(&w, &bad).unwrap_err().to_string().contains("hidden size"));
}

/// A second turn through `Session` (the caches extended by the new tokens only) generates
/// bitwise the tokens of one fresh prefill of the whole conversation, in AR and tree modes, for
/// a first turn that ends at a bonus token and one that ends inside an accepted path.
#[test]
fn cpu_second_turn_via_extend_equals_a_fresh_prefill_of_the_conversation() {
    let (w, d) = models(1);
    let more = [17u32, 230, 4, 99, 61];
    let cfg = |mode, n| GenerateConfig { mode, budget: 22, max_tokens: n, eos: vec![], rule: DecodingRule::Greedy };
    let session = || Session::new(CpuTarget::new(&w, d.hparams.target_layer_ids.clone()), Some(CpuDraft::new(&d, &w)));
    for mode in [Mode::Ar, Mode::Tree] {
        for n1 in [12, 31] {
            let mut s = session();
            let (g1, _) = s.generate(&PROMPT, &cfg(mode, n1), |_| ControlFlow::Continue(())).unwrap();
            let conv: Vec<u32> = PROMPT.iter().chain(&g1).chain(&more).copied().collect();
            let (g2, st2) = s.generate(&conv, &cfg(mode, 40), |_| ControlFlow::Continue(())).unwrap();
            assert!(st2.reused_tokens + 1 >= PROMPT.len() + g1.len(), "{mode:?} n1 {n1}: not reused");
            let (fresh, _) = session().generate(&conv, &cfg(mode, 40), |_| ControlFlow::Continue(())).unwrap();
            assert_eq!(g2, fresh, "{mode:?} n1 {n1}: the continued turn differs from a fresh prefill");
        }
    }
}

/// `spec::OracleDraft` (the bench's controlled-acceptance draft): around the real draft, with a
/// recorded greedy continuation, every round accepts `cap` drafted tokens plus the bonus (the
/// random draft's own ranks beyond `cap` rarely add more), and the output is still AR's.
#[test]
fn capped_oracle_draft_sets_the_acceptance_length_and_stays_lossless() {
    use flashtree::spec::OracleDraft as CappedOracle;
    let (w, d) = models(3);
    let n = 120;
    let ar = ar_reference(&w, &PROMPT, n);
    let seq: Vec<u32> = PROMPT.iter().copied().chain(ar.iter().copied()).collect();
    for cap in [0usize, 1, 3, 7] {
        let mut target = CpuTarget::new(&w, d.hparams.target_layer_ids.clone());
        let mut draft = CappedOracle::new(CpuDraft::new(&d, &w), seq.clone(), cap);
        let cfg =
            GenerateConfig { mode: Mode::Tree, budget: 22, max_tokens: n, eos: vec![], rule: DecodingRule::Greedy };
        let (out, stats) =
            generate(&mut target, Some(&mut draft), &PROMPT, &cfg, |_| ControlFlow::Continue(())).unwrap();
        assert_eq!(out, ar, "cap {cap}: output differs from AR");
        let al = stats.acceptance_length();
        let want = (cap + 1).min(d.hparams.block_size) as f64;
        eprintln!("cap {cap}: acceptance length {al:.3}");
        assert!(al >= want - 0.35 && al <= want + 0.5, "cap {cap}: acceptance length {al:.3}, expected ≈ {want}");
    }
}

/// The CPU draft computes each context row's K/V once (incremental): fed its rows over several
/// rounds it proposes bitwise what the whole-context reference forward gives.
#[test]
fn incremental_cpu_draft_equals_the_whole_context_forward() {
    use flashtree::spec::Draft;
    let (w, d) = models(5);
    let hp = &d.hparams;
    let width = hp.target_layer_ids.len() * hp.n_embd;
    let rows: Vec<Vec<f32>> = (0..40)
        .map(|r| (0..width).map(|i| ((mix((r * width + i) as u64) >> 40) as f32 / 16_777_216.0 - 0.5) * 2.0).collect())
        .collect();
    let mut draft = CpuDraft::new(&d, &w);
    let mut fed = 0;
    for (step, take) in [13usize, 1, 9, 17].into_iter().enumerate() {
        let bonus = 5 + step as u32;
        let got = draft.propose(&rows[fed..fed + take].to_vec(), bonus, 4).unwrap();
        fed += take;
        let mut block = vec![hp.mask_token_id; hp.block_size];
        block[0] = bonus;
        let out = d.forward(&w.token_embd, w.lm_head(), &rows[..fed], 0, &block, fed).unwrap();
        let want = flashtree::spec::topk_logprobs(&out.logits.concat(), w.hparams.n_vocab, 4).unwrap();
        for depth in 1..=got.depths() {
            for r in 0..4 {
                assert_eq!(got.token(depth, r), want.token(depth, r), "round {step} depth {depth} rank {r}");
                assert_eq!(got.logprob(depth, r).to_bits(), want.logprob(depth, r).to_bits());
            }
        }
    }
}
