//! [`Engine`]: device buffers of one target and its forward / commit.

use std::sync::Arc;

use cudarc::driver::{CudaEvent, CudaSlice};
use kernel_abi::sampling::SampleRule;
use kernel_abi::{CommitPath, GdnReplay, NodeBatch, MAX_NODES, SAMPLE_MAX_ROWS};

use super::batch::bytes_of;
use super::clock::{Phase, PhaseClock};
use super::features::{EngineFeatures, FeatureStore};
use super::plan::MemoryPlan;
use super::weights::{self, AttnProj, GdnProj, MixerWeights, TargetWeights};
use super::EngineError;
use crate::gguf::Gguf;
use crate::gpu::attention::{self as attn, AttnDims, AttnPrepIn};
use crate::gpu::copy::copy_path_rows;
use crate::gpu::deltanet::{self as gdn, GdnIo, GdnLayerState, GdnShape, GdnWeights};
use crate::gpu::embed::embed_rows;
use crate::gpu::graph::Graph;
use crate::gpu::norm::{add_rms_norm, rms_norm_rows_span};
use crate::gpu::qmatmul::{
    accumulation_enabled, accumulator_width_fits, qmm_needs_pairs, qmm_swiglu_rows, swiglu_tail_fits, swiglu_tail_rows,
    QWeight, QmmAccumulated, QmmWorkspace,
};
use crate::gpu::sample::{argmax_rows_span, argmax_scratch_len, sample_rows};
use crate::gpu::{DevSpan, Gpu, GpuError};
use crate::model::Qwen35Config;

const N: usize = MAX_NODES as usize;
/// Tokens per prefill forward: one matmul launch wide (a wider chain would stream the weights
/// once per 32 columns anyway), so prefill runs as it did before trees could exceed 32 nodes.
const PREFILL_CHUNK: usize = kernel_abi::QMM_MAX_N as usize;

/// The target on the GPU: weights, caches, recurrent state, step buffers.
pub struct Engine {
    /// Shared with a [`super::DraftEngine`] on the same stream.
    pub gpu: Arc<Gpu>,
    pub cfg: Qwen35Config,
    pub plan: MemoryPlan,
    /// Shared with a [`super::DraftEngine`] (the token embedding and the LM head).
    w: Arc<TargetWeights>,
    attn: AttnDims,
    gdn: GdnShape,
    /// Per trunk layer: its index among the attention layers or among the DeltaNet layers.
    slot: Vec<usize>,
    n_attn: usize,
    n_gdn: usize,
    // Step parameters (device).
    batch_dev: CudaSlice<u8>,
    /// The host bytes of `batch_dev`'s upload (the node batch, then the DeltaNet replay
    /// schedule), kept so a forward allocates nothing.
    batch_host: Vec<u8>,
    commit_dev: CudaSlice<u8>,
    /// The commit's KV compaction and DeltaNet replay on the side stream while a draft reads
    /// the committed feature rows ([`Engine::commit`]); `None`: all on the main stream.
    side: Option<SideCommit>,
    /// A deliberately wrong commit for tests ([`Engine::set_commit_fault`]) and its path buffer.
    fault: Option<CommitFault>,
    fault_dev: CudaSlice<u8>,
    /// The last forward's batch (host copy), for commit's checks.
    last: Option<NodeBatch>,
    /// The last forward of two or more nodes (host copy), for benches ([`Engine::last_tree_parents`]).
    last_tree: Option<NodeBatch>,
    // Activations `[MAX_NODES, dim]`.
    h: CudaSlice<f32>,
    h2: CudaSlice<f32>,
    x: CudaSlice<f32>,
    mix: CudaSlice<f32>,
    wide: CudaSlice<f32>,
    /// An attention layer's first product (room for `[M][2·n_head·hd + 2·n_kv·hd]`): rows
    /// `[q | k | v]` ([`AttnProj::Qkv`]), `[q | k]` ([`AttnProj::QkV`]; v in `vb`), or q
    /// ([`AttnProj::Split`]; k, v in `kb`, `vb`), each product's rows dense.
    qg: CudaSlice<f32>,
    kb: CudaSlice<f32>,
    vb: CudaSlice<f32>,
    q: CudaSlice<f32>,
    gate: CudaSlice<f32>,
    ao: CudaSlice<f32>,
    /// A DeltaNet layer's gate and raw beta / alpha: `[M][inner + 2·n_v]` rows `[z | b | a]`
    /// (`M = MAX_NODES`) written by one product ([`GdnProj::Zba`]), or `z [M][inner]`,
    /// `b [M][n_v]`, `a [M][n_v]` one after the other ([`GdnProj::Split`]); unused with [`GdnProj::All`]
    /// (the rows are in the `mixed` arena).
    zba: CudaSlice<f32>,
    go: CudaSlice<f32>,
    logits: CudaSlice<f32>,
    /// Argmax scratch (partials) and results: index and value per node.
    am_part_val: CudaSlice<f32>,
    am_part_idx: CudaSlice<u32>,
    am_idx: CudaSlice<u32>,
    am_val: CudaSlice<f32>,
    ws: QmmWorkspace,
    rope: CudaSlice<f32>,
    /// Split-K partials of `attn_tree` (one buffer serves every layer).
    attn_scratch: CudaSlice<f32>,
    // Caches and state (arenas over layers).
    kv: CudaSlice<u16>,
    state: CudaSlice<f32>,
    conv: CudaSlice<f32>,
    /// One saved copy of `state` then `conv` (`[gdn layers · state_len | gdn layers ·
    /// conv_len]`, allocated once, counted in the plan) and the position it was saved at
    /// ([`Engine::save_snapshot`]; `None`: none, or dropped by a reset).
    snapshot: CudaSlice<f32>,
    snapshot_at: Option<usize>,
    /// `[gdn layers][MAX_NODES][mixed_stride]`: each row the layer's conv inputs (`conv_ch` values),
    /// followed by its `[z | b | a]` when the layers' projections are one product
    /// ([`GdnProj::All`]; `mixed_stride = conv_ch + inner + 2·n_v`, else `conv_ch`). Kept until
    /// the commit.
    mixed: CudaSlice<f32>,
    mixed_stride: usize,
    gdn_scratch: CudaSlice<f32>,
    /// Committed tokens.
    n_past: usize,
    /// Layers whose outputs (the residual stream after the layer, HF `hidden_states[l + 1]`)
    /// every forward copies into `features` (`[capture.len()][MAX_NODES][n_embd]`): the draft's taps.
    capture: Vec<usize>,
    features: CudaSlice<f32>,
    /// The committed tokens' captured rows `[ctx][capture.len() · n_embd]`, appended by every
    /// commit (`super::features`); `None` without capture.
    store: Option<Arc<FeatureStore>>,
    /// When set, [`Engine::forward`] records an event after each kernel group (serialising the
    /// chain): the per-family breakdown of `flashtree bench`.
    profile: Option<Profile>,
    /// The forward of `n` nodes (index `n − 1`) per attention head-group count `r` it ran with:
    /// `(r, None)` after its first, eager run (which fills the launchers' caches), `(r,
    /// Some(graph))` once the second run captured it; replayed with a new `NodeBatch` after that.
    /// `FLASHTREE_GRAPH=0` launches every kernel from the host instead.
    graphs: Vec<Vec<(usize, Option<Graph>)>>,
    /// `FLASHTREE_ATTN_HEAD_GROUPS` ([`attn_head_groups_override`]), else `None`: the rule.
    head_groups_override: Option<usize>,
    /// Head groups of the attention split pass of the forward being enqueued
    /// (`attn::attn_head_groups`, a function of `n` and `n_past`).
    attn_groups: usize,
}

/// The attention split rule's fewest keys per split (`kernel_abi::attn_split_len_min`):
/// `kernel_abi::ATTN_MIN_SPLIT_KEYS` unless `FLASHTREE_ATTN_SPLIT_KEYS=<64..=65536>` overrides it
/// (tuning only: any fixed value keeps every node's reduction order a function of its key count,
/// so results stay batch-invariant; the tree scratch is sized for the default, the most splits).
pub fn attn_split_keys() -> u32 {
    static V: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *V.get_or_init(|| {
        std::env::var("FLASHTREE_ATTN_SPLIT_KEYS")
            .ok()
            .and_then(|v| v.trim().parse::<u32>().ok())
            .filter(|v| (kernel_abi::ATTN_TILE_KEYS..=65_536).contains(v))
            .unwrap_or(kernel_abi::ATTN_MIN_SPLIT_KEYS)
    })
}

/// `FLASHTREE_ATTN_HEAD_GROUPS=<r>`: the attention split pass spreads each KV head's `group` query
/// heads over `r` blocks in every launch (A/B of `attn::attn_head_groups`' rule, which picks `r`
/// per forward; the output bits are the same for every `r`). `None` when unset or empty; an error
/// naming the variable when `r` does not divide `group` (`who`: whose attention, for the message).
pub fn attn_head_groups_override(group: usize, who: &str) -> Result<Option<usize>, EngineError> {
    match std::env::var(HEAD_GROUPS_VAR) {
        Ok(v) if !v.trim().is_empty() => parse_head_groups(&v, group, who).map(Some),
        _ => Ok(None),
    }
}

const HEAD_GROUPS_VAR: &str = "FLASHTREE_ATTN_HEAD_GROUPS";

/// [`attn_head_groups_override`]'s value `v`: a divisor of `group`.
fn parse_head_groups(v: &str, group: usize, who: &str) -> Result<usize, EngineError> {
    match v.trim().parse::<usize>() {
        Ok(r) if r >= 1 && group.is_multiple_of(r) => Ok(r),
        _ => {
            let divisors: Vec<String> =
                (1..=group).filter(|r| group.is_multiple_of(*r)).map(|r| r.to_string()).collect();
            Err(EngineError::Env(format!(
                "{HEAD_GROUPS_VAR}={v}: the {who}'s attention has {group} query heads per KV head; expected one of \
                 its divisors ({})",
                divisors.join(", ")
            )))
        }
    }
}

/// A deliberately wrong commit ([`Engine::set_commit_fault`]), for tests that must fail when the
/// rollback is broken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitFault {
    /// The DeltaNet states and conv windows advance along the path whose last node is a rejected
    /// sibling of the last accepted node (when it has one); KV rows and features stay right.
    DeltaNetFromRejectedSibling,
}

/// `path` with its last node replaced by a sibling that is not on it (the first one), if any.
fn rejected_sibling_path(batch: &NodeBatch, path: &[usize]) -> Option<Vec<usize>> {
    let (&last, rest) = path.split_last()?;
    let &parent = rest.last()?;
    let sib = (0..batch.n as usize).find(|&j| j != last && batch.parent[j] == parent as i32)?;
    Some(rest.iter().copied().chain([sib]).collect())
}

/// Whether a commit with capture on runs its KV compaction and DeltaNet replay on the side
/// stream, beside the draft step that follows (default; `FLASHTREE_COMMIT_STREAM=0` off).
pub fn side_commit_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("FLASHTREE_COMMIT_STREAM").map(|v| v.trim() != "0").unwrap_or(true))
}

/// The events that order a commit's side-stream work ([`Gpu::on_side_stream`]): `start` after
/// the main stream's work before it, `done` after it; `pending` while the main stream has not
/// waited for `done` yet.
struct SideCommit {
    start: CudaEvent,
    done: CudaEvent,
    pending: std::sync::atomic::AtomicBool,
}

/// Whether forwards are captured and replayed as graphs (default; `FLASHTREE_GRAPH=0` off).
pub fn graphs_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("FLASHTREE_GRAPH").map(|v| v.trim() != "0").unwrap_or(true))
}

/// Whether each residual add + RMSNorm is fused with the matmul prep that follows it
/// (`qmm_prep_norm`, the default) or run as `add_rms_norm` + `qmm_prep_x`
/// (`FLASHTREE_FUSED_NORM=0`). The two give the same bits (GPU test
/// `qmm_prep_norm::fused_norm_prep_equals_norm_then_prep_bitwise`); the fused kernel keeps its
/// row in registers and saves one kernel boundary per norm (nvidia-h200, 27B AR: 116.5 vs
/// 113.5 tok/s, docs/perf/engine.md v1.2). The same switch picks the DeltaNet layers' gated
/// norm + out-projection prep: `gdn_norm_prep` (default) or `gdn_gated_norm` + `qmm_prep_x`,
/// also bitwise equal (GPU test `deltanet_norm_prep::gdn_norm_prep_equals_gated_norm_then_prep_bitwise`).
pub fn fused_norm_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("FLASHTREE_FUSED_NORM").map(|v| v.trim() != "0").unwrap_or(true))
}

/// Events recorded after each kernel group of a profiled forward, with the group's family.
pub struct Profile {
    start: CudaEvent,
    marks: Vec<(&'static str, CudaEvent)>,
    /// Milliseconds per family over every profiled forward so far.
    pub totals: Vec<(&'static str, f64)>,
    pub steps: usize,
}

fn mark(gpu: &Gpu, prof: &mut Option<Profile>, family: &'static str) -> Result<(), GpuError> {
    if let Some(p) = prof {
        let ev = gpu
            .context()
            .new_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(|e| GpuError::from_driver("creating an event", e))?;
        ev.record(gpu.stream()).map_err(|e| GpuError::from_driver("recording an event", e))?;
        p.marks.push((family, ev));
    }
    Ok(())
}

impl Engine {
    /// Plans, checks and allocates an engine for `cfg` at context `ctx`, then loads the weights
    /// from `g` (`progress(bytes done, total)` after each tensor). Prints nothing: the caller
    /// shows [`Engine::plan`] and the progress.
    pub fn load(
        gpu: Gpu,
        g: &Gguf,
        cfg: Qwen35Config,
        ctx: usize,
        progress: impl FnMut(u64, u64),
    ) -> Result<Engine, EngineError> {
        Self::load_with_capture(gpu, g, cfg, ctx, &[], progress)
    }

    /// [`Engine::load`], capturing the outputs of `capture` (the draft's target layers) into the
    /// feature store, which the plan counts ([`Engine::set_capture`]).
    pub fn load_with_capture(
        gpu: Gpu,
        g: &Gguf,
        cfg: Qwen35Config,
        ctx: usize,
        capture: &[usize],
        progress: impl FnMut(u64, u64),
    ) -> Result<Engine, EngineError> {
        let plan = Self::plan_with_capture(&cfg, g, ctx, capture.len())?;
        let (free, _total) = gpu.memory_info()?;
        plan.check(free, 512 << 20)?;
        let w = weights::load(&gpu, &cfg, g, progress)?;
        let mut e = Self::with_weights(Arc::new(gpu), cfg, ctx, plan, Arc::new(w))?;
        if !capture.is_empty() {
            e.set_capture(capture)?;
        }
        Ok(e)
    }

    /// The memory plan of `cfg` from `g` at context `ctx` (nothing allocated).
    pub fn plan_for(cfg: &Qwen35Config, g: &Gguf, ctx: usize) -> Result<MemoryPlan, EngineError> {
        Self::plan_with_capture(cfg, g, ctx, 0)
    }

    /// The memory plan with a feature store for `capture_layers` layers.
    pub fn plan_with_capture(
        cfg: &Qwen35Config,
        g: &Gguf,
        ctx: usize,
        capture_layers: usize,
    ) -> Result<MemoryPlan, EngineError> {
        check_supported(cfg, ctx)?;
        let gdn = gdn_shape(cfg);
        let mixed_stride = weights::gdn_mixed_stride(cfg, g);
        let wb = weights::weight_bytes(cfg, g)?;
        MemoryPlan::new(cfg, ctx, wb, gdn::gdn_scratch_len(&gdn), mixed_stride, capture_layers)
    }

    fn with_weights(
        gpu: Arc<Gpu>,
        cfg: Qwen35Config,
        ctx: usize,
        plan: MemoryPlan,
        w: Arc<TargetWeights>,
    ) -> Result<Engine, EngineError> {
        let d = cfg.embedding_length;
        let hd = cfg.key_length;
        let (nh, nkv) = (cfg.head_count, cfg.head_count_kv);
        let ch = cfg.ssm_conv_channels();
        let inner = cfg.ssm_inner_size;
        let vh = cfg.ssm_time_step_rank;
        let ff = cfg.feed_forward_length;
        let mut slot = Vec::with_capacity(cfg.n_layer());
        let (mut n_attn, mut n_gdn) = (0, 0);
        for l in 0..cfg.n_layer() {
            if cfg.is_recurrent(l) {
                slot.push(n_gdn);
                n_gdn += 1;
            } else {
                slot.push(n_attn);
                n_attn += 1;
            }
        }
        let attn = attn_dims(&cfg);
        let gdn = gdn_shape(&cfg);
        let max_in = [d, ff, nh * hd, inner].into_iter().max().unwrap_or(d);
        let mixed_stride = match w.layers.iter().find_map(|l| match &l.mixer {
            MixerWeights::DeltaNet { proj, .. } => Some(proj),
            _ => None,
        }) {
            Some(GdnProj::All(_)) => ch + inner + 2 * vh,
            _ => ch,
        };
        let qkv_width = 2 * nh * hd + 2 * nkv * hd;
        let max_out = [cfg.vocab_size, qmm_swiglu_rows(ff), qkv_width, mixed_stride, inner + 2 * vh, d]
            .into_iter()
            .max()
            .unwrap_or(d);
        let state_len = vh * cfg.ssm_state_size * cfg.ssm_value_head_dim();
        let conv_len = (cfg.ssm_conv_kernel - 1) * ch;
        let z = |n: usize| gpu.zeros::<f32>(n.max(1));
        let head_groups_override = attn_head_groups_override(nh / nkv.max(1), "target")?;
        let rope = gpu.upload(&attn::rope_table(cfg.rope_dimension_count, cfg.rope_freq_base as f64, ctx))?;
        let e = Engine {
            batch_dev: gpu.zeros::<u8>(std::mem::size_of::<NodeBatch>() + std::mem::size_of::<GdnReplay>())?,
            batch_host: Vec::with_capacity(std::mem::size_of::<NodeBatch>() + std::mem::size_of::<GdnReplay>()),
            commit_dev: gpu.zeros::<u8>(std::mem::size_of::<CommitPath>())?,
            side: if side_commit_enabled() {
                Some(SideCommit { start: gpu.new_sync_event()?, done: gpu.new_sync_event()?, pending: false.into() })
            } else {
                None
            },
            fault: None,
            fault_dev: gpu.zeros::<u8>(1)?,
            last: None,
            last_tree: None,
            h: z(N * d)?,
            h2: z(N * d)?,
            x: z(N * d)?,
            mix: z(N * d)?,
            wide: z(N * ff.max(ch))?,
            qg: z(N * qkv_width)?,
            kb: z(N * nkv * hd)?,
            vb: z(N * nkv * hd)?,
            q: z(N * nh * hd)?,
            gate: z(N * nh * hd)?,
            ao: z(N * nh * hd)?,
            // `[z | b | a]` rows of their own only when the DeltaNet projections are not one product.
            zba: z(if mixed_stride == ch { N * (inner + 2 * vh) } else { 1 })?,
            go: z(N * inner)?,
            logits: z(N * cfg.vocab_size)?,
            am_part_val: gpu.zeros(argmax_scratch_len(N))?,
            am_part_idx: gpu.zeros(argmax_scratch_len(N))?,
            am_idx: gpu.zeros(N)?,
            am_val: z(N)?,
            ws: {
                let mut ws = QmmWorkspace::new(&gpu, max_in, max_out)?;
                ws.pairs_needed = w.layers.iter().any(|l| l.uses_type(qmm_needs_pairs)) || w.head.needs_pairs();
                enable_accumulations(&gpu, &mut ws, cfg.embedding_length, w.layers.iter().map(|l| &l.gate_up))?;
                ws
            },
            rope,
            attn_scratch: z(attn::attn_tree_scratch_len(attn, N, ctx))?,
            kv: gpu.zeros::<u16>((n_attn * 2 * ctx * nkv * hd).max(1))?,
            state: z(n_gdn * state_len)?,
            conv: z(n_gdn * conv_len)?,
            snapshot: z(n_gdn * (gdn.state_len() + gdn.conv_state_len()))?,
            snapshot_at: None,
            mixed: z(n_gdn * N * mixed_stride)?,
            mixed_stride,
            gdn_scratch: z(n_gdn * gdn::gdn_scratch_len(&gdn))?,
            n_past: 0,
            profile: None,
            capture: Vec::new(),
            features: z(1)?,
            store: None,
            graphs: (0..N).map(|_| Vec::new()).collect(),
            head_groups_override,
            attn_groups: 1,
            gpu,
            cfg,
            plan,
            w,
            attn,
            gdn,
            slot,
            n_attn,
            n_gdn,
        };
        Ok(e)
    }

    /// Weight bytes one forward reads: every matrix once, one embedding row per node (ignored),
    /// the vectors.
    pub fn step_weight_bytes(&self) -> u64 {
        let w = &self.w;
        let mut b = w.head.device_bytes() as u64 + 4 * w.output_norm.len() as u64;
        for l in &w.layers {
            b += (l.gate_up.device_bytes() + l.down.device_bytes()) as u64;
            b += 4 * (l.attn_norm.len() + l.post_norm.len()) as u64;
            b += match &l.mixer {
                MixerWeights::Attention { proj, o, .. } => proj.bytes() + o.device_bytes(),
                MixerWeights::DeltaNet { proj, out, conv, .. } => proj.bytes() + out.device_bytes() + 4 * conv.len(),
            } as u64;
        }
        b
    }

    /// Makes every later forward copy the outputs of `layers` (each `< n_layer`) into the
    /// per-forward buffer ([`Engine::captured`]) and every later commit append them to the
    /// feature store ([`Engine::feature_source`]; rows of tokens committed before are not
    /// captured). A change of layers drops the captured graphs (they record the copies into the
    /// per-forward buffer, which is reallocated); the same layers again keep them and the store.
    /// The plan's feature line becomes this store's size.
    pub fn set_capture(&mut self, layers: &[usize]) -> Result<(), EngineError> {
        if let Some(&l) = layers.iter().find(|&&l| l >= self.cfg.n_layer()) {
            return Err(EngineError::Batch(format!("capture layer {l}: the model has {} layers", self.cfg.n_layer())));
        }
        let d = self.cfg.embedding_length;
        if layers != self.capture.as_slice() {
            // Free the old buffers first.
            self.store = None;
            self.features = self.gpu.zeros::<f32>(1)?;
            self.features = self.gpu.zeros::<f32>((layers.len() * N * d).max(1))?;
            self.store = match layers.len() {
                0 => None,
                k => Some(Arc::new(FeatureStore::new(&self.gpu, self.ctx(), k, d)?)),
            };
            self.graphs.iter_mut().for_each(Vec::clear);
        }
        self.plan.features = MemoryPlan::feature_bytes(self.ctx(), layers.len(), d)?;
        self.plan.capture_layers = layers.len();
        self.capture = layers.to_vec();
        Ok(())
    }

    /// The target's weights (the draft uses its token embedding and LM head).
    pub fn weights(&self) -> Arc<TargetWeights> {
        Arc::clone(&self.w)
    }

    /// How many layers every forward captures.
    pub fn capture_len(&self) -> usize {
        self.capture.len()
    }

    /// A reader of the feature store (`None` without capture): row `r` is the committed token
    /// at position `r` (valid for the rows committed since the capture was set).
    pub fn feature_source(&self) -> Option<EngineFeatures> {
        self.store.clone().map(EngineFeatures)
    }

    /// The captured layer outputs of the last forward: `[capture.len()][n][n_embd]` (waits).
    pub fn captured(&self, n: usize) -> Result<Vec<Vec<f32>>, EngineError> {
        let d = self.cfg.embedding_length;
        let all = self.gpu.download(&self.features)?;
        Ok((0..self.capture.len()).map(|c| all[c * N * d..c * N * d + n * d].to_vec()).collect())
    }

    /// Committed tokens.
    pub fn n_past(&self) -> usize {
        self.n_past
    }

    /// The tree of the last forward of two or more nodes: each node's parent (`None` for a root),
    /// for a bench to time the spec loop's own tree shape again.
    pub fn last_tree_parents(&self) -> Option<Vec<Option<usize>>> {
        self.last_tree.as_ref().map(|b| {
            let n = (b.n as usize).min(MAX_NODES as usize);
            b.parent[..n].iter().map(|&p| usize::try_from(p).ok()).collect()
        })
    }

    /// The context (KV rows) the engine was planned for.
    pub fn ctx(&self) -> usize {
        self.plan.ctx
    }

    /// Forgets every committed token (the caches are overwritten as the next prompt runs; the
    /// recurrent state and conv windows are zeroed).
    pub fn reset(&mut self) -> Result<(), EngineError> {
        self.join_side()?;
        self.gpu.fill_bytes(&mut self.state, 0)?;
        self.gpu.fill_bytes(&mut self.conv, 0)?;
        self.n_past = 0;
        self.last = None;
        self.snapshot_at = None;
        Ok(())
    }

    /// Saves every DeltaNet layer's state and conv window at the committed position `n_past`
    /// into the snapshot buffer (replacing an earlier snapshot): two device-to-device copies on
    /// the stream, `n_gdn · (state_len + conv_len) · 4` bytes read and written (27B: 48 × (48 ×
    /// 128 × 128 + 3 × 10240) × 4 ≈ 157 MB). The KV rows and feature rows before `n_past` need
    /// no copy: later tokens only append after them.
    pub fn save_snapshot(&mut self) -> Result<(), EngineError> {
        self.copy_recurrent(true)?;
        self.snapshot_at = Some(self.n_past);
        Ok(())
    }

    /// Goes back to the snapshot's position `s` and returns it: copies the saved states and
    /// conv windows back and sets `n_past = s` (the KV and feature rows from `s` on are
    /// overwritten by the next tokens; attention reads only rows before `n_past` + the batch).
    /// The snapshot stays. An error, changing nothing, without a snapshot or when it lies past
    /// `n_past`.
    pub fn restore_snapshot(&mut self) -> Result<usize, EngineError> {
        let at = self.snapshot_at.ok_or_else(|| EngineError::Batch("restore: no snapshot saved".into()))?;
        if at > self.n_past {
            return Err(EngineError::Batch(format!(
                "restore: the snapshot at position {at} lies past the {} committed tokens",
                self.n_past
            )));
        }
        self.copy_recurrent(false)?;
        self.n_past = at;
        self.last = None;
        Ok(at)
    }

    /// The position of the saved snapshot, if any.
    pub fn snapshot_position(&self) -> Option<usize> {
        self.snapshot_at
    }

    /// Every DeltaNet layer's committed state followed by its conv window, as the snapshot
    /// buffer lays them out (`[gdn layers · state_len | gdn layers · conv_len]`, waits): what a
    /// test compares before a save and after a restore.
    pub fn recurrent_state(&self) -> Result<Vec<f32>, EngineError> {
        self.join_side()?;
        let (sn, cn) = self.recurrent_lens();
        let (state, conv) = (self.gpu.download(&self.state)?, self.gpu.download(&self.conv)?);
        match (state.get(..sn), conv.get(..cn)) {
            (Some(s), Some(c)) => Ok([s, c].concat()),
            _ => Err(EngineError::Batch(format!(
                "recurrent state: {sn} + {cn} values expected, the buffers hold {} + {}",
                state.len(),
                conv.len()
            ))),
        }
    }

    /// f32 values of the DeltaNet states and of the conv windows of all layers.
    fn recurrent_lens(&self) -> (usize, usize) {
        (self.n_gdn * self.gdn.state_len(), self.n_gdn * self.gdn.conv_state_len())
    }

    /// `state` and `conv` → the snapshot buffer (`to_snapshot`), or back.
    fn copy_recurrent(&mut self, to_snapshot: bool) -> Result<(), EngineError> {
        self.join_side()?;
        let (sn, cn) = self.recurrent_lens();
        let gpu = &self.gpu;
        let snap = DevSpan::of(gpu, &self.snapshot);
        let pairs = [
            (DevSpan::of(gpu, &self.state).sub(0, sn, "recurrent state")?, snap.sub(0, sn, "snapshot state")?),
            (DevSpan::of(gpu, &self.conv).sub(0, cn, "conv windows")?, snap.sub(sn, cn, "snapshot conv windows")?),
        ];
        gpu.context().bind_to_thread().map_err(|e| GpuError::from_driver("binding the context", e))?;
        for (live, saved) in pairs {
            let (src, dst) = if to_snapshot { (live, saved) } else { (saved, live) };
            if src.is_empty() {
                continue;
            }
            // Safety: both spans hold `src.len()` f32 of live device buffers (checked by `sub`);
            // the copy is ordered on the engine's stream after the commits that wrote the source.
            unsafe {
                cudarc::driver::result::memcpy_dtod_async(dst.ptr(), src.ptr(), src.len() * 4, gpu.stream().cu_stream())
            }
            .map_err(|e| GpuError::from_driver("copying the recurrent snapshot", e))?;
        }
        Ok(())
    }

    /// Enqueues the forward of `batch` (built by [`super::node_batch`] at this engine's
    /// `n_past`): logits of every node in the logits buffer, argmax in the argmax buffer. The
    /// committed state is not modified.
    pub fn forward(&mut self, batch: &NodeBatch) -> Result<(), EngineError> {
        let n = batch.n as usize;
        if n == 0 || n > N || batch.n_past as usize != self.n_past {
            return Err(EngineError::Batch(format!(
                "batch of {n} nodes at n_past {} (the engine holds {} tokens)",
                batch.n_past, self.n_past
            )));
        }
        let need = self.n_past + n;
        if need > self.ctx() {
            return Err(EngineError::Context { need, ctx: self.ctx() });
        }
        // The last commit's side-stream work wrote the caches and read the buffers this overwrites.
        self.join_side()?;
        self.attn_groups = match self.head_groups_override {
            Some(r) => r,
            None if self.n_attn > 0 => attn::attn_head_groups(&self.gpu, self.attn, n, self.n_past, attn_split_keys())?,
            None => 1,
        };
        // The node batch, then (for DeltaNet layers) its replay schedule: one upload.
        self.batch_host.clear();
        self.batch_host.extend_from_slice(bytes_of(batch));
        if self.n_gdn > 0 {
            let r = crate::gpu::deltanet::gdn_replay_schedule(batch)
                .ok_or_else(|| EngineError::Batch(format!("batch of {n} nodes: a parent follows its child")))?;
            self.batch_host.extend_from_slice(bytes_of(&r));
        }
        self.gpu.write(&self.batch_host, &mut self.batch_dev)?;
        self.last = Some(*batch);
        if n > 1 {
            self.last_tree = Some(*batch);
        }
        let mut prof = self.profile.take();
        if let Some(p) = &mut prof {
            p.marks.clear();
            p.start.record(self.gpu.stream()).map_err(|e| GpuError::from_driver("recording an event", e))?;
        }
        // Outside any capture: a replay runs no host code (`gpu::qmatmul` accum.rs).
        self.ws.begin_accumulation(&self.gpu)?;
        let r =
            if prof.is_none() && graphs_enabled() { self.forward_graph(n) } else { self.enqueue_forward(n, &mut prof) };
        if let Some(p) = &mut prof {
            p.collect()?;
        }
        self.profile = prof;
        r
    }

    /// Replays the graph of `n` nodes at this forward's head groups, capturing it first when this
    /// size already ran eagerly with them.
    fn forward_graph(&mut self, n: usize) -> Result<(), EngineError> {
        let r = self.attn_groups;
        let Some(at) = self.graphs[n - 1].iter().position(|(gr, _)| *gr == r) else {
            self.graphs[n - 1].push((r, None));
            return self.enqueue_forward(n, &mut None);
        };
        if self.graphs[n - 1][at].1.is_none() {
            Graph::begin_capture(&self.gpu)?;
            let recorded = self.enqueue_forward(n, &mut None);
            let graph = Graph::end_capture(&self.gpu);
            recorded?;
            self.graphs[n - 1][at].1 = Some(graph?);
        }
        match &self.graphs[n - 1][at].1 {
            Some(g) => Ok(g.replay()?),
            None => Err(EngineError::Batch(format!("no graph for {n} nodes"))),
        }
    }

    /// Turns the per-family profile on (serialises every kernel group) or off, returning the
    /// profile gathered so far.
    pub fn set_profile(&mut self, on: bool) -> Result<Option<Profile>, EngineError> {
        let old = self.profile.take();
        if on {
            let start = self
                .gpu
                .context()
                .new_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT))
                .map_err(|e| GpuError::from_driver("creating an event", e))?;
            self.profile = Some(Profile { start, marks: Vec::new(), totals: Vec::new(), steps: 0 });
        }
        Ok(old)
    }

    fn enqueue_forward(&mut self, n: usize, prof: &mut Option<Profile>) -> Result<(), EngineError> {
        let gpu = &self.gpu;
        let cfg = &self.cfg;
        let d = cfg.embedding_length;
        let eps = cfg.rms_norm_eps;
        let s = |b: &CudaSlice<f32>| DevSpan::of(gpu, b);
        let batch: DevSpan<u8> = DevSpan::of(gpu, &self.batch_dev);
        // Safety: `batch_dev` holds one `NodeBatch` for the engine's life; its `tokens` field
        // follows `n_past` and `n`.
        let nodes: DevSpan<NodeBatch> = unsafe { DevSpan::from_raw(batch.ptr(), 1) };
        let tokens: DevSpan<u32> = unsafe { DevSpan::from_raw(batch.ptr() + 8, N) };
        // Safety: `batch_dev` holds a `GdnReplay` right after the `NodeBatch` (written by
        // `forward` whenever the model has DeltaNet layers, the only readers).
        let replay: DevSpan<GdnReplay> =
            unsafe { DevSpan::from_raw(batch.ptr() + std::mem::size_of::<NodeBatch>() as u64, 1) };
        embed_rows(gpu, self.w.embd_ty, DevSpan::of(gpu, &self.w.embd), cfg.vocab_size, d, tokens, n, s(&self.h))?;
        mark(gpu, prof, "embed")?;
        let (x, mix) = (s(&self.x), s(&self.mix));
        // The residual stream alternates between two buffers when the norm is fused into the
        // matmul prep (that kernel reads `h` whole in every block, so it writes `h + a` elsewhere).
        let hb = [s(&self.h), s(&self.h2)];
        let mut cur = 0usize;
        let fused = fused_norm_enabled();
        // Residual add (unless `first`) + RMSNorm with `w` + the matmul prep of the result.
        // `acc`: the mixer's product accumulated for this site ([`mixer_product`]) instead of `mix`.
        let mut norm_site = |w: DevSpan<f32>,
                             first: bool,
                             acc: Option<QmmAccumulated>,
                             ws: &mut QmmWorkspace,
                             prof: &mut Option<Profile>|
         -> Result<DevSpan<f32>, EngineError> {
            let add = match (first, acc) {
                (true, _) => Addend::None,
                (false, acc) => Addend::product(acc, mix),
            };
            norm_site(gpu, ws, hb, &mut cur, add, w, x, n, d, eps, &mut |k| mark(gpu, prof, k))?;
            Ok(hb[cur])
        };
        // Copies the residual stream (the output of layer `l`) into its feature slot if captured.
        let features = s(&self.features);
        let capture = &self.capture;
        let copy_out = |l: usize, h: DevSpan<f32>| -> Result<(), EngineError> {
            if let Some(c) = capture.iter().position(|&x| x == l) {
                let dst = features.sub(c * N * d, n * d, "features")?;
                // Safety: both spans hold n·d f32 on this device; the copy is ordered on the stream.
                unsafe {
                    cudarc::driver::result::memcpy_dtod_async(dst.ptr(), h.ptr(), n * d * 4, gpu.stream().cu_stream())
                }
                .map_err(|e| GpuError::from_driver("copying captured hidden states", e))?;
            }
            Ok(())
        };
        let mut acc: Option<QmmAccumulated> = None;
        for (l, lw) in self.w.layers.iter().enumerate() {
            let h = norm_site(s(&lw.attn_norm), l == 0, acc.take(), &mut self.ws, prof)?;
            if l > 0 {
                copy_out(l - 1, h)?;
            }
            match &lw.mixer {
                MixerWeights::Attention { proj, o, q_norm, k_norm } => {
                    let a = self.slot[l];
                    let plane = self.ctx() * self.attn.row();
                    let kv = DevSpan::of(gpu, &self.kv);
                    let kc = kv.sub(2 * a * plane, plane, "kv cache")?;
                    let vc = kv.sub((2 * a + 1) * plane, plane, "kv cache")?;
                    let input = match proj {
                        AttnProj::Qkv(w) => {
                            // One product, rows `[q | k | v]`.
                            matmul(gpu, w, n, s(&self.qg), &mut self.ws)?;
                            AttnPrepIn::merged(self.attn, s(&self.qg))?
                        }
                        AttnProj::QkV { qk, v } => {
                            // Rows `[q | k]` (stride `qk.out()`), v alone (dense).
                            matmul(gpu, qk, n, s(&self.qg), &mut self.ws)?;
                            matmul(gpu, v, n, s(&self.vb), &mut self.ws)?;
                            let (stride, row) = (qk.out(), self.attn.row());
                            let merged = AttnPrepIn::merged(self.attn, s(&self.qg))?;
                            AttnPrepIn { qg_stride: stride, k_stride: stride, v: s(&self.vb), v_stride: row, ..merged }
                        }
                        AttnProj::Split { q, k, v } => {
                            matmul(gpu, q, n, s(&self.qg), &mut self.ws)?;
                            matmul(gpu, k, n, s(&self.kb), &mut self.ws)?;
                            matmul(gpu, v, n, s(&self.vb), &mut self.ws)?;
                            AttnPrepIn::dense(self.attn, s(&self.qg), s(&self.kb), s(&self.vb))
                        }
                    };
                    mark(gpu, prof, "qmm")?;
                    let ctx = self.ctx();
                    attn::attn_prep(
                        gpu,
                        self.attn,
                        cfg.rope_dimension_count,
                        eps,
                        nodes,
                        n,
                        input,
                        s(q_norm),
                        s(k_norm),
                        s(&self.rope),
                        s(&self.q),
                        s(&self.gate),
                        kc,
                        vc,
                        ctx,
                    )?;
                    attn::attn_tree_min_split(
                        gpu,
                        self.attn,
                        nodes,
                        n,
                        s(&self.q),
                        s(&self.gate),
                        kc,
                        vc,
                        ctx,
                        s(&self.attn_scratch),
                        s(&self.ao),
                        attn_split_keys(),
                        self.attn_groups,
                    )?;
                    mark(gpu, prof, "attention")?;
                    prepare(gpu, s(&self.ao), n, o.inp(), &mut self.ws)?;
                    mark(gpu, prof, "prep")?;
                    acc = mixer_product(gpu, o, n, mix, &mut self.ws)?;
                    mark(gpu, prof, "qmm")?;
                }
                MixerWeights::DeltaNet { proj, out, conv, dt_bias, ssm_a, norm } => {
                    let g = self.slot[l];
                    let ch = cfg.ssm_conv_channels();
                    let (inner, vh) = (cfg.ssm_inner_size, cfg.ssm_time_step_rank);
                    let ms = self.mixed_stride;
                    let mixed = DevSpan::of(gpu, &self.mixed).sub(g * N * ms, N * ms, "mixed")?;
                    // `[z | b | a]` rows of width `inner + 2·n_v` starting at `rows`, stride `stride`.
                    let zba_io = |rows: DevSpan<f32>, stride: usize| -> Result<GdnIo, GpuError> {
                        let len = rows.len();
                        Ok(GdnIo {
                            mixed,
                            z: rows,
                            b: rows.sub(inner, len - inner, "b")?,
                            a: rows.sub(inner + vh, len - inner - vh, "a")?,
                            out: s(&self.go),
                            mixed_stride: ms,
                            z_stride: stride,
                            a_stride: stride,
                            b_stride: stride,
                        })
                    };
                    if !matches!(proj, GdnProj::All(_)) && ms != ch {
                        return Err(EngineError::Weights(format!(
                            "DeltaNet layer {l}: separate qkv product but the mixed arena has row stride {ms}"
                        )));
                    }
                    let io = match proj {
                        GdnProj::All(w) => {
                            // One product, rows `[mixed | z | b | a]` in the arena.
                            matmul(gpu, w, n, mixed, &mut self.ws)?;
                            zba_io(mixed.sub(ch, mixed.len() - ch, "z")?, ms)?
                        }
                        GdnProj::Zba { qkv, zba } => {
                            matmul(gpu, qkv, n, mixed, &mut self.ws)?;
                            matmul(gpu, zba, n, s(&self.zba), &mut self.ws)?;
                            zba_io(s(&self.zba), inner + 2 * vh)?
                        }
                        GdnProj::Split { qkv, gate, beta, alpha } => {
                            let zba = s(&self.zba);
                            let z = zba.sub(0, N * inner, "z")?;
                            let b = zba.sub(N * inner, N * vh, "b")?;
                            let a = zba.sub(N * (inner + vh), N * vh, "a")?;
                            matmul(gpu, qkv, n, mixed, &mut self.ws)?;
                            matmul(gpu, gate, n, z, &mut self.ws)?;
                            matmul(gpu, beta, n, b, &mut self.ws)?;
                            matmul(gpu, alpha, n, a, &mut self.ws)?;
                            GdnIo::dense(&self.gdn, mixed, z, a, b, s(&self.go))
                        }
                    };
                    mark(gpu, prof, "qmm")?;
                    let state_len = self.gdn.state_len();
                    let conv_len = self.gdn.conv_state_len();
                    let scratch_len = gdn::gdn_scratch_len(&self.gdn);
                    let w = GdnWeights { conv_w: s(conv), ssm_a: s(ssm_a), dt_bias: s(dt_bias), norm_w: s(norm) };
                    let st = GdnLayerState {
                        conv_state: DevSpan::of(gpu, &self.conv).sub(g * conv_len, conv_len, "conv state")?,
                        state: DevSpan::of(gpu, &self.state).sub(g * state_len, state_len, "state")?,
                        scratch: DevSpan::of(gpu, &self.gdn_scratch).sub(
                            g * scratch_len,
                            scratch_len,
                            "gdn scratch",
                        )?,
                    };
                    gdn::gdn_recurrence_marked(gpu, &self.gdn, n, nodes, replay, &w, &io, &st, &mut |k| {
                        mark(gpu, prof, if k == "gdn_prep" { "dn prep" } else { "dn recur" })
                    })?;
                    if fused {
                        // The gated norm straight into the out projection's workspace (`go`
                        // is not written: only the prep read it).
                        let pairs = self.ws.pairs_needed;
                        gdn::gdn_norm_prep(gpu, &self.gdn, n, &w, &io, &st, &mut self.ws, pairs)?;
                        mark(gpu, prof, "dn norm+prep")?;
                    } else {
                        gdn::gdn_gated_norm(gpu, &self.gdn, n, nodes, &w, &io, &st)?;
                        mark(gpu, prof, "dn norm")?;
                        prepare(gpu, s(&self.go), n, out.inp(), &mut self.ws)?;
                        mark(gpu, prof, "prep")?;
                    }
                    acc = mixer_product(gpu, out, n, mix, &mut self.ws)?;
                    mark(gpu, prof, "qmm")?;
                }
            }
            norm_site(s(&lw.post_norm), false, acc.take(), &mut self.ws, prof)?;
            gate_up_site(gpu, &mut self.ws, &lw.gate_up, n, s(&self.wide), lw.down.inp(), &mut |k| mark(gpu, prof, k))?;
            acc = mixer_product(gpu, &lw.down, n, mix, &mut self.ws)?;
            mark(gpu, prof, "qmm")?;
        }
        let h = norm_site(s(&self.w.output_norm), false, acc.take(), &mut self.ws, prof)?;
        self.ws.end_accumulation(gpu)?;
        copy_out(self.w.layers.len() - 1, h)?;
        matmul(gpu, &self.w.head, n, s(&self.logits), &mut self.ws)?;
        mark(gpu, prof, "lm_head")?;
        argmax_rows_span(
            gpu,
            s(&self.logits),
            n,
            cfg.vocab_size,
            s(&self.am_part_val),
            DevSpan::of(gpu, &self.am_part_idx),
            DevSpan::of(gpu, &self.am_idx),
            s(&self.am_val),
        )?;
        mark(gpu, prof, "argmax")?;
        Ok(())
    }

    /// Replaces the argmax of every node of the last forward (in the buffer
    /// [`Engine::argmax_tokens`] reads) by a seeded draw from the node's logits under `rule`,
    /// node `i` with the stream of the position after it (`n_past + depth[i] + 1`, where its
    /// picked token would go): one `sample_rows` launch on the device, no logits copied, no
    /// sync. A node with nothing to draw gets `u32::MAX`. Errors without a forward to sample.
    pub fn sample_nodes(&mut self, rule: &SampleRule) -> Result<(), EngineError> {
        let b = self.last.as_ref().ok_or_else(|| EngineError::Batch("sampling without a forward".into()))?;
        let positions: Vec<u64> = (0..b.n as usize).map(|i| b.n_past as u64 + b.depth[i] as u64 + 1).collect();
        self.sample_rows_of_last(rule, 0, &positions)
    }

    /// Samples rows `first..first + positions.len()` of the last forward's logits into the
    /// same rows of the argmax buffer, row `first + i` at `positions[i]` (one `sample_rows`
    /// launch per `SAMPLE_MAX_ROWS` rows; each row's draw is its own).
    fn sample_rows_of_last(&mut self, rule: &SampleRule, first: usize, positions: &[u64]) -> Result<(), EngineError> {
        let (gpu, vocab) = (&self.gpu, self.cfg.vocab_size);
        for (c, pos) in positions.chunks(SAMPLE_MAX_ROWS as usize).enumerate() {
            let (at, n) = (first + c * SAMPLE_MAX_ROWS as usize, pos.len());
            let logits = DevSpan::of(gpu, &self.logits).sub(at * vocab, n * vocab, "sample_rows logits")?;
            let tokens = DevSpan::of(gpu, &self.am_idx).sub(at, n, "sample_rows tokens")?;
            sample_rows(gpu, logits, vocab, rule, pos, tokens)?;
        }
        Ok(())
    }

    /// The argmax token of each node of the last forward (waits for it: the step's sync).
    pub fn argmax_tokens(&self, n: usize) -> Result<Vec<u32>, EngineError> {
        let all = self.gpu.download(&self.am_idx)?;
        Ok(all[..n.min(all.len())].to_vec())
    }

    /// The logits of the last forward, `[n, n_vocab]` (waits).
    pub fn logits(&self, n: usize) -> Result<Vec<f32>, EngineError> {
        let all = self.gpu.download(&self.logits)?;
        Ok(all[..n * self.cfg.vocab_size].to_vec())
    }

    /// Keeps the nodes `path` of the last forward (root first, each the parent of the next):
    /// KV rows compacted, recurrent state and conv windows advanced along the path, the path's
    /// captured rows appended to the feature store.
    pub fn commit(&mut self, path: &[usize]) -> Result<(), EngineError> {
        self.commit_timed(path, None)
    }

    /// [`Engine::commit`] with `clock`'s commit phase around the KV compaction and the DeltaNet
    /// replay. With capture on (a draft reads the store) and `side_commit_enabled()`, those two
    /// run on the side stream after the feature rows are copied on the main stream: the draft
    /// step that follows reads only the store, so it runs beside them, and the next forward (or
    /// anything else that touches the caches) waits for them (`Engine::join_side`).
    pub fn commit_timed(&mut self, path: &[usize], clock: Option<&mut PhaseClock>) -> Result<(), EngineError> {
        // `commit_dev` is about to be overwritten: the last commit's side work reads it.
        self.join_side()?;
        let batch = self.last.take().ok_or_else(|| EngineError::Batch("commit without a forward".into()))?;
        let c = super::batch::commit_path(&batch, path)?;
        if path.is_empty() {
            return Ok(());
        }
        self.gpu.write(bytes_of(&c), &mut self.commit_dev)?;
        let faulty = match self.fault {
            Some(CommitFault::DeltaNetFromRejectedSibling) => rejected_sibling_path(&batch, path),
            None => None,
        };
        if let Some(p) = &faulty {
            let c = super::batch::commit_path(&batch, p)?;
            self.gpu.write(bytes_of(&c), &mut self.fault_dev)?;
        }
        let gpu = &self.gpu;
        if let Some(store) = &self.store {
            // The path's captured rows → store rows n_past.. (device to device, main stream).
            let (src, dst) = (DevSpan::of(gpu, &self.features), store.span(gpu));
            let (layers, d) = (self.capture.len(), self.cfg.embedding_length);
            // Safety: `commit_dev` holds one `CommitPath` (this path, at `n_past`).
            let on_device = unsafe { DevSpan::from_raw(DevSpan::of(gpu, &self.commit_dev).ptr(), 1) };
            copy_path_rows(gpu, on_device, path.len(), self.n_past, src, dst, layers, N, d)?;
        }
        let gdn_len = faulty.as_ref().map_or(path.len(), Vec::len);
        match self.side_commit() {
            // Measured on nvidia-h200 (oracle AL 8, 22-node trees): 656 → 663 tok/s with the main
            // stream at the higher priority, unchanged at equal priorities (the replay's blocks
            // then took the SMs ahead of the draft's): `docs/perf/engine.md`, twelfth session.
            Some(side) => {
                side.pending.store(true, std::sync::atomic::Ordering::Relaxed);
                gpu.on_side_stream(&side.start, &side.done, || self.commit_caches(faulty.is_some(), gdn_len, clock))?;
            }
            None => self.commit_caches(faulty.is_some(), gdn_len, clock)?,
        }
        self.n_past += path.len();
        Ok(())
    }

    /// The commit's cache work on [`Gpu::stream`] (`commit_dev` / `fault_dev` written): KV rows
    /// of the path to their committed positions, the DeltaNet replay along the path (the
    /// deliberately wrong one of `gdn_len` nodes from `fault_dev` when `faulty`), inside
    /// `clock`'s commit phase.
    fn commit_caches(&self, faulty: bool, gdn_len: usize, clock: Option<&mut PhaseClock>) -> Result<(), EngineError> {
        let gpu = &self.gpu;
        let mut clock = clock;
        if let Some(c) = clock.as_deref_mut() {
            c.start(gpu, Phase::Commit)?;
        }
        // Safety: `commit_dev` holds one `CommitPath` for the engine's life.
        let commit: DevSpan<CommitPath> = unsafe { DevSpan::from_raw(DevSpan::of(gpu, &self.commit_dev).ptr(), 1) };
        if self.n_attn > 0 {
            let plane = self.ctx() * self.attn.row();
            attn::kv_commit(
                gpu,
                commit,
                DevSpan::of(gpu, &self.kv),
                2 * self.n_attn,
                plane,
                self.attn.row(),
                self.ctx(),
            )?;
        }
        let gdn_commit_dev = if faulty {
            // Safety: `fault_dev` holds one `CommitPath` once a fault is set.
            unsafe { DevSpan::from_raw(DevSpan::of(gpu, &self.fault_dev).ptr(), 1) }
        } else {
            commit
        };
        if self.n_gdn > 0 {
            gdn::gdn_commit(
                gpu,
                &self.gdn,
                self.n_gdn,
                gdn_commit_dev,
                gdn_len,
                DevSpan::of(gpu, &self.mixed),
                self.mixed_stride,
                DevSpan::of(gpu, &self.gdn_scratch),
                DevSpan::of(gpu, &self.state),
                DevSpan::of(gpu, &self.conv),
            )?;
        }
        if let Some(c) = clock {
            c.stop(gpu, Phase::Commit)?;
        }
        Ok(())
    }

    /// Whether commits run their cache work on the side stream (capture on and
    /// `side_commit_enabled()`).
    pub fn commits_on_side_stream(&self) -> bool {
        self.side_commit().is_some()
    }

    /// The side stream's events when commits use it (capture on: a draft reads the store).
    fn side_commit(&self) -> Option<&SideCommit> {
        self.side.as_ref().filter(|_| self.store.is_some())
    }

    /// Makes the main stream wait for the last commit's side-stream work (nothing when none is
    /// pending): before anything that reads or writes the caches, `mixed`, the DeltaNet
    /// scratch or the commit path buffers.
    fn join_side(&self) -> Result<(), EngineError> {
        if let Some(side) = &self.side {
            if side.pending.swap(false, std::sync::atomic::Ordering::Relaxed) {
                self.gpu.wait_on_main(&side.done)?;
            }
        }
        Ok(())
    }

    /// Makes every later commit deliberately wrong (`Some`) or right again (`None`): for tests
    /// that must fail when the rollback is broken.
    #[doc(hidden)]
    pub fn set_commit_fault(&mut self, fault: Option<CommitFault>) -> Result<(), EngineError> {
        if fault.is_some() && self.fault_dev.len() < std::mem::size_of::<CommitPath>() {
            self.fault_dev = self.gpu.zeros::<u8>(std::mem::size_of::<CommitPath>())?;
        }
        self.fault = fault;
        Ok(())
    }

    /// Runs `tokens` (a prompt, or its continuation) in chains of at most 32 through the same
    /// forward, committing each chain. Returns the argmax after the last token.
    pub fn prefill(&mut self, tokens: &[u32]) -> Result<u32, EngineError> {
        self.prefill_with(tokens, None)
    }

    /// [`Engine::prefill`] returning the token `sampling` draws after the last token (with the
    /// stream of the position it will occupy), or the argmax with `None`.
    pub fn prefill_with(&mut self, tokens: &[u32], sampling: Option<&SampleRule>) -> Result<u32, EngineError> {
        let mut last = None;
        let chunks = tokens.len().div_ceil(PREFILL_CHUNK);
        for (c, chunk) in tokens.chunks(PREFILL_CHUNK).enumerate() {
            let b = super::batch::chain_batch(self.n_past, chunk, self.cfg.vocab_size, self.ctx())?;
            self.forward(&b)?;
            if c + 1 == chunks {
                if let Some(rule) = sampling {
                    self.sample_rows_of_last(rule, chunk.len() - 1, &[(self.n_past + chunk.len()) as u64])?;
                }
                last = self.argmax_tokens(chunk.len())?.last().copied();
            }
            let path: Vec<usize> = (0..chunk.len()).collect();
            self.commit(&path)?;
        }
        last.ok_or_else(|| EngineError::Batch("empty prompt".into()))
    }
}

impl Drop for Engine {
    /// The buffers are freed in order on the main stream: after the last commit's side work.
    fn drop(&mut self) {
        let _ = self.join_side();
    }
}

impl Profile {
    /// Waits for the last forward and adds each group's time to its family.
    fn collect(&mut self) -> Result<(), EngineError> {
        let mut prev = &self.start;
        for (family, ev) in &self.marks {
            ev.synchronize().map_err(|e| GpuError::from_driver("waiting for an event", e))?;
            let ms = prev.elapsed_ms(ev).map_err(|e| GpuError::from_driver("reading event time", e))? as f64;
            match self.totals.iter_mut().find(|(f, _)| f == family) {
                Some((_, t)) => *t += ms,
                None => self.totals.push((family, ms)),
            }
            prev = ev;
        }
        self.steps += 1;
        Ok(())
    }
}

/// The residual addend of a norm site.
pub(super) enum Addend {
    /// None: the first site of a forward.
    None,
    /// The mixer's output `[n, h]` in a buffer.
    Buffer(DevSpan<f32>),
    /// The mixer's product accumulated for this site ([`mixer_product`]; fused norm only).
    Accumulated(QmmAccumulated),
}

impl Addend {
    /// The addend a mixer's or MLP's product leaves for the next norm site: accumulated
    /// ([`mixer_product`]'s `Some`), else the product `y` it wrote.
    pub(super) fn product(acc: Option<QmmAccumulated>, y: DevSpan<f32>) -> Addend {
        acc.map_or(Addend::Buffer(y), Addend::Accumulated)
    }
}

/// A norm site of a forward (the target's and the DFlash draft's): the residual add (`add`: the
/// mixer's output; none at the first site), RMSNorm with `w` and the matmul prep of the result,
/// over `n` rows of width `h` of the residual stream `eb[cur]`. Fused (`qmm_prep_norm`, the
/// default: one kernel, which reads `h` whole in every block, so `h + a` goes to the other buffer
/// of `eb` and `cur` flips; `after("norm+prep")`; an accumulated addend through
/// `qmm_prep_norm_accum`) or, with `FLASHTREE_FUSED_NORM=0`, `add_rms_norm` / `rms_norm_rows` in
/// place into `x` then the prep (`after("norm")`, `after("prep")`): bitwise the same prepared
/// activations for a buffer addend.
#[allow(clippy::too_many_arguments)]
pub(super) fn norm_site(
    gpu: &Gpu,
    ws: &mut QmmWorkspace,
    eb: [DevSpan<f32>; 2],
    cur: &mut usize,
    add: Addend,
    w: DevSpan<f32>,
    x: DevSpan<f32>,
    n: usize,
    h: usize,
    eps: f32,
    after: &mut dyn FnMut(&'static str) -> Result<(), GpuError>,
) -> Result<(), EngineError> {
    let pairs = ws.pairs_needed;
    let fused = fused_norm_enabled();
    let add = match add {
        Addend::Accumulated(a) => {
            if !fused {
                return Err(GpuError::shape("norm site", "an accumulated product needs the fused norm").into());
            }
            ws.prepare_norm_accum(gpu, eb[*cur], a, eb[1 - *cur], w, n, h, eps, pairs)?;
            *cur = 1 - *cur;
            after("norm+prep")?;
            return Ok(());
        }
        Addend::Buffer(a) => Some(a),
        Addend::None => None,
    };
    if fused {
        ws.prepare_norm(gpu, eb[*cur], add.map(|a| (a, eb[1 - *cur])), w, n, h, eps, pairs)?;
        if add.is_some() {
            *cur = 1 - *cur;
        }
        after("norm+prep")?;
    } else {
        match add {
            None => rms_norm_rows_span(gpu, eb[*cur], w, x, n, h, eps)?,
            Some(a) => add_rms_norm(gpu, eb[*cur], a, w, x, n, h, eps)?,
        }
        after("norm")?;
        ws.prepare(gpu, x, n, h, pairs)?;
        after("prep")?;
    }
    Ok(())
}

/// Whether the target's output and down projections accumulate for the next norm site
/// (`gpu::qmatmul` accum.rs): `FLASHTREE_QMM_ACCUM` not `0`, the fused norm on, and a residual
/// width the accumulating norm kernel takes. A property of the model, never of `n`.
pub(super) fn accumulates_residual(width: usize) -> bool {
    accumulation_enabled() && fused_norm_enabled() && accumulator_width_fits(width)
}

/// A mixer's or MLP's output product, read only by the next norm site's residual add:
/// accumulated for that site where the workspace takes `w` ([`QmmWorkspace::accumulates`]: its
/// K-split reduction then happens exactly in the site's kernel, no split waiting for another),
/// else `y = W·x` into `y`. (The DFlash draft's block pass uses it too.)
pub(super) fn mixer_product(
    gpu: &Gpu,
    w: &QWeight,
    n: usize,
    y: DevSpan<f32>,
    ws: &mut QmmWorkspace,
) -> Result<Option<QmmAccumulated>, EngineError> {
    if ws.accumulates(w) {
        return Ok(Some(ws.matmul_accum(gpu, w, n)?));
    }
    w.matmul(gpu, n, y, ws)?;
    Ok(None)
}

/// Enables the accumulated products (`gpu::qmatmul` accum.rs) of a forward whose residual stream
/// is `width` wide and whose MLPs are the fused `gate_ups`: the output and down projections into
/// the next norm site (where [`accumulates_residual`]), the gate/up products' split tails where
/// they fit. The target's forward and the DFlash draft's block pass.
pub(super) fn enable_accumulations<'a>(
    gpu: &Gpu,
    ws: &mut QmmWorkspace,
    width: usize,
    gate_ups: impl Iterator<Item = &'a QWeight>,
) -> Result<(), EngineError> {
    if accumulates_residual(width) {
        ws.enable_accumulation(gpu, width)?;
    }
    let tail = gate_ups.map(swiglu_tail_rows).max().unwrap_or(0);
    if accumulation_enabled() && swiglu_tail_fits(tail) {
        ws.enable_swiglu_accumulation(gpu, tail)?;
    }
    Ok(())
}

/// An MLP's fused gate/up product of `n` rows into `wide` and the down projection's prep of it
/// (`ff` features): the split tail accumulated and its SwiGLU applied by the prep where the
/// workspace takes it, else the SwiGLU epilogue's column maxima read without a scan. `after`:
/// `"qmm"` after the product, `"prep"` after the prep (profile marks).
pub(super) fn gate_up_site(
    gpu: &Gpu,
    ws: &mut QmmWorkspace,
    gate_up: &QWeight,
    n: usize,
    wide: DevSpan<f32>,
    ff: usize,
    after: &mut dyn FnMut(&'static str) -> Result<(), GpuError>,
) -> Result<(), EngineError> {
    let pairs = ws.pairs_needed;
    if ws.swiglu_accumulates(gate_up) {
        let t = ws.swiglu_accum(gpu, gate_up, n, wide)?;
        after("qmm")?;
        ws.prepare_swiglu_accum(gpu, wide, t, n, ff, pairs)?;
    } else {
        gate_up.swiglu(gpu, n, wide, ws)?;
        after("qmm")?;
        ws.prepare_swiglu(gpu, wide, n, ff, pairs)?;
    }
    after("prep")?;
    Ok(())
}

/// Converts the activations `x [n, inp]` for the matmuls that follow (with the bf16 pair only
/// when some matrix of the model is F32: [`qmm_needs_pairs`]).
fn prepare(gpu: &Gpu, x: DevSpan<f32>, n: usize, inp: usize, ws: &mut QmmWorkspace) -> Result<(), EngineError> {
    let pairs = ws.pairs_needed;
    ws.prepare(gpu, x, n, inp, pairs)?;
    Ok(())
}

fn matmul(gpu: &Gpu, w: &QWeight, n: usize, y: DevSpan<f32>, ws: &mut QmmWorkspace) -> Result<(), EngineError> {
    w.matmul(gpu, n, y, ws)?;
    Ok(())
}

fn attn_dims(cfg: &Qwen35Config) -> AttnDims {
    AttnDims { n_head: cfg.head_count, n_head_kv: cfg.head_count_kv, head_dim: cfg.key_length, gated: true, window: 0 }
}

fn gdn_shape(cfg: &Qwen35Config) -> GdnShape {
    GdnShape {
        n_k: cfg.ssm_group_count,
        n_v: cfg.ssm_time_step_rank,
        d_k: cfg.ssm_state_size,
        d_v: cfg.ssm_value_head_dim(),
        conv_kernel: cfg.ssm_conv_kernel,
        eps: cfg.rms_norm_eps,
    }
}

/// Shapes the kernels do not cover, refused before anything is allocated.
fn check_supported(cfg: &Qwen35Config, ctx: usize) -> Result<(), EngineError> {
    if cfg.key_length != cfg.value_length {
        return Err(EngineError::Unsupported(format!(
            "attention key_length {} ≠ value_length {}",
            cfg.key_length, cfg.value_length
        )));
    }
    if ctx == 0 || ctx > cfg.context_length {
        return Err(EngineError::Plan(format!(
            "context {ctx} is outside 1..={} (the model's qwen35.context_length)",
            cfg.context_length
        )));
    }
    if ctx > u32::MAX as usize / 2 {
        return Err(EngineError::Plan(format!("context {ctx} is too large")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_groups_override_takes_divisors_of_the_group_and_names_the_variable_otherwise() {
        assert_eq!(parse_head_groups("3", 6, "target").unwrap(), 3);
        assert_eq!(parse_head_groups(" 6 ", 6, "target").unwrap(), 6);
        assert_eq!(parse_head_groups("1", 1, "draft").unwrap(), 1);
        for bad in ["4", "0", "7", "-2", "two", "12"] {
            let err = parse_head_groups(bad, 6, "target").unwrap_err().to_string();
            assert!(err.contains(&format!("FLASHTREE_ATTN_HEAD_GROUPS={bad}")), "{err}");
            assert!(err.contains("6 query heads per KV head") && err.contains("(1, 2, 3, 6)"), "{err}");
        }
    }
}
