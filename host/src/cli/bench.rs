//! `flashtree bench`: decode speed of the GPU engine against the bandwidth limit measured in
//! the same run: AR tok/s, ms per step, weight GB/s and its fraction of the copy ceiling, the
//! time of a tree verify forward against an AR step, chunked prefill tok/s, load time, memory,
//! and a per-kernel-family breakdown of one step.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::bail;
use clap::Args;

use super::backend::{open_engine, resolve, BackendArg};
use std::ops::ControlFlow;

use super::generate::CpuDraftOnGpu;
use crate::engine::{chain_batch, node_batch, Engine, GpuTarget};
use crate::gpu::bandwidth;
use crate::spec::{generate, DecodingRule, GenerateConfig, Mode};

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Target model (qwen35 GGUF).
    #[arg(long)]
    pub model: PathBuf,
    /// Decoding mode: `ar` (speculative modes run through `flashtree generate --backend gpu`,
    /// with the draft on the CPU until it runs on the GPU).
    #[arg(long, value_enum, default_value_t = super::generate::ModeArg::Ar)]
    pub mode: super::generate::ModeArg,
    #[arg(long, value_enum, default_value_t = BackendArg::Gpu)]
    pub backend: BackendArg,
    /// KV context to plan for (default: the model's, at most 8192 + the prompt).
    #[arg(long)]
    pub ctx: Option<usize>,
    /// Prompt tokens before decoding (the decode context).
    #[arg(long, default_value_t = 512)]
    pub prompt_tokens: usize,
    /// Decode steps measured.
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
}

fn rand_tokens(seed: u64, n: usize, vocab: usize) -> Vec<u32> {
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
    if args.mode != super::generate::ModeArg::Ar {
        bail!(
            "bench --mode {:?}: bench measures AR decoding; run speculative modes with `flashtree generate \
             --backend gpu --mode tree --draft …` (its stats print host and device phase times)",
            args.mode
        );
    }
    if args.prompt_tokens == 0 || args.tokens == 0 || args.tree_nodes == 0 || args.tree_nodes > 32 {
        bail!("--prompt-tokens and --tokens must be ≥ 1 and --tree-nodes in 1..=32");
    }
    let Some(gpu) = resolve(args.backend)? else { bail!("bench measures the GPU engine: no GPU here") };
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
    let parents: Vec<Option<usize>> = rand_tokens(args.seed + 1, args.tree_nodes, 1 << 20)
        .iter()
        .enumerate()
        .map(|(i, r)| if i == 0 { None } else { Some(*r as usize % i) })
        .collect();
    let tree_toks = rand_tokens(args.seed + 2, args.tree_nodes, v);
    let time_forward = |e: &mut Engine, toks: &[u32], parents: &[Option<usize>]| -> anyhow::Result<f64> {
        let b = node_batch(e.n_past(), toks, parents, v, e.ctx())?;
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
    };
    let t1 = time_forward(&mut e, &[tok], &[None])?;
    let tn = time_forward(&mut e, &tree_toks, &parents)?;
    println!(
        "forward of a {}-node tree: {:.3} ms; one node: {:.3} ms; ratio {:.2}",
        args.tree_nodes,
        tn * 1e3,
        t1 * 1e3,
        tn / t1
    );
    if let Some(path) = &args.draft {
        bench_draft(&e, path, tok, ar_s, tn, args.tree_nodes)?;
    }
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
    // The same decode through the spec loop: host wall time and device-event time per phase.
    let cfg =
        GenerateConfig { mode: Mode::Ar, budget: 0, max_tokens: args.tokens, eos: vec![], rule: DecodingRule::Greedy };
    let mut target = GpuTarget::new(&mut e);
    let (_, stats) = generate(&mut target, None::<&mut CpuDraftOnGpu>, &prompt, &cfg, |_| ControlFlow::Continue(()))?;
    println!("spec loop, AR through GpuTarget ({} tokens after the {}-token prompt):", args.tokens, prompt.len());
    for line in stats.summary().lines() {
        println!("  {line}");
    }
    Ok(())
}

/// Times the GPU draft over the engine's context: appending context rows, and one round's draft
/// step (the accepted path's rows appended + the block forward + top-K, one sync), against the
/// AR step `ar_s`; projects tok/s from the draft step and the verify forward `verify_s`.
fn bench_draft(
    e: &Engine,
    path: &std::path::Path,
    bonus: u32,
    ar_s: f64,
    verify_s: f64,
    verify_nodes: usize,
) -> anyhow::Result<()> {
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
    // The draft's time does not depend on the feature values: synthetic rows of the right size.
    let rows = |n: usize| -> Vec<f32> { (0..n * fl).map(|i| ((i % 97) as f32 - 48.0) * 1e-2).collect() };
    let prompt_rows = e.n_past().min(d.max_context().saturating_sub(256));
    let t = Instant::now();
    d.extend_context(&rows(prompt_rows))?;
    e.gpu.synchronize()?;
    let ctx_s = t.elapsed().as_secs_f64();
    println!(
        "draft context: {prompt_rows} rows appended in {:.2} ms ({:.1} µs per row, chunks of 32)",
        ctx_s * 1e3,
        ctx_s * 1e6 / prompt_rows.max(1) as f64
    );
    let (accepted, k) = (8usize, 8usize.min(e.cfg.vocab_size));
    let path_rows = rows(accepted);
    let rounds = ((d.max_context() - d.context_len()) / accepted).min(20);
    if rounds < 4 {
        anyhow::bail!("bench --draft: the context leaves room for {rounds} draft rounds; raise --ctx");
    }
    d.extend_context(&path_rows)?;
    d.propose(bonus, k)?;
    let t = Instant::now();
    for _ in 1..rounds {
        d.extend_context(&path_rows)?;
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
    let round_s = step_s + verify_s;
    for al in [6.14, 7.04, 8.31] {
        println!(
            "projected at acceptance length {al}: {:.0} tok/s (draft + {verify_nodes}-node verify = {:.3} ms per \
             round; commit and tree build not included)",
            al / round_s,
            round_s * 1e3
        );
    }
    Ok(())
}

fn gib(b: u64) -> f64 {
    b as f64 / (1u64 << 30) as f64
}
