//! The GPU engine against the CPU reference on the tiny synthetic model: logits of chains and
//! trees, batch invariance (a node's logits are the same bits alone or in any tree), and greedy
//! AR tokens.
//!
//! Tolerance of the logits (relative to the row's largest |logit|): the engine stores three things
//! at reduced precision by design — every matmul input as f16 (`qmm_prep_x`, 2⁻¹¹ relative), the
//! KV cache as f16, and the DeltaNet state as f32 after every token. The reference run with
//! [`engine_arithmetic`] inside `with_device_rounding` applies exactly these three roundings (in
//! f64 otherwise), so the GPU must match it within 2e-3 (what remains is f32 accumulation order
//! and approximate exp/log); a wrong kernel shows up as errors of order 1. The device-rounding
//! reference also takes the weights as the matmul multiplies them (`load_qwen35_as_matmul`: the
//! K-quant and Q6_K A operands rounded to f16). Against the exact reference the same logits also
//! carry the roundings' own effect (see docs/perf/engine.md), checked against a looser sanity
//! bound (2e-2 since the Q4_K/Q5_K weights are rounded to f16: 1.2e-2 measured on prompt 7,
//! where the device-rounding error is 7e-4) that still catches any real bug.

use flashtree::cli::pair_args::PairArgs;
use flashtree::engine::{chain_batch, node_batch, DeviceFeatures, Engine};
use flashtree::gguf::Gguf;
use flashtree::model::Qwen35Config;
use flashtree::spec::cpu::CpuDraft;
use flashtree::spec::{DecodingRule, HostDraft};

/// The CPU draft fed from the engine's device feature store.
type CpuDraftOnGpu<'w> = HostDraft<CpuDraft<'w>, flashtree::engine::EngineFeatures>;
use flashtree_reference::model::tensor::with_device_rounding;
use flashtree_reference::model::{DeltaNetMode, ForwardOptions, Qwen35State, Qwen35Weights};

/// The reference run as the engine computes: inside [`with_device_rounding`], and with the
/// DeltaNet state stored as f32 after every token (the recurrence, as the engine and AR keep
/// it) rather than the chunked f64 form — that rounding alone moves HF fixture `c`'s logits by
/// 2.3e-3 of the row's largest |logit| (the model amplifies it: the gated RMSNorm rescales a
/// small `o = Sᵀq`), which is why it belongs to the reference of the engine's arithmetic.
pub(crate) fn engine_arithmetic() -> ForwardOptions {
    ForwardOptions { deltanet: DeltaNetMode::Recurrent, ..Default::default() }
}
use flashtree_tests::gpu::gpu_or_skip;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::OnceLock;

pub(crate) struct Tiny {
    pub(crate) path: PathBuf,
    pub(crate) draft: PathBuf,
    pub(crate) cpu: Qwen35Weights,
    /// The same weights as the GPU matmul multiplies them (`load_qwen35_as_matmul`): the
    /// device-rounding reference's.
    pub(crate) cpu_device: Qwen35Weights,
}

pub(crate) fn tiny() -> &'static Tiny {
    static T: OnceLock<Tiny> = OnceLock::new();
    T.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("flashtree-engine-tiny-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let out = flashtree::synth::tiny(&dir, 7).expect("synth tiny");
        let cpu = flashtree::convert::gguf_load::load_qwen35(&out.target).expect("reference loads");
        let cpu_device = flashtree::convert::gguf_load::load_qwen35_as_matmul(&out.target).expect("reference loads");
        Tiny { path: out.target, draft: out.draft_dir.expect("synth wrote the draft"), cpu, cpu_device }
    })
}

pub(crate) fn engine(test: &str, ctx: usize) -> Option<Engine> {
    gpu_or_skip(test)?;
    // Each test owns an engine on its own context (the shared GPU handle is for kernel tests).
    let gpu = flashtree::gpu::Gpu::try_new().expect("gpu");
    let g = Gguf::open(&tiny().path).expect("open");
    let cfg = Qwen35Config::from_gguf(&g).expect("config");
    Some(Engine::load(gpu, &g, cfg, ctx, |_, _| {}).expect("engine loads"))
}

pub(crate) use flashtree::cli::bench::rand_tokens as tokens;

/// max |a − b| / max |b| over one row.
pub(crate) fn rel_err(a: &[f32], b: &[f32]) -> f64 {
    let scale = b.iter().fold(0f64, |m, &v| m.max(v.abs() as f64)).max(1e-30);
    a.iter().zip(b).fold(0f64, |m, (&x, &y)| m.max((x as f64 - y as f64).abs())) / scale
}

/// Runs `toks` through the engine in chains of ≤ 32, returning every row's logits.
pub(crate) fn engine_chain_logits(e: &mut Engine, toks: &[u32]) -> Vec<Vec<f32>> {
    let v = e.cfg.vocab_size;
    let mut rows = Vec::new();
    for chunk in toks.chunks(32) {
        let b = chain_batch(e.n_past(), chunk, v, e.ctx()).unwrap();
        e.forward(&b).unwrap();
        let l = e.logits(chunk.len()).unwrap();
        rows.extend(l.chunks(v).map(|r| r.to_vec()));
        e.commit(&(0..chunk.len()).collect::<Vec<_>>()).unwrap();
    }
    rows
}

#[test]
fn chain_logits_match_the_reference_for_prompts_of_1_to_300_tokens() {
    let Some(mut e) = engine("chain_logits_match_the_reference_for_prompts_of_1_to_300_tokens", 512) else {
        return;
    };
    let t = tiny();
    for (seed, len) in [(1u64, 1usize), (2, 7), (3, 32), (4, 33), (5, 100), (6, 300)] {
        let toks = tokens(seed, len, e.cfg.vocab_size);
        e.reset().unwrap();
        let got = engine_chain_logits(&mut e, &toks);
        let reference = |rounding: bool| {
            let run = || {
                let w = if rounding { &t.cpu_device } else { &t.cpu };
                let mut st = Qwen35State::new(&w.hparams);
                let opts = if rounding { engine_arithmetic() } else { ForwardOptions::default() };
                w.forward(&mut st, &toks, &opts).unwrap().logits
            };
            if rounding {
                with_device_rounding(run)
            } else {
                run()
            }
        };
        let (emulated, exact) = (reference(true), reference(false));
        let (mut worst_emu, mut worst_exact) = (0f64, 0f64);
        for (i, g) in got.iter().enumerate() {
            let (e, x) = (rel_err(g, &emulated[i]), rel_err(g, &exact[i]));
            assert!(e <= 2e-3, "prompt {len} (seed {seed}) token {i}: error {e:e} vs the device-rounding reference");
            assert!(x <= 2e-2, "prompt {len} (seed {seed}) token {i}: error {x:e} vs the exact reference");
            worst_emu = worst_emu.max(e);
            worst_exact = worst_exact.max(x);
        }
        eprintln!(
            "prompt {len}: max logit error {worst_emu:.2e} (device-rounding reference), {worst_exact:.2e} (exact)"
        );
    }
}

/// A random tree of `n` nodes: each node's parent is a random earlier node or the root slot.
/// The nodes from the root to `i` of the tree `parents`, in order.
fn path_to(parents: &[Option<usize>], i: usize) -> Vec<usize> {
    let mut path = vec![i];
    while let Some(p) = parents[*path.last().unwrap()] {
        path.push(p);
    }
    path.reverse();
    path
}

/// Node `i` of the tree `(toks, parents)` alone: the engine reset, `prompt` and then `i`'s
/// ancestors committed as chains, one forward of `toks[i]`; its logits and the root-to-`i` path.
fn node_alone(
    e: &mut Engine,
    prompt: &[u32],
    toks: &[u32],
    parents: &[Option<usize>],
    i: usize,
) -> (Vec<f32>, Vec<usize>) {
    let v = e.cfg.vocab_size;
    let path = path_to(parents, i);
    e.reset().unwrap();
    engine_chain_logits(e, prompt);
    let anc: Vec<u32> = path[..path.len() - 1].iter().map(|&j| toks[j]).collect();
    if !anc.is_empty() {
        engine_chain_logits(e, &anc);
    }
    e.forward(&chain_batch(e.n_past(), &[toks[i]], v, e.ctx()).unwrap()).unwrap();
    (e.logits(1).unwrap(), path)
}

pub(crate) fn random_parents(seed: u64, n: usize) -> Vec<Option<usize>> {
    let r = tokens(seed, n, 1 << 20);
    (0..n).map(|i| if i == 0 { None } else { Some(r[i] as usize % i) }).collect()
}

#[test]
fn tree_logits_match_the_reference_and_each_node_alone_bitwise() {
    let Some(mut e) = engine("tree_logits_match_the_reference_and_each_node_alone_bitwise", 512) else {
        return;
    };
    let t = tiny();
    let v = e.cfg.vocab_size;
    // 33..=64 nodes run every product as two launches of ≤ 32 columns.
    for seed in 0..6u64 {
        let prompt = tokens(100 + seed, 20 + 13 * seed as usize, v);
        let n = [32usize, 22, 5, 1, 64, 41][seed as usize];
        let parents = random_parents(seed, n);
        let toks = tokens(200 + seed, n, v);
        e.reset().unwrap();
        engine_chain_logits(&mut e, &prompt);
        let b = node_batch(e.n_past(), &toks, &parents, v, e.ctx()).unwrap();
        e.forward(&b).unwrap();
        let tree = e.logits(n).unwrap();
        // Reference tree forward.
        let want = with_device_rounding(|| {
            let mut st = Qwen35State::new(&t.cpu_device.hparams);
            t.cpu_device.forward(&mut st, &prompt, &engine_arithmetic()).unwrap();
            t.cpu_device.forward_tree(&st, &toks, &parents, &[]).unwrap().logits
        });
        let mut worst = 0f64;
        for i in 0..n {
            let err = rel_err(&tree[i * v..(i + 1) * v], &want[i]);
            assert!(err <= 2e-3, "seed {seed} node {i}: error {err:e} vs the device-rounding reference");
            worst = worst.max(err);
        }
        eprintln!("tree of {n} nodes: max logit error {worst:.2e} (device-rounding reference)");
        // Each node alone after its ancestors, committed as a chain.
        for i in 0..n {
            let (alone, path) = node_alone(&mut e, &prompt, &toks, &parents, i);
            let same = alone.iter().zip(&tree[i * v..(i + 1) * v]).all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "seed {seed}: node {i} (path {path:?}) alone differs from the tree in some bit");
        }
    }
}

#[test]
fn commit_of_a_tree_path_equals_the_chain() {
    let Some(mut e) = engine("commit_of_a_tree_path_equals_the_chain", 512) else {
        return;
    };
    let v = e.cfg.vocab_size;
    let prompt = tokens(9, 40, v);
    let parents = random_parents(77, 22);
    let toks = tokens(78, 22, v);
    // Deepest node's path.
    let b = node_batch(0, &toks, &parents, v, 512).unwrap();
    let deepest = (0..22).max_by_key(|&i| (b.depth[i], i)).unwrap();
    let path = path_to(&parents, deepest);
    let next = tokens(79, 1, v);
    // Tree, commit the path, then one token.
    e.reset().unwrap();
    engine_chain_logits(&mut e, &prompt);
    let b = node_batch(e.n_past(), &toks, &parents, v, e.ctx()).unwrap();
    e.forward(&b).unwrap();
    e.commit(&path).unwrap();
    let after_tree = engine_chain_logits(&mut e, &next);
    // The same tokens as a chain.
    e.reset().unwrap();
    engine_chain_logits(&mut e, &prompt);
    let chain: Vec<u32> = path.iter().map(|&i| toks[i]).collect();
    engine_chain_logits(&mut e, &chain);
    let after_chain = engine_chain_logits(&mut e, &next);
    assert!(
        after_tree[0].iter().zip(&after_chain[0]).all(|(a, b)| a.to_bits() == b.to_bits()),
        "the token after a committed tree path differs from the token after the same chain"
    );
}

#[test]
fn greedy_ar_gives_the_reference_tokens_for_256_steps() {
    let Some(mut e) = engine("greedy_ar_gives_the_reference_tokens_for_256_steps", 512) else {
        return;
    };
    let t = tiny();
    let v = e.cfg.vocab_size;
    let prompt = tokens(5, 12, v);
    let mut tok = e.prefill(&prompt).unwrap();
    let mut st = Qwen35State::new(&t.cpu.hparams);
    let out = t.cpu.forward(&mut st, &prompt, &ForwardOptions::default()).unwrap();
    let mut ref_logits = out.logits.last().unwrap().clone();
    for step in 0..256 {
        let (want, margin) = top2(&ref_logits);
        if tok != want {
            let scale = ref_logits.iter().fold(0f32, |m, x| m.max(x.abs()));
            assert!(
                margin <= 2e-3 * scale,
                "step {step}: GPU token {tok} vs reference {want} with a top-2 margin of {margin} (scale {scale})"
            );
            eprintln!("step {step}: tokens diverge where the reference's top-2 margin is {margin}: stopping");
            return;
        }
        let b = chain_batch(e.n_past(), &[tok], v, e.ctx()).unwrap();
        e.forward(&b).unwrap();
        let next = e.argmax_tokens(1).unwrap()[0];
        e.commit(&[0]).unwrap();
        ref_logits = t.cpu.forward(&mut st, &[tok], &ForwardOptions::default()).unwrap().logits.remove(0);
        tok = next;
    }
}

fn top2(l: &[f32]) -> (u32, f32) {
    let mut best = (0usize, f32::NEG_INFINITY);
    let mut second = f32::NEG_INFINITY;
    for (i, &x) in l.iter().enumerate() {
        if x > best.1 {
            second = best.1;
            best = (i, x);
        } else if x > second {
            second = x;
        }
    }
    (best.0 as u32, best.1 - second)
}

/// Every layer's output (the draft's taps) against the device-rounding reference, chunk by
/// chunk: shows where along the stack the logits' error builds up (printed per layer), and
/// checks the captures themselves (bound as the logits: 2e-3 of the row's largest |h|).
#[test]
fn captured_layer_outputs_match_the_reference_layer_by_layer() {
    let Some(mut e) = engine("captured_layer_outputs_match_the_reference_layer_by_layer", 512) else {
        return;
    };
    let t = tiny();
    let layers: Vec<usize> = (0..e.cfg.n_layer()).collect();
    e.set_capture(&layers).unwrap();
    let (d, v) = (e.cfg.embedding_length, e.cfg.vocab_size);
    let toks = tokens(11, 70, v);
    let want = with_device_rounding(|| {
        let mut st = Qwen35State::new(&t.cpu_device.hparams);
        let opts = ForwardOptions { capture_layers: layers.clone(), ..engine_arithmetic() };
        t.cpu_device.forward(&mut st, &toks, &opts).unwrap().captured
    });
    let exact = {
        let mut st = Qwen35State::new(&t.cpu.hparams);
        let opts = ForwardOptions { capture_layers: layers.clone(), ..Default::default() };
        t.cpu.forward(&mut st, &toks, &opts).unwrap().captured
    };
    let mut worst = vec![0f64; layers.len()];
    let mut worst_exact = vec![0f64; layers.len()];
    let mut start = 0;
    for chunk in toks.chunks(32) {
        let b = chain_batch(e.n_past(), chunk, v, e.ctx()).unwrap();
        e.forward(&b).unwrap();
        let got = e.captured(chunk.len()).unwrap();
        for (l, rows) in got.iter().enumerate() {
            for (i, row) in rows.chunks(d).enumerate() {
                worst[l] = worst[l].max(rel_err(row, &want[l][start + i]));
                worst_exact[l] = worst_exact[l].max(rel_err(row, &exact[l][start + i]));
            }
        }
        e.commit(&(0..chunk.len()).collect::<Vec<_>>()).unwrap();
        start += chunk.len();
    }
    let kinds: Vec<&str> =
        layers.iter().map(|&l| if e.cfg.is_recurrent(l) { "deltanet" } else { "attention" }).collect();
    for (l, w) in worst.iter().enumerate() {
        eprintln!(
            "layer {l} ({}): max hidden-state error {w:.2e} (device-rounding reference), {:.2e} (exact)",
            kinds[l], worst_exact[l]
        );
    }
    for (l, w) in worst.iter().enumerate() {
        assert!(*w <= 2e-3, "layer {l} ({}): hidden-state error {w:e}", kinds[l]);
    }
}

/// The spec loop's AR mode on the GPU target (`GpuTarget` through `spec::generate`) emits the
/// tokens of a hand-written engine AR loop, and `generate --backend gpu` (the CLI path) prints
/// text for the tiny model.
#[test]
fn gpu_target_in_the_spec_loop_equals_the_engine_ar_loop_and_the_cli_runs() {
    let Some(mut e) = engine("gpu_target_in_the_spec_loop_equals_the_engine_ar_loop_and_the_cli_runs", 512) else {
        return;
    };
    let v = e.cfg.vocab_size;
    let prompt = tokens(21, 9, v);
    let n = 40;
    // Hand-written loop.
    e.reset().unwrap();
    let mut tok = e.prefill(&prompt).unwrap();
    let mut want = vec![tok];
    while want.len() < n {
        let b = chain_batch(e.n_past(), &[tok], v, e.ctx()).unwrap();
        e.forward(&b).unwrap();
        tok = e.argmax_tokens(1).unwrap()[0];
        e.commit(&[0]).unwrap();
        want.push(tok);
    }
    // The generic loop.
    let cfg = flashtree::spec::GenerateConfig {
        mode: flashtree::spec::Mode::Ar,
        budget: 0,
        max_tokens: n,
        eos: vec![],
        rule: DecodingRule::Greedy,
    };
    let mut target = flashtree::engine::GpuTarget::new(&mut e);
    let (got, stats) =
        flashtree::spec::generate(
            &mut target,
            None::<&mut CpuDraftOnGpu>,
            &prompt,
            &cfg,
            |_| ControlFlow::Continue(()),
        )
        .unwrap();
    assert_eq!(got, want, "spec::generate on GpuTarget differs from the engine's own AR loop");
    assert_eq!(stats.generated, n);
    // The CLI path.
    let args = flashtree::cli::generate::GenerateArgs {
        pair: PairArgs {
            model: tiny().path.clone(),
            draft: None,
            mode: flashtree::cli::generate::ModeArg::Ar,
            budget: 0,
            backend: flashtree::cli::backend::BackendArg::Gpu,
        },
        max_tokens: 16,
        prompt: Some("The quick brown fox".into()),
        chat: false,
        system: None,
        no_think: false,
        ctx: None,
        verbose: false,
        sampling: Default::default(),
        output_format: Default::default(),
    };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    flashtree::cli::generate::run_to(&args, &mut out, &mut err).unwrap();
    let err = String::from_utf8_lossy(&err);
    assert!(err.contains("backend gpu"), "stats line: {err}");
    assert!(!out.is_empty());
}

/// `flashtree logits --backend gpu` prints the engine's logits and layer outputs: the same
/// top-5 tokens as the CPU reference for a prompt of the tiny model (JSON output parsed back).
#[test]
fn logits_cli_on_the_gpu_agrees_with_the_cpu_reference() {
    if gpu_or_skip("logits_cli_on_the_gpu_agrees_with_the_cpu_reference").is_none() {
        return;
    }
    let toks = tokens(31, 40, 512).iter().map(|t| t.to_string()).collect::<Vec<_>>().join(",");
    let run = |backend| {
        let args = flashtree::cli::logits::LogitsArgs {
            model: tiny().path.clone(),
            tokens: toks.clone(),
            layers: Some("0,3".into()),
            json: true,
            ctx: None,
            backend,
        };
        let v: serde_json::Value = serde_json::from_str(&flashtree::cli::logits::render(&args).unwrap()).unwrap();
        let logits: Vec<Vec<f32>> = serde_json::from_value(v["logits"].clone()).unwrap();
        let hidden: Vec<Vec<f32>> = serde_json::from_value(v["hidden"]["3"].clone()).unwrap();
        (logits, hidden)
    };
    let (gpu, gpu_h) = run(flashtree::cli::backend::BackendArg::Gpu);
    let (cpu, cpu_h) = run(flashtree::cli::backend::BackendArg::Cpu);
    assert_eq!(gpu.len(), 40);
    assert_eq!(gpu_h.len(), 40);
    for (i, (g, c)) in gpu.iter().zip(&cpu).enumerate() {
        assert!(rel_err(g, c) <= 1e-2, "position {i}: logits differ by {:e}", rel_err(g, c));
        assert!(rel_err(&gpu_h[i], &cpu_h[i]) <= 1e-2, "position {i}: layer 3 output differs");
    }
}

/// Greedy speculation on the GPU target (the draft on the CPU, fed by the engine's layer taps)
/// emits exactly the GPU's own greedy AR tokens: DDTree at budgets 1, 4, 22, 32 (33 nodes: every
/// product in two launches) and 48, a DFlash chain and the anchor's tree, 210 tokens each.
#[test]
fn gpu_tree_and_chain_output_equals_gpu_ar_bit_for_bit() {
    let Some(mut e) = engine("gpu_tree_and_chain_output_equals_gpu_ar_bit_for_bit", 512) else {
        return;
    };
    use flashtree::spec::{generate, GenerateConfig, Mode};
    let t = tiny();
    let (_, dw) = flashtree::convert::dflash::load_draft(&t.draft).expect("draft loads");
    flashtree::spec::cpu::check_pair(&t.cpu, &dw).expect("pair");
    let layers = dw.hparams.target_layer_ids.clone();
    let prompt = tokens(41, 11, e.cfg.vocab_size);
    let n = 210;
    let cfg = |mode, budget| GenerateConfig { mode, budget, max_tokens: n, eos: vec![], rule: DecodingRule::Greedy };
    let (ar, _) = generate(
        &mut flashtree::engine::GpuTarget::new(&mut e),
        None::<&mut CpuDraftOnGpu>,
        &prompt,
        &cfg(Mode::Ar, 0),
        |_| ControlFlow::Continue(()),
    )
    .unwrap();
    assert_eq!(ar.len(), n);
    for (mode, budget) in [
        (Mode::Tree, 1),
        (Mode::Tree, 4),
        (Mode::Tree, 22),
        (Mode::Tree, 32),
        (Mode::Tree, 48),
        (Mode::Chain, 22),
        (Mode::AnchorTree, 22),
    ] {
        let mut target = flashtree::engine::GpuTarget::with_capture(&mut e, &layers).unwrap();
        let source = target.feature_source().unwrap();
        let mut draft = HostDraft::new(flashtree::spec::cpu::CpuDraft::new(&dw, &t.cpu), source);
        let (out, stats) =
            generate(&mut target, Some(&mut draft), &prompt, &cfg(mode, budget), |_| ControlFlow::Continue(()))
                .unwrap();
        assert_eq!(out, ar, "{mode:?} budget {budget}: GPU speculative output differs from GPU AR");
        // Device-event times: every phase ran on the device; the verify forward's events lie
        // inside the host's wall time of the verify (which also waits for the argmax).
        let dev = stats.device.expect("the GPU target reports device times");
        assert!(dev.prefill.as_nanos() > 0 && dev.verify.as_nanos() > 0 && dev.commit.as_nanos() > 0, "{dev:?}");
        assert!(dev.verify <= stats.time.verify, "device verify {:?} > host {:?}", dev.verify, stats.time.verify);
        eprintln!(
            "{mode:?} budget {budget}: {n} tokens equal to AR, acceptance length {:.3}",
            stats.acceptance_length()
        );
    }
}

/// A second turn through `Session` on the GPU target (the engine's caches extended by the new
/// tokens only, in chunks of ≤ 32) generates bitwise the tokens of one fresh prefill of the whole
/// conversation, in AR and tree modes, for first turns that end at a bonus token and inside an
/// accepted path; a 70-token continuation crosses chunk boundaries.
#[test]
fn gpu_second_turn_via_extend_equals_a_fresh_prefill_of_the_conversation() {
    let Some(mut e) = engine("gpu_second_turn_via_extend_equals_a_fresh_prefill_of_the_conversation", 512) else {
        return;
    };
    use flashtree::spec::{GenerateConfig, Mode, Session};
    let t = tiny();
    let (_, dw) = flashtree::convert::dflash::load_draft(&t.draft).expect("draft loads");
    let layers = dw.hparams.target_layer_ids.clone();
    let v = e.cfg.vocab_size;
    let prompt = tokens(51, 13, v);
    let cfg = |mode, n| GenerateConfig { mode, budget: 22, max_tokens: n, eos: vec![], rule: DecodingRule::Greedy };
    for mode in [Mode::Ar, Mode::Tree] {
        for (n1, more) in [(12, 5), (31, 70)] {
            let user = tokens(61 + n1 as u64, more, v);
            let (g2, reused, conv) = {
                let target = flashtree::engine::GpuTarget::with_capture(&mut e, &layers).unwrap();
                let draft = HostDraft::new(CpuDraft::new(&dw, &t.cpu), target.feature_source().unwrap());
                let mut s = Session::new(target, Some(draft));
                let (g1, _) = s.generate(&prompt, &cfg(mode, n1), |_| ControlFlow::Continue(())).unwrap();
                let conv: Vec<u32> = prompt.iter().chain(&g1).chain(&user).copied().collect();
                let (g2, st2) = s.generate(&conv, &cfg(mode, 40), |_| ControlFlow::Continue(())).unwrap();
                (g2, st2.reused_tokens, conv)
            };
            assert!(reused >= conv.len() - more - 1, "{mode:?} n1 {n1}: caches not reused ({reused})");
            let target = flashtree::engine::GpuTarget::with_capture(&mut e, &layers).unwrap();
            let draft = HostDraft::new(CpuDraft::new(&dw, &t.cpu), target.feature_source().unwrap());
            let mut s = Session::new(target, Some(draft));
            let (fresh, st) = s.generate(&conv, &cfg(mode, 40), |_| ControlFlow::Continue(())).unwrap();
            assert_eq!(st.reused_tokens, 0);
            assert_eq!(g2, fresh, "{mode:?} n1 {n1}: the continued turn differs from a fresh prefill");
        }
    }
}

/// The device feature store holds, for every committed token, the captured layer outputs of the
/// forward that committed it, concatenated: prefill chunks (70 tokens: chains of 32, 32, 6) and a
/// tree path with gaps in its node indices, read back through the host draft's download step.
#[test]
fn the_feature_store_holds_the_captured_rows_of_every_committed_token() {
    let Some(mut e) = engine("the_feature_store_holds_the_captured_rows_of_every_committed_token", 512) else {
        return;
    };
    use flashtree::spec::FeatureSource;
    let layers: Vec<usize> = (0..e.cfg.n_layer()).step_by(2).collect();
    e.set_capture(&layers).unwrap();
    let (v, d) = (e.cfg.vocab_size, e.cfg.embedding_length);
    let row =
        |cap: &[Vec<f32>], i: usize| -> Vec<f32> { cap.iter().flat_map(|c| c[i * d..(i + 1) * d].to_vec()).collect() };
    let mut want = Vec::new();
    for chunk in tokens(71, 70, v).chunks(32) {
        let b = chain_batch(e.n_past(), chunk, v, e.ctx()).unwrap();
        e.forward(&b).unwrap();
        let cap = e.captured(chunk.len()).unwrap();
        want.extend((0..chunk.len()).map(|i| row(&cap, i)));
        e.commit(&(0..chunk.len()).collect::<Vec<_>>()).unwrap();
    }
    let parents = random_parents(5, 24);
    let b = node_batch(e.n_past(), &tokens(72, 24, v), &parents, v, e.ctx()).unwrap();
    e.forward(&b).unwrap();
    let cap = e.captured(24).unwrap();
    let path = path_to(&parents, (0..24).max_by_key(|&i| (b.depth[i], i)).unwrap());
    want.extend(path.iter().map(|&i| row(&cap, i)));
    e.commit(&path).unwrap();
    let got = e.feature_source().unwrap().host_rows(&DeviceFeatures { first_row: 0, rows: want.len() }).unwrap();
    assert_eq!(got.len(), 70 + path.len());
    for (r, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!(g == w, "store row {r} differs from the captured row (path {path:?})");
    }
}

/// `flashtree generate --backend gpu --mode tree|chain|anchor-tree` on the tiny pair (the GPU
/// target, the CPU draft reading the engine's feature store) prints the text of
/// `--backend gpu --mode ar`, with device phase times in its stats.
#[test]
fn generate_cli_runs_speculative_modes_on_the_gpu_and_equals_ar() {
    if gpu_or_skip("generate_cli_runs_speculative_modes_on_the_gpu_and_equals_ar").is_none() {
        return;
    }
    use flashtree::cli::generate::{run_to, GenerateArgs, ModeArg};
    let t = tiny();
    let run = |mode| {
        let args = GenerateArgs {
            pair: PairArgs {
                model: t.path.clone(),
                draft: Some(t.draft.clone()),
                mode,
                budget: 22,
                backend: flashtree::cli::backend::BackendArg::Gpu,
            },
            max_tokens: 64,
            prompt: Some("The quick brown fox".into()),
            chat: false,
            system: None,
            no_think: false,
            ctx: None,
            verbose: true,
            sampling: Default::default(),
            output_format: Default::default(),
        };
        let (mut out, mut err) = (Vec::new(), Vec::new());
        run_to(&args, &mut out, &mut err).unwrap();
        (String::from_utf8(out).unwrap(), String::from_utf8_lossy(&err).into_owned())
    };
    let (ar, ar_err) = run(ModeArg::Ar);
    assert!(ar_err.contains("mode ar budget 0 backend gpu"), "{ar_err}");
    assert!(!ar.trim().is_empty());
    for mode in [ModeArg::Tree, ModeArg::Chain, ModeArg::AnchorTree] {
        let (text, err) = run(mode);
        assert_eq!(text, ar, "{mode:?} on the GPU differs from AR on the GPU");
        assert!(err.contains("backend gpu") && err.contains("device time:"), "{err}");
    }
}

/// The tiny model with 8 layers: its first attention layer's `attn_v` is Q6_K (llama.cpp's
/// `use_more_bits`), the second's Q4_K, so the engine runs both attention merges (q + k with v
/// alone, and q + k + v) beside the DeltaNet layers' one promoted Q5_K product.
#[test]
fn both_attention_merges_match_the_reference_and_stay_batch_invariant() {
    let Some(_) = gpu_or_skip("both_attention_merges_match_the_reference_and_stay_batch_invariant") else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("flashtree-engine-tiny8-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out = flashtree::synth::synth(&flashtree::synth::SynthOptions {
        shape: flashtree::synth::SynthShape { n_layer: 8, ..flashtree::synth::SynthShape::tiny() },
        draft: None,
        mix: flashtree::synth::QuantMix::Q4KM,
        seed: 11,
        out_dir: dir.clone(),
        name: "tiny8".into(),
        tiktoken: None,
    })
    .expect("synth tiny8");
    let cpu = flashtree::convert::gguf_load::load_qwen35_as_matmul(&out.target).expect("reference loads");
    let g = Gguf::open(&out.target).expect("open");
    let ty = |s: &str| g.tensor(s).expect(s).ty;
    assert_eq!(ty("blk.3.attn_v.weight"), flashtree::gguf::GgmlType::Q6_K, "the file exercises q + k, v");
    assert_eq!(ty("blk.7.attn_v.weight"), flashtree::gguf::GgmlType::Q4_K, "the file exercises q + k + v");
    let cfg = Qwen35Config::from_gguf(&g).expect("config");
    let gpu = flashtree::gpu::Gpu::try_new().expect("gpu");
    let mut e = Engine::load(gpu, &g, cfg, 256, |_, _| {}).expect("engine loads");
    let v = e.cfg.vocab_size;
    // Chain logits against the device-rounding reference.
    let prompt = tokens(31, 45, v);
    let got = engine_chain_logits(&mut e, &prompt);
    let want = with_device_rounding(|| {
        let mut st = Qwen35State::new(&cpu.hparams);
        cpu.forward(&mut st, &prompt, &engine_arithmetic()).unwrap().logits
    });
    // The 2e-3 bound of the 4-layer tiny model covers what the emulation does not model (f32
    // accumulation order, approximate exp/log), which grows about linearly with depth
    // (docs/perf/engine.md, Accuracy); this file has twice the layers, so twice the bound (with
    // the K-quant and Q6_K weights as the matmul rounds them now modelled). A wrong merge (rows of k read as q, a stride off by a row) gives
    // errors of order 1, and the tree check below is bitwise.
    let bound = 2e-3 * e.cfg.n_layer() as f64 / 4.0;
    let mut worst = 0f64;
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        let err = rel_err(g, w);
        assert!(err <= bound, "token {i}: error {err:e} vs the device-rounding reference (bound {bound:e})");
        worst = worst.max(err);
    }
    eprintln!("8-layer merges: max logit error {worst:.2e} vs the device-rounding reference (bound {bound:.1e})");
    // A 22-node tree: each node bitwise as alone after its ancestors.
    let parents = random_parents(5, 22);
    let toks = tokens(32, 22, v);
    let b = node_batch(e.n_past(), &toks, &parents, v, e.ctx()).unwrap();
    e.forward(&b).unwrap();
    let tree = e.logits(22).unwrap();
    for i in [0usize, 7, 21] {
        let (alone, path) = node_alone(&mut e, &prompt, &toks, &parents, i);
        let same = alone.iter().zip(&tree[i * v..(i + 1) * v]).all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same, "node {i} (path {path:?}) alone differs from the tree in some bit");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
