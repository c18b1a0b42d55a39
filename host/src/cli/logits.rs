//! `flashtree logits`: teacher-forced logits (and optionally layer outputs) of a token sequence,
//! for comparing flashtree with another implementation. Runs the CPU reference, or the GPU engine
//! (`--backend gpu`, or `auto` on a machine with a GPU and a GGUF model) through the same chunked
//! forward that prefill uses.

use crate::cli::limits;
use crate::convert::qwen35::load_hf;
use crate::gguf::Gguf;
use anyhow::Context;
use clap::Args;
use flashtree_reference::model::{ForwardOptions, ForwardOutput, Qwen35State, Qwen35Weights};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

#[derive(Debug, Args)]
pub struct LogitsArgs {
    /// A qwen35 GGUF, or an HF checkpoint folder.
    #[arg(long)]
    pub model: PathBuf,
    /// Comma-separated token ids, e.g. 1,2,3.
    #[arg(long)]
    pub tokens: String,
    /// Comma-separated 0-based layers whose outputs (residual stream after the layer, HF
    /// `hidden_states[l+1]`) are also printed.
    #[arg(long)]
    pub layers: Option<String>,
    /// Print JSON `{"tokens", "logits": [[..]..], "hidden": {"<layer>": [[..]..]}}` instead of a
    /// per-position summary.
    #[arg(long)]
    pub json: bool,
    /// Context in tokens; default and maximum: the model's trained context (`qwen35.context_length`
    /// of a GGUF, `max_position_embeddings` of an HF config).
    #[arg(long)]
    pub ctx: Option<usize>,
    /// Where the forward runs: `auto` = the GPU engine when a GPU is present and the model is a
    /// GGUF, `cpu` = the reference, `gpu` = the engine or an error.
    #[arg(long, value_enum, default_value_t = super::backend::BackendArg::Auto)]
    pub backend: super::backend::BackendArg,
}

/// A comma-separated list of non-negative integers; an empty item (`1,,2`, a trailing comma) is
/// an error, not skipped.
pub fn parse_list<T: std::str::FromStr>(what: &str, s: &str) -> anyhow::Result<Vec<T>> {
    s.split(',')
        .map(str::trim)
        .enumerate()
        .map(|(i, x)| {
            if x.is_empty() {
                anyhow::bail!(
                    "--{what}: item {} is empty in \"{}\" (expected e.g. 1,2,3)",
                    i + 1,
                    crate::cli::limits::cut(s)
                );
            }
            x.parse::<T>().map_err(|_| {
                anyhow::anyhow!("--{what}: \"{}\" is not a non-negative integer", crate::cli::limits::cut(x))
            })
        })
        .collect()
}

/// The trained context of a model given as a GGUF file or an HF folder, and (for a GGUF) the CPU
/// memory plan of a forward over `tokens` tokens.
fn context_and_plan(path: &Path, tokens: usize) -> anyhow::Result<(usize, Option<limits::CpuMemoryPlan>)> {
    if path.is_dir() {
        let cfg_path = path.join("config.json");
        let text = crate::model::json::read_config_text(&cfg_path)?;
        let cfg = crate::convert::hf_config::parse(&text, &cfg_path)?;
        Ok((cfg.context_length, None))
    } else {
        let g = Gguf::open(path)?; // its errors name the file
        let cfg = crate::model::Qwen35Config::from_gguf(&g)?;
        Ok((cfg.context_length, Some(limits::cpu_plan(&g, tokens, tokens, 0, false)?)))
    }
}

/// Loads a model given as a GGUF file or an HF folder (a progress bar on a terminal).
pub fn load_model(path: &Path) -> anyhow::Result<Qwen35Weights> {
    let progress = limits::LoadProgress::new(false);
    let w = if path.is_dir() {
        progress.step(format!("loading {}", path.display()));
        load_hf(path).with_context(|| format!("loading HF checkpoint {}", path.display()))?.1
    } else {
        progress
            .load_target(format!("loading {}", path.display()), path)
            .with_context(|| format!("loading GGUF {}", path.display()))?
    };
    progress.finish();
    Ok(w)
}

/// Runs the forward and renders the output (JSON or text).
pub fn render(args: &LogitsArgs) -> anyhow::Result<String> {
    let tokens: Vec<u32> = parse_list("tokens", &args.tokens)?;
    anyhow::ensure!(!tokens.is_empty(), "--tokens: no token ids given");
    let layers: Vec<usize> = match &args.layers {
        Some(l) => parse_list("layers", l)?,
        None => Vec::new(),
    };
    let (trained, plan) = context_and_plan(&args.model, tokens.len())?;
    let ctx = limits::choose_context(args.ctx, trained, &args.model)?;
    limits::check_prompt_fits(tokens.len(), 0, ctx)?;
    if let Some(plan) = plan {
        limits::check_memory(&plan, limits::mem_available())?;
    }
    let backend = match args.backend {
        super::backend::BackendArg::Auto if args.model.is_dir() => super::backend::BackendArg::Cpu,
        super::backend::BackendArg::Gpu if args.model.is_dir() => {
            anyhow::bail!("--backend gpu needs a GGUF model (convert the HF folder with `flashtree convert`)")
        }
        b => b,
    };
    if let Some(gpu) = super::backend::resolve(backend)? {
        let out = gpu_forward(gpu, &args.model, &tokens, &layers)?;
        return Ok(if args.json { to_json(&tokens, &layers, &out) } else { to_text(&tokens, &layers, &out) });
    }
    let w = load_model(&args.model)?;
    let mut st = Qwen35State::new(&w.hparams);
    let opts = ForwardOptions { capture_layers: layers.clone(), ..Default::default() };
    let out = w.forward(&mut st, &tokens, &opts)?;
    Ok(if args.json { to_json(&tokens, &layers, &out) } else { to_text(&tokens, &layers, &out) })
}

/// The logits (and layer outputs) of `tokens` from the GPU engine, in chains of ≤ 32.
fn gpu_forward(gpu: crate::gpu::Gpu, model: &Path, tokens: &[u32], layers: &[usize]) -> anyhow::Result<ForwardOutput> {
    let (mut e, _) = super::backend::open_engine(gpu, model, Some(tokens.len().max(1)), &[], true)?;
    e.set_capture(layers)?;
    let (v, d) = (e.cfg.vocab_size, e.cfg.embedding_length);
    let mut out = ForwardOutput { logits: Vec::new(), captured: vec![Vec::new(); layers.len()] };
    for chunk in tokens.chunks(32) {
        let b = crate::engine::chain_batch(e.n_past(), chunk, v, e.ctx())?;
        e.forward(&b)?;
        out.logits.extend(e.logits(chunk.len())?.chunks(v).map(<[f32]>::to_vec));
        for (c, rows) in e.captured(chunk.len())?.iter().enumerate() {
            out.captured[c].extend(rows.chunks(d).map(<[f32]>::to_vec));
        }
        e.commit(&(0..chunk.len()).collect::<Vec<_>>())?;
    }
    Ok(out)
}

pub fn run(args: &LogitsArgs) -> anyhow::Result<()> {
    print!("{}", render(args)?);
    Ok(())
}

fn to_json(tokens: &[u32], layers: &[usize], out: &ForwardOutput) -> String {
    let hidden: serde_json::Map<String, serde_json::Value> =
        layers.iter().zip(&out.captured).map(|(l, rows)| (l.to_string(), serde_json::json!(rows))).collect();
    let v = serde_json::json!({ "tokens": tokens, "logits": out.logits, "hidden": hidden });
    format!("{v}\n")
}

fn to_text(tokens: &[u32], layers: &[usize], out: &ForwardOutput) -> String {
    let mut s = String::new();
    for (p, (tok, row)) in tokens.iter().zip(&out.logits).enumerate() {
        let top = flashtree_reference::model::ops::top_k_log_probs(row, 5);
        let top: Vec<String> = top.iter().map(|(t, lp)| format!("{t}:{lp:.4}")).collect();
        let norm: f64 = row.iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt();
        let _ = writeln!(s, "pos {p} token {tok} |logits| {norm:.6} top5(id:logprob) {}", top.join(" "));
    }
    for (l, rows) in layers.iter().zip(&out.captured) {
        for (p, r) in rows.iter().enumerate() {
            let norm: f64 = r.iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt();
            let _ = writeln!(s, "layer {l} pos {p} |h| {norm:.6} h[0..4] {:?}", &r[..r.len().min(4)]);
        }
    }
    s
}
