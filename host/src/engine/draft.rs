//! [`DraftEngine`]: a DFlash block-diffusion draft (z-lab layout, `../docs` dflash-draft.md §2) on
//! the GPU, on the target engine's stream, with the target's token embedding and LM head.
//!
//! Two passes, both through the target's kernels:
//!
//! * **Context** ([`DraftEngine::extend_context`]), once per committed token: the token's feature
//!   row `f = concat_l h_l` (the target's layer taps, `[k·H]`) → `c = RMSNorm_hidden(W_fc·f)` →
//!   per draft layer `K = RoPE(k_norm(W_k·c))`, `V = W_v·c` at the token's position, written as
//!   f16 rows of the draft's KV cache (`attn_prep` with no query heads). Chunks of ≤ 32 rows.
//! * **Block** ([`DraftEngine::propose`]): the `B` nodes `[bonus, MASK × (B−1)]` at positions
//!   `n_ctx …` through every layer — pre-norm attention over the context rows and the block
//!   (non-causal for full layers; causal when the config says so), SwiGLU MLP — then the final
//!   norm, the target's LM head on slots `1 … B−1`, and the top-K log-probs of each row on the
//!   device. The block's K/V rows sit after the context rows and are overwritten when the next
//!   committed tokens' context rows are written.
//!
//! Arithmetic: the target's (`qmm` with f16-rounded inputs, f16 KV, f32 elsewhere), so the logits
//! follow the reference draft within the f16 rounding of the matmul inputs and the cache. Full
//! layers attend every committed row; sliding-window layers (causal inside the block unless the
//! config says otherwise) attend the committed rows at positions `> p − window` for a block slot
//! at `p`, as the reference draft does (`attn_tree`'s window; windows of at least 32 keys).

use std::sync::Arc;

use cudarc::driver::CudaSlice;
use kernel_abi::{NodeBatch, QMM_MAX_N};

use super::batch::bytes_of;
use super::forward::{enable_accumulations, gate_up_site, mixer_product, norm_site, Addend};
use super::weights::TargetWeights;
use super::EngineError;
use crate::gpu::attention::{self as attn, AttnDims, AttnPrepIn};
use crate::gpu::embed::embed_rows;
use crate::gpu::graph::Graph;
use crate::gpu::qmatmul::{qmm_format, qmm_swiglu_rows, PackedWeight, QWeight, QmmAccumulated, QmmWorkspace};
use crate::gpu::sample::{topk_logprobs_rows, topk_scratch_len};
use crate::gpu::{DevSpan, Gpu, GpuTimer};
use crate::model::{DraftConfig, DraftModel, Qwen35Config};
use flashtree_quants::promote::promote;
use flashtree_quants::{common_lossless_type, dequantize};

/// Most rows of the draft's block and of one context chunk: one matmul launch wide (the
/// target's trees may be wider; the draft's block is 16 rows).
const N: usize = QMM_MAX_N as usize;

/// One draft layer's weights on the device.
struct DraftLayer {
    attn_norm: CudaSlice<f32>,
    post_norm: CudaSlice<f32>,
    q: DraftQ,
    /// The context pass's k and v (and the block pass's, when q stands alone); `None` when the
    /// context pass reads [`DraftEngine::context_kv`] instead.
    kv: Option<DraftKv>,
    o: QWeight,
    q_norm: CudaSlice<f32>,
    k_norm: CudaSlice<f32>,
    gate_up: QWeight,
    down: QWeight,
}

/// A draft layer's k and v projections (`[n_kv·hd, h]` each): one matrix `[2·n_kv·hd, h]`, product
/// rows `[k | v]`, when their types have a lossless common type (always for BF16, F16 and Q8_0
/// drafts; [`flashtree_quants::common_lossless_type`]), else two. The context pass reads these
/// (k and v of the context rows only: stacking q too would make every context row stream the q
/// rows as well); the block pass reads them only when its q stands alone ([`DraftQ`]).
enum DraftKv {
    Stacked(QWeight),
    Split { k: QWeight, v: QWeight },
}

/// A draft layer's q projection for the block pass: with k and v under it (`[q | k | v]` rows,
/// one product instead of two: the block pass's q and kv products are each ≈ 10 µs of launch
/// fill and tail for 5–22 MB of weights) where the three have a lossless common type, else alone.
/// The context pass keeps its own k + v matrix ([`DraftKv`]): it needs no q rows.
enum DraftQ {
    WithKv(QWeight),
    Alone(QWeight),
}

impl DraftQ {
    fn matrix(&self) -> &QWeight {
        match self {
            DraftQ::WithKv(w) | DraftQ::Alone(w) => w,
        }
    }
}

impl DraftKv {
    fn matrices(&self) -> Vec<&QWeight> {
        match self {
            DraftKv::Stacked(w) => vec![w],
            DraftKv::Split { k, v } => vec![k, v],
        }
    }
}

/// A layer's [`DraftKv`], which it holds unless [`DraftEngine::context_kv`] replaced it (and
/// then only a layer whose q stands alone would ask: none does).
fn layer_kv(kv: &Option<DraftKv>, layer: usize) -> Result<&DraftKv, EngineError> {
    kv.as_ref().ok_or_else(|| EngineError::Weights(format!("draft layer {layer}: no k/v matrix of its own")))
}

/// The k and v products of `kv` over the `m` rows last prepared in `ws`, into `kb` (`[m][2·row]`
/// when stacked, else `[m][row]`) and `vb` (`[m][row]`, split only): the k and v inputs of
/// `attn_prep`, with an empty query input (the caller sets it).
fn kv_products(
    gpu: &Gpu,
    kv: &DraftKv,
    dims: AttnDims,
    m: usize,
    kb: DevSpan<f32>,
    vb: DevSpan<f32>,
    ws: &mut QmmWorkspace,
) -> Result<AttnPrepIn, EngineError> {
    let none = kb.sub(0, 0, "no queries")?;
    let row = dims.row();
    Ok(match kv {
        DraftKv::Stacked(w) => {
            matmul(gpu, w, m, kb, ws)?;
            let v = kb.sub(row, kb.len() - row, "v columns")?;
            AttnPrepIn { qg: none, k: kb, v, qg_stride: 0, k_stride: 2 * row, v_stride: 2 * row }
        }
        DraftKv::Split { k, v } => {
            matmul(gpu, k, m, kb, ws)?;
            matmul(gpu, v, m, vb, ws)?;
            AttnPrepIn { qg: none, k: kb, v: vb, qg_stride: 0, k_stride: row, v_stride: row }
        }
    })
}

/// The DFlash draft on the GPU.
pub struct DraftEngine {
    gpu: Arc<Gpu>,
    /// The target's weights: token embedding (block inputs, MASK row) and LM head.
    target: Arc<TargetWeights>,
    target_vocab: usize,
    pub cfg: DraftConfig,
    fc: QWeight,
    hidden_norm: CudaSlice<f32>,
    layers: Vec<DraftLayer>,
    /// Every layer's context k and v as one matrix `[layers·2·n_kv·hd, h]`, layer `l`'s rows
    /// `[k_l | v_l]` at `l·2·n_kv·hd`, when all of them have a lossless common type and every
    /// layer's block pass reads its k and v under its q ([`DraftQ::WithKv`]): a context chunk is
    /// then one product of ≈ 55 MB (the 27B draft) instead of one of ≈ 11 MB per layer, each
    /// with its own launch fill and tail. Into `kvc` (`[m][layers·2·row]`).
    context_kv: Option<QWeight>,
    kvc: CudaSlice<f32>,
    output_norm: CudaSlice<f32>,
    dims: AttnDims,
    /// Context rows the KV cache holds (positions `0..n_ctx`).
    n_ctx: usize,
    /// Rows per KV plane: the context plus one block.
    rows: usize,
    /// `[layers][K|V][rows][n_kv·hd]` f16.
    kv: CudaSlice<u16>,
    rope: CudaSlice<f32>,
    batch_dev: CudaSlice<u8>,
    /// The block's `NodeBatch` with causal masks (slot `i` sees slots `0..=i`), for the layers
    /// that attend causally (sliding-window layers, or every layer when the config says so).
    causal_dev: CudaSlice<u8>,
    feat: CudaSlice<f32>,
    c: CudaSlice<f32>,
    e: CudaSlice<f32>,
    /// The residual stream's second buffer: with the fused norm prep (`qmm_prep_norm`, which
    /// reads `h` whole in every block) each site writes `h + a` to the other buffer.
    e2: CudaSlice<f32>,
    x: CudaSlice<f32>,
    mix: CudaSlice<f32>,
    kb: CudaSlice<f32>,
    vb: CudaSlice<f32>,
    qb: CudaSlice<f32>,
    qo: CudaSlice<f32>,
    ao: CudaSlice<f32>,
    wide: CudaSlice<f32>,
    logits: CudaSlice<f32>,
    topk_scratch: CudaSlice<u32>,
    /// The block's top-k: `B·k` tokens, then `B·k` log-probs as f32 bits (one download).
    topk_out: CudaSlice<u32>,
    attn_scratch: CudaSlice<f32>,
    ws: QmmWorkspace,
    /// The block pass captured as a graph for one top-`k` and one pair of attention head groups
    /// (on the second propose; the first fills the launchers' caches) and replayed with a new
    /// `NodeBatch`: every per-round value (bonus, context length) is read from device memory.
    /// `FLASHTREE_GRAPH=0` launches every kernel.
    block_graph: Option<(Graph, BlockGraphKey)>,
    block_runs: u32,
    /// `FLASHTREE_ATTN_HEAD_GROUPS` (`super::forward::attn_head_groups_override`), else `None`.
    head_groups_override: Option<usize>,
    /// Head groups of the attention split pass in the block being enqueued: full-attention
    /// layers, sliding-window layers (`attn::attn_head_groups` at this round's context).
    attn_groups: [usize; 2],
    /// Fewest keys per split of the block's attention ([`draft_split_keys`] at this round's context).
    split_keys: u32,
    /// Device time of the draft's passes ([`DraftEngine::start_timing`] → the next propose's
    /// sync), accumulated in ms.
    timer: Option<GpuTimer>,
    timing: bool,
    device_ms: f64,
}

/// What a captured block graph was recorded for: top-`k`, the attention's head groups (full,
/// sliding layers) and its fewest keys per split.
type BlockGraphKey = (usize, [usize; 2], u32);

/// Fewest context keys per split of the draft's attention (`kernel_abi::attn_split_len_min`) at
/// a context of `n_ctx` committed rows: the smallest of 64 (one tile, `ATTN_TILE_KEYS`), 128, …
/// 1024 that keeps the committed rows at ≤ [`DRAFT_SPLITS`] splits per KV head (the draft needs
/// no batch invariance: its output is only a proposal, so it need not follow the target's one
/// split per 128 keys). The block's 16 nodes share one tensor-core tile row, so the attention of
/// a layer is `splits × KV heads` blocks: at 771 rows 13 one-tile splits (104 blocks) instead of
/// 7 (56); at 8K 16 splits of 512 keys instead of 8 of 1024 (`docs/perf/spec.md`, nineteenth
/// session). Powers of two keep the block graph's arguments fixed except where the step changes.
fn draft_split_keys(n_ctx: usize) -> u32 {
    let mut keys = kernel_abi::ATTN_TILE_KEYS;
    while keys < DRAFT_MAX_SPLIT_KEYS && n_ctx > DRAFT_SPLITS * keys as usize {
        keys *= 2;
    }
    keys
}

/// Splits per KV head [`draft_split_keys`] aims at (at most; more past 16K rows).
const DRAFT_SPLITS: usize = 16;

/// The longest split [`draft_split_keys`] picks (the scratch is sized for the shortest).
const DRAFT_MAX_SPLIT_KEYS: u32 = 1024;

/// The most top-K entries per position a [`DraftEngine`] returns.
pub const DRAFT_MAX_K: usize = N;

/// A matrix to pack for `qmm`: its name, `[out, in]`, and for a fused gate/up pair the up
/// matrix's name (`out` = `ff`), or for a stack the matrices stacked under it (`(name, rows)`,
/// each `[rows, in]`, all of one lossless common type: the packed matrix is
/// `[out + Σ rows, in]`).
struct PackJob {
    name: String,
    up: Option<String>,
    below: Vec<(String, usize)>,
    out: usize,
    inp: usize,
}

impl PackJob {
    fn matrix(name: String, out: usize, inp: usize) -> Self {
        PackJob { name, up: None, below: Vec::new(), out, inp }
    }

    /// Packs on the host.
    fn pack(&self, d: &DraftModel) -> Result<PackedWeight, EngineError> {
        let t = tensor(d, &self.name)?;
        if qmm_format(t.ty).is_none() {
            return Err(EngineError::Weights(format!(
                "{} is {}: the GPU draft takes BF16, F16, F32, Q8_0, Q4_K, Q5_K, Q6_K",
                self.name,
                t.ty.name()
            )));
        }
        let err = |e: crate::gpu::GpuError| EngineError::Weights(format!("{}: {e}", self.name));
        if !self.below.is_empty() {
            let mut parts = vec![(self.name.as_str(), t, self.out)];
            for (name, rows) in &self.below {
                parts.push((name.as_str(), tensor(d, name)?, *rows));
            }
            let types: Vec<_> = parts.iter().map(|(_, x, _)| x.ty).collect();
            let ty = common_lossless_type(&types).ok_or_else(|| {
                let names: Vec<_> = parts.iter().map(|(n, x, _)| format!("{n} ({})", x.ty)).collect();
                EngineError::Weights(format!("{}: no common type", names.join(", ")))
            })?;
            let mut raw = Vec::new();
            let mut total = 0usize;
            for (name, x, rows) in &parts {
                let elements = rows
                    .checked_mul(self.inp)
                    .ok_or_else(|| EngineError::Weights(format!("{name}: [{rows}, {}] overflows", self.inp)))?;
                let p =
                    promote(x.ty, ty, x.data, elements).map_err(|e| EngineError::Weights(format!("{name}: {e}")))?;
                raw.extend_from_slice(&p);
                total += rows;
            }
            return PackedWeight::pack(ty, &raw, total, self.inp).map_err(err);
        }
        match &self.up {
            None => PackedWeight::pack(t.ty, t.data, self.out, self.inp).map_err(err),
            Some(up) => {
                let u = tensor(d, up)?;
                if u.ty != t.ty {
                    return Err(EngineError::Weights(format!("{} is {} but {up} is {}", self.name, t.ty, u.ty)));
                }
                PackedWeight::pack_gate_up(t.ty, t.data, u.data, self.out, self.inp).map_err(err)
            }
        }
    }
}

/// Packs `jobs` on all host cores, uploading each result in job order as it is ready.
fn pack_all(gpu: &Gpu, d: &DraftModel, jobs: &[PackJob]) -> Result<Vec<QWeight>, EngineError> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc;
    let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).clamp(1, 16);
    let next = AtomicUsize::new(0);
    let mut done: Vec<Option<QWeight>> = (0..jobs.len()).map(|_| None).collect();
    std::thread::scope(|s| -> Result<(), EngineError> {
        let (tx, rx) = mpsc::sync_channel::<(usize, Result<PackedWeight, EngineError>)>(threads);
        for _ in 0..threads.min(jobs.len()) {
            let (tx, next) = (tx.clone(), &next);
            s.spawn(move || loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= jobs.len() || tx.send((i, jobs[i].pack(d))).is_err() {
                    break;
                }
            });
        }
        drop(tx);
        for (i, r) in rx {
            done[i] = Some(r?.upload(gpu)?);
        }
        Ok(())
    })?;
    done.into_iter()
        .enumerate()
        .map(|(i, x)| x.ok_or_else(|| EngineError::Weights(format!("{}: not packed", jobs[i].name))))
        .collect()
}

fn upload_vector(gpu: &Gpu, d: &DraftModel, name: &str, len: usize) -> Result<CudaSlice<f32>, EngineError> {
    let t = tensor(d, name)?;
    let v = dequantize(t.ty, t.data).map_err(|e| EngineError::Weights(format!("{name}: {e}")))?;
    if v.len() != len {
        return Err(EngineError::Weights(format!("{name}: {} values, expected {len}", v.len())));
    }
    Ok(gpu.upload(&v)?)
}

fn tensor<'d>(d: &'d DraftModel, name: &str) -> Result<crate::model::draft::DraftTensor<'d>, EngineError> {
    d.tensor(name).ok_or_else(|| EngineError::Weights(format!("{}: no tensor {name}", d.path.display())))
}

/// How the context pass computes each layer's k and v ([`DraftEngine::load_with`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContextKv {
    /// One product over every layer's k and v where the draft's types allow it
    /// ([`DraftEngine`]'s `context_kv`), else per layer.
    AllLayers,
    /// One product per layer (each layer's own k + v matrix).
    PerLayer,
}

impl ContextKv {
    /// `FLASHTREE_DRAFT_CONTEXT_KV=per-layer` (an A/B switch, read once per process), else
    /// [`ContextKv::AllLayers`].
    pub fn from_env() -> ContextKv {
        static V: std::sync::OnceLock<ContextKv> = std::sync::OnceLock::new();
        *V.get_or_init(|| match std::env::var("FLASHTREE_DRAFT_CONTEXT_KV").as_deref() {
            Ok("per-layer") => ContextKv::PerLayer,
            _ => ContextKv::AllLayers,
        })
    }
}

impl DraftEngine {
    /// Uploads `draft` for the target whose weights are `target` (`tcfg`), with room for `ctx`
    /// context rows (the target engine's context). Refuses a draft the kernels do not cover
    /// (sliding windows under 32 keys, head shapes outside the attention kernels, a vocabulary over the
    /// target's) and a pair that does not match. The context k/v layout: [`ContextKv::from_env`].
    pub fn load(
        gpu: Arc<Gpu>,
        target: Arc<TargetWeights>,
        tcfg: &Qwen35Config,
        draft: &DraftModel,
        ctx: usize,
    ) -> Result<DraftEngine, EngineError> {
        Self::load_with(gpu, target, tcfg, draft, ctx, ContextKv::from_env())
    }

    /// [`DraftEngine::load`] with the context pass's k/v layout `context`.
    pub fn load_with(
        gpu: Arc<Gpu>,
        target: Arc<TargetWeights>,
        tcfg: &Qwen35Config,
        draft: &DraftModel,
        ctx: usize,
        context: ContextKv,
    ) -> Result<DraftEngine, EngineError> {
        let cfg = draft.config.clone();
        cfg.check_target(tcfg, &draft.path)?;
        // Sliding-window layers: a query at position p sees context keys > p − W (`attn_tree`'s
        // window, which keeps every block key visible for W ≥ the block's rows).
        if let (Some(l), w) = (cfg.sliding_layers.iter().position(|&s| s), cfg.sliding_window.unwrap_or(0)) {
            if w < N {
                return Err(EngineError::Unsupported(format!(
                    "{}: draft layer {l} is a sliding-window layer with window {w}; the GPU draft takes windows of \
                     at least {N}",
                    draft.path.display()
                )));
            }
        }
        let (h, hd, ff) = (cfg.hidden_size, cfg.head_dim, cfg.intermediate_size);
        let (nh, nkv) = (cfg.num_heads, cfg.num_kv_heads);
        let kh = cfg.target_layer_ids.len() * h;
        if cfg.block_size < 2 || cfg.block_size > N {
            return Err(EngineError::Unsupported(format!(
                "block size {}: the GPU draft takes 2..={N}",
                cfg.block_size
            )));
        }
        let dims = AttnDims { n_head: nh, n_head_kv: nkv, head_dim: hd, gated: false, window: 0 };
        let head_groups_override = super::forward::attn_head_groups_override(nh / nkv.max(1), "draft")?;
        let g = &*gpu;
        // Every matrix packed in parallel: fc, then per layer q, k + v (or k, v), o, gate/up, down.
        let mut jobs = vec![PackJob::matrix("fc.weight".into(), h, kh)];
        // Per layer: whether its k and v stack (a lossless common type), and whether q stacks on
        // them too; the context pass's one k/v matrix over every layer ([`DraftEngine::context_kv`])
        // needs every layer's q over its k + v and one common type across all the k and v.
        let mut stacked = Vec::with_capacity(cfg.num_layers);
        let mut kv_types = Vec::with_capacity(2 * cfg.num_layers);
        for i in 0..cfg.num_layers {
            let n = |s: &str| format!("layers.{i}.self_attn.{s}_proj.weight");
            let (qt, kt, vt) = (tensor(draft, &n("q"))?.ty, tensor(draft, &n("k"))?.ty, tensor(draft, &n("v"))?.ty);
            stacked.push((common_lossless_type(&[kt, vt]).is_some(), common_lossless_type(&[qt, kt, vt]).is_some()));
            kv_types.extend([kt, vt]);
        }
        let context_stack = context == ContextKv::AllLayers
            && cfg.num_layers > 0
            && stacked.iter().all(|&(_, with_kv)| with_kv)
            && common_lossless_type(&kv_types).is_some();
        if context_stack {
            let n = |i: usize, s: &str| format!("layers.{i}.self_attn.{s}_proj.weight");
            let mut below = vec![(n(0, "v"), nkv * hd)];
            for i in 1..cfg.num_layers {
                below.extend([(n(i, "k"), nkv * hd), (n(i, "v"), nkv * hd)]);
            }
            jobs.push(PackJob { below, ..PackJob::matrix(n(0, "k"), nkv * hd, h) });
        }
        for (i, &(stack, with_kv)) in stacked.iter().enumerate() {
            let n = |s: &str| format!("layers.{i}.{s}");
            let (q, k, v) = (n("self_attn.q_proj.weight"), n("self_attn.k_proj.weight"), n("self_attn.v_proj.weight"));
            if with_kv {
                let below = vec![(k.clone(), nkv * hd), (v.clone(), nkv * hd)];
                jobs.push(PackJob { below, ..PackJob::matrix(q, nh * hd, h) });
            } else {
                jobs.push(PackJob::matrix(q, nh * hd, h));
            }
            if context_stack {
                // The context pass reads `context_kv`; the block pass reads q + k + v.
            } else if stack {
                jobs.push(PackJob { below: vec![(v, nkv * hd)], ..PackJob::matrix(k, nkv * hd, h) });
            } else {
                jobs.push(PackJob::matrix(k, nkv * hd, h));
                jobs.push(PackJob::matrix(v, nkv * hd, h));
            }
            jobs.push(PackJob::matrix(n("self_attn.o_proj.weight"), h, nh * hd));
            jobs.push(PackJob {
                up: Some(n("mlp.up_proj.weight")),
                ..PackJob::matrix(n("mlp.gate_proj.weight"), ff, h)
            });
            jobs.push(PackJob::matrix(n("mlp.down_proj.weight"), h, ff));
        }
        let mut packed = pack_all(g, draft, &jobs)?.into_iter();
        let mut take = || packed.next().ok_or_else(|| EngineError::Weights("draft matrices".into()));
        let fc = take()?;
        let context_kv = if context_stack { Some(take()?) } else { None };
        let mut layers = Vec::with_capacity(cfg.num_layers);
        for (i, &(stacked, with_kv)) in stacked.iter().enumerate() {
            let n = |s: &str| format!("layers.{i}.{s}");
            let q = if with_kv { DraftQ::WithKv(take()?) } else { DraftQ::Alone(take()?) };
            let kv = match (context_stack, stacked) {
                (true, _) => None,
                (false, true) => Some(DraftKv::Stacked(take()?)),
                (false, false) => Some(DraftKv::Split { k: take()?, v: take()? }),
            };
            let o = take()?;
            let gu = take()?;
            layers.push(DraftLayer {
                attn_norm: upload_vector(g, draft, &n("input_layernorm.weight"), h)?,
                post_norm: upload_vector(g, draft, &n("post_attention_layernorm.weight"), h)?,
                q,
                kv,
                o,
                q_norm: upload_vector(g, draft, &n("self_attn.q_norm.weight"), hd)?,
                k_norm: upload_vector(g, draft, &n("self_attn.k_norm.weight"), hd)?,
                gate_up: gu,
                down: take()?,
            });
        }
        let hidden_norm = upload_vector(g, draft, "hidden_norm.weight", h)?;
        let output_norm = upload_vector(g, draft, "norm.weight", h)?;
        let b = cfg.block_size;
        let rows = ctx.checked_add(b).ok_or_else(|| EngineError::Plan(format!("context {ctx} overflows")))?;
        let vocab = tcfg.vocab_size;
        let max_in = [kh, h, ff, nh * hd].into_iter().max().unwrap_or(h);
        let qkv = nh * hd + 2 * nkv * hd;
        let max_out = [vocab, qmm_swiglu_rows(ff), qkv, h].into_iter().max().unwrap_or(h);
        let mut ws = QmmWorkspace::with_columns(g, max_in, max_out, N)?;
        ws.pairs_needed = target.head.needs_pairs()
            || fc.needs_pairs()
            || context_kv.as_ref().is_some_and(|w| w.needs_pairs())
            || layers.iter().any(|l| {
                [l.q.matrix(), &l.o, &l.gate_up, &l.down]
                    .into_iter()
                    .chain(l.kv.iter().flat_map(|kv| kv.matrices()))
                    .any(|w| w.needs_pairs())
            });
        // The block pass's products accumulate as in the target's forward: no split of them
        // waits for another.
        enable_accumulations(g, &mut ws, h, layers.iter().map(|l| &l.gate_up))?;
        let kv_len = cfg
            .num_layers
            .checked_mul(2 * rows * dims.row())
            .ok_or_else(|| EngineError::Plan("draft KV cache size overflows".into()))?;
        let z = |n: usize| g.zeros::<f32>(n.max(1));
        let k = DRAFT_MAX_K.min(vocab);
        Ok(DraftEngine {
            rope: g.upload(&attn::rope_table(hd, cfg.rope_theta as f64, rows))?,
            kv: g.zeros::<u16>(kv_len.max(1))?,
            batch_dev: g.zeros::<u8>(std::mem::size_of::<NodeBatch>())?,
            causal_dev: g.zeros::<u8>(std::mem::size_of::<NodeBatch>())?,
            feat: z(N * kh)?,
            c: z(N * h)?,
            e: z(N * h)?,
            e2: z(N * h)?,
            x: z(N * h)?,
            mix: z(N * h)?,
            kb: z(N * 2 * nkv * hd)?,
            kvc: z(if context_kv.is_some() { N * cfg.num_layers * 2 * nkv * hd } else { 0 })?,
            context_kv,
            vb: z(N * nkv * hd)?,
            qb: z(N * qkv)?,
            qo: z(N * nh * hd)?,
            ao: z(N * nh * hd)?,
            wide: z(N * ff)?,
            logits: z(b * vocab)?,
            topk_scratch: g.zeros::<u32>(topk_scratch_len(b, vocab, k).max(1))?,
            topk_out: g.zeros::<u32>(2 * b * k)?,
            attn_scratch: z(attn::attn_tree_scratch_len_min(dims, b, rows, draft_split_keys(0)))?,
            ws,
            block_graph: None,
            block_runs: 0,
            head_groups_override,
            attn_groups: [1; 2],
            split_keys: DRAFT_MAX_SPLIT_KEYS,
            timer: None,
            timing: false,
            device_ms: 0.0,
            n_ctx: 0,
            rows,
            target_vocab: vocab,
            dims,
            fc,
            hidden_norm,
            layers,
            output_norm,
            target,
            gpu,
            cfg,
        })
    }

    /// The GPU (the target engine's).
    pub fn gpu(&self) -> Arc<Gpu> {
        Arc::clone(&self.gpu)
    }

    /// Context rows held (committed tokens whose features have been appended).
    pub fn context_len(&self) -> usize {
        self.n_ctx
    }

    /// The most context rows this draft can hold.
    pub fn max_context(&self) -> usize {
        self.rows - self.cfg.block_size
    }

    /// Drops every context row (a new conversation).
    pub fn reset(&mut self) {
        self.n_ctx = 0;
    }

    /// Keeps the first `rows` context rows (positions `0..rows`): the next context rows are
    /// appended from position `rows`, overwriting the K/V rows of the forgotten ones. Nothing
    /// else depends on the rows held. An error when it holds fewer than `rows`.
    pub fn truncate_context(&mut self, rows: usize) -> Result<(), EngineError> {
        if rows > self.n_ctx {
            return Err(EngineError::Batch(format!(
                "truncate: the draft holds {} context rows, not {rows}",
                self.n_ctx
            )));
        }
        self.n_ctx = rows;
        Ok(())
    }

    /// Whether the context pass computes every layer's k and v in one product
    /// ([`ContextKv::AllLayers`] taken).
    pub fn context_kv_stacked(&self) -> bool {
        self.context_kv.is_some()
    }

    /// Feature values per row (`len(target_layer_ids) · hidden_size`).
    pub fn feature_len(&self) -> usize {
        self.cfg.target_layer_ids.len() * self.cfg.hidden_size
    }

    fn write_batch(&mut self, b: &NodeBatch) -> Result<DevSpan<NodeBatch>, EngineError> {
        self.gpu.write(bytes_of(b), &mut self.batch_dev)?;
        let span = DevSpan::of(&self.gpu, &self.batch_dev);
        // Safety: `batch_dev` holds exactly one `NodeBatch` for the engine's life.
        Ok(unsafe { DevSpan::from_raw(span.ptr(), 1) })
    }

    fn plane(&self, layer: usize, v: bool) -> Result<DevSpan<u16>, EngineError> {
        let plane = self.rows * self.dims.row();
        Ok(DevSpan::of(&self.gpu, &self.kv).sub((2 * layer + v as usize) * plane, plane, "draft kv cache")?)
    }

    /// Appends the context rows of `features` (`rows · feature_len()` f32, token-major: each row
    /// `concat_l h_l` of one committed token, in position order).
    pub fn extend_context(&mut self, features: &[f32]) -> Result<(), EngineError> {
        let fl = self.feature_len();
        if !features.len().is_multiple_of(fl) {
            return Err(EngineError::Batch(format!(
                "{} feature values: not a whole number of rows of {fl}",
                features.len()
            )));
        }
        let rows = features.len() / fl;
        if self.n_ctx + rows > self.max_context() {
            return Err(EngineError::Context { need: self.n_ctx + rows, ctx: self.max_context() });
        }
        for chunk in features.chunks(N * fl) {
            let m = chunk.len() / fl;
            let gpu = Arc::clone(&self.gpu);
            gpu.write_prefix(chunk, &mut self.feat)?;
            let feat = DevSpan::of(&gpu, &self.feat);
            self.context_chunk(feat, m)?;
        }
        Ok(())
    }

    /// Appends `rows` context rows read from the device (`rows · feature_len()` f32 at `features`,
    /// token-major: the target engine's feature store, [`super::FeatureStore`]); no host copy.
    pub fn extend_context_device(&mut self, features: DevSpan<f32>, rows: usize) -> Result<(), EngineError> {
        let fl = self.feature_len();
        features.need(rows * fl, "draft context", "features")?;
        if self.n_ctx + rows > self.max_context() {
            return Err(EngineError::Context { need: self.n_ctx + rows, ctx: self.max_context() });
        }
        let mut at = 0;
        while at < rows {
            let m = (rows - at).min(N);
            self.context_chunk(features.sub(at * fl, m * fl, "feature rows")?, m)?;
            at += m;
        }
        Ok(())
    }

    /// The context pass over the `m` feature rows at `feat`.
    fn context_chunk(&mut self, feat: DevSpan<f32>, m: usize) -> Result<(), EngineError> {
        let (h, eps) = (self.cfg.hidden_size, self.cfg.rms_norm_eps);
        let mut b = NodeBatch { n: m as u32, ..NodeBatch::empty(self.n_ctx as u32) };
        for i in 0..m {
            b.depth[i] = i as u32;
            b.parent[i] = i as i32 - 1;
            b.anc[i] = if i + 1 >= 64 { u64::MAX } else { (1u64 << (i + 1)) - 1 };
        }
        let batch = self.write_batch(&b)?;
        let gpu = &*self.gpu;
        let s = |x: &CudaSlice<f32>| DevSpan::of(gpu, x);
        let kh = self.feature_len();
        self.ws.prepare(gpu, feat, m, kh, self.ws.pairs_needed)?;
        matmul(gpu, &self.fc, m, s(&self.c), &mut self.ws)?;
        let mut cur = 0;
        norm_site(
            gpu,
            &mut self.ws,
            [s(&self.c), s(&self.c)],
            &mut cur,
            Addend::None,
            s(&self.hidden_norm),
            s(&self.x),
            m,
            h,
            eps,
            &mut |_| Ok(()),
        )?;
        let kv_dims = AttnDims { n_head: 0, ..self.dims };
        let (row, layers) = (self.dims.row(), self.layers.len());
        if let Some(w) = &self.context_kv {
            matmul(gpu, w, m, s(&self.kvc), &mut self.ws)?;
        }
        for (li, l) in self.layers.iter().enumerate() {
            let input = match &self.context_kv {
                Some(_) => {
                    let (kvc, stride) = (s(&self.kvc), 2 * layers * row);
                    let k = kvc.sub(2 * li * row, kvc.len() - 2 * li * row, "layer k columns")?;
                    let v = kvc.sub((2 * li + 1) * row, kvc.len() - (2 * li + 1) * row, "layer v columns")?;
                    let none = kvc.sub(0, 0, "no queries")?;
                    AttnPrepIn { qg: none, k, v, qg_stride: 0, k_stride: stride, v_stride: stride }
                }
                None => kv_products(gpu, layer_kv(&l.kv, li)?, self.dims, m, s(&self.kb), s(&self.vb), &mut self.ws)?,
            };
            let (kc, vc) = (self.plane(li, false)?, self.plane(li, true)?);
            let none = s(&self.qo).sub(0, 0, "no queries")?;
            attn::attn_prep(
                gpu,
                kv_dims,
                self.dims.head_dim,
                eps,
                batch,
                m,
                input,
                s(&l.q_norm),
                s(&l.k_norm),
                s(&self.rope),
                none,
                none,
                kc,
                vc,
                self.rows,
            )?;
        }
        self.n_ctx += m;
        Ok(())
    }

    /// Drafts the block rooted at `bonus` (at position `context_len()`): returns the top-`k`
    /// tokens and log-probs of each of the `B − 1` drafted positions, rows in position order,
    /// each row descending (`tokens`, `logprobs`: `(B−1)·k` entries). One host sync.
    pub fn propose(&mut self, bonus: u32, k: usize) -> Result<(Vec<u32>, Vec<f32>), EngineError> {
        let (bs, vocab) = (self.cfg.block_size, self.target_vocab);
        if k == 0 || k > DRAFT_MAX_K.min(vocab) {
            return Err(EngineError::Batch(format!("top-{k}: the GPU draft returns 1..={}", DRAFT_MAX_K.min(vocab))));
        }
        if bonus as usize >= vocab {
            return Err(EngineError::Batch(format!("bonus token {bonus}: the vocabulary has {vocab}")));
        }
        let mut b = NodeBatch { n: bs as u32, ..NodeBatch::empty(self.n_ctx as u32) };
        let all = if bs >= 64 { u64::MAX } else { (1u64 << bs) - 1 };
        for i in 0..bs {
            b.tokens[i] = if i == 0 { bonus } else { self.cfg.mask_token_id };
            b.depth[i] = i as u32;
            b.parent[i] = i as i32 - 1;
            b.anc[i] = all;
        }
        // The causal masks are written only for a draft that has causal layers (none of the
        // z-lab full-attention drafts): one host-to-device copy per round less.
        if self.cfg.causal.unwrap_or(false) || self.cfg.sliding_layers.iter().any(|&s| s) {
            let mut c = b;
            for i in 0..bs {
                c.anc[i] = all >> (bs - 1 - i);
            }
            self.gpu.write(bytes_of(&c), &mut self.causal_dev)?;
        }
        let batch = self.write_batch(&b)?;
        self.attn_groups = self.attn_head_groups()?;
        self.split_keys = draft_split_keys(self.n_ctx);
        let key = (k, self.attn_groups, self.split_keys);
        if self.block_graph.as_ref().is_some_and(|(_, gk)| *gk != key) {
            self.block_graph = None;
        }
        // Outside any capture: a replay runs no host code (`gpu::qmatmul` accum.rs).
        self.ws.begin_accumulation(&self.gpu)?;
        match &self.block_graph {
            Some((g, _)) => g.replay()?,
            None if super::forward::graphs_enabled() && self.block_runs > 0 => {
                let gpu = Arc::clone(&self.gpu);
                Graph::begin_capture(&gpu)?;
                let recorded = self.enqueue_block(batch, k);
                let graph = Graph::end_capture(&gpu);
                recorded?;
                let graph = graph?;
                graph.replay()?;
                self.block_graph = Some((graph, key));
            }
            None => {
                self.block_runs += 1;
                self.enqueue_block(batch, k)?;
            }
        }
        if let (true, Some(t)) = (self.timing, &self.timer) {
            t.stop(&self.gpu)?;
        }
        let rows = bs - 1;
        // One download: tokens, then the log-probs' bits; the tokens stay in the downloaded vector.
        let mut tokens = self.gpu.download(&self.topk_out)?;
        let half = tokens.len() / 2;
        let logprobs = tokens[half..half + rows * k].iter().map(|&b| f32::from_bits(b)).collect();
        tokens.truncate(rows * k);
        if let (true, Some(t)) = (self.timing, &self.timer) {
            self.device_ms += t.elapsed_ms()? as f64;
            self.timing = false;
        }
        Ok((tokens, logprobs))
    }

    /// Drops the block pass's graph: the next [`DraftEngine::propose`] launches its kernels from
    /// the host (what a launch log records), the one after captures a new graph.
    pub fn drop_block_graph(&mut self) {
        self.block_graph = None;
        self.block_runs = 0;
    }

    /// Head groups of the block's attention at the current context (full-attention layers,
    /// sliding-window layers): the override, else `attn::attn_head_groups`' rule for the block's
    /// nodes over `n_ctx` committed rows (the draft needs no batch invariance, and the rule keeps
    /// the bits anyway).
    fn attn_head_groups(&self) -> Result<[usize; 2], EngineError> {
        let window = self.cfg.sliding_window.unwrap_or(0);
        let pick = |window: usize| -> Result<usize, EngineError> {
            match self.head_groups_override {
                Some(r) => Ok(r),
                None => Ok(attn::attn_head_groups(
                    &self.gpu,
                    AttnDims { window, ..self.dims },
                    self.cfg.block_size,
                    self.n_ctx,
                    draft_split_keys(self.n_ctx),
                )?),
            }
        };
        let full = pick(0)?;
        let sliding = if self.cfg.sliding_layers.iter().any(|&s| s) { pick(window)? } else { full };
        Ok([full, sliding])
    }

    /// Records a start event: the device time from here to the end of the next
    /// [`DraftEngine::propose`] (context rows appended in between included) is added to
    /// [`DraftEngine::take_device_ms`], read after that propose's own sync.
    pub fn start_timing(&mut self) -> Result<(), EngineError> {
        if self.timer.is_none() {
            self.timer = Some(GpuTimer::new(&self.gpu)?);
        }
        if let Some(t) = &self.timer {
            t.start(&self.gpu)?;
        }
        self.timing = true;
        Ok(())
    }

    /// Device ms of the timed proposes since the last call.
    pub fn take_device_ms(&mut self) -> f64 {
        std::mem::take(&mut self.device_ms)
    }

    /// Enqueues the block pass over `batch` (written by [`DraftEngine::propose`]): embedding,
    /// every layer, the final norm, the LM head on slots `1 … B−1` and their top-`k`.
    fn enqueue_block(&mut self, batch: DevSpan<NodeBatch>, k: usize) -> Result<(), EngineError> {
        let bs = self.cfg.block_size;
        let (h, hd, eps) = (self.cfg.hidden_size, self.cfg.head_dim, self.cfg.rms_norm_eps);
        let (nh, ff, vocab) = (self.cfg.num_heads, self.cfg.intermediate_size, self.target_vocab);
        let gpu = &*self.gpu;
        let s = |x: &CudaSlice<f32>| DevSpan::of(gpu, x);
        let tokens: DevSpan<u32> = unsafe { DevSpan::from_raw(batch.ptr() + 8, N) };
        // Safety: `causal_dev` holds exactly one `NodeBatch` for the engine's life.
        let causal_batch: DevSpan<NodeBatch> =
            unsafe { DevSpan::from_raw(DevSpan::of(gpu, &self.causal_dev).ptr(), 1) };
        let t = &*self.target;
        embed_rows(gpu, t.embd_ty, DevSpan::of(gpu, &t.embd), vocab, h, tokens, bs, s(&self.e))?;
        // The residual stream: `eb[cur]` (the embedding in `e`, then alternating under the fused
        // norm prep).
        let eb = [s(&self.e), s(&self.e2)];
        let mut cur = 0;
        // The previous product for the next norm site: accumulated, or in `mix`.
        let mut acc: Option<QmmAccumulated> = None;
        for (li, l) in self.layers.iter().enumerate() {
            let sliding = self.cfg.sliding_layers.get(li).copied().unwrap_or(false);
            let batch = if self.cfg.causal.unwrap_or(sliding) { causal_batch } else { batch };
            let window = if sliding { self.cfg.sliding_window.unwrap_or(0) } else { 0 };
            let add = match (li, acc.take()) {
                (0, _) => Addend::None,
                (_, acc) => Addend::product(acc, s(&self.mix)),
            };
            norm_site(gpu, &mut self.ws, eb, &mut cur, add, s(&l.attn_norm), s(&self.x), bs, h, eps, &mut |_| Ok(()))?;
            let input = match &l.q {
                DraftQ::WithKv(w) => {
                    // One product, rows `[q | k | v]`.
                    matmul(gpu, w, bs, s(&self.qb), &mut self.ws)?;
                    AttnPrepIn::merged(self.dims, s(&self.qb))?
                }
                DraftQ::Alone(q) => {
                    matmul(gpu, q, bs, s(&self.qb), &mut self.ws)?;
                    let kv = layer_kv(&l.kv, li)?;
                    let kv_in = kv_products(gpu, kv, self.dims, bs, s(&self.kb), s(&self.vb), &mut self.ws)?;
                    AttnPrepIn { qg: s(&self.qb), qg_stride: nh * hd, ..kv_in }
                }
            };
            let (kc, vc) = (self.plane(li, false)?, self.plane(li, true)?);
            let none = s(&self.ao).sub(0, 0, "no gate")?;
            attn::attn_prep(
                gpu,
                self.dims,
                hd,
                eps,
                batch,
                bs,
                input,
                s(&l.q_norm),
                s(&l.k_norm),
                s(&self.rope),
                s(&self.qo),
                none,
                kc,
                vc,
                self.rows,
            )?;
            attn::attn_tree_min_split(
                gpu,
                AttnDims { window, ..self.dims },
                batch,
                bs,
                s(&self.qo),
                none,
                kc,
                vc,
                self.rows,
                s(&self.attn_scratch),
                s(&self.ao),
                self.split_keys,
                self.attn_groups[sliding as usize],
            )?;
            self.ws.prepare(gpu, s(&self.ao), bs, nh * hd, self.ws.pairs_needed)?;
            let add = Addend::product(mixer_product(gpu, &l.o, bs, s(&self.mix), &mut self.ws)?, s(&self.mix));
            norm_site(gpu, &mut self.ws, eb, &mut cur, add, s(&l.post_norm), s(&self.x), bs, h, eps, &mut |_| Ok(()))?;
            gate_up_site(gpu, &mut self.ws, &l.gate_up, bs, s(&self.wide), ff, &mut |_| Ok(()))?;
            acc = mixer_product(gpu, &l.down, bs, s(&self.mix), &mut self.ws)?;
        }
        // Slots 1 … B−1 predict the drafted positions. The output norm and the LM head run over
        // every slot (slot 0's row is not used; rows are independent), so that the norm consumes
        // the last down projection accumulated, whole; at B = 16 the head's tile count is that of
        // B − 1 rows.
        let add = Addend::product(acc.take(), s(&self.mix));
        let out_norm = s(&self.output_norm);
        norm_site(gpu, &mut self.ws, eb, &mut cur, add, out_norm, s(&self.x), bs, h, eps, &mut |_| Ok(()))?;
        matmul(gpu, &t.head, bs, s(&self.logits), &mut self.ws)?;
        let rows = bs - 1;
        let drafted = s(&self.logits).sub(vocab, rows * vocab, "draft logits")?;
        let out = DevSpan::of(gpu, &self.topk_out);
        let half = out.len() / 2;
        let tokens = out.sub(0, half, "top-k tokens")?;
        // Safety: the second half of `topk_out` (live as long as the engine) holds `half` u32,
        // which the top-k writes as f32 log-probs (same size and alignment).
        let logprobs = unsafe { DevSpan::<f32>::from_raw(out.ptr() + 4 * half as u64, half) };
        topk_logprobs_rows(gpu, drafted, rows, vocab, k, DevSpan::of(gpu, &self.topk_scratch), tokens, logprobs)?;
        // Last: after an odd number of products in an accumulator set (the gate/up tails of 5
        // layers) this zeroes pair 0 by a memset node, which between the output norm and the LM
        // head kept the head from launching early (the output norm's share of the chain 4 → 12 µs).
        self.ws.end_accumulation(gpu)?;
        Ok(())
    }

    /// The logits of the last [`DraftEngine::propose`]: `(B−1) · vocab` f32, rows in position
    /// order (slots 1 … B−1; waits; for tests).
    pub fn last_logits(&self) -> Result<Vec<f32>, EngineError> {
        let (b, vocab) = (self.cfg.block_size, self.target_vocab);
        Ok(self.gpu.download(&self.logits)?[vocab..b * vocab].to_vec())
    }
}

fn matmul(gpu: &Gpu, w: &QWeight, n: usize, y: DevSpan<f32>, ws: &mut QmmWorkspace) -> Result<(), EngineError> {
    w.matmul(gpu, n, y, ws)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draft_split_keys_keep_at_most_sixteen_splits_up_to_the_longest_split() {
        let splits = |n_ctx: usize| (n_ctx + 16).div_ceil(draft_split_keys(n_ctx) as usize);
        assert_eq!(draft_split_keys(0), kernel_abi::ATTN_TILE_KEYS);
        assert_eq!(draft_split_keys(771), 64);
        assert_eq!(draft_split_keys(1100), 128);
        assert_eq!(draft_split_keys(8192), 512);
        assert_eq!(draft_split_keys(16_384), 1024);
        assert_eq!(draft_split_keys(100_000), DRAFT_MAX_SPLIT_KEYS);
        for n_ctx in (0..16_384).step_by(61) {
            assert!(splits(n_ctx) <= DRAFT_SPLITS + 1, "{n_ctx} rows: {} splits", splits(n_ctx));
            assert!(draft_split_keys(n_ctx) >= draft_split_keys(n_ctx.saturating_sub(61)), "monotone");
        }
    }
}
