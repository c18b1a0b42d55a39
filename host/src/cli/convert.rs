//! `flashtree convert`: HF Qwen3.5 text checkpoint → `qwen35` GGUF, or z-lab DFlash draft →
//! llama.cpp `dflash` GGUF.

use crate::convert::gguf_write::{convert_dflash, convert_qwen35};
use crate::convert::hf_config;
use crate::convert::out_type::OutType;
use crate::convert::safetensors::open_folder;
use crate::model::DraftConfig;
use anyhow::{bail, Context};
use clap::Args;
use std::path::{Path, PathBuf};

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
    /// Replace an existing output file (never one of the input files).
    #[arg(long)]
    pub force: bool,
}

/// `(device, inode)` of a file, to tell whether two paths are one file.
#[cfg(unix)]
fn file_id(p: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()))
}

#[cfg(not(unix))]
fn file_id(p: &Path) -> Option<std::path::PathBuf> {
    std::fs::canonicalize(p).ok()
}

/// Refuses an output that is one of the files of `folders` (same inode or canonical path), or
/// that exists without `force`.
fn check_output(output: &Path, folders: &[&Path], force: bool) -> anyhow::Result<()> {
    if output.is_dir() {
        bail!("--output {}: is a directory; expected the GGUF file to write", output.display());
    }
    let Some(out_id) = file_id(output) else { return Ok(()) };
    for folder in folders {
        let entries = std::fs::read_dir(folder).with_context(|| format!("reading {}", folder.display()))?;
        for e in entries.flatten() {
            if file_id(&e.path()).as_ref() == Some(&out_id) {
                bail!(
                    "--output {} is the input file {}: convert never overwrites its input; choose another output path",
                    output.display(),
                    e.path().display()
                );
            }
        }
    }
    if !force {
        bail!("--output {} exists; pass --force to replace it", output.display());
    }
    Ok(())
}

/// The temporary file the GGUF is written to, next to `output` (so the final rename stays on
/// one file system).
fn temporary_path(output: &Path) -> PathBuf {
    let name = output.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "out.gguf".into());
    output.with_file_name(format!(".{name}.partial-{}", std::process::id()))
}

/// Whether `config.json` describes a DFlash draft.
fn is_dflash(v: &serde_json::Value) -> bool {
    v.get("dflash_config").is_some()
        || v.get("architectures")
            .and_then(|a| a.as_array())
            .is_some_and(|a| a.iter().any(|x| x.as_str().is_some_and(|s| s.contains("DFlash"))))
}

/// Converts into a temporary file next to `--output`, then renames it over `--output`, so that
/// neither a failed run nor a crash leaves a half-written output, and an input is never written.
pub fn run(args: &ConvertArgs) -> anyhow::Result<()> {
    let mut folders = vec![args.input.as_path()];
    if let Some(t) = &args.target {
        folders.push(t.as_path());
    }
    check_output(&args.output, &folders, args.force)?;
    let tmp = temporary_path(&args.output);
    let result = convert_to(args, &tmp);
    match result {
        Ok(bytes) => {
            std::fs::rename(&tmp, &args.output).with_context(|| {
                let _ = std::fs::remove_file(&tmp);
                format!("renaming {} to {}", tmp.display(), args.output.display())
            })?;
            eprintln!("wrote {} ({bytes} bytes)", args.output.display());
            Ok(())
        }
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

fn convert_to(args: &ConvertArgs, out: &Path) -> anyhow::Result<u64> {
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
        convert_dflash(&args.input, &cfg, &files, args.target.as_deref(), out_type, out)?
    } else {
        let cfg = hf_config::parse(&text, &cfg_path)?;
        convert_qwen35(&args.input, &cfg, &files, out_type, out)?
    };
    Ok(bytes)
}
