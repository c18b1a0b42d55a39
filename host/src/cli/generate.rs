//! `flashtree generate`: tokenise a prompt (optionally through the chat template), run the
//! speculative loop (AR, DFlash chain or DDTree) on the CPU backend, stream the text as tokens
//! are committed, then print tokens, tok/s, acceptance length and the accepted-depth histogram.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use clap::{Args, ValueEnum};
use flashtree_reference::model::dflash::DFlashWeights;

use crate::chat::{ChatTemplate, Message, RenderOptions};
use crate::convert::dflash::load_draft as load_draft_weights;
use crate::convert::gguf_load::load_qwen35;
use crate::gguf::Gguf;
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
#[derive(Debug, Args)]
pub struct GenerateArgs {
    /// Target model (qwen35 GGUF).
    #[arg(long)]
    pub model: PathBuf,
    /// DFlash draft: a z-lab folder (config.json + safetensors) or a `dflash` GGUF. Not needed
    /// for `--mode ar`.
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
}

fn load_draft(path: &Path) -> anyhow::Result<DFlashWeights> {
    Ok(load_draft_weights(path).with_context(|| format!("loading draft {}", path.display()))?.1)
}

/// Runs the command, writing generated text to `out` and progress/stats to `err`.
pub fn run_to(args: &GenerateArgs, out: &mut dyn Write, err: &mut dyn Write) -> anyhow::Result<()> {
    if args.budget > MAX_BUDGET {
        bail!("--budget {} is larger than the maximum {MAX_BUDGET}", args.budget);
    }
    let mode = match args.mode {
        ModeArg::Ar => Mode::Ar,
        ModeArg::Chain => Mode::Chain,
        ModeArg::Tree => Mode::Tree,
        ModeArg::AnchorTree => Mode::AnchorTree,
    };
    let file = Gguf::open(&args.model).with_context(|| format!("opening {}", args.model.display()))?;
    let tk = from_gguf(&file)?;
    drop(file);
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
            let d = load_draft(p)?;
            check_pair(&target, &d).map_err(|e| anyhow::anyhow!("{} vs {}: {e}", p.display(), args.model.display()))?;
            Some(d)
        }
        (None, Mode::Ar) => None,
        (None, _) => bail!("--mode {} needs --draft", mode.name()),
    };
    let text = match &args.prompt {
        Some(p) => p.clone(),
        None => {
            let mut buf = Vec::new();
            std::io::stdin().read_to_end(&mut buf).context("reading the prompt from stdin")?;
            // Invalid UTF-8 becomes U+FFFD, as the tokenizer's byte input does.
            String::from_utf8_lossy(&buf).into_owned()
        }
    };
    let text = if args.chat {
        let template = match &tk.chat_template {
            Some(src) => ChatTemplate::new(src).context("the model's tokenizer.chat_template")?,
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
    let capture = draft.as_ref().map_or_else(Vec::new, |d| d.hparams.target_layer_ids.clone());
    let mut tgt = CpuTarget::new(&target, capture);
    let mut dft = draft.as_ref().map(|d| CpuDraft::new(d, &target));
    let cfg = GenerateConfig { mode, budget: args.budget, max_tokens: args.max_tokens, eos: tk.stop_ids.clone() };
    let mut dec = StreamDecoder::new();
    let mut io_err = None;
    let (_, stats) = generate(&mut tgt, dft.as_mut(), &prompt, &cfg, |ids| {
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
    writeln!(err, "mode {} budget {}", mode.name(), if mode == Mode::Ar { 0 } else { args.budget })?;
    writeln!(err, "{}", stats.summary())?;
    Ok(())
}

/// Runs the command on stdout/stderr.
pub fn run(args: &GenerateArgs) -> anyhow::Result<()> {
    run_to(args, &mut std::io::stdout().lock(), &mut std::io::stderr().lock())
}
