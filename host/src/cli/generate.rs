//! `flashtree generate`: tokenise a prompt (optionally through the chat template), run the
//! speculative loop (AR, DFlash chain or DDTree) with the target on the GPU engine or the CPU
//! reference, stream the text as tokens are committed, then print tokens, tok/s, acceptance
//! length, the accepted-depth histogram and the phase times (host, and device where measured).
//! The draft runs where the target does: on the GPU (`engine::GpuDraft`, reading its context rows
//! from the engine's feature store) with the GPU target — or, for a draft the GPU kernels do not
//! cover yet (sliding-window layers), on the CPU reference fed from that store (`spec::HostDraft`).

use std::io::{Read, Write};
use std::ops::ControlFlow;
use std::path::Path;

use anyhow::{bail, Context};
use clap::{Args, ValueEnum};
use flashtree_reference::model::dflash::DFlashWeights;

use crate::chat::{ChatTemplate, Message, RenderOptions};
use crate::cli::limits;
use crate::cli::pair_args::PairArgs;
use crate::cli::sampling::{write_result, OutputFormat, SamplingArgs};
use crate::convert::dflash::load_draft as load_draft_weights;
use crate::gguf::Gguf;
use crate::model::Qwen35Config;
use crate::spec::cpu::{check_pair, CpuDraft, CpuTarget};
use crate::spec::{generate, DecodingRule, Draft, GenerateConfig, HostDraft, Mode, SpecError, Stats, Target};
use crate::tokenizer::gguf::{from_gguf, GgufTokenizer};
use crate::tokenizer::StreamDecoder;

/// The CPU draft driven by the GPU target (for drafts the GPU kernels do not cover yet): it
/// downloads its rows from the engine's feature store.
pub type CpuDraftOnGpu<'w> = HostDraft<CpuDraft<'w>, crate::engine::EngineFeatures>;

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

impl ModeArg {
    /// The loop's mode.
    pub fn mode(self) -> Mode {
        match self {
            ModeArg::Ar => Mode::Ar,
            ModeArg::Chain => Mode::Chain,
            ModeArg::Tree => Mode::Tree,
            ModeArg::AnchorTree => Mode::AnchorTree,
        }
    }
}

/// `flashtree generate` arguments.
#[derive(Debug, Clone, Args)]
pub struct GenerateArgs {
    /// Target, draft, mode, budget and backend.
    #[command(flatten)]
    pub pair: PairArgs,
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
    /// (`qwen35.context_length`; the GPU engine allocates only what the prompt and
    /// `--max-tokens` need of it).
    #[arg(long)]
    pub ctx: Option<usize>,
    /// Print each load step (a spinner shows them anyway when stderr is a terminal).
    #[arg(long)]
    pub verbose: bool,
    /// Decoding: greedy unless `--temperature` > 0.
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// What is written to stdout: `text` (streamed), `ids` (the generated token ids on one line,
    /// space-separated) or `json` (text, ids, prompt_tokens, stop, seed).
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub output_format: OutputFormat,
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

/// Loads a DFlash draft (folder or GGUF), naming the path in errors.
pub fn load_draft(path: &Path) -> anyhow::Result<DFlashWeights> {
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
    let (rule, seed) = args.sampling.rule()?;
    if let (true, Some(seed)) = (args.verbose, seed) {
        writeln!(err, "sampling seed {seed}")?;
    }
    if !args.chat {
        if args.system.is_some() {
            bail!("--system is only used with --chat (it becomes the chat template's system turn)");
        }
        if args.no_think {
            bail!("--no-think is only used with --chat (it switches the chat template's thinking off)");
        }
    }
    let args = &GenerateArgs { pair: args.pair.resolved()?, ..args.clone() };
    let mode = args.pair.mode.mode();
    check_model_path(&args.pair.model)?;
    let file = Gguf::open(&args.pair.model)?; // its errors name the file
    let cfg = Qwen35Config::from_gguf(&file)?;
    let ctx = limits::choose_context(args.ctx, cfg.context_length, &args.pair.model)?;
    let tk = from_gguf(&file).with_context(|| format!("reading the tokenizer of {}", args.pair.model.display()))?;
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
                .with_context(|| format!("the tokenizer.chat_template of {}", args.pair.model.display()))?,
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
    if let Some(gpu) = super::backend::resolve(args.pair.backend)? {
        return run_gpu(args, gpu, mode, (&file, &cfg, ctx), &tk, &prompt, (rule, seed), out, err);
    }
    let draft_f32 = match &args.pair.draft {
        Some(p) => limits::draft_f32_bytes(p)?,
        None => 0,
    };
    let positions = prompt.len().saturating_add(args.max_tokens).saturating_add(args.pair.budget + 1);
    let plan = limits::cpu_plan(&file, positions, prompt.len(), draft_f32, false)?;
    limits::check_memory(&plan, limits::mem_available())?;
    drop(file);

    let progress = limits::LoadProgress::new(args.verbose);
    let msg = format!(
        "loading {} (dequantising to f32: {})",
        args.pair.model.display(),
        limits::format_gib(plan.target_weights)
    );
    let target = progress
        .load_target(msg, &args.pair.model)
        .with_context(|| format!("loading {}", args.pair.model.display()))?;
    if tk.tokenizer.vocab_size() > target.hparams.n_vocab {
        bail!(
            "{}: the tokenizer has {} tokens but the model's vocabulary is {}",
            args.pair.model.display(),
            tk.tokenizer.vocab_size(),
            target.hparams.n_vocab
        );
    }
    let draft = match (&args.pair.draft, mode) {
        (Some(p), _) => {
            progress.step(format!("loading the draft {}", p.display()));
            let d = load_draft(p)?;
            check_pair(&target, &d)
                .map_err(|e| anyhow::anyhow!("{} vs {}: {e}", p.display(), args.pair.model.display()))?;
            Some(d)
        }
        (None, Mode::Ar) => None,
        (None, _) => bail!("--mode {} needs --draft", mode.name()),
    };
    progress.step(format!("prefill of {} prompt tokens", prompt.len()));
    let capture = draft.as_ref().map_or_else(Vec::new, |d| d.hparams.target_layer_ids.clone());
    let mut tgt = CpuTarget::new(&target, capture);
    let mut dft = draft.as_ref().map(|d| CpuDraft::new(d, &target));
    let cfg =
        GenerateConfig { mode, budget: args.pair.budget, max_tokens: args.max_tokens, eos: tk.stop_ids.clone(), rule };
    let stats = stream_generate(&mut tgt, dft.as_mut(), &prompt, &cfg, &tk, (args.output_format, seed), out, progress)?;
    writeln!(err, "mode {} budget {} backend cpu", mode.name(), if mode == Mode::Ar { 0 } else { args.pair.budget })?;
    writeln!(err, "{}", stats.summary())?;
    Ok(())
}

/// Runs the loop, streaming the text of each round's tokens to `out` with `--output-format
/// text` (a failed write stops generation after that round and is returned), else writing the
/// ids or the JSON result at the end (`seed`: the sampling seed, for JSON); clears `progress`
/// at the first tokens.
#[allow(clippy::too_many_arguments)]
fn stream_generate<T, D>(
    target: &mut T,
    draft: Option<&mut D>,
    prompt: &[u32],
    cfg: &GenerateConfig,
    tk: &GgufTokenizer,
    (format, seed): (OutputFormat, Option<u64>),
    out: &mut dyn Write,
    progress: limits::LoadProgress,
) -> anyhow::Result<Stats>
where
    T: Target,
    D: Draft<Features = T::Features>,
{
    let mut dec = StreamDecoder::new();
    let mut io_err = None;
    let mut progress = Some(progress);
    let stream = format == OutputFormat::Text;
    let (ids, stats) = generate(target, draft, prompt, cfg, |ids| {
        if let Some(p) = progress.take() {
            p.finish();
        }
        for &id in ids.iter().filter(|_| stream) {
            let bytes = tk.tokenizer.token_bytes(id).unwrap_or(b"\xEF\xBF\xBD");
            let piece = dec.push(bytes);
            if let Err(e) = out.write_all(piece.as_bytes()).and_then(|_| out.flush()) {
                io_err.get_or_insert(e);
            }
        }
        // A closed output (a pipe whose reader left) stops generation after this round.
        if io_err.is_some() {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    })
    .map_err(|e: SpecError| anyhow::anyhow!(e))?;
    if let Some(p) = progress.take() {
        p.finish();
    }
    if let Some(e) = io_err {
        return Err(e).context("writing the generated text");
    }
    if stream {
        out.write_all(dec.finish().as_bytes())?;
        writeln!(out)?;
    } else {
        let mut text = String::new();
        for &id in &ids {
            text.push_str(&dec.push(tk.tokenizer.token_bytes(id).unwrap_or(b"\xEF\xBF\xBD")));
        }
        text.push_str(&dec.finish());
        write_result(format, &ids, &text, prompt.len(), stats.stop.name(), seed, out)?;
    }
    Ok(stats)
}

/// The target on the GPU engine (context: prompt + `--max-tokens` + one verify batch, at most
/// `ctx_limit`); for the speculative modes the draft on the GPU, or on the CPU reading the
/// engine's feature store when the GPU kernels do not cover it.
#[allow(clippy::too_many_arguments)]
fn run_gpu(
    args: &GenerateArgs,
    gpu: crate::gpu::Gpu,
    mode: Mode,
    (file, cfg_t, ctx_limit): (&Gguf, &Qwen35Config, usize),
    tk: &GgufTokenizer,
    prompt: &[u32],
    (rule, seed): (DecodingRule, Option<u64>),
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> anyhow::Result<()> {
    let progress = limits::LoadProgress::new(args.verbose);
    // The draft's config first: its target layers decide what the engine captures.
    let draft = match (&args.pair.draft, mode) {
        (_, Mode::Ar) => None,
        (Some(p), _) => Some(crate::model::DraftModel::open(p)?),
        (None, _) => bail!("--mode {} needs --draft", mode.name()),
    };
    let capture = draft.as_ref().map_or_else(Vec::new, |d| d.config.target_layer_ids.clone());
    let nodes = if mode == Mode::Ar { 1 } else { kernel_abi::MAX_NODES as usize };
    let ctx = (prompt.len() + args.max_tokens + nodes).min(ctx_limit);
    progress.finish();
    let (mut engine, _) = super::backend::open_engine(gpu, &args.pair.model, Some(ctx), &capture, !args.verbose)?;
    let gpu_draft = match &draft {
        // A draft the GPU kernels do not cover runs on the CPU.
        Some(d) => super::gpu_draft_load::gpu_draft_or_note(&engine, d, ctx, args.verbose, |n| {
            writeln!(err, "{n}")?;
            Ok(())
        })?,
        None => None,
    };
    let cfg = GenerateConfig {
        mode,
        budget: if mode == Mode::Ar { 0 } else { args.pair.budget },
        max_tokens: args.max_tokens,
        eos: tk.stop_ids.clone(),
        rule,
    };
    let shown = (args.output_format, seed);
    let mut tgt = crate::engine::GpuTarget::new(&mut engine);
    let progress = limits::LoadProgress::new(args.verbose);
    progress.step(format!("prefill of {} prompt tokens on the GPU", prompt.len()));
    let stats = match (draft, gpu_draft) {
        (None, _) => stream_generate(&mut tgt, None::<&mut CpuDraftOnGpu>, prompt, &cfg, tk, shown, out, progress)?,
        (Some(_), Some(de)) => {
            let mut dft = crate::engine::GpuDraft::new(de, tgt.feature_source()?)?;
            stream_generate(&mut tgt, Some(&mut dft), prompt, &cfg, tk, shown, out, progress)?
        }
        (Some(model), None) => {
            let parts = super::gpu_draft_load::CpuDraftParts::load(&model, file, cfg_t, &args.pair.model)?;
            let mut dft = HostDraft::new(parts.draft(), tgt.feature_source()?);
            stream_generate(&mut tgt, Some(&mut dft), prompt, &cfg, tk, shown, out, progress)?
        }
    };
    writeln!(err, "mode {} budget {} backend gpu", mode.name(), cfg.budget)?;
    writeln!(err, "{}", stats.summary())?;
    Ok(())
}

/// Runs the command on stdout/stderr. Stderr is not held locked: the load progress draws on it
/// from its own thread (holding it here would deadlock the two on a terminal).
pub fn run(args: &GenerateArgs) -> anyhow::Result<()> {
    run_to(args, &mut std::io::stdout().lock(), &mut std::io::stderr())
}
