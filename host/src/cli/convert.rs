//! `flashtree convert`: HF Qwen3.5 text checkpoint → `qwen35` GGUF, or z-lab DFlash draft →
//! llama.cpp `dflash` GGUF.

use crate::convert::gguf_write::{convert_dflash, convert_qwen35};
use crate::convert::hf_config;
use crate::convert::out_type::OutType;
use crate::convert::safetensors::open_folder;
use crate::model::DraftConfig;
use anyhow::{bail, Context};
use clap::Args;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct ConvertArgs {
    /// Checkpoint folder (config.json + *.safetensors): a Qwen3.5 text model or a z-lab DFlash draft.
    #[arg(long)]
    pub input: PathBuf,
    /// Output GGUF file.
    #[arg(long)]
    pub output: PathBuf,
    /// f32, f16, bf16, q8_0 or q4_k_m (drafts: bf16 or q8_0; f32/f16 also accepted).
    #[arg(long, default_value = "bf16")]
    pub outtype: String,
    /// For a draft: the target's HF folder or GGUF, whose tokenizer metadata goes into the draft GGUF.
    #[arg(long)]
    pub target: Option<PathBuf>,
}

/// Whether `config.json` describes a DFlash draft.
fn is_dflash(v: &serde_json::Value) -> bool {
    v.get("dflash_config").is_some()
        || v.get("architectures")
            .and_then(|a| a.as_array())
            .is_some_and(|a| a.iter().any(|x| x.as_str().is_some_and(|s| s.contains("DFlash"))))
}

pub fn run(args: &ConvertArgs) -> anyhow::Result<()> {
    let out_type = OutType::parse(&args.outtype)
        .with_context(|| format!("--outtype {:?}: expected f32, f16, bf16, q8_0 or q4_k_m", args.outtype))?;
    let cfg_path = args.input.join("config.json");
    let text = crate::model::json::read_config_text(&cfg_path)?;
    let v: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", cfg_path.display()))?;
    let files = open_folder(&args.input)?;
    let bytes = if is_dflash(&v) {
        if out_type == OutType::Q4KM {
            bail!("--outtype q4_k_m is for targets; convert a DFlash draft to bf16 or q8_0");
        }
        let cfg = DraftConfig::from_zlab_json(&text, &cfg_path)?;
        convert_dflash(&args.input, &cfg, &files, args.target.as_deref(), out_type, &args.output)?
    } else {
        let cfg = hf_config::parse(&text, &cfg_path)?;
        convert_qwen35(&args.input, &cfg, &files, out_type, &args.output)?
    };
    eprintln!("wrote {} ({bytes} bytes)", args.output.display());
    Ok(())
}
