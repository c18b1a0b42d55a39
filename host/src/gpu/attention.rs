//! Launchers of `attention` (`gpu-kernels/src/attention.rs`): `attn_prep` (q/k norm, RoPE, KV
//! write), `attn_tree` (flash-decoding over each node's visible keys: `attn_tree_mma_hd*` — see
//! [`mma_kernel`] — or `attn_tree_split_g{G}`, then `attn_tree_combine`) and `kv_commit`. All launch through [`ChainedLaunch`] and read the step's
//! [`NodeBatch`] / [`CommitPath`] from device memory, so a step can be captured as a graph.
//!
//! KV cache layout, per attention layer: a K plane and a V plane of `[ctx, n_kv·head_dim]` f16
//! (as `u16`), row `r` = position `r`; a batch's node `i` writes row `n_past + i` (scratch until
//! [`kv_commit`] moves the accepted path to `n_past..n_past + len`).

use cudarc::driver::LaunchConfig;
use kernel_abi::{
    attn_mma_nodes_per_block, attn_mma_smem_bytes, attn_split_slots_min, attn_splits_min, AttnPrepParams,
    AttnTreeParams, CommitPath, KvCommitParams, NodeBatch, ATTN_MAX_GROUP, ATTN_MAX_HEAD_DIM, ATTN_MIN_SPLIT_KEYS,
    ATTN_THREADS, MAX_NODES,
};

use super::{ChainedLaunch, DevSpan, Gpu, GpuError, Param};

/// Head counts and head dimension of one attention layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttnDims {
    pub n_head: usize,
    pub n_head_kv: usize,
    /// A power of two in `32..=256`.
    pub head_dim: usize,
    /// Gated attention (the qwen35 target: the query projection gives `[q | gate]` per head and
    /// the output is multiplied by `sigmoid(gate)`), or plain (the DFlash draft: `q` per head, no
    /// gate; the gate spans are not read and may be empty).
    pub gated: bool,
    /// Sliding window of [`attn_tree`] (0 = none, else at least the launch's node count, so
    /// above every depth): a node at position `p`
    /// sees the committed rows at positions `> p − window` (`kernel_abi::attn_window_lo`) and all
    /// its tree keys. The DFlash draft's sliding-window layers; the target has none.
    pub window: usize,
}

impl AttnDims {
    /// f16 values per KV cache row (`n_head_kv · head_dim`).
    pub fn row(&self) -> usize {
        self.n_head_kv * self.head_dim
    }

    fn check(&self, kernel: &'static str) -> Result<(), GpuError> {
        self.check_heads(kernel, true)
    }

    /// `queries`: query heads are required (`n_head ≥ 1`); else `n_head = 0` is allowed (an
    /// `attn_prep` that only writes K/V rows: the draft's context rows).
    fn check_heads(&self, kernel: &'static str, queries: bool) -> Result<(), GpuError> {
        if !queries && self.n_head == 0 {
            let hd = self.head_dim;
            if !(hd.is_power_of_two() && (32..=ATTN_MAX_HEAD_DIM as usize).contains(&hd)) || self.n_head_kv == 0 {
                return Err(GpuError::shape(kernel, format!("head_dim {hd}, {} KV heads", self.n_head_kv)));
            }
            return Ok(());
        }
        let hd = self.head_dim;
        if !(hd.is_power_of_two() && (32..=ATTN_MAX_HEAD_DIM as usize).contains(&hd)) {
            return Err(GpuError::shape(kernel, format!("head_dim {hd}: must be a power of two in 32..=256")));
        }
        if self.n_head_kv == 0 || !self.n_head.is_multiple_of(self.n_head_kv) {
            return Err(GpuError::shape(
                kernel,
                format!("{} query heads are not a multiple of {} KV heads", self.n_head, self.n_head_kv),
            ));
        }
        let g = self.n_head / self.n_head_kv;
        if g == 0 || g > ATTN_MAX_GROUP as usize {
            return Err(GpuError::shape(kernel, format!("GQA group of {g} query heads per KV head: 1..=8 supported")));
        }
        if self.n_head * hd > u32::MAX as usize / 2 {
            return Err(GpuError::shape(kernel, "too many heads"));
        }
        Ok(())
    }
}

/// The RoPE table `attn_prep` reads: `[max_pos, n_rot/2]` pairs `(cos θ, sin θ)` with
/// `θ = pos · theta^(−2j/n_rot)` computed in f64 (as the reference's `model::rope`) and rounded
/// to f32. Build once per model (`max_pos` = the context size).
pub fn rope_table(n_rot: usize, theta: f64, max_pos: usize) -> Vec<f32> {
    let half = n_rot / 2;
    let mut t = Vec::with_capacity(max_pos * half * 2);
    for pos in 0..max_pos {
        for j in 0..half {
            let inv_freq = theta.powf(-2.0 * j as f64 / n_rot as f64);
            let (s, c) = (pos as f64 * inv_freq).sin_cos();
            t.push(c as f32);
            t.push(s as f32);
        }
    }
    t
}

fn check_n(kernel: &'static str, n: usize) -> Result<u32, GpuError> {
    if n == 0 || n > MAX_NODES as usize {
        return Err(GpuError::shape(kernel, format!("{n} nodes: 1..={MAX_NODES} per launch")));
    }
    Ok(n as u32)
}

fn check_batch(kernel: &'static str, batch: DevSpan<NodeBatch>) -> Result<(), GpuError> {
    batch.need(1, kernel, "batch")?;
    if !batch.ptr().is_multiple_of(4) {
        return Err(GpuError::shape(kernel, "NodeBatch must be 4-byte aligned"));
    }
    Ok(())
}

fn check_planes(
    kernel: &'static str,
    d: AttnDims,
    k_cache: DevSpan<u16>,
    v_cache: DevSpan<u16>,
    ctx: usize,
) -> Result<u32, GpuError> {
    let ctx32 = u32::try_from(ctx).map_err(|_| GpuError::shape(kernel, format!("ctx {ctx} too large")))?;
    if ctx == 0 {
        return Err(GpuError::shape(kernel, "ctx = 0 rows"));
    }
    let need = ctx.checked_mul(d.row()).ok_or_else(|| GpuError::shape(kernel, "ctx × row overflows"))?;
    k_cache.need(need, kernel, "k_cache")?;
    v_cache.need(need, kernel, "v_cache")?;
    if !k_cache.ptr().is_multiple_of(16) || !v_cache.ptr().is_multiple_of(16) {
        return Err(GpuError::shape(kernel, "KV cache planes must be 16-byte aligned"));
    }
    Ok(ctx32)
}

/// The inputs of [`attn_prep`]: `qg [n][n_head·2·hd]` (per head `[q | gate]`; `[n][n_head·hd]`
/// plain q when not gated), `k`, `v` `[n][n_kv·hd]`, node `i`'s rows starting at `i·qg_stride`,
/// `i·k_stride`, `i·v_stride` (at least the widths; the values between rows are never read), so
/// they can be column ranges of one product's rows, e.g. the engine's `[q | k | v]`.
/// [`AttnPrepIn::dense`] sets the strides to the widths.
#[derive(Clone, Copy, Debug)]
pub struct AttnPrepIn {
    pub qg: DevSpan<f32>,
    pub k: DevSpan<f32>,
    pub v: DevSpan<f32>,
    pub qg_stride: usize,
    pub k_stride: usize,
    pub v_stride: usize,
}

impl AttnPrepIn {
    /// Dense rows: `qg_stride = n_head·hd·(2 if gated else 1)`, `k_stride = v_stride = n_kv·hd`.
    pub fn dense(d: AttnDims, qg: DevSpan<f32>, k: DevSpan<f32>, v: DevSpan<f32>) -> Self {
        let q_row = d.n_head * d.head_dim * if d.gated { 2 } else { 1 };
        AttnPrepIn { qg, k, v, qg_stride: q_row, k_stride: d.row(), v_stride: d.row() }
    }

    /// One merged product's rows `[qg | k | v]` at `qkv` (row stride `qg_width + 2·n_kv·hd`).
    pub fn merged(d: AttnDims, qkv: DevSpan<f32>) -> Result<Self, GpuError> {
        let q_row = d.n_head * d.head_dim * if d.gated { 2 } else { 1 };
        let len = qkv.len();
        let k = qkv.sub(q_row, len.saturating_sub(q_row), "k columns")?;
        let v = qkv.sub(q_row + d.row(), len.saturating_sub(q_row + d.row()), "v columns")?;
        let stride = q_row + 2 * d.row();
        Ok(AttnPrepIn { qg: qkv, k, v, qg_stride: stride, k_stride: stride, v_stride: stride })
    }
}

/// Values a strided `[n][width]` view must hold: `(n − 1)·stride + width`.
fn strided_len(n: usize, stride: usize, width: usize) -> usize {
    n.saturating_sub(1).saturating_mul(stride).saturating_add(width)
}

/// `attn_prep` for `n` nodes of `batch` (`d.n_head = 0`: K/V rows only): per head of node `i`, q = RoPE(rmsnorm(qg's query half)
/// ⊙ q_norm) at `n_past + depth[i]` → `q [n, n_head·hd]`, gate = qg's gate half → `gate`,
/// K = RoPE(rmsnorm(k) ⊙ k_norm) and V as f16 into row `n_past + i` of `k_cache` / `v_cache`
/// (`[ctx, n_kv·hd]` each). The inputs `qg`, `k`, `v` are strided rows ([`AttnPrepIn`]),
/// `rope` = [`rope_table`]`(n_rot, θ, max_pos)`. Rows `≥ ctx` are never written
/// and a node at `pos ≥ max_pos` gets NaN queries (the engine refuses such batches first).
#[allow(clippy::too_many_arguments)]
pub fn attn_prep(
    gpu: &Gpu,
    d: AttnDims,
    n_rot: usize,
    eps: f32,
    batch: DevSpan<NodeBatch>,
    n: usize,
    input: AttnPrepIn,
    q_norm: DevSpan<f32>,
    k_norm: DevSpan<f32>,
    rope: DevSpan<f32>,
    q: DevSpan<f32>,
    gate: DevSpan<f32>,
    k_cache: DevSpan<u16>,
    v_cache: DevSpan<u16>,
    ctx: usize,
) -> Result<(), GpuError> {
    const K: &str = "attn_prep";
    d.check_heads(K, false)?;
    let n32 = check_n(K, n)?;
    check_batch(K, batch)?;
    let ctx32 = check_planes(K, d, k_cache, v_cache, ctx)?;
    let hd = d.head_dim;
    if !n_rot.is_multiple_of(2) || n_rot > hd {
        return Err(GpuError::shape(K, format!("n_rot {n_rot}: must be even and ≤ head_dim {hd}")));
    }
    let q_row = d.n_head * hd;
    let gate_row = if d.gated { q_row } else { 0 };
    let AttnPrepIn { qg, k, v, qg_stride, k_stride, v_stride } = input;
    let strides = [("qg", qg_stride, q_row + gate_row), ("k", k_stride, d.row()), ("v", v_stride, d.row())];
    for (what, stride, width) in strides {
        if stride < width || stride > u32::MAX as usize / MAX_NODES as usize {
            return Err(GpuError::shape(
                K,
                format!("{what} row stride {stride}: at least its width {width}, at most 2^32/{MAX_NODES}"),
            ));
        }
    }
    let q_need = if d.n_head == 0 { 0 } else { strided_len(n, qg_stride, q_row + gate_row) };
    qg.need(q_need, K, "qg")?;
    k.need(strided_len(n, k_stride, d.row()), K, "k")?;
    v.need(strided_len(n, v_stride, d.row()), K, "v")?;
    q_norm.need(hd, K, "q_norm")?;
    k_norm.need(hd, K, "k_norm")?;
    q.need(n * q_row, K, "q")?;
    gate.need(n * gate_row, K, "gate")?;
    let half = n_rot / 2;
    let max_pos = if half == 0 { u32::MAX as usize } else { rope.len() / (2 * half) };
    if half > 0 && max_pos == 0 {
        return Err(GpuError::shape(K, format!("rope table of {} values holds no position", rope.len())));
    }
    let p = AttnPrepParams {
        n: n32,
        n_head: d.n_head as u32,
        n_head_kv: d.n_head_kv as u32,
        head_dim: hd as u32,
        n_rot: n_rot as u32,
        ctx: ctx32,
        max_pos: max_pos.min(u32::MAX as usize) as u32,
        eps,
        gated: d.gated as u32,
        q_stride: qg_stride as u32,
        k_stride: k_stride as u32,
        v_stride: v_stride as u32,
    };
    let vectors = (d.n_head + 2 * d.n_head_kv) as u32;
    let cfg = LaunchConfig {
        grid_dim: (n32, vectors.div_ceil(ATTN_THREADS / 32), 1),
        block_dim: (ATTN_THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    unsafe {
        ChainedLaunch::new(gpu, K)
            .span(batch)
            .span(qg)
            .span(k)
            .span(v)
            .span(q_norm)
            .span(k_norm)
            .span(rope)
            .span(q)
            .span(gate)
            .span(k_cache)
            .span(v_cache)
            .value(Param(p))
            .launch(cfg)
    }
}

/// f32 values of the scratch [`attn_tree`] needs for `n` nodes over a cache of `ctx` rows:
/// `n · n_head · attn_split_slots(ctx) · (head_dim + 2)` (27B, 32 nodes, ctx ≥ 4096: 25.4 MB).
pub fn attn_tree_scratch_len(d: AttnDims, n: usize, ctx: usize) -> usize {
    attn_tree_scratch_len_min(d, n, ctx, ATTN_MIN_SPLIT_KEYS)
}

/// [`attn_tree_scratch_len`] for [`attn_tree_min_split`] with `min_split_keys`.
pub fn attn_tree_scratch_len_min(d: AttnDims, n: usize, ctx: usize, min_split_keys: u32) -> usize {
    n * d.n_head * attn_split_slots_min(ctx.min(u32::MAX as usize) as u32, min_split_keys) as usize * (d.head_dim + 2)
}

fn split_kernel(g: usize) -> &'static str {
    match g {
        1 => "attn_tree_split_g1",
        2 => "attn_tree_split_g2",
        3 => "attn_tree_split_g3",
        4 => "attn_tree_split_g4",
        5 => "attn_tree_split_g5",
        6 => "attn_tree_split_g6",
        7 => "attn_tree_split_g7",
        _ => "attn_tree_split_g8",
    }
}

/// The tensor-core split kernel (`attn_tree_mma_hd*`) for `d`, or `None` for the f32 kernels
/// (`attn_tree_split_g*`): it serves head dims 64, 128 and 256 without a sliding window.
/// `FLASHTREE_ATTN_MMA=0` keeps the f32 kernels everywhere (an A/B switch, read once per
/// process). The choice depends on the model's dims only — never on the batch — so a node's
/// bits are the same alone or in a tree either way.
pub fn mma_kernel(d: AttnDims) -> Option<&'static str> {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if !*ON.get_or_init(|| std::env::var("FLASHTREE_ATTN_MMA").map_or(true, |v| v != "0")) || d.window != 0 {
        return None;
    }
    match d.head_dim {
        64 => Some("attn_tree_mma_hd64"),
        128 => Some("attn_tree_mma_hd128"),
        256 => Some("attn_tree_mma_hd256"),
        _ => None,
    }
}

/// Query heads per KV head (`G`) of `d`, after [`AttnDims::check`].
fn gqa_group(d: AttnDims) -> usize {
    d.n_head / d.n_head_kv
}

/// The head-group count `r` of [`attn_tree_min_split`] for `n` nodes at `n_past` committed rows:
/// the largest divisor `r` of `G = n_head / n_kv` for which the launch's working blocks
/// `attn_splits_min(keys, min_split_keys) · n_kv · r · n` (`keys = n_past + n`, at most the
/// window: the most keys a node of the launch sees) fit in one wave of `attn_tree_split_g{G/r}`
/// (SMs × its occupancy, [`Gpu::resident_blocks`]); 1 when even `r = 1` does not fit.
///
/// Why one wave: while the work fits, more blocks put more SMs (and their load pipelines) on the
/// same keys, each block doing `G/r` heads' arithmetic over the full K/V tile; past one wave the
/// extra blocks queue behind each other and each re-reads the K/V rows. The 27B (`G = 6`,
/// occupancy 2 blocks per SM at `g1`, 1 at `g2…g6` on an H200): `r = 6` for one node up to
/// 1,408 keys, `r = 2` up to 2,048, then 1; a 22-node tree gets 1.
///
/// A node's output bits do not depend on `r` (`attn_tree_split`'s head-group invariance), so
/// the rule may follow `n` and `n_past` without breaking batch invariance. 1 wherever the
/// tensor-core kernel serves `d` ([`mma_kernel`]: it has no head groups).
pub fn attn_head_groups(
    gpu: &Gpu,
    d: AttnDims,
    n: usize,
    n_past: usize,
    min_split_keys: u32,
) -> Result<usize, GpuError> {
    d.check("attn_tree")?;
    if mma_kernel(d).is_some() {
        return Ok(1);
    }
    let keys = n_past.saturating_add(n);
    let keys = if d.window == 0 { keys } else { keys.min(d.window) };
    let splits = attn_splits_min(keys.min(u32::MAX as usize) as u32, min_split_keys).max(1) as usize;
    let work = splits.saturating_mul(d.n_head_kv).saturating_mul(n);
    pick_head_groups(gqa_group(d), work, |heads| {
        gpu.resident_blocks(split_kernel(heads), ATTN_THREADS).map(|b| b as usize)
    })
}

/// The largest divisor `r` of `group` with `work · r ≤ resident(group / r)` (`resident(h)`: the
/// blocks of the `h`-heads split kernel the device holds at once), else 1.
pub fn pick_head_groups<E>(
    group: usize,
    work: usize,
    mut resident: impl FnMut(usize) -> Result<usize, E>,
) -> Result<usize, E> {
    for r in (2..=group).rev().filter(|r| group.is_multiple_of(*r)) {
        if work.saturating_mul(r) <= resident(group / r)? {
            return Ok(r);
        }
    }
    Ok(1)
}

/// Gated attention of `n` nodes of `batch` over the f16 KV cache (plain, without the sigmoid
/// factor, when `!d.gated`): `out[i, h·hd ..] = sigmoid(gate[i, h·hd ..]) ⊙ Σ_t softmax_t(q_{i,h}·K_t/√hd)·V_t` over node `i`'s visible keys
/// (committed rows `0..n_past` — the last ones only under `d.window` —, then rows `n_past + j`
/// of its ancestors and itself, `j` in `anc[i]`), query head `h` on KV head `h / (n_head/n_kv)`. `q`, `gate`, `out`
/// `[n, n_head·hd]` f32; `scratch` ≥ [`attn_tree_scratch_len`]. Bitwise batch-invariant: a
/// node's output depends only on its q, gate and visible key/value sequence. A batch with
/// `n_past + NodeBatch::n > ctx` gives NaN outputs (and reads nothing outside the planes).
/// One split block per KV head (`head_groups = 1` of [`attn_tree_min_split`]).
#[allow(clippy::too_many_arguments)]
pub fn attn_tree(
    gpu: &Gpu,
    d: AttnDims,
    batch: DevSpan<NodeBatch>,
    n: usize,
    q: DevSpan<f32>,
    gate: DevSpan<f32>,
    k_cache: DevSpan<u16>,
    v_cache: DevSpan<u16>,
    ctx: usize,
    scratch: DevSpan<f32>,
    out: DevSpan<f32>,
) -> Result<(), GpuError> {
    attn_tree_min_split(gpu, d, batch, n, q, gate, k_cache, v_cache, ctx, scratch, out, ATTN_MIN_SPLIT_KEYS, 1)
}

/// [`attn_tree`] with the split rule's fewest keys per split `min_split_keys`
/// (`kernel_abi::attn_split_len_min`) instead of the target's `ATTN_MIN_SPLIT_KEYS`: still a
/// function of each node's key count alone, with fewer and longer splits (the DFlash draft's
/// block over a long context). `scratch` ≥ [`attn_tree_scratch_len_min`].
///
/// `head_groups` (`r`, a divisor of `G = n_head / n_kv`; [`attn_head_groups`] picks one): the
/// f32 split pass runs `r` blocks per (split, KV head, node), each over `G/r` of the KV head's
/// query heads (`attn_tree_split_g{G/r}`, grid `(slots, n_kv·r, n)`). The output is bitwise the
/// same for every `r`. Where [`mma_kernel`] serves `d`, the split pass is the tensor-core kernel
/// (grid `(slots, n_kv, ⌈n / attn_mma_nodes_per_block⌉)`) and `r` is only validated.
#[allow(clippy::too_many_arguments)]
pub fn attn_tree_min_split(
    gpu: &Gpu,
    d: AttnDims,
    batch: DevSpan<NodeBatch>,
    n: usize,
    q: DevSpan<f32>,
    gate: DevSpan<f32>,
    k_cache: DevSpan<u16>,
    v_cache: DevSpan<u16>,
    ctx: usize,
    scratch: DevSpan<f32>,
    out: DevSpan<f32>,
    min_split_keys: u32,
    head_groups: usize,
) -> Result<(), GpuError> {
    const K: &str = "attn_tree";
    if min_split_keys == 0 {
        return Err(GpuError::shape(K, "min_split_keys must be ≥ 1"));
    }
    let window = u32::try_from(d.window).unwrap_or(u32::MAX);
    d.check(K)?;
    let group = gqa_group(d);
    if head_groups == 0 || !group.is_multiple_of(head_groups) {
        return Err(GpuError::shape(
            K,
            format!("head_groups {head_groups}: must divide the {group} query heads per KV head"),
        ));
    }
    let grid_y = d.n_head_kv * head_groups;
    if grid_y > 65_535 {
        return Err(GpuError::shape(K, format!("{grid_y} KV-head blocks: at most 65,535")));
    }
    let n32 = check_n(K, n)?;
    // Every depth is below `n`, so a window of at least `n` keeps every tree key visible.
    if window != 0 && window < n32 {
        return Err(GpuError::shape(K, format!("sliding window {}: 0 (none) or ≥ the {n} nodes", d.window)));
    }
    check_batch(K, batch)?;
    let ctx32 = check_planes(K, d, k_cache, v_cache, ctx)?;
    let q_row = d.n_head * d.head_dim;
    q.need(n * q_row, K, "q")?;
    gate.need(if d.gated { n * q_row } else { 0 }, K, "gate")?;
    out.need(n * q_row, K, "out")?;
    scratch.need(attn_tree_scratch_len_min(d, n, ctx, min_split_keys), K, "scratch")?;
    let slots = attn_split_slots_min(ctx32, min_split_keys);
    let p = AttnTreeParams {
        n: n32,
        n_head: d.n_head as u32,
        n_head_kv: d.n_head_kv as u32,
        head_dim: d.head_dim as u32,
        ctx: ctx32,
        slots,
        scale_log2: (std::f64::consts::LOG2_E / (d.head_dim as f64).sqrt()) as f32,
        gated: d.gated as u32,
        min_split_keys,
        window,
        head_groups: head_groups as u32,
    };
    // The split pass: the tensor-core kernel (grid (split, KV head, group of nodes); `head_groups`
    // does not apply) or the f32 kernel of `G / r` heads (grid (split, KV head · r, node)). Both
    // take the same arguments and fill the same scratch.
    let (kernel, grid, smem) = match mma_kernel(d) {
        Some(kernel) => {
            let smem = attn_mma_smem_bytes(d.head_dim as u32, n32);
            gpu.allow_dynamic_smem(kernel, smem)?;
            (kernel, (slots, d.n_head_kv as u32, n32.div_ceil(attn_mma_nodes_per_block(group as u32))), smem)
        }
        None => (split_kernel(group / head_groups), (slots, grid_y as u32, n32), 0),
    };
    let cfg = LaunchConfig { grid_dim: grid, block_dim: (ATTN_THREADS, 1, 1), shared_mem_bytes: smem };
    unsafe {
        ChainedLaunch::new(gpu, kernel)
            .span(batch)
            .span(q)
            .span(k_cache)
            .span(v_cache)
            .span(scratch)
            .value(Param(p))
            .launch(cfg)?;
    }
    let cfg =
        LaunchConfig { grid_dim: (d.n_head as u32, n32, 1), block_dim: (ATTN_THREADS, 1, 1), shared_mem_bytes: 0 };
    unsafe {
        ChainedLaunch::new(gpu, "attn_tree_combine")
            .span(batch)
            .span(gate)
            .span(scratch)
            .span(out)
            .value(Param(p))
            .launch(cfg)
    }
}

/// Keeps the accepted path in every KV plane: for `p < path.len`, row `n_past + nodes[p]` →
/// row `n_past + p`. `cache` holds `planes` planes (`2 · attention layers`: the engine's arena
/// `[layers][K|V][ctx][row_elems]`), plane `k` at `k · plane_stride` f16 values; rows of
/// `row_elems` f16 (even); `ctx` rows per plane (rows `≥ ctx` are skipped). One launch for all
/// layers; race-free (each thread reads its columns of every source row before writing).
pub fn kv_commit(
    gpu: &Gpu,
    path: DevSpan<CommitPath>,
    cache: DevSpan<u16>,
    planes: usize,
    plane_stride: usize,
    row_elems: usize,
    ctx: usize,
) -> Result<(), GpuError> {
    const K: &str = "kv_commit";
    path.need(1, K, "path")?;
    if planes == 0 || row_elems == 0 || ctx == 0 {
        return Err(GpuError::shape(K, format!("{planes} planes of {ctx} rows of {row_elems}: none may be 0")));
    }
    if !row_elems.is_multiple_of(2) || !plane_stride.is_multiple_of(2) || !cache.ptr().is_multiple_of(4) {
        return Err(GpuError::shape(K, "row_elems and plane_stride must be even, the cache 4-byte aligned"));
    }
    let plane_len = ctx.checked_mul(row_elems).ok_or_else(|| GpuError::shape(K, "ctx × row overflows"))?;
    if plane_stride < plane_len {
        return Err(GpuError::shape(K, format!("plane_stride {plane_stride} < ctx × row_elems {plane_len}")));
    }
    let need = (planes - 1)
        .checked_mul(plane_stride)
        .and_then(|x| x.checked_add(plane_len))
        .ok_or_else(|| GpuError::shape(K, "planes × stride overflows"))?;
    cache.need(need, K, "cache")?;
    let too_big = |what| GpuError::shape(K, format!("{what} too large"));
    let p = KvCommitParams {
        planes: u32::try_from(planes).map_err(|_| too_big("planes"))?,
        row_elems: u32::try_from(row_elems).map_err(|_| too_big("row_elems"))?,
        ctx: u32::try_from(ctx).map_err(|_| too_big("ctx"))?,
        _pad: 0,
        plane_stride: plane_stride as u64,
    };
    if p.planes > 65_535 {
        return Err(too_big("planes"));
    }
    let cfg = LaunchConfig {
        grid_dim: ((row_elems / 2).div_ceil(ATTN_THREADS as usize) as u32, p.planes, 1),
        block_dim: (ATTN_THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    unsafe { ChainedLaunch::new(gpu, K).span(path).span(cache).value(Param(p)).launch(cfg) }
}

/// A step parameter kept in device memory: `#[repr(C)]` and made of 4-byte fields only (no
/// padding), so its bytes are a sequence of `u32` words.
pub trait StepParam: Copy + sealed::Sealed {}
impl StepParam for NodeBatch {}
impl StepParam for CommitPath {}
mod sealed {
    pub trait Sealed {}
    impl Sealed for kernel_abi::NodeBatch {}
    impl Sealed for kernel_abi::CommitPath {}
}

/// Writes one step parameter ([`NodeBatch`], [`CommitPath`]) into `dst` (a whole device buffer of
/// at least its size in `u32` words) and returns its span (for tests and benches; the engine keeps its own).
pub fn write_step_param<T: StepParam>(
    gpu: &Gpu,
    value: &T,
    dst: &mut super::CudaSlice<u32>,
) -> Result<DevSpan<T>, GpuError> {
    let words = std::mem::size_of::<T>().div_ceil(4);
    // A device allocation starts 256-byte aligned, so a `u32` buffer holds any `T` aligned to 8
    // (`NodeBatch`'s `u64` masks).
    if dst.len() < words || std::mem::align_of::<T>() > 8 {
        return Err(GpuError::shape("write_step_param", format!("needs {words} u32 words, buffer has {}", dst.len())));
    }
    let mut w = vec![0u32; words];
    // Safety: `T` is plain data of `size_of::<T>()` bytes; `w` holds at least that many.
    unsafe {
        std::ptr::copy_nonoverlapping(
            value as *const T as *const u8,
            w.as_mut_ptr() as *mut u8,
            std::mem::size_of::<T>(),
        )
    };
    gpu.write(&w, dst)?;
    let s = DevSpan::of(gpu, dst);
    // Safety: the buffer holds at least `size_of::<T>()` bytes and outlives the caller's launches.
    Ok(unsafe { DevSpan::from_raw(s.ptr(), 1) })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Resident blocks per split kernel on an H200 (132 SMs) at the ptxas register counts of the
    /// kernels: 2 blocks per SM for `g1`, 1 for the others.
    fn h200(heads: usize) -> Result<usize, ()> {
        Ok(if heads == 1 { 264 } else { 132 })
    }

    #[test]
    fn head_groups_rule_fills_one_wave_with_the_largest_divisor() {
        // 27B: 4 KV heads of 6 query heads. One node: splits of 128 keys.
        let work = |splits: usize, n: usize| splits * 4 * n;
        assert_eq!(pick_head_groups(6, work(5, 1), h200), Ok(6)); // 513 keys: 120 blocks
        assert_eq!(pick_head_groups(6, work(11, 1), h200), Ok(6)); // 264 blocks: one wave of g1
        assert_eq!(pick_head_groups(6, work(12, 1), h200), Ok(2)); // 96 blocks of g3
        assert_eq!(pick_head_groups(6, work(16, 1), h200), Ok(2));
        assert_eq!(pick_head_groups(6, work(17, 1), h200), Ok(1));
        assert_eq!(pick_head_groups(6, work(32, 1), h200), Ok(1)); // ≥ 4,096 keys
        assert_eq!(pick_head_groups(6, work(1, 22), h200), Ok(1)); // a 22-node tree
        assert_eq!(pick_head_groups(6, work(5, 2), h200), Ok(6));
        // Only divisors: G = 5 gives 5 or 1, never 2.
        assert_eq!(pick_head_groups(5, 20, h200), Ok(5));
        assert_eq!(pick_head_groups(5, 60, h200), Ok(1));
        assert_eq!(pick_head_groups(1, 1, h200), Ok(1));
        // The resident counts come from the kernel the candidate would launch.
        let mut asked = Vec::new();
        let _ = pick_head_groups(8, 1000, |h| -> Result<usize, ()> {
            asked.push(h);
            Ok(0)
        });
        assert_eq!(asked, vec![1, 2, 4]);
    }
}
