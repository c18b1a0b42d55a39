//! `flashtree generate`: tokenise a prompt (optionally through the chat template), run the
//! speculative loop (AR, DFlash chain or DDTree) on the CPU backend, stream the text as tokens
//! are committed, then print tokens, tok/s, acceptance length and the accepted-depth histogram.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use clap::{Args, ValueEnum};
use flashtree_reference::model::dflash::DFlashWeights;

use crate::chat::{ChatTemplate, Message, RenderOptions};
use crate::cli::limits;
use crate::convert::dflash::load_draft as load_draft_weights;
use crate::convert::gguf_load::load_qwen35;
use crate::gguf::Gguf;
use crate::model::Qwen35Config;
use crate::spec::cpu::{check_pair, CpuDraft, CpuTarget};
use crate::spec::{generate, GenerateConfig, Mode, SpecError};
use crate::tokenizer::gguf::from_gguf;
use crate::tokenizer::StreamDecoder;

/// The largest budget accepted (the verify batch is `budget + 1` tokens).
pub const MAX_BUDGET: usize = 4096;

/// Which tree each round verifies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ModeArg {
    /// Plain autoregressive decoding (no draft needed).
    Ar,
    /// DFlash chain (top-1 of each drafted position).
    Chain,
    /// DDTree (best-first tree of `--budget` nodes).
    Tree,
    /// The anchor's DDTree variant (chain seeded first, K ≤ 8), for comparison.
    AnchorTree,
}

/// `flashtree generate` arguments.
#[derive(Debug, Clone, Args)]
pub struct GenerateArgs {
    /// Target model (qwen35 GGUF); default: the demo target in `models/` (`$FLASHTREE_MODELS`
    /// overrides the folder; see `models/README.md`).
    #[arg(long, default_value_os_t = super::default_model::target())]
    pub model: PathBuf,
    /// DFlash draft: a z-lab folder (config.json + safetensors) or a `dflash` GGUF. Not needed
    /// for `--mode ar`; the demo target's draft is taken when the model is the demo target.
    #[arg(long)]
    pub draft: Option<PathBuf>,
    /// Decoding mode.
    #[arg(long, value_enum, default_value_t = ModeArg::Tree)]
    pub mode: ModeArg,
    /// Tree budget: non-root nodes verified per round.
    #[arg(long, default_value_t = 22)]
    pub budget: usize,
    /// Stop after this many generated tokens.
    #[arg(long, default_value_t = 256)]
    pub max_tokens: usize,
    /// Prompt text; read from stdin when absent.
    #[arg(long)]
    pub prompt: Option<String>,
    /// Wrap the prompt as a user turn with the model's chat template.
    #[arg(long)]
    pub chat: bool,
    /// System prompt (with --chat).
    #[arg(long)]
    pub system: Option<String>,
    /// Disable thinking in the chat template (with --chat).
    #[arg(long)]
    pub no_think: bool,
    /// Context in tokens (prompt + generated); default and maximum: the model's trained context
    /// (`qwen35.context_length`).
    #[arg(long)]
    pub ctx: Option<usize>,
    /// Print each load step (a spinner shows them anyway when stderr is a terminal).
    #[arg(long)]
    pub verbose: bool,
    /// Where the target runs: `auto` = the GPU when one is present (for `--mode ar`; the
    /// speculative modes run on the CPU until the draft runs on the GPU), `gpu` = the GPU or an
    /// error, `cpu` = the CPU reference.
    #[arg(long, value_enum, default_value_t = super::backend::BackendArg::Auto)]
    pub backend: super::backend::BackendArg,
}

/// Refuses a `--model` that is a directory or missing, naming it (the OS says "No such device"
/// for a directory mapped as a file).
pub fn check_model_path(path: &Path) -> anyhow::Result<()> {
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => bail!("--model {}: is a directory; expected a qwen35 GGUF file", path.display()),
        Ok(_) => Ok(()),
        Err(e) => Err(e).with_context(|| format!("--model {}: cannot read it", path.display())),
    }
}

fn load_draft(path: &Path) -> anyhow::Result<DFlashWeights> {
    Ok(load_draft_weights(path).with_context(|| format!("loading draft {}", path.display()))?.1)
}

/// Reads the prompt: `--prompt`, else stdin (at most `max_bytes` + 1 bytes are read).
fn read_prompt(args: &GenerateArgs, max_bytes: usize) -> anyhow::Result<String> {
    match &args.prompt {
        Some(p) => Ok(p.clone()),
        None => {
            let mut buf = Vec::new();
            std::io::stdin()
                .take(max_bytes as u64 + 1)
                .read_to_end(&mut buf)
                .context("reading the prompt from stdin")?;
            // Invalid UTF-8 becomes U+FFFD, as the tokenizer's byte input does.
            Ok(String::from_utf8_lossy(&buf).into_owned())
        }
    }
}

/// Runs the command, writing generated text to `out` and progress/stats to `err`.
///
/// Order matters for bounded input: the model's header (config, tokenizer) is read first, the
/// prompt is tokenised and checked against the context, the CPU memory plan against the RAM
/// available, and only then are the weights loaded.
pub fn run_to(args: &GenerateArgs, out: &mut dyn Write, err: &mut dyn Write) -> anyhow::Result<()> {
    if args.budget > MAX_BUDGET {
        bail!("--budget {} is larger than the maximum {MAX_BUDGET}", args.budget);
    }
    if !args.chat {
        if args.system.is_some() {
            bail!("--system is only used with --chat (it becomes the chat template's system turn)");
        }
        if args.no_think {
            bail!("--no-think is only used with --chat (it switches the chat template's thinking off)");
        }
    }
    let mode = match args.mode {
        ModeArg::Ar => Mode::Ar,
        ModeArg::Chain => Mode::Chain,
        ModeArg::Tree => Mode::Tree,
        ModeArg::AnchorTree => Mode::AnchorTree,
    };
    let with_demo_draft;
    let args = match super::default_model::draft_for(&args.model) {
        Some(d) if args.draft.is_none() && mode != Mode::Ar => {
            with_demo_draft = GenerateArgs { draft: Some(d), ..args.clone() };
            &with_demo_draft
        }
        _ => args,
    };
    if args.draft.is_none() && mode != Mode::Ar {
        bail!("--mode {} needs --draft", mode.name());
    }
    check_model_path(&args.model)?;
    let file = Gguf::open(&args.model)?; // its errors name the file
    let cfg = Qwen35Config::from_gguf(&file)?;
    let ctx = limits::choose_context(args.ctx, cfg.context_length, &args.model)?;
    let tk = from_gguf(&file).with_context(|| format!("reading the tokenizer of {}", args.model.display()))?;
    let longest_token =
        (0..tk.tokenizer.vocab_size() as u32).filter_map(|id| tk.tokenizer.token_bytes(id)).map(<[u8]>::len).max();
    let max_bytes = limits::max_prompt_bytes(ctx, longest_token.unwrap_or(1));
    let text = read_prompt(args, max_bytes)?;
    if text.len() > max_bytes {
        bail!(
            "the prompt is longer than {max_bytes} bytes, so it needs more than the context of {ctx} tokens \
             (no token of this vocabulary covers more than {} bytes)",
            longest_token.unwrap_or(1)
        );
    }
    let text = if args.chat {
        let template = match &tk.chat_template {
            Some(src) => ChatTemplate::new(src)
                .with_context(|| format!("the tokenizer.chat_template of {}", args.model.display()))?,
            None => ChatTemplate::qwen35(),
        };
        let mut msgs = Vec::new();
        if let Some(s) = &args.system {
            msgs.push(Message::new("system", s));
        }
        msgs.push(Message::new("user", &text));
        template.render(&msgs, RenderOptions { add_generation_prompt: true, enable_thinking: !args.no_think })?
    } else {
        text
    };
    let prompt = tk.tokenizer.encode(&text)?;
    if prompt.is_empty() {
        bail!("the prompt is empty");
    }
    limits::check_prompt_fits(prompt.len(), args.max_tokens, ctx)?;
    // `auto` runs speculative modes on the CPU until the draft runs on the GPU; `gpu` refuses them.
    let backend = match (args.backend, mode) {
        (super::backend::BackendArg::Auto, m) if m != Mode::Ar => super::backend::BackendArg::Cpu,
        (b, _) => b,
    };
    if let Some(gpu) = super::backend::resolve(backend)? {
        drop(file);
        return run_gpu(args, gpu, mode, &tk, &prompt, out, err);
    }
    let draft_f32 = match &args.draft {
        Some(p) => limits::draft_f32_bytes(p)?,
        None => 0,
    };
    let positions = prompt.len().saturating_add(args.max_tokens).saturating_add(args.budget + 1);
    let plan = limits::cpu_plan(&file, positions, prompt.len(), draft_f32)?;
    limits::check_memory(&plan, limits::mem_available())?;
    drop(file);

    let progress = limits::LoadProgress::new(args.verbose);
    progress.step(format!(
        "loading {} (dequantising to f32: {})",
        args.model.display(),
        limits::format_gib(plan.target_weights)
    ));
    let target = load_qwen35(&args.model).with_context(|| format!("loading {}", args.model.display()))?;
    if tk.tokenizer.vocab_size() > target.hparams.n_vocab {
        bail!(
            "{}: the tokenizer has {} tokens but the model's vocabulary is {}",
            args.model.display(),
            tk.tokenizer.vocab_size(),
            target.hparams.n_vocab
        );
    }
    let draft = match (&args.draft, mode) {
        (Some(p), _) => {
            progress.step(format!("loading the draft {}", p.display()));
            let d = load_draft(p)?;
            check_pair(&target, &d).map_err(|e| anyhow::anyhow!("{} vs {}: {e}", p.display(), args.model.display()))?;
            Some(d)
        }
        (None, Mode::Ar) => None,
        (None, _) => bail!("--mode {} needs --draft", mode.name()),
    };
    progress.step(format!("prefill of {} prompt tokens", prompt.len()));
    let capture = draft.as_ref().map_or_else(Vec::new, |d| d.hparams.target_layer_ids.clone());
    let mut tgt = CpuTarget::new(&target, capture);
    let mut dft = draft.as_ref().map(|d| CpuDraft::new(d, &target));
    let cfg = GenerateConfig { mode, budget: args.budget, max_tokens: args.max_tokens, eos: tk.stop_ids.clone() };
    let mut dec = StreamDecoder::new();
    let mut io_err = None;
    let mut progress = Some(progress);
    let (_, stats) = generate(&mut tgt, dft.as_mut(), &prompt, &cfg, |ids| {
        if let Some(p) = progress.take() {
            p.finish();
        }
        for &id in ids {
            let bytes = tk.tokenizer.token_bytes(id).unwrap_or(b"\xEF\xBF\xBD");
            let piece = dec.push(bytes);
            if let Err(e) = out.write_all(piece.as_bytes()).and_then(|_| out.flush()) {
                io_err.get_or_insert(e);
            }
        }
    })
    .map_err(|e: SpecError| anyhow::anyhow!(e))?;
    if let Some(p) = progress.take() {
        p.finish();
    }
    out.write_all(dec.finish().as_bytes())?;
    writeln!(out)?;
    if let Some(e) = io_err {
        return Err(e).context("writing the generated text");
    }
    writeln!(err, "mode {} budget {}", mode.name(), if mode == Mode::Ar { 0 } else { args.budget })?;
    writeln!(err, "{}", stats.summary())?;
    Ok(())
}

/// Greedy AR decoding of the target on the GPU engine (context: prompt + `--max-tokens`).
fn run_gpu(
    args: &GenerateArgs,
    gpu: crate::gpu::Gpu,
    mode: Mode,
    tk: &crate::tokenizer::gguf::GgufTokenizer,
    prompt: &[u32],
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> anyhow::Result<()> {
    if mode != Mode::Ar {
        bail!(
            "--mode {} on the GPU backend needs the draft on the GPU, which is not built yet: use --mode ar, \
             or --backend cpu for speculative decoding on the CPU reference",
            mode.name()
        );
    }
    let ctx = prompt.len() + args.max_tokens + 1;
    let (mut engine, _) = super::backend::open_engine(gpu, &args.model, Some(ctx), !args.verbose)?;
    let mut tgt = crate::engine::GpuTarget::new(&mut engine);
    let cfg = GenerateConfig { mode, budget: 0, max_tokens: args.max_tokens, eos: tk.stop_ids.clone() };
    let mut dec = StreamDecoder::new();
    let mut io_err = None;
    let (_, stats) = generate(&mut tgt, None::<&mut CpuDraft>, prompt, &cfg, |ids| {
        for &id in ids {
            let bytes = tk.tokenizer.token_bytes(id).unwrap_or(b"\xEF\xBF\xBD");
            let piece = dec.push(bytes);
            if let Err(e) = out.write_all(piece.as_bytes()).and_then(|_| out.flush()) {
                io_err.get_or_insert(e);
            }
        }
    })
    .map_err(|e: SpecError| anyhow::anyhow!(e))?;
    out.write_all(dec.finish().as_bytes())?;
    writeln!(out)?;
    if let Some(e) = io_err {
        return Err(e).context("writing the generated text");
    }
    writeln!(err, "mode ar budget 0 backend gpu")?;
    writeln!(err, "{}", stats.summary())?;
    Ok(())
}

/// Runs the command on stdout/stderr.
pub fn run(args: &GenerateArgs) -> anyhow::Result<()> {
    run_to(args, &mut std::io::stdout().lock(), &mut std::io::stderr().lock())
}
