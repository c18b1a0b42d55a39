//! Loading: the model's header (config, tokenizer, chat template) on the calling thread; the
//! backend chosen, the weights loaded and kept on the worker thread (the targets borrow them),
//! which then serves the queue for the process's lifetime.

use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context};
use tokio::sync::mpsc;

use super::worker::{run_jobs, Job};
use crate::chat::ChatTemplate;
use crate::cli::generate::{check_model_path, load_draft, CpuDraftOnGpu};
use crate::cli::limits;
use crate::cli::serve::ServeArgs;
use crate::gguf::Gguf;
use crate::model::Qwen35Config;
use crate::spec::cpu::{check_pair, CpuDraft, CpuTarget};
use crate::spec::{HostDraft, Mode, Session};
use crate::tokenizer::gguf::{from_gguf, GgufTokenizer};

/// Default context of the GPU engine when `--ctx` is not given (the KV cache is allocated for
/// all of it at load), as `generate` uses.
pub const GPU_DEFAULT_CTX: usize = 8192;

/// What the HTTP side needs of the loaded model.
pub struct Loaded {
    /// The model's name (its file stem).
    pub id: String,
    /// Context in tokens: prompt + generated + `reserve` fit in it.
    pub ctx: usize,
    /// Positions kept free after the generated tokens for one verify batch (the GPU engine's
    /// fixed context must hold it; the CPU caches grow, so 0 there).
    pub reserve: usize,
    /// Tokenizer, EOS ids.
    pub tk: Arc<GgufTokenizer>,
    /// The GGUF's chat template (the built-in Qwen3.5 one when it has none).
    pub template: ChatTemplate,
    /// Longest byte length of one token (bounds the prompt text before tokenising).
    pub longest_token: usize,
    /// Whether the target runs on the GPU (`/metrics` reports the backend).
    pub gpu: bool,
    /// Where jobs are queued (bounded: full → 429).
    pub jobs: mpsc::Sender<Job>,
    /// Requests and generations counted for `/metrics` (the worker records into it).
    pub metrics: Arc<super::metrics::Metrics>,
}

/// What the worker reports once its models are loaded.
struct Ready {
    gpu: bool,
    ctx: usize,
    reserve: usize,
}

/// Reads the model's header, loads the pair on a new worker thread and waits until it is ready
/// to take jobs. Errors (a missing file, a mismatched pair, too little memory) come back here.
/// `args.pair` is resolved ([`crate::cli::pair_args::PairArgs::resolved`], as [`super::app`] does).
pub fn load(args: &ServeArgs, mode: Mode) -> anyhow::Result<Loaded> {
    if args.queue == 0 {
        bail!("--queue 0: the queue must hold at least one request");
    }
    check_model_path(&args.pair.model)?;
    let file = Gguf::open(&args.pair.model)?; // its errors name the file
    let cfg = Qwen35Config::from_gguf(&file)?;
    // Checked here for its message; the context itself is chosen per backend on the worker.
    limits::choose_context(args.ctx, cfg.context_length, &args.pair.model)?;
    let tk = from_gguf(&file).with_context(|| format!("reading the tokenizer of {}", args.pair.model.display()))?;
    let longest_token = (0..tk.tokenizer.vocab_size() as u32)
        .filter_map(|id| tk.tokenizer.token_bytes(id))
        .map(<[u8]>::len)
        .max()
        .unwrap_or(1);
    let template = match (&args.chat_template, &tk.chat_template) {
        (Some(p), _) if p.as_os_str() == "qwen35" => ChatTemplate::qwen35(),
        (Some(p), _) => {
            let src =
                std::fs::read_to_string(p).with_context(|| format!("--chat-template: reading {}", p.display()))?;
            ChatTemplate::new(&src).with_context(|| format!("--chat-template {}", p.display()))?
        }
        (None, Some(src)) => ChatTemplate::new(src)
            .with_context(|| format!("the tokenizer.chat_template of {}", args.pair.model.display()))?,
        (None, None) => ChatTemplate::qwen35(),
    };
    drop(file);

    let tk = Arc::new(tk);
    let (jobs, rx) = mpsc::channel(args.queue);
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<anyhow::Result<Ready>>();
    let metrics = super::metrics::Metrics::new();
    let (args_w, worker_tk, worker_metrics) = (args.clone(), tk.clone(), metrics.clone());
    std::thread::Builder::new()
        .name("flashtree-serve-worker".into())
        .spawn(move || {
            let r = match crate::cli::backend::resolve(args_w.pair.backend) {
                Ok(Some(gpu)) => gpu_worker(&args_w, mode, gpu, &ready_tx, rx, (worker_tk, worker_metrics)),
                Ok(None) => cpu_worker(&args_w, mode, &ready_tx, rx, (worker_tk, worker_metrics)),
                Err(e) => Err(e),
            };
            // Only a failure before `Ready` reaches the caller; later ones end the worker, and
            // requests are then answered 503.
            if let Err(e) = r {
                let _ = ready_tx.send(Err(e));
            }
        })
        .context("starting the worker thread")?;
    let ready = ready_rx.recv().context("the worker thread stopped while loading")??;
    Ok(Loaded {
        id: model_id(&args.pair.model),
        ctx: ready.ctx,
        reserve: ready.reserve,
        tk,
        template,
        longest_token,
        gpu: ready.gpu,
        jobs,
        metrics,
    })
}

/// The CPU reference: memory plan checked, weights dequantised, then the queue served.
fn cpu_worker(
    args: &ServeArgs,
    mode: Mode,
    ready: &std::sync::mpsc::Sender<anyhow::Result<Ready>>,
    rx: mpsc::Receiver<Job>,
    (tk, metrics): (Arc<GgufTokenizer>, Arc<super::metrics::Metrics>),
) -> anyhow::Result<()> {
    let file = Gguf::open(&args.pair.model)?;
    let cfg = Qwen35Config::from_gguf(&file)?;
    let ctx = limits::choose_context(args.ctx, cfg.context_length, &args.pair.model)?;
    let draft_f32 = match &args.pair.draft {
        Some(p) if mode != Mode::Ar => limits::draft_f32_bytes(p)?,
        _ => 0,
    };
    let plan = limits::cpu_plan(&file, ctx.saturating_add(args.pair.budget + 1), ctx, draft_f32, true)?;
    limits::check_memory(&plan, limits::mem_available())?;
    drop(file);
    let model = &args.pair.model;
    let progress = limits::LoadProgress::new(true);
    let msg = format!("loading {} (dequantising to f32: {})", model.display(), limits::format_gib(plan.target_weights));
    let target = progress.load_target(msg, model).with_context(|| format!("loading {}", model.display()))?;
    let vocab = tk.tokenizer.vocab_size();
    if vocab > target.hparams.n_vocab {
        bail!(
            "{}: the tokenizer has {vocab} tokens but the model's vocabulary is {}",
            model.display(),
            target.hparams.n_vocab
        );
    }
    let draft = match &args.pair.draft {
        Some(p) if mode != Mode::Ar => {
            progress.step(format!("loading the draft {}", p.display()));
            let d = load_draft(p)?;
            check_pair(&target, &d).map_err(|e| anyhow::anyhow!("{} vs {}: {e}", p.display(), model.display()))?;
            Some(d)
        }
        _ => None,
    };
    let capture = draft.as_ref().map_or_else(Vec::new, |d| d.hparams.target_layer_ids.clone());
    let tgt = CpuTarget::new(&target, capture);
    let dft = draft.as_ref().map(|d| CpuDraft::new(d, &target));
    progress.finish();
    if let Some(path) = &args.script {
        let tgt = super::script::ScriptedTarget::new(tgt, &super::script::read(path)?, tk.clone())?;
        let _ = ready.send(Ok(Ready { gpu: false, ctx, reserve: 0 }));
        run_jobs(Session::new(tgt, dft), rx, tk, metrics);
        return Ok(());
    }
    let _ = ready.send(Ok(Ready { gpu: false, ctx, reserve: 0 }));
    run_jobs(Session::new(tgt, dft), rx, tk, metrics);
    Ok(())
}

/// The GPU engine (context `--ctx`, default [`GPU_DEFAULT_CTX`]); the draft on the GPU, or on
/// the CPU reading the engine's feature store when the GPU kernels do not cover it — as
/// `generate` runs them.
fn gpu_worker(
    args: &ServeArgs,
    mode: Mode,
    gpu: crate::gpu::Gpu,
    ready: &std::sync::mpsc::Sender<anyhow::Result<Ready>>,
    rx: mpsc::Receiver<Job>,
    (tk, metrics): (Arc<GgufTokenizer>, Arc<super::metrics::Metrics>),
) -> anyhow::Result<()> {
    if args.script.is_some() {
        bail!("--script (for tests) runs on the CPU backend only");
    }
    let nodes = if mode == Mode::Ar { 1 } else { kernel_abi::MAX_NODES as usize };
    if mode != Mode::Ar && args.pair.budget >= nodes {
        bail!("--budget {}: the GPU engine verifies at most {nodes} nodes (budget + 1) per round", args.pair.budget);
    }
    let file = Gguf::open(&args.pair.model)?;
    let cfg_t = Qwen35Config::from_gguf(&file)?;
    let ctx = limits::choose_context(
        args.ctx.or(Some(cfg_t.context_length.min(GPU_DEFAULT_CTX))),
        cfg_t.context_length,
        &args.pair.model,
    )?;
    if ctx <= nodes {
        bail!("--ctx {ctx} leaves no room for a prompt next to a verify batch of {nodes} tokens");
    }
    let draft = match &args.pair.draft {
        Some(p) if mode != Mode::Ar => Some(crate::model::DraftModel::open(p)?),
        _ => None,
    };
    let capture = draft.as_ref().map_or_else(Vec::new, |d| d.config.target_layer_ids.clone());
    let (mut engine, _) = crate::cli::backend::open_engine(gpu, &args.pair.model, Some(ctx), &capture, false)?;
    let gpu_draft = match &draft {
        Some(d) => crate::cli::gpu_draft_load::gpu_draft_or_note(&engine, d, ctx, false, |n| {
            eprintln!("{n}");
            Ok(())
        })?,
        None => None,
    };
    let tgt = crate::engine::GpuTarget::new(&mut engine);
    let ok = Ready { gpu: true, ctx, reserve: nodes };
    match (draft, gpu_draft) {
        (None, _) => {
            let _ = ready.send(Ok(ok));
            run_jobs(Session::new(tgt, None::<CpuDraftOnGpu>), rx, tk, metrics);
        }
        (Some(_), Some(de)) => {
            let dft = crate::engine::GpuDraft::new(de, tgt.feature_source()?)?;
            let _ = ready.send(Ok(ok));
            run_jobs(Session::new(tgt, Some(dft)), rx, tk, metrics);
        }
        (Some(model), None) => {
            let parts = crate::cli::gpu_draft_load::CpuDraftParts::load(&model, &file, &cfg_t, &args.pair.model)?;
            let dft = HostDraft::new(parts.draft(), tgt.feature_source()?);
            let _ = ready.send(Ok(ok));
            run_jobs(Session::new(tgt, Some(dft)), rx, tk, metrics);
        }
    }
    Ok(())
}

/// The name `/v1/models` lists: the file stem.
fn model_id(path: &Path) -> String {
    path.file_stem().map_or_else(|| "model".into(), |s| s.to_string_lossy().into_owned())
}
