//! The memory plan: every device allocation of the engine, computed from the config and the
//! chosen context before anything is allocated, printed, and checked against the free memory.

use std::fmt;

use kernel_abi::{MAX_NODES, QMM_MAX_N};

use super::EngineError;
use crate::model::Qwen35Config;

/// Node rows of every per-node buffer.
const M: u64 = MAX_NODES as u64;

/// Bytes of each part of the engine's device memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryPlan {
    pub ctx: usize,
    pub weights: u64,
    /// F16 K and V of every attention layer for `ctx` tokens.
    pub kv_cache: u64,
    /// DeltaNet recurrent state and conv windows.
    pub recurrent: u64,
    /// One saved copy of them ([`super::Engine::save_snapshot`]): as large as `recurrent`.
    pub snapshot: u64,
    /// Per-node scratch a verify keeps until commit (conv inputs, recurrent inputs), `MAX_NODES`
    /// rows per DeltaNet layer.
    pub tree_scratch: u64,
    /// Activations and logits (`MAX_NODES` rows), the matmul workspace (activation planes for
    /// `MAX_NODES` columns), the RoPE table, the attention partials.
    pub workspace: u64,
    /// The draft's features: the device store of every committed token's captured layer
    /// outputs (`ctx × layers × d` f32) and the per-forward scratch (`layers × MAX_NODES × d` f32).
    pub features: u64,
    /// Layers captured for the draft (0: no store).
    pub capture_layers: usize,
}

impl MemoryPlan {
    pub fn total(&self) -> u64 {
        self.weights
            + self.kv_cache
            + self.recurrent
            + self.snapshot
            + self.tree_scratch
            + self.workspace
            + self.features
    }

    /// Bytes of the feature store and scratch of `layers` captured layers of width `d` at
    /// context `ctx` (checked arithmetic).
    pub fn feature_bytes(ctx: usize, layers: usize, d: usize) -> Result<u64, EngineError> {
        let rows = (ctx as u64).checked_add(M).ok_or_else(|| EngineError::Plan("memory plan overflows".into()))?;
        rows.checked_mul(layers as u64)
            .and_then(|x| x.checked_mul(d as u64))
            .and_then(|x| x.checked_mul(4))
            .ok_or_else(|| EngineError::Plan("memory plan overflows".into()))
    }

    /// The plan for `cfg` at context `ctx` with `weights` bytes of packed weights,
    /// `gdn_scratch` f32 values of per-layer DeltaNet scratch and `mixed_stride` f32 values per
    /// node row of the DeltaNet `mixed` arena (`conv_ch`, or more when the layer's projections
    /// are one product), capturing `capture_layers` layers for the draft. All arithmetic is
    /// checked.
    pub fn new(
        cfg: &Qwen35Config,
        ctx: usize,
        weights: u64,
        gdn_scratch: usize,
        mixed_stride: usize,
        capture_layers: usize,
    ) -> Result<Self, EngineError> {
        let over = || EngineError::Plan("memory plan overflows".into());
        let m = |a: u64, b: u64| a.checked_mul(b).ok_or_else(over);
        let n_attn = cfg.attention_layers().len() as u64;
        let n_gdn = cfg.n_layer() as u64 - n_attn;
        let kv_row = (cfg.head_count_kv * cfg.key_length) as u64;
        let kv_cache = m(m(m(n_attn, 2)?, ctx as u64)?, m(kv_row, 2)?)?;
        let state = (cfg.ssm_time_step_rank * cfg.ssm_state_size * cfg.ssm_value_head_dim()) as u64;
        let ch = cfg.ssm_conv_channels() as u64;
        let conv = (cfg.ssm_conv_kernel as u64 - 1) * ch;
        let recurrent = m(m(n_gdn, state + conv)?, 4)?;
        let tree_scratch = m(m(n_gdn, M * (mixed_stride as u64).max(ch) + gdn_scratch as u64)?, 4)?;
        let d = cfg.embedding_length as u64;
        let hd = cfg.key_length as u64;
        let nh = cfg.head_count as u64;
        let wide = [cfg.feed_forward_length as u64, 2 * nh * hd, ch, cfg.ssm_inner_size as u64].into_iter().max();
        let wide = wide.unwrap_or(0);
        let v = cfg.vocab_size as u64;
        // The attention product buffer holds `[q | k | v]` rows (merged projections).
        let qkv = 2 * nh * hd + 2 * kv_row;
        let acts = M * 4 * (3 * d + 2 * wide + 4 * nh * hd + 3 * cfg.ssm_inner_size as u64 + 2 * kv_row);
        let logits = M * 4 * v;
        let max_in = [d, cfg.feed_forward_length as u64, nh * hd, cfg.ssm_inner_size as u64].into_iter().max();
        let max_in = max_in.unwrap_or(0);
        let max_out = [v, 2 * cfg.feed_forward_length as u64 + 16, qkv, mixed_stride as u64, ch].into_iter().max();
        let max_out = max_out.unwrap_or(0);
        // Activation planes of 32 columns (f16 x, bf16 pair, core-matrix copy; scales, sums) for
        // MAX_NODES columns; one launch's split-K partials; the SwiGLU row maxima (a word per
        // column and row group).
        let planes = M.div_ceil(QMM_MAX_N as u64);
        let qmm_ws = planes * 32 * max_in * 2 * 4
            + 16 * 32 * max_out * 4
            + planes * 32 * (max_in / 32 + 8 * max_in / 256 + 8) * 4
            + planes * 32 * max_out.div_ceil(kernel_abi::QMM_ROWS_PER_BLOCK as u64) * 4;
        // The accumulator pairs of the accumulated output/down projections and, at most, of the
        // gate/up products' split tails (`gpu::qmatmul` accum.rs).
        let residual_acc =
            if super::forward::accumulates_residual(cfg.embedding_length) { 2 * M * (d * 8 + 4) } else { 0 };
        let tail_rows = kernel_abi::qmm_accum::MAX_SWIGLU_TAIL_ROWS as u64;
        let tail_acc = if crate::gpu::qmatmul::accumulation_enabled() { 2 * M * (tail_rows * 8 + 4) } else { 0 };
        let qmm_ws = qmm_ws + residual_acc + tail_acc;
        let rope = m(ctx as u64, cfg.rope_dimension_count as u64 * 4)?;
        // The attention split-K partials: up to ATTN_MAX_SPLITS splits × MAX_NODES nodes × heads × (head_dim + 2).
        let attn_split = kernel_abi::ATTN_MAX_SPLITS as u64 * M * nh * (hd + 2) * 4;
        let workspace = acts + logits + qmm_ws + rope + attn_split;
        let features = Self::feature_bytes(ctx, capture_layers, cfg.embedding_length)?;
        Ok(MemoryPlan {
            ctx,
            weights,
            kv_cache,
            recurrent,
            snapshot: recurrent,
            tree_scratch,
            workspace,
            features,
            capture_layers,
        })
    }

    /// Refuses the plan unless it fits `free` bytes, keeping `reserve` for the driver.
    pub fn check(&self, free: u64, reserve: u64) -> Result<(), EngineError> {
        if self.total().saturating_add(reserve) > free {
            return Err(EngineError::Plan(format!(
                "the plan does not fit: {self}\n  needs {:.2} GiB + {:.2} GiB reserve, the GPU has {:.2} GiB free \
                 (lower --ctx to shrink the KV cache)",
                gib(self.total()),
                gib(reserve),
                gib(free)
            )));
        }
        Ok(())
    }
}

fn gib(b: u64) -> f64 {
    b as f64 / (1u64 << 30) as f64
}

impl fmt::Display for MemoryPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "weights {:.2} GiB, KV cache {:.2} GiB (context {}), recurrent state {:.3} GiB (+ {:.3} GiB \
             snapshot), tree scratch {:.3} GiB, \
             workspace {:.3} GiB, draft features {:.3} GiB ({} layers): total {:.2} GiB",
            gib(self.weights),
            gib(self.kv_cache),
            self.ctx,
            gib(self.recurrent),
            gib(self.snapshot),
            gib(self.tree_scratch),
            gib(self.workspace),
            gib(self.features),
            self.capture_layers,
            gib(self.total())
        )
    }
}
