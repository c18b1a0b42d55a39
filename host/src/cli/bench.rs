//! `flashtree bench`: decode speed of the GPU engine against the bandwidth limit measured in
//! the same run: AR tok/s, ms per step, weight GB/s and its fraction of the copy ceiling, the
//! time of a tree verify forward against an AR step, chunked prefill tok/s, load time, memory,
//! and a per-kernel-family breakdown of one step.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::bail;
use clap::Args;

use super::backend::{open_engine, resolve, BackendArg};
use crate::engine::{chain_batch, node_batch, Engine};
use crate::gpu::bandwidth;

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Target model (qwen35 GGUF); default: the demo target in `models/` (see `models/README.md`).
    #[arg(long, default_value_os_t = super::default_model::target())]
    pub model: PathBuf,
    /// Decoding mode (the GPU runs `ar` today; tree modes need the GPU draft).
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
        bail!("bench --mode {:?}: the GPU backend runs `ar` until the draft runs on the GPU", args.mode);
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
    let (mut e, load_s) = open_engine(gpu, &args.model, Some(ctx), false)?;
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
    Ok(())
}

fn gib(b: u64) -> f64 {
    b as f64 / (1u64 << 30) as f64
}
