//! Loading a target and its draft on the chosen backend once, for commands that run many
//! generations over them (`chat`, `bench --prompts`): the header (tokenizer, chat template,
//! context) read first, the memory checked, the weights loaded with progress shown on a terminal,
//! then one [`Session`] handed to a [`PairRunner`]. The targets borrow the weights, so the
//! session lives only inside [`with_pair`]; the runner is generic over the backend's types.
//!
//! CPU: `CpuTarget` + `CpuDraft`. GPU: the engine target with the draft on the GPU, or on the CPU
//! reading the engine's feature store when the GPU kernels do not cover it (as `generate` and
//! `serve` run them).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

use super::backend::BackendArg;
use super::generate::{check_model_path, load_draft, CpuDraftOnGpu};
use super::limits;
use crate::chat::ChatTemplate;
use crate::gguf::Gguf;
use crate::model::Qwen35Config;
use crate::spec::cpu::{check_pair, CpuDraft, CpuTarget};
use crate::spec::{Draft, HostDraft, Session, Target};
use crate::tokenizer::gguf::{from_gguf, GgufTokenizer};

/// Default context of the GPU engine when `--ctx` is not given (its KV cache is allocated whole).
pub const GPU_DEFAULT_CTX: usize = 8192;

/// What to load.
#[derive(Debug, Clone)]
pub struct PairSpec {
    /// Target GGUF.
    pub model: PathBuf,
    /// DFlash draft (folder or GGUF); `None` runs AR only.
    pub draft: Option<PathBuf>,
    /// Where the target runs.
    pub backend: BackendArg,
    /// `--ctx`: at most the model's trained context. Default: the trained context on the CPU,
    /// min(trained, [`GPU_DEFAULT_CTX`]) on the GPU.
    pub ctx: Option<usize>,
    /// Largest tree budget that will be asked for (the CPU memory plan counts its verify rows).
    pub budget: usize,
    /// Print each load step also when stderr is not a terminal.
    pub verbose: bool,
}

/// The loaded model's header, for the runner.
pub struct PairInfo {
    /// Tokenizer and EOS ids.
    pub tk: GgufTokenizer,
    /// The GGUF's chat template (the built-in Qwen3.5 one when it has none).
    pub template: ChatTemplate,
    /// Context in tokens: prompt + generated + `reserve` must fit in it.
    pub ctx: usize,
    /// Positions kept free after the generated tokens for one verify batch (the GPU engine's
    /// fixed context must hold it; the CPU caches grow, so 0 there).
    pub reserve: usize,
    /// Whether the target runs on the GPU.
    pub gpu: bool,
    /// Whether a draft was loaded (the speculative modes need it).
    pub has_draft: bool,
}

impl PairInfo {
    /// The tokens left for generation after a prompt of `prompt` tokens (0 when it does not fit).
    pub fn room(&self, prompt: usize) -> usize {
        self.ctx.saturating_sub(prompt.saturating_add(self.reserve))
    }
}

/// Runs over the loaded pair's session, whatever the backend's target and draft types are.
pub trait PairRunner {
    /// What the run returns.
    type Output;
    /// Uses `session` (fresh: its first turn prefills).
    fn run<T, D>(self, session: Session<T, D>, info: &PairInfo) -> anyhow::Result<Self::Output>
    where
        T: Target,
        D: Draft<Features = T::Features>;
}

/// Loads the pair of `spec` and calls `runner` with its session.
pub fn with_pair<R: PairRunner>(spec: &PairSpec, runner: R) -> anyhow::Result<R::Output> {
    check_model_path(&spec.model)?;
    let file = Gguf::open(&spec.model)?; // its errors name the file
    let cfg = Qwen35Config::from_gguf(&file)?;
    limits::choose_context(spec.ctx, cfg.context_length, &spec.model)?;
    let tk = from_gguf(&file).with_context(|| format!("reading the tokenizer of {}", spec.model.display()))?;
    let template = match &tk.chat_template {
        Some(src) => ChatTemplate::new(src)
            .with_context(|| format!("the tokenizer.chat_template of {}", spec.model.display()))?,
        None => ChatTemplate::qwen35(),
    };
    let header = Header { file, cfg, tk, template };
    match super::backend::resolve(spec.backend)? {
        Some(gpu) => on_gpu(spec, gpu, header, runner),
        None => on_cpu(spec, header, runner),
    }
}

/// The model's header, read before the weights.
struct Header {
    file: Gguf,
    cfg: Qwen35Config,
    tk: GgufTokenizer,
    template: ChatTemplate,
}

/// The CPU reference: memory plan checked, weights dequantised to f32.
fn on_cpu<R: PairRunner>(spec: &PairSpec, h: Header, runner: R) -> anyhow::Result<R::Output> {
    let model = &spec.model;
    let ctx = limits::choose_context(spec.ctx, h.cfg.context_length, model)?;
    let draft_f32 = match &spec.draft {
        Some(p) => limits::draft_f32_bytes(p)?,
        None => 0,
    };
    let plan = limits::cpu_plan(&h.file, ctx.saturating_add(spec.budget + 1), ctx, draft_f32, true)?;
    limits::check_memory(&plan, limits::mem_available())?;
    drop(h.file);
    let progress = limits::LoadProgress::new(spec.verbose);
    let msg = format!("loading {} (dequantising to f32: {})", model.display(), limits::format_gib(plan.target_weights));
    let target = progress.load_target(msg, model).with_context(|| format!("loading {}", model.display()))?;
    let vocab = h.tk.tokenizer.vocab_size();
    if vocab > target.hparams.n_vocab {
        bail!(
            "{}: the tokenizer has {vocab} tokens but the model's vocabulary is {}",
            model.display(),
            target.hparams.n_vocab
        );
    }
    let draft = match &spec.draft {
        Some(p) => {
            progress.step(format!("loading the draft {}", p.display()));
            let d = load_draft(p)?;
            check_pair(&target, &d).map_err(|e| anyhow::anyhow!("{} vs {}: {e}", p.display(), model.display()))?;
            Some(d)
        }
        None => None,
    };
    progress.finish();
    let capture = draft.as_ref().map_or_else(Vec::new, |d| d.hparams.target_layer_ids.clone());
    let tgt = CpuTarget::new(&target, capture);
    let dft = draft.as_ref().map(|d| CpuDraft::new(d, &target));
    let info = PairInfo { tk: h.tk, template: h.template, ctx, reserve: 0, gpu: false, has_draft: dft.is_some() };
    runner.run(Session::new(tgt, dft), &info)
}

/// The GPU engine (context `--ctx`, default min(trained, [`GPU_DEFAULT_CTX`]), one verify batch
/// kept free); the draft on the GPU, or on the CPU from the feature store.
fn on_gpu<R: PairRunner>(spec: &PairSpec, gpu: crate::gpu::Gpu, h: Header, runner: R) -> anyhow::Result<R::Output> {
    let model = &spec.model;
    let nodes = if spec.draft.is_none() { 1 } else { kernel_abi::MAX_NODES as usize };
    if spec.draft.is_some() && spec.budget >= nodes {
        bail!("--budget {}: the GPU engine verifies at most {nodes} nodes (budget + 1) per round", spec.budget);
    }
    let trained = h.cfg.context_length;
    let ctx = limits::choose_context(spec.ctx.or(Some(trained.min(GPU_DEFAULT_CTX))), trained, model)?;
    if ctx <= nodes {
        bail!("--ctx {ctx} leaves no room for a prompt next to a verify batch of {nodes} tokens");
    }
    let draft = match &spec.draft {
        Some(p) => Some(crate::model::DraftModel::open(p)?),
        None => None,
    };
    let capture = draft.as_ref().map_or_else(Vec::new, |d| d.config.target_layer_ids.clone());
    let (mut engine, _) = super::backend::open_engine(gpu, model, Some(ctx), &capture, !spec.verbose)?;
    let gpu_draft = match &draft {
        Some(d) => super::gpu_draft_load::gpu_draft_or_note(&engine, d, ctx, spec.verbose, |n| {
            eprintln!("{n}");
            Ok(())
        })?,
        None => None,
    };
    let info = PairInfo { tk: h.tk, template: h.template, ctx, reserve: nodes, gpu: true, has_draft: draft.is_some() };
    let tgt = crate::engine::GpuTarget::new(&mut engine);
    match (draft, gpu_draft) {
        (None, _) => runner.run(Session::new(tgt, None::<CpuDraftOnGpu>), &info),
        (Some(_), Some(de)) => {
            let dft = crate::engine::GpuDraft::new(de, tgt.feature_source()?)?;
            runner.run(Session::new(tgt, Some(dft)), &info)
        }
        (Some(d), None) => {
            let parts = super::gpu_draft_load::CpuDraftParts::load(&d, &h.file, &h.cfg, model)?;
            let dft = HostDraft::new(parts.draft(), tgt.feature_source()?);
            runner.run(Session::new(tgt, Some(dft)), &info)
        }
    }
}

/// The demo draft for the demo target when no draft is given and a speculative mode is wanted.
pub fn draft_or_demo(model: &Path, draft: Option<&Path>, speculative: bool) -> Option<PathBuf> {
    match draft {
        Some(d) => Some(d.to_path_buf()),
        None if speculative => super::default_model::draft_for(model),
        None => None,
    }
}
