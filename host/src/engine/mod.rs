//! The GPU engine: the `qwen35` target forward over up to `MAX_NODES` = 64 nodes (one AR token, a prefill
//! chain, or a DDTree verify — one code path, design.md §1), and commit of an accepted path.
//!
//! A step is: host writes the [`NodeBatch`](kernel_abi::NodeBatch) (tokens, parents, depths, ancestor masks) into one
//! device buffer → [`Engine::forward`] enqueues every kernel (embed, per layer: RMSNorm,
//! projections, attention or Gated DeltaNet, gated output, residual, SwiGLU MLP; final norm,
//! LM head, argmax) without a host sync → the host reads the `n` argmax tokens (the step's only
//! sync) → the host writes the accepted path → [`Engine::commit`] compacts the KV rows, advances
//! the recurrent state and conv windows along the path. Every launch reads per-step values from
//! device memory, so a step can be captured as a graph and replayed.
//!
//! Batch invariance (design.md §5.2): every kernel computes a node from its own row and its
//! ancestors' with a reduction order fixed by the shapes, so a node's logits are the same bits
//! alone or in any tree, and greedy speculation reproduces greedy AR exactly.

mod batch;
mod clock;
mod draft;
mod features;
mod forward;
mod gpu_draft;
mod plan;
mod target;
mod weights;

pub use batch::{bytes_of, chain_batch, commit_path, node_batch};
pub use clock::{Phase, PhaseClock};
pub use draft::{ContextKv, DraftEngine, DRAFT_MAX_K};
pub use features::{DeviceFeatures, EngineFeatures, FeatureStore};
pub use forward::{CommitFault, Engine, Profile};
pub use gpu_draft::GpuDraft;
pub use plan::MemoryPlan;
pub use target::GpuTarget;
pub use weights::{gdn_mixed_stride, weight_bytes, AttnProj, GdnProj, LayerWeights, MixerWeights, TargetWeights};

use crate::gpu::GpuError;

/// Errors of the engine.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Gpu(#[from] GpuError),
    #[error(transparent)]
    Model(#[from] crate::model::ModelError),
    /// A weight could not be loaded as the GPU needs it.
    #[error("weights: {0}")]
    Weights(String),
    /// The memory plan does not fit or overflows.
    #[error("memory plan: {0}")]
    Plan(String),
    /// A batch the kernels cannot take.
    #[error("batch: {0}")]
    Batch(String),
    /// A batch past the context.
    #[error("context: {need} positions needed, the engine's context is {ctx} (raise --ctx)")]
    Context { need: usize, ctx: usize },
    /// A model shape the kernels do not cover.
    #[error("unsupported model: {0}")]
    Unsupported(String),
    /// An environment setting the engine cannot take.
    #[error("environment: {0}")]
    Env(String),
}
