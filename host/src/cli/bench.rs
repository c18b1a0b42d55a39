//! `flashtree bench`: decode speed of the GPU engine against the bandwidth limit measured in
//! the same run: AR tok/s, ms per step, weight GB/s and its fraction of the copy ceiling, the
//! time of a tree verify forward against an AR step, chunked prefill tok/s, load time, memory,
//! and a per-kernel-family breakdown of one step; for the speculative modes the acceptance
//! length and tok/s (at T = 0, and with `--temperature` at T > 0 beside it). With `--prompts
//! FILE.jsonl` it runs prompt sets instead, in every mode of `--modes`, on either backend
//! (`cli::bench_suite`).

use std::path::PathBuf;
use std::time::Instant;

use anyhow::bail;
use clap::Args;

use super::backend::{open_engine, resolve, BackendArg};
use std::ops::ControlFlow;

use super::generate::CpuDraftOnGpu;
use crate::engine::{chain_batch, node_batch, Engine, GpuTarget};
use crate::gpu::bandwidth;
use crate::spec::{generate, DecodingRule, GenerateConfig, Mode, OracleDraft};

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Target model (qwen35 GGUF); default: the demo target in `models/` (see `models/README.md`).
    #[arg(long, default_value_os_t = super::default_model::target())]
    pub model: PathBuf,
    /// Decoding mode: `ar`, or a speculative mode (needs `--draft`): after the AR measurements,
    /// the mode runs through the spec loop with the draft on the GPU, at the draft's own
    /// acceptance and, with `--oracle-depths`, at controlled acceptance lengths.
    #[arg(long, value_enum, default_value_t = super::generate::ModeArg::Ar)]
    pub mode: super::generate::ModeArg,
    /// Where the target runs: the step bench needs the GPU (default `gpu`); the prompt sets
    /// (`--prompts`) run on either (default `auto`: the GPU when present).
    #[arg(long, value_enum)]
    pub backend: Option<BackendArg>,
    /// KV context to plan for (default: the model's, at most 8192 + the prompt).
    #[arg(long)]
    pub ctx: Option<usize>,
    /// Prompt tokens before decoding (the decode context).
    #[arg(long, default_value_t = 512)]
    pub prompt_tokens: usize,
    /// Decode steps measured (with `--prompts`: most tokens generated per prompt and mode).
    #[arg(long, default_value_t = 128)]
    pub tokens: usize,
    /// Nodes of the verify forward timed against an AR step.
    #[arg(long, default_value_t = 22)]
    pub tree_nodes: usize,
    /// Seed of the synthetic prompt and tree.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// A DFlash draft for the target (z-lab folder or `dflash` GGUF): also time the draft on
    /// the GPU (context rows appended per committed token, the block forward and top-K) against
    /// the AR step, and project tok/s at the anchor's acceptance lengths.
    #[arg(long)]
    pub draft: Option<PathBuf>,
    /// Speculative modes: also run with the draft's proposals replaced, at its first `C` depths,
    /// by the target's own greedy continuation (recorded by the AR run) — acceptance length
    /// ≈ C + 1 — for each `C` of this comma-separated list (`spec::OracleDraft`; the draft still
    /// runs every round, so rounds cost what they would).
    #[arg(long, value_delimiter = ',')]
    pub oracle_depths: Vec<usize>,
    /// Non-root nodes per round of the speculative modes (DDTree budget).
    /// On the GPU a verify of up to 32 nodes (budget ≤ 31) streams each weight matrix once;
    /// budget 32 and above (33+ nodes) stream it twice (nvidia-h200, 27B: a 33-node verify costs
    /// 2.7 AR steps, a 23-node one 1.4).
    #[arg(long, default_value_t = 22)]
    pub budget: usize,
    /// Speculative modes: also decode with seeded sampling at this temperature (no other
    /// filter, seed `--seed`) and report its acceptance length and tok/s beside T = 0's; the
    /// output must equal AR sampling's with the same seed. 0 = greedy only.
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f32,
    /// Prompt sets (JSON Lines; repeatable): each line an object with `messages` (chat turns),
    /// `prompt`, `turns` (the first is taken) or `question`; `id` and `suite` (the dataset's
    /// name, else the file's stem) are used when present. Runs the prompt-set bench instead of
    /// the step bench: every prompt in every mode of `--modes`, then the table per dataset,
    /// `--out`/bench.json and `--out`/bench.svg.
    #[arg(long)]
    pub prompts: Vec<PathBuf>,
    /// Modes of the prompt-set bench (comma-separated); `ar` first checks the others' output
    /// against it (greedy decoding is lossless: they must be equal).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "ar,chain,tree")]
    pub modes: Vec<super::generate::ModeArg>,
    /// Prompts taken from each file (the first N).
    #[arg(long)]
    pub limit: Option<usize>,
    /// Folder for bench.json and bench.svg (created; default: the current folder).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Send each prompt's text as is, without the chat template (a `messages` prompt: the
    /// contents joined by newlines).
    #[arg(long)]
    pub raw: bool,
    /// Also time every kernel inside the chained AR step and tree forward (needs the
    /// `chain-trace` kernel build: `cargo xtask ptx --features chain-trace`, loaded with
    /// FLASHTREE_PTX=<that .ptx>).
    #[arg(long)]
    pub chain_trace: bool,
}

/// `n` deterministic token ids below `vocab` from `seed` (xorshift64 after a golden-ratio mix of
/// the seed): the bench's synthetic prompts and trees, and the tests' random sequences.
pub fn rand_tokens(seed: u64, n: usize, vocab: usize) -> Vec<u32> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s % vocab as u64) as u32
        })
        .collect()
}

pub fn run(args: &BenchArgs) -> anyhow::Result<()> {
    if !args.prompts.is_empty() {
        if args.temperature != 0.0 {
            bail!("--temperature {} with --prompts: the prompt-set bench decodes greedily (its modes are checked token for token against AR); use the step bench for sampled runs", args.temperature);
        }
        return super::bench_suite::run(args);
    }
    let mode = match args.mode {
        super::generate::ModeArg::Ar => Mode::Ar,
        super::generate::ModeArg::Chain => Mode::Chain,
        super::generate::ModeArg::Tree => Mode::Tree,
        super::generate::ModeArg::AnchorTree => Mode::AnchorTree,
    };
    if mode != Mode::Ar && args.draft.is_none() {
        bail!("bench --mode {}: needs --draft", mode.name());
    }
    if mode != Mode::Ar && (args.budget == 0 || args.budget >= kernel_abi::MAX_NODES as usize) {
        bail!("--budget {}: the GPU verifies 1..={} nodes per round", args.budget, kernel_abi::MAX_NODES - 1);
    }
    if !(args.temperature.is_finite() && args.temperature >= 0.0) {
        bail!("--temperature {}: expected a finite value ≥ 0", args.temperature);
    }
    let max_nodes = kernel_abi::MAX_NODES as usize;
    if args.prompt_tokens == 0 || args.tokens == 0 || args.tree_nodes == 0 || args.tree_nodes > max_nodes {
        bail!("--prompt-tokens and --tokens must be ≥ 1 and --tree-nodes in 1..={max_nodes}");
    }
    let Some(gpu) = resolve(args.backend.unwrap_or(BackendArg::Gpu))? else {
        bail!("bench measures the GPU engine: no GPU here")
    };
    let info = crate::gpu::info::DeviceInfo::query(&gpu)?;
    println!("{info}");
    let bw = bandwidth::measure_copy(&gpu, 1 << 30, 10)?;
    let ceiling = bw.ceiling_gbps();
    println!("copy bandwidth (ceiling, this run): {ceiling:.1} GB/s");
    let ctx = args.ctx.unwrap_or(args.prompt_tokens + args.tokens + 64);
    let (mut e, load_s) = open_engine(gpu, &args.model, Some(ctx), &[], false)?;
    let (free, total) = e.gpu.memory_info()?;
    println!("load: {load_s:.1} s; GPU memory in use {:.2} GiB of {:.2} GiB", gib(total - free), gib(total));
    println!("memory plan: {}", e.plan);
    let v = e.cfg.vocab_size;
    let prompt = rand_tokens(args.seed, args.prompt_tokens, v);
    // Prefill through the chunked (≤ 32-token chain) path; warm up on a short prompt first.
    e.prefill(&prompt[..prompt.len().min(32)])?;
    e.reset()?;
    let t = Instant::now();
    let mut tok = e.prefill(&prompt)?;
    let pre_s = t.elapsed().as_secs_f64();
    println!(
        "prefill {} tokens (chains of 32): {:.1} tok/s ({:.2} ms per 32-token chunk)",
        prompt.len(),
        prompt.len() as f64 / pre_s,
        pre_s * 1e3 / prompt.len().div_ceil(32) as f64
    );
    // AR decode.
    let step = |e: &mut Engine, tok: u32| -> anyhow::Result<u32> {
        let b = chain_batch(e.n_past(), &[tok], v, e.ctx())?;
        e.forward(&b)?;
        let next = e.argmax_tokens(1)?[0];
        e.commit(&[0])?;
        Ok(next)
    };
    for _ in 0..3 {
        tok = step(&mut e, tok)?;
    }
    let t = Instant::now();
    for _ in 0..args.tokens {
        tok = step(&mut e, tok)?;
    }
    let ar_s = t.elapsed().as_secs_f64() / args.tokens as f64;
    let bytes = e.step_weight_bytes() as f64;
    let gbps = bytes / ar_s / 1e9;
    println!(
        "AR decode at context {}: {:.1} tok/s, {:.3} ms/step, weights {:.2} GB/step → {:.0} GB/s = {:.3} of copy; \
         limit {:.1} tok/s",
        e.n_past(),
        1.0 / ar_s,
        ar_s * 1e3,
        bytes / 1e9,
        gbps,
        gbps / ceiling,
        ceiling * 1e9 / bytes
    );
    // Verify forward of a random tree vs a one-node forward at the same context (no commit).
    // A random tree of `n` nodes: node 0 the root, each other node's parent an earlier node.
    let random_parents = |seed: u64, n: usize| -> Vec<Option<usize>> {
        rand_tokens(seed, n, 1 << 20)
            .iter()
            .enumerate()
            .map(|(i, r)| if i == 0 { None } else { Some(*r as usize % i) })
            .collect()
    };
    let parents = random_parents(args.seed + 1, args.tree_nodes);
    let tree_toks = rand_tokens(args.seed + 2, args.tree_nodes, v);
    let t1 = time_forward(&mut e, &[tok], &[None], v)?;
    let tn = time_forward(&mut e, &tree_toks, &parents, v)?;
    println!(
        "forward of a {}-node tree: {:.3} ms; one node: {:.3} ms; ratio {:.2}",
        args.tree_nodes,
        tn * 1e3,
        t1 * 1e3,
        tn / t1
    );
    // The spec loop's own verify: a DDTree or chain of budget B verifies up to B + 1 nodes (the
    // root and B proposals), which is what its projection must use; timed here when it differs
    // from `--tree-nodes` (e.g. budget 32: 33 nodes, past the 32 columns of one matmul launch).
    let spec_nodes = if mode == Mode::Ar { args.tree_nodes } else { (args.budget + 1).min(max_nodes) };
    let t_spec = if spec_nodes == args.tree_nodes {
        tn
    } else {
        let par = random_parents(args.seed + 3, spec_nodes);
        let t = time_forward(&mut e, &rand_tokens(args.seed + 4, spec_nodes, v), &par, v)?;
        println!(
            "forward of a {spec_nodes}-node tree (budget {} + the root, what the spec loop verifies): {:.3} ms; \
             ratio {:.2}",
            args.budget,
            t * 1e3,
            t / t1
        );
        t
    };
    let mut draft = match &args.draft {
        Some(path) => Some(bench_draft(&e, path, tok, ar_s, tn, args.tree_nodes, args.chain_trace.then_some(ceiling))?),
        None => None,
    };
    // Per-family breakdown (each kernel group serialised by events).
    for (label, toks, par) in [("AR step", vec![tok], vec![None]), ("tree", tree_toks.clone(), parents.clone())] {
        e.set_profile(true)?;
        let b = node_batch(e.n_past(), &toks, &par, v, e.ctx())?;
        for _ in 0..5 {
            e.forward(&b)?;
        }
        let p = e.set_profile(false)?.expect("profile on");
        let sum: f64 = p.totals.iter().map(|(_, t)| t).sum::<f64>() / p.steps as f64;
        let unprofiled = if toks.len() == 1 { t1 } else { tn } * 1e3;
        println!("breakdown of one {label} forward ({} nodes), ms per family (events between groups):", toks.len());
        for (f, t) in &p.totals {
            let ms = t / p.steps as f64;
            println!("  {f:<10} {ms:8.3} ms  {:5.1} %", 100.0 * ms / sum);
        }
        println!(
            "  sum {sum:.3} ms profiled vs {unprofiled:.3} ms chained (host sync included): \
             {:.3} ms saved by chaining",
            sum - unprofiled
        );
    }
    if args.chain_trace {
        let bytes = e.step_weight_bytes() as f64;
        for (label, toks, par, t) in
            [("AR step", vec![tok], vec![None], t1), ("tree", tree_toks.clone(), parents.clone(), tn)]
        {
            let b = node_batch(e.n_past(), &toks, &par, v, e.ctx())?;
            super::chain_trace::report(&mut e, label, &b, t, bytes, ceiling)?;
        }
    }
    // The same decode through the spec loop: host wall time and device-event time per phase.
    let cfg =
        GenerateConfig { mode: Mode::Ar, budget: 0, max_tokens: args.tokens, eos: vec![], rule: DecodingRule::Greedy };
    let mut target = GpuTarget::new(&mut e);
    let (ar, stats) = generate(&mut target, None::<&mut CpuDraftOnGpu>, &prompt, &cfg, |_| ControlFlow::Continue(()))?;
    println!("spec loop, AR through GpuTarget ({} tokens after the {}-token prompt):", args.tokens, prompt.len());
    for line in stats.summary().lines() {
        println!("  {line}");
    }
    if let (Some((d, step_s)), true) = (draft.take(), mode != Mode::Ar) {
        bench_spec(&mut e, d, mode, args, &prompt, &ar, step_s + t_spec, spec_nodes, ceiling)?;
    }
    Ok(())
}

/// The speculative `mode` through the spec loop with the GPU draft: at the draft's own
/// acceptance, then with [`OracleDraft`] at each `--oracle-depths` cap; after each, the forward of
/// the loop's last verified tree timed alone (and chain-traced with `--chain-trace`). Each run's output must
/// equal the recorded AR tokens `ar`; prints acceptance length, decode tok/s, the host and
/// device phase times, and tok/s projected from the measured draft step + verify of
/// `verify_nodes` nodes (`round_s`); `ceiling`: the run's copy bandwidth (GB/s) for the chain trace.
#[allow(clippy::too_many_arguments)]
fn bench_spec(
    e: &mut Engine,
    d: crate::engine::DraftEngine,
    mode: Mode,
    args: &BenchArgs,
    prompt: &[u32],
    ar: &[u32],
    round_s: f64,
    verify_nodes: usize,
    ceiling: f64,
) -> anyhow::Result<()> {
    let layers = d.cfg.target_layer_ids.clone();
    let source = GpuTarget::with_capture(e, &layers)?.feature_source()?;
    let mut draft = crate::engine::GpuDraft::new(d, source)?;
    let cfg =
        GenerateConfig { mode, budget: args.budget, max_tokens: ar.len(), eos: vec![], rule: DecodingRule::Greedy };
    let seq: Vec<u32> = prompt.iter().chain(ar).copied().collect();
    let caps: Vec<Option<usize>> = std::iter::once(None).chain(args.oracle_depths.iter().map(|&c| Some(c))).collect();
    // Acceptance length and decode tok/s of the draft's own proposals at T = 0.
    let mut greedy = (0.0, 0.0);
    for cap in caps {
        let mut target = GpuTarget::with_capture(e, &layers)?;
        let go = |_: &[u32]| ControlFlow::Continue(());
        let (out, stats) = match cap {
            None => generate(&mut target, Some(&mut draft), prompt, &cfg, go)?,
            Some(c) => {
                let mut oracle = OracleDraft::new(&mut draft, seq.clone(), c);
                generate(&mut target, Some(&mut oracle), prompt, &cfg, go)?
            }
        };
        if out != ar {
            bail!(
                "{} budget {}: the output differs from AR (a bug: the loop must be lossless)",
                mode.name(),
                cfg.budget
            );
        }
        let al = stats.acceptance_length();
        if cap.is_none() {
            greedy = (al, stats.decode_tokens_per_second());
        }
        let label = cap.map_or_else(|| "the draft's own proposals".to_string(), |c| format!("oracle depth {c}"));
        println!(
            "{} budget {}, {label}: {} tokens equal to AR; acceptance length {al:.2}, {:.1} tok/s decode \
             (projected from draft step + verify of {verify_nodes} nodes: {:.1} tok/s)",
            mode.name(),
            cfg.budget,
            out.len(),
            stats.decode_tokens_per_second(),
            al / round_s
        );
        for line in stats.summary().lines() {
            println!("  {line}");
        }
        if let Some(par) = e.last_tree_parents() {
            loop_tree(e, &par, args, ceiling)?;
        }
    }
    if args.temperature > 0.0 {
        bench_sampled(e, &mut draft, &layers, mode, args, prompt, ar.len(), greedy)?;
    }
    Ok(())
}

/// A forward timed as the step bench times one (3 warm-up forwards, then the mean of 20; each
/// with the argmax read back): the tree of `parents` over `toks` at the engine's `n_past`.
fn time_forward(e: &mut Engine, toks: &[u32], parents: &[Option<usize>], vocab: usize) -> anyhow::Result<f64> {
    let b = node_batch(e.n_past(), toks, parents, vocab, e.ctx())?;
    for _ in 0..3 {
        e.forward(&b)?;
        e.argmax_tokens(toks.len())?;
    }
    let reps = 20;
    let t = Instant::now();
    for _ in 0..reps {
        e.forward(&b)?;
        e.argmax_tokens(toks.len())?;
    }
    Ok(t.elapsed().as_secs_f64() / reps as f64)
}

/// The spec loop's last verified tree (`parents`) forwarded alone, as the step bench's random
/// tree is: its shape (depth, leaves), its time, and with `--chain-trace` its chain trace — so the
/// loop's verify can be told apart from the bench's by tree shape versus loop context.
fn loop_tree(e: &mut Engine, parents: &[Option<usize>], args: &BenchArgs, ceiling: f64) -> anyhow::Result<()> {
    let n = parents.len();
    let mut depth = vec![0usize; n];
    for i in 0..n {
        depth[i] = parents[i].map_or(0, |p| depth[p] + 1);
    }
    let leaves = (0..n).filter(|&i| !parents.contains(&Some(i))).count();
    let toks = rand_tokens(args.seed + 5, n, e.cfg.vocab_size);
    let t = time_forward(e, &toks, parents, e.cfg.vocab_size)?;
    println!(
        "  the loop's last verified tree alone ({n} nodes, depth {}, {leaves} leaves): forward {:.3} ms",
        depth.iter().max().map_or(0, |d| d + 1),
        t * 1e3
    );
    if args.chain_trace {
        let b = node_batch(e.n_past(), &toks, parents, e.cfg.vocab_size, e.ctx())?;
        let bytes = e.step_weight_bytes() as f64;
        super::chain_trace::report(e, "loop tree", &b, t, bytes, ceiling)?;
    }
    Ok(())
}

/// The speculative `mode` with seeded sampling at `--temperature` (the draft's own proposals),
/// after AR sampling with the same seed, which it must equal token for token; prints its
/// acceptance length and decode tok/s beside the greedy run's (`greedy`).
#[allow(clippy::too_many_arguments)]
fn bench_sampled(
    e: &mut Engine,
    draft: &mut crate::engine::GpuDraft,
    layers: &[usize],
    mode: Mode,
    args: &BenchArgs,
    prompt: &[u32],
    n: usize,
    (al0, tps0): (f64, f64),
) -> anyhow::Result<()> {
    let t = args.temperature;
    let rule = DecodingRule::sample(t, 0, 1.0, 0.0, args.seed)?;
    let go = |_: &[u32]| ControlFlow::Continue(());
    let ar_cfg = GenerateConfig { mode: Mode::Ar, budget: 0, max_tokens: n, eos: vec![], rule };
    let (ar, ar_stats) = generate(&mut GpuTarget::new(e), None::<&mut CpuDraftOnGpu>, prompt, &ar_cfg, go)?;
    let cfg = GenerateConfig { mode, budget: args.budget, max_tokens: n, eos: vec![], rule };
    let (out, stats) = generate(&mut GpuTarget::with_capture(e, layers)?, Some(draft), prompt, &cfg, go)?;
    if out != ar {
        bail!(
            "{} budget {} at T = {t}: the output differs from AR sampling with the same seed",
            mode.name(),
            args.budget
        );
    }
    println!(
        "{} budget {}, T = {t} (seed {}): {} tokens equal to AR sampling; acceptance length {:.2} (T = 0: {al0:.2}), \
         {:.1} tok/s decode (T = 0: {tps0:.1}; AR sampling {:.1})",
        mode.name(),
        args.budget,
        args.seed,
        out.len(),
        stats.acceptance_length(),
        stats.decode_tokens_per_second(),
        ar_stats.decode_tokens_per_second()
    );
    for line in stats.summary().lines() {
        println!("  {line}");
    }
    Ok(())
}

/// Times the GPU draft over the engine's context: appending context rows, and one round's draft
/// step (the accepted path's rows appended + the block forward + top-K, one sync), against the
/// AR step `ar_s`; projects tok/s from the draft step and the verify forward `verify_s`.
/// `trace`: the copy ceiling (GB/s) when the draft step's chain trace is wanted too.
fn bench_draft(
    e: &Engine,
    path: &std::path::Path,
    bonus: u32,
    ar_s: f64,
    verify_s: f64,
    verify_nodes: usize,
    trace: Option<f64>,
) -> anyhow::Result<(crate::engine::DraftEngine, f64)> {
    let model = crate::model::DraftModel::open(path)?;
    let t = Instant::now();
    let mut d = crate::engine::DraftEngine::load(e.gpu.clone(), e.weights(), &e.cfg, &model, e.ctx())?;
    let load_s = t.elapsed().as_secs_f64();
    let fl = d.feature_len();
    let bytes: u64 = model.weight_bytes();
    println!(
        "draft: {} layers, block {}, {:.2} GB of weights ({}), loaded in {load_s:.1} s",
        d.cfg.num_layers,
        d.cfg.block_size,
        bytes as f64 / 1e9,
        path.display()
    );
    // The draft's time does not depend on the feature values: synthetic rows of the right size,
    // made and uploaded before timing (in the spec loop they come from the engine's device store).
    let rows = |n: usize| -> Vec<f32> { (0..n * fl).map(|i| ((i % 97) as f32 - 48.0) * 1e-2).collect() };
    let prompt_rows = e.n_past().min(d.max_context().saturating_sub(256));
    let dev_rows = e.gpu.upload(&rows(prompt_rows.max(1)))?;
    e.gpu.synchronize()?;
    let t = Instant::now();
    d.extend_context_device(crate::gpu::DevSpan::of(&e.gpu, &dev_rows), prompt_rows)?;
    e.gpu.synchronize()?;
    let ctx_s = t.elapsed().as_secs_f64();
    drop(dev_rows);
    println!(
        "draft context: {prompt_rows} rows appended from device memory in {:.2} ms ({:.2} µs per row, chunks of 32)",
        ctx_s * 1e3,
        ctx_s * 1e6 / prompt_rows.max(1) as f64
    );
    let (accepted, k) = (8usize, 8usize.min(e.cfg.vocab_size));
    let path_rows = e.gpu.upload(&rows(accepted))?;
    let path_span = crate::gpu::DevSpan::of(&e.gpu, &path_rows);
    let rounds = ((d.max_context() - d.context_len()) / accepted).min(20);
    if rounds < 4 {
        anyhow::bail!("bench --draft: the context leaves room for {rounds} draft rounds; raise --ctx");
    }
    d.extend_context_device(path_span, accepted)?;
    d.propose(bonus, k)?;
    let t = Instant::now();
    for _ in 1..rounds {
        d.extend_context_device(path_span, accepted)?;
        d.propose(bonus, k)?;
    }
    let step_s = t.elapsed().as_secs_f64() / (rounds - 1) as f64;
    println!(
        "draft step ({accepted} context rows appended + block of {} + top-{k}, one sync): {:.3} ms = {:.3} of an \
         AR step (target ≤ 0.25)",
        d.cfg.block_size,
        step_s * 1e3,
        step_s / ar_s
    );
    if let Some(ceiling) = trace {
        // Weights one step streams: the draft's matrices and the target's output head.
        let bytes = (bytes + e.weights().head.device_bytes() as u64) as f64;
        super::chain_trace::report_draft(&mut d, path_span, accepted, bonus, k, step_s, bytes, ceiling)?;
    }
    let round_s = step_s + verify_s;
    for al in [6.14, 7.04, 8.31] {
        println!(
            "projected at acceptance length {al}: {:.0} tok/s (draft + {verify_nodes}-node verify = {:.3} ms per \
             round; commit and tree build not included)",
            al / round_s,
            round_s * 1e3
        );
    }
    Ok((d, step_s))
}

fn gib(b: u64) -> f64 {
    b as f64 / (1u64 << 30) as f64
}
