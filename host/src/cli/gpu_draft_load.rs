//! The draft of a GPU target, as `generate` and `serve` load it: on the GPU
//! ([`crate::engine::DraftEngine`]) when the kernels cover it, else the CPU reference draft fed
//! from the engine's feature store, with the target's embedding and LM head read from the GGUF
//! (host RAM checked first).

use std::path::Path;

use flashtree_reference::model::dflash::DFlashWeights;
use flashtree_reference::model::tensor::Matrix;

use anyhow::{bail, Context};

use super::generate::load_draft;
use super::limits;
use crate::convert::gguf_load::read_tensor;
use crate::engine::{DraftEngine, Engine, EngineError};
use crate::gguf::Gguf;
use crate::model::{DraftModel, Qwen35Config};
use crate::spec::cpu::{check_pair_shape, CpuDraft};

/// The draft on the GPU over `engine` (context `ctx`), or `Err(why)` when the GPU kernels do not
/// cover it (sliding-window layers whose window is smaller than the context); other failures are
/// errors.
pub fn load_gpu_draft(engine: &Engine, d: &DraftModel, ctx: usize) -> anyhow::Result<Result<DraftEngine, String>> {
    match DraftEngine::load(engine.gpu.clone(), engine.weights(), &engine.cfg, d, ctx) {
        Ok(de) => Ok(Ok(de)),
        Err(EngineError::Unsupported(why)) => Ok(Err(why)),
        Err(e) => Err(e.into()),
    }
}

/// [`load_gpu_draft`] behind a load progress line: the GPU draft, or `None` after `note(why)` when
/// the kernels do not cover it and the draft runs on the CPU reference instead.
pub fn gpu_draft_or_note(
    engine: &Engine,
    d: &DraftModel,
    ctx: usize,
    verbose: bool,
    note: impl FnOnce(&str) -> anyhow::Result<()>,
) -> anyhow::Result<Option<DraftEngine>> {
    let progress = limits::LoadProgress::new(verbose);
    progress.step(format!("loading the draft {} onto the GPU", d.path.display()));
    let r = load_gpu_draft(engine, d, ctx)?;
    progress.finish();
    match r {
        Ok(de) => Ok(Some(de)),
        Err(why) => {
            note(&format!("note: {why}; the draft runs on the CPU reference instead"))?;
            Ok(None)
        }
    }
}

/// What a CPU draft driven by a GPU target holds: its f32 weights and the target's embedding and
/// LM head (`None`: tied to the embedding).
pub struct CpuDraftParts {
    pub weights: DFlashWeights,
    pub embd: Matrix,
    pub head: Option<Matrix>,
}

impl CpuDraftParts {
    /// Loads `model` for the target `file` (`cfg`, at `target`) after checking that the f32 draft
    /// and matrices fit in the available RAM, and that the pair matches.
    pub fn load(model: &DraftModel, file: &Gguf, cfg: &Qwen35Config, target: &Path) -> anyhow::Result<Self> {
        let p = &model.path;
        let draft_f32 = limits::draft_f32_bytes(p)?;
        let heads = if file.tensor("output.weight").is_some() { 2 } else { 1 };
        let matrices = (heads * cfg.vocab_size as u64).saturating_mul(cfg.embedding_length as u64 * 4);
        check_host_memory(draft_f32.saturating_add(matrices), limits::mem_available())?;
        let weights = load_draft(p)?;
        check_pair_shape(cfg.embedding_length, cfg.n_layer(), cfg.vocab_size, &weights)
            .map_err(|e| anyhow::anyhow!("{} vs {}: {e}", p.display(), target.display()))?;
        let (embd, head) = draft_matrices(file, cfg, target)?;
        Ok(CpuDraftParts { weights, embd, head })
    }

    /// The CPU draft over these parts (empty context).
    pub fn draft(&self) -> CpuDraft<'_> {
        CpuDraft::with_target_matrices(&self.weights, &self.embd, self.head.as_ref().unwrap_or(&self.embd))
    }
}

/// The target's token embedding and LM head as f32 (the CPU draft's), read from the GGUF alone:
/// `[n_vocab, n_embd]` each; `None` for the head when it is tied to the embedding.
fn draft_matrices(file: &Gguf, cfg: &Qwen35Config, model: &Path) -> anyhow::Result<(Matrix, Option<Matrix>)> {
    let read = |name: &str| -> anyhow::Result<Option<Matrix>> {
        let Some(t) = read_tensor(file, name).with_context(|| format!("{}: reading {name}", model.display()))? else {
            return Ok(None);
        };
        let want = [cfg.vocab_size, cfg.embedding_length];
        if t.shape != want {
            bail!("{}: {name} has shape {:?}, expected {want:?}", model.display(), t.shape);
        }
        Ok(Some(Matrix::new(name, want[0], want[1], t.data)?))
    };
    let embd = read("token_embd.weight")?
        .ok_or_else(|| anyhow::anyhow!("{}: token_embd.weight is missing", model.display()))?;
    Ok((embd, read("output.weight")?))
}

/// Refuses a host allocation of `need` bytes larger than `available` (unknown passes).
fn check_host_memory(need: u64, available: Option<u64>) -> anyhow::Result<()> {
    match available {
        Some(avail) if need > avail => bail!(
            "the CPU draft needs about {} of RAM (its weights and the target's embedding and LM head as f32) but \
             only {} is available (MemAvailable)",
            limits::format_gib(need),
            limits::format_gib(avail)
        ),
        _ => Ok(()),
    }
}
