//! Loading: the model's header (config, tokenizer, chat template) on the calling thread, the
//! weights on the worker thread, which keeps them (the targets borrow them) for its lifetime.

use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context};
use tokio::sync::mpsc;

use super::worker::{run_jobs, Job};
use crate::chat::ChatTemplate;
use crate::cli::backend::BackendArg;
use crate::cli::generate::{check_model_path, load_draft};
use crate::cli::limits;
use crate::cli::serve::ServeArgs;
use crate::convert::gguf_load::load_qwen35;
use crate::gguf::Gguf;
use crate::model::Qwen35Config;
use crate::spec::cpu::{check_pair, CpuDraft, CpuTarget};
use crate::spec::{Mode, Session};
use crate::tokenizer::gguf::{from_gguf, GgufTokenizer};

/// What the HTTP side needs of the loaded model.
pub struct Loaded {
    /// The model's name (its file stem).
    pub id: String,
    /// Context in tokens (prompt + generated).
    pub ctx: usize,
    /// Tokenizer, EOS ids.
    pub tk: Arc<GgufTokenizer>,
    /// The GGUF's chat template (the built-in Qwen3.5 one when it has none).
    pub template: ChatTemplate,
    /// Longest byte length of one token (bounds the prompt text before tokenising).
    pub longest_token: usize,
    /// Whether the target runs on the GPU (which refuses T > 0 for now).
    pub gpu: bool,
    /// Where jobs are queued (bounded: full → 429).
    pub jobs: mpsc::Sender<Job>,
}

/// Reads the model's header, loads the pair on a new worker thread and waits until it is ready
/// to take jobs. Errors (a missing file, a mismatched pair, too little RAM) come back here.
pub fn load(args: &ServeArgs, mode: Mode) -> anyhow::Result<Loaded> {
    if args.queue == 0 {
        bail!("--queue 0: the queue must hold at least one request");
    }
    if args.backend == BackendArg::Gpu {
        bail!(
            "--backend gpu: serve runs the target on the CPU backend only for now (the GPU session is the next \
             step); use --backend cpu"
        );
    }
    check_model_path(&args.model)?;
    let file = Gguf::open(&args.model)?; // its errors name the file
    let cfg = Qwen35Config::from_gguf(&file)?;
    let ctx = limits::choose_context(args.ctx, cfg.context_length, &args.model)?;
    let tk = from_gguf(&file).with_context(|| format!("reading the tokenizer of {}", args.model.display()))?;
    let longest_token = (0..tk.tokenizer.vocab_size() as u32)
        .filter_map(|id| tk.tokenizer.token_bytes(id))
        .map(<[u8]>::len)
        .max()
        .unwrap_or(1);
    let template = match &tk.chat_template {
        Some(src) => ChatTemplate::new(src)
            .with_context(|| format!("the tokenizer.chat_template of {}", args.model.display()))?,
        None => ChatTemplate::qwen35(),
    };
    let draft_f32 = match &args.draft {
        Some(p) => limits::draft_f32_bytes(p)?,
        None => 0,
    };
    let plan = limits::cpu_plan(&file, ctx.saturating_add(args.budget + 1), ctx, draft_f32)?;
    limits::check_memory(&plan, limits::mem_available())?;
    drop(file);
    if args.draft.is_none() && mode != Mode::Ar {
        bail!("--mode {} needs --draft", mode.name());
    }

    let tk = Arc::new(tk);
    let (jobs, rx) = mpsc::channel(args.queue);
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<anyhow::Result<()>>();
    let (model, draft, worker_tk) = (args.model.clone(), args.draft.clone(), tk.clone());
    let vocab = tk.tokenizer.vocab_size();
    std::thread::Builder::new()
        .name("flashtree-serve-worker".into())
        .spawn(move || {
            let loaded = (|| -> anyhow::Result<_> {
                let target = load_qwen35(&model).with_context(|| format!("loading {}", model.display()))?;
                if vocab > target.hparams.n_vocab {
                    bail!(
                        "{}: the tokenizer has {vocab} tokens but the model's vocabulary is {}",
                        model.display(),
                        target.hparams.n_vocab
                    );
                }
                let d = match &draft {
                    Some(p) => {
                        let d = load_draft(p)?;
                        check_pair(&target, &d)
                            .map_err(|e| anyhow::anyhow!("{} vs {}: {e}", p.display(), model.display()))?;
                        Some(d)
                    }
                    None => None,
                };
                Ok((target, d))
            })();
            let (target, draft) = match loaded {
                Ok(x) => x,
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                    return;
                }
            };
            let capture = draft.as_ref().map_or_else(Vec::new, |d| d.hparams.target_layer_ids.clone());
            let tgt = CpuTarget::new(&target, capture);
            let dft = draft.as_ref().map(|d| CpuDraft::new(d, &target));
            let _ = ready_tx.send(Ok(()));
            run_jobs(Session::new(tgt, dft), rx, worker_tk);
        })
        .context("starting the worker thread")?;
    ready_rx.recv().context("the worker thread stopped while loading")??;
    Ok(Loaded { id: model_id(&args.model), ctx, tk, template, longest_token, gpu: false, jobs })
}

/// The name `/v1/models` lists: the file stem.
fn model_id(path: &Path) -> String {
    path.file_stem().map_or_else(|| "model".into(), |s| s.to_string_lossy().into_owned())
}
