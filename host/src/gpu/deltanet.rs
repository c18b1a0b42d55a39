//! Launchers of `deltanet` (`gpu-kernels/src/deltanet.rs`): the Gated DeltaNet layer core over a
//! tree of nodes ([`gdn_forward`]; or [`gdn_recurrence_marked`] then [`gdn_norm_prep`], the
//! gated norm fused with the out projection's input preparation) and the commit of an accepted
//! path over all layers ([`gdn_commit`]).
//!
//! Buffers (f32, row-major; `vd = n_v·d_v`, `conv_ch = 2·n_k·d_k + vd`):
//!
//! | buffer | per layer | written by |
//! |---|---|---|
//! | `mixed` | `[MAX_NODES][conv_ch]` raw conv inputs, row `i` = node `i`, row stride `mixed_stride ≥ conv_ch` | the engine's matmul; read by forward and commit |
//! | `z` | `[n][vd]` gate, row stride `z_stride ≥ vd` | the engine |
//! | `a`, `b` | `[n][n_v]` raw alpha / beta projections, row strides `≥ n_v` | the engine |
//! | `conv_state` | `[K−1][conv_ch]` committed raw inputs, oldest first | commit |
//! | `state` | `[n_v][d_k][d_v]` committed recurrent state | commit (the forward only reads it) |
//! | `scratch` | [`gdn_scratch_len`] floats: the nodes' q, k, v, α, β and `o` | forward; read by commit |
//! | `out` | `[n][vd]` gated-RMSNorm output (input of the out projection) | forward ([`gdn_gated_norm`]; not with [`gdn_norm_prep`]) |
//!
//! Every kernel is chained ([`ChainedLaunch`]) and reads the node batch and the path from
//! device memory, so a step can be captured in a CUDA graph and replayed with new values.

use cudarc::driver::LaunchConfig;
use kernel_abi::{
    gdn_commit_smem_words, gdn_programs_for, gdn_recur_smem_words, CommitPath, GdnParams, GdnReplay, NodeBatch,
    GDN_COLS_PER_BLOCK, GDN_MAX_CONV_KERNEL, GDN_NORM_PREP_MAX_HEADS, GDN_PREP_NODES_PER_BLOCK, GDN_PREP_THREADS,
    GDN_RECUR_THREADS, MAX_NODES, QMM_PREP_CHUNK,
};

use super::qmatmul::QmmWorkspace;
use super::{ChainedLaunch, DevSpan, Gpu, GpuError};

/// Shapes of one Gated DeltaNet layer (from the model's hyperparameters).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GdnShape {
    /// Key heads.
    pub n_k: usize,
    /// Value heads (value head `j` reads key head `j mod n_k`).
    pub n_v: usize,
    /// Key head dim: 16, 32, 64 or 128.
    pub d_k: usize,
    /// Value head dim: a positive multiple of 8.
    pub d_v: usize,
    /// Causal conv kernel `K` (1..=8).
    pub conv_kernel: usize,
    /// Epsilon of the gated RMSNorm (the model's `rms_eps`).
    pub eps: f32,
}

impl GdnShape {
    /// Conv channels `2·n_k·d_k + n_v·d_v`.
    pub fn conv_ch(&self) -> usize {
        2 * self.n_k * self.d_k + self.n_v * self.d_v
    }
    /// Floats of one layer's recurrent state `n_v·d_k·d_v`.
    pub fn state_len(&self) -> usize {
        self.n_v * self.d_k * self.d_v
    }
    /// Floats of one layer's conv window `(K−1)·conv_ch`.
    pub fn conv_state_len(&self) -> usize {
        self.conv_kernel.saturating_sub(1) * self.conv_ch()
    }
    /// Floats of one layer's dense `mixed` rows `MAX_NODES·conv_ch` (the commit arena's stride when
    /// the row stride is `conv_ch`).
    pub fn mixed_len(&self) -> usize {
        MAX_NODES as usize * self.conv_ch()
    }
    /// Floats of one layer's `out` / `z` rows per node, `n_v·d_v`.
    pub fn value_len(&self) -> usize {
        self.n_v * self.d_v
    }

    fn params(&self, kernel: &'static str, layers: usize) -> Result<GdnParams, GpuError> {
        let s = self;
        if s.n_k == 0 || s.n_v == 0 {
            return Err(GpuError::shape(kernel, format!("n_k = {}, n_v = {}: need at least one head", s.n_k, s.n_v)));
        }
        if !matches!(s.d_k, 16 | 32 | 64 | 128) {
            return Err(GpuError::shape(kernel, format!("d_k = {}: kernels exist for 16, 32, 64 and 128", s.d_k)));
        }
        if s.d_v == 0 || !s.d_v.is_multiple_of(8) {
            return Err(GpuError::shape(kernel, format!("d_v = {}: must be a positive multiple of 8", s.d_v)));
        }
        if s.conv_kernel == 0 || s.conv_kernel > GDN_MAX_CONV_KERNEL as usize {
            return Err(GpuError::shape(kernel, format!("conv kernel {}: 1..={GDN_MAX_CONV_KERNEL}", s.conv_kernel)));
        }
        if !(s.eps.is_finite() && s.eps >= 0.0) {
            return Err(GpuError::shape(kernel, format!("eps = {}", s.eps)));
        }
        let u =
            |v: usize, what: &str| u32::try_from(v).map_err(|_| GpuError::shape(kernel, format!("{what} too large")));
        // Every per-layer offset the kernels compute must fit comfortably.
        let biggest = self.state_len().max(gdn_scratch_len(self)).max(self.mixed_len());
        u(biggest.saturating_mul(layers.max(1)), "arena")?;
        Ok(GdnParams {
            n_k: u(s.n_k, "n_k")?,
            n_v: u(s.n_v, "n_v")?,
            d_k: u(s.d_k, "d_k")?,
            d_v: u(s.d_v, "d_v")?,
            conv_kernel: u(s.conv_kernel, "conv kernel")?,
            conv_ch: u(s.conv_ch(), "conv channels")?,
            eps: s.eps,
            layers: u(layers, "layers")?,
            mixed_stride: u(self.conv_ch(), "conv channels")?,
            z_stride: u(self.value_len(), "n_v·d_v")?,
            a_stride: s.n_v as u32,
            b_stride: s.n_v as u32,
            smem_nodes: MAX_NODES,
        })
    }
}

/// Floats of one layer's scratch: `MAX_NODES·(2·n_k·d_k + 2·n_v·d_v + 2·n_v)` (the nodes' q, k,
/// v, α, β and `o`; layout `kernel_abi::gdn_scratch`). 27B: `64·(4096 + 12288 + 96) = 1 054 720`
/// floats (4.2 MB) per layer.
pub fn gdn_scratch_len(shape: &GdnShape) -> usize {
    kernel_abi::gdn_scratch_len(shape.n_k, shape.n_v, shape.d_k, shape.d_v)
}

/// One layer's DeltaNet weights (f32): `conv_w [conv_ch·K]` (`conv_w[c·K + t]`, tap `K−1` =
/// current token), `ssm_a [n_v]`, `dt_bias [n_v]`, `norm_w [d_v]`.
#[derive(Clone, Copy, Debug)]
pub struct GdnWeights {
    pub conv_w: DevSpan<f32>,
    pub ssm_a: DevSpan<f32>,
    pub dt_bias: DevSpan<f32>,
    pub norm_w: DevSpan<f32>,
}

/// One layer's per-node activations: inputs `mixed [≥ n][conv_ch]`, `z [n][n_v·d_v]`,
/// `a`, `b [n][n_v]`, and the output `out [n][n_v·d_v]` (dense). Node `i`'s row of `mixed`,
/// `z`, `a`, `b` starts at `i·mixed_stride`, `i·z_stride`, `i·a_stride`, `i·b_stride` (at least
/// the widths; the values between rows are never read), so they can be column ranges of one
/// product's rows, e.g. the engine's `[mixed | z | beta | alpha]`. [`GdnIo::dense`] sets the
/// strides to the widths.
#[derive(Clone, Copy, Debug)]
pub struct GdnIo {
    pub mixed: DevSpan<f32>,
    pub z: DevSpan<f32>,
    pub a: DevSpan<f32>,
    pub b: DevSpan<f32>,
    pub out: DevSpan<f32>,
    pub mixed_stride: usize,
    pub z_stride: usize,
    pub a_stride: usize,
    pub b_stride: usize,
}

impl GdnIo {
    /// Dense rows: `mixed_stride = conv_ch`, `z_stride = n_v·d_v`, `a_stride = b_stride = n_v`.
    pub fn dense(
        shape: &GdnShape,
        mixed: DevSpan<f32>,
        z: DevSpan<f32>,
        a: DevSpan<f32>,
        b: DevSpan<f32>,
        out: DevSpan<f32>,
    ) -> Self {
        GdnIo {
            mixed,
            z,
            a,
            b,
            out,
            mixed_stride: shape.conv_ch(),
            z_stride: shape.value_len(),
            a_stride: shape.n_v,
            b_stride: shape.n_v,
        }
    }
}

/// Values a strided `[n][width]` view must hold: `(n − 1)·stride + width`.
fn strided_len(n: usize, stride: usize, width: usize) -> usize {
    n.saturating_sub(1).saturating_mul(stride).saturating_add(width)
}

/// One layer's committed state (only read by the forward) and its scratch (written).
#[derive(Clone, Copy, Debug)]
pub struct GdnLayerState {
    pub conv_state: DevSpan<f32>,
    pub state: DevSpan<f32>,
    pub scratch: DevSpan<f32>,
}

/// The `gdn_norm_prep_dv*` kernel for value heads of `d_v` columns: the smallest whose register
/// layout holds a head (`d_v` beyond 256: `dv256`'s long-row path).
fn norm_prep_kernel(d_v: usize) -> &'static str {
    match d_v {
        0..=64 => "gdn_norm_prep_dv64",
        65..=128 => "gdn_norm_prep_dv128",
        _ => "gdn_norm_prep_dv256",
    }
}

fn recur_kernels(d_k: usize) -> (&'static str, &'static str) {
    match d_k {
        16 => ("gdn_recur_dk16", "gdn_commit_dk16"),
        32 => ("gdn_recur_dk32", "gdn_commit_dk32"),
        64 => ("gdn_recur_dk64", "gdn_commit_dk64"),
        _ => ("gdn_recur_dk128", "gdn_commit_dk128"),
    }
}

/// The layer core for the `n` nodes of `nodes` (device memory, one [`NodeBatch`] whose `n`
/// must equal `n`): conv along each node's ancestors, the delta rule from each node's parent's
/// state (roots from `st.state`), gated RMSNorm into `io.out`. `st.conv_state` and `st.state`
/// are not modified; `st.scratch` keeps what [`gdn_commit`] needs (until the next forward of
/// this layer). Three chained launches: `gdn_prep` (grid `(n, 2·n_k + n_v)`), `gdn_recur_dk*`
/// (grid `(n_v, ⌈d_v/16⌉)`, 64 threads, shared memory for `n` nodes: 75 KB at `d_k = 128` and
/// `n = 32`, 110 KB at 64) and `gdn_gated_norm`
/// (grid `(n, ⌈n_v/8⌉)`). Each node's result is bitwise independent of the other nodes.
/// `replay`: the batch's replay schedule ([`gdn_replay_words`] of the same batch).
#[allow(clippy::too_many_arguments)]
pub fn gdn_forward(
    gpu: &Gpu,
    shape: &GdnShape,
    n: usize,
    nodes: DevSpan<NodeBatch>,
    replay: DevSpan<GdnReplay>,
    w: &GdnWeights,
    io: &GdnIo,
    st: &GdnLayerState,
) -> Result<(), GpuError> {
    gdn_forward_marked(gpu, shape, n, nodes, replay, w, io, st, &mut |_| Ok(()))
}

/// [`gdn_forward`], calling `after(kernel)` once each of its three launches is queued (the
/// engine's per-kernel profile records an event there).
#[allow(clippy::too_many_arguments)]
pub fn gdn_forward_marked(
    gpu: &Gpu,
    shape: &GdnShape,
    n: usize,
    nodes: DevSpan<NodeBatch>,
    replay: DevSpan<GdnReplay>,
    w: &GdnWeights,
    io: &GdnIo,
    st: &GdnLayerState,
    after: &mut dyn FnMut(&'static str) -> Result<(), GpuError>,
) -> Result<(), GpuError> {
    gdn_recurrence_marked(gpu, shape, n, nodes, replay, w, io, st, after)?;
    gdn_gated_norm(gpu, shape, n, nodes, w, io, st)?;
    after("gdn_gated_norm")
}

/// `n` nodes per forward: `1..=MAX_NODES`.
fn check_nodes(k: &'static str, n: usize) -> Result<(), GpuError> {
    if n == 0 || n > MAX_NODES as usize {
        return Err(GpuError::shape(k, format!("{n} nodes: 1..={MAX_NODES} per forward")));
    }
    Ok(())
}

/// A row stride of `what`: at least its row's `width`, and small enough that `MAX_NODES` rows
/// stay addressable in u32.
fn check_stride(k: &'static str, what: &str, stride: usize, width: usize) -> Result<(), GpuError> {
    if stride < width || stride > u32::MAX as usize / MAX_NODES as usize {
        return Err(GpuError::shape(
            k,
            format!("{what} row stride {stride}: at least its width {width}, at most 2^32/{MAX_NODES}"),
        ));
    }
    Ok(())
}

/// The checks of a forward's arguments, and its parameters with `io`'s row strides.
#[allow(clippy::too_many_arguments)]
fn forward_params(
    shape: &GdnShape,
    n: usize,
    nodes: DevSpan<NodeBatch>,
    w: &GdnWeights,
    io: &GdnIo,
    st: &GdnLayerState,
) -> Result<GdnParams, GpuError> {
    const K: &str = "gdn_forward";
    let mut p = shape.params(K, 1)?;
    check_nodes(K, n)?;
    let (ch, vd, nv) = (shape.conv_ch(), shape.value_len(), shape.n_v);
    let strides =
        [("mixed", io.mixed_stride, ch), ("z", io.z_stride, vd), ("a", io.a_stride, nv), ("b", io.b_stride, nv)];
    for (what, stride, width) in strides {
        check_stride(K, what, stride, width)?;
    }
    p.mixed_stride = io.mixed_stride as u32;
    (p.z_stride, p.a_stride, p.b_stride) = (io.z_stride as u32, io.a_stride as u32, io.b_stride as u32);
    nodes.need(1, K, "nodes (one NodeBatch)")?;
    w.conv_w.need(ch * shape.conv_kernel, K, "conv_w")?;
    w.ssm_a.need(nv, K, "ssm_a")?;
    w.dt_bias.need(nv, K, "dt_bias")?;
    w.norm_w.need(shape.d_v, K, "norm_w")?;
    io.mixed.need(strided_len(n, io.mixed_stride, ch), K, "mixed")?;
    io.z.need(strided_len(n, io.z_stride, vd), K, "z")?;
    io.a.need(strided_len(n, io.a_stride, nv), K, "a")?;
    io.b.need(strided_len(n, io.b_stride, nv), K, "b")?;
    io.out.need(n * vd, K, "out")?;
    st.conv_state.need(shape.conv_state_len(), K, "conv_state")?;
    st.state.need(shape.state_len(), K, "state")?;
    st.scratch.need(gdn_scratch_len(shape), K, "scratch")?;
    // `gdn_recur` stages k, q and v rows from the scratch by 16-byte `cp.async` (every offset of
    // `kernel_abi::gdn_scratch` is a multiple of 4 floats).
    if !st.scratch.ptr().is_multiple_of(16) {
        return Err(GpuError::shape(K, format!("scratch at {:#x} is not 16-byte aligned", st.scratch.ptr())));
    }
    Ok(p)
}
/// The checks of the gated norm's inputs (`w.norm_w`, `io.z` at `io.z_stride`, `st.scratch`)
/// and its parameters.
fn norm_params(
    k: &'static str,
    shape: &GdnShape,
    n: usize,
    w: &GdnWeights,
    io: &GdnIo,
    st: &GdnLayerState,
) -> Result<GdnParams, GpuError> {
    let mut p = shape.params(k, 1)?;
    check_nodes(k, n)?;
    let vd = shape.value_len();
    check_stride(k, "z", io.z_stride, vd)?;
    p.z_stride = io.z_stride as u32;
    w.norm_w.need(shape.d_v, k, "norm_w")?;
    io.z.need(strided_len(n, io.z_stride, vd), k, "z")?;
    st.scratch.need(gdn_scratch_len(shape), k, "scratch")?;
    Ok(p)
}

/// Which conv/norm kernel a forward runs: `gdn_prep` (one node per block), `gdn_prep_pairs`
/// (two), or `Auto` — one node per block while its blocks fit on the device at once, else pairs
/// (fewer resident per SM, but one wave where one node per block takes two: 22 nodes of the
/// 27B). The two give the same bits (`tests/tests/gpu/deltanet.rs` checks it), so the choice is
/// speed only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GdnPrepKernel {
    Auto,
    OneNode,
    Pairs,
}

/// Launches the conv/norm step of a forward (`which` kernel) into `st.scratch`'s q, k, v, α and β
/// rows (`kernel_abi::gdn_scratch`): the first launch of [`gdn_forward`], on its own for tests and
/// benches.
#[allow(clippy::too_many_arguments)]
pub fn gdn_prep(
    gpu: &Gpu,
    shape: &GdnShape,
    n: usize,
    nodes: DevSpan<NodeBatch>,
    w: &GdnWeights,
    io: &GdnIo,
    st: &GdnLayerState,
    which: GdnPrepKernel,
) -> Result<(), GpuError> {
    let p = forward_params(shape, n, nodes, w, io, st)?;
    launch_prep(gpu, &p, n as u32, nodes, w, io, st, which)
}

#[allow(clippy::too_many_arguments)]
fn launch_prep(
    gpu: &Gpu,
    p: &GdnParams,
    n: u32,
    nodes: DevSpan<NodeBatch>,
    w: &GdnWeights,
    io: &GdnIo,
    st: &GdnLayerState,
    which: GdnPrepKernel,
) -> Result<(), GpuError> {
    let groups = p.n_k * 2 + p.n_v;
    let pairs = match which {
        GdnPrepKernel::OneNode => false,
        GdnPrepKernel::Pairs => true,
        GdnPrepKernel::Auto => {
            u64::from(n) * u64::from(groups) > u64::from(gpu.resident_blocks("gdn_prep", GDN_PREP_THREADS)?)
        }
    };
    let (name, per_block) = if pairs { ("gdn_prep_pairs", GDN_PREP_NODES_PER_BLOCK) } else { ("gdn_prep", 1) };
    let cfg = LaunchConfig {
        grid_dim: (n.div_ceil(per_block), groups, 1),
        block_dim: (GDN_PREP_THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    // Safety: arguments match `gdn_prep`'s and `gdn_prep_pairs`' signature; every kernel here
    // waits (griddepcontrol) before touching memory, and the lengths were checked by
    // `forward_params`.
    unsafe {
        ChainedLaunch::new(gpu, name)
            .span(nodes)
            .span(io.mixed)
            .span(st.conv_state)
            .span(w.conv_w)
            .span(io.a)
            .span(io.b)
            .span(w.ssm_a)
            .span(w.dt_bias)
            .span(st.scratch)
            .value(super::Param(*p))
            .launch(cfg)
    }
}

/// The forward up to the recurrence output: `gdn_prep` (or `gdn_prep_pairs`, [`GdnPrepKernel`])
/// then `gdn_recur_dk*` (see [`gdn_forward`]), leaving each node's `o` in `st.scratch`
/// (`kernel_abi::gdn_scratch`'s `o` rows) for the gated norm — [`gdn_gated_norm`] into `io.out`,
/// or [`gdn_norm_prep`] straight into the out projection's workspace. Calls `after("gdn_prep")`
/// and `after("gdn_recur")`.
#[allow(clippy::too_many_arguments)]
pub fn gdn_recurrence_marked(
    gpu: &Gpu,
    shape: &GdnShape,
    n: usize,
    nodes: DevSpan<NodeBatch>,
    replay: DevSpan<GdnReplay>,
    w: &GdnWeights,
    io: &GdnIo,
    st: &GdnLayerState,
    after: &mut dyn FnMut(&'static str) -> Result<(), GpuError>,
) -> Result<(), GpuError> {
    let mut p = forward_params(shape, n, nodes, w, io, st)?;
    replay.need(1, "gdn_forward", "replay (one GdnReplay)")?;
    let n32 = n as u32;
    launch_prep(gpu, &p, n32, nodes, w, io, st, GdnPrepKernel::Auto)?;
    after("gdn_prep")?;

    let (recur, _) = recur_kernels(shape.d_k);
    // Shared memory for this launch's nodes, not `MAX_NODES` (a graph is captured per count).
    p.smem_nodes = n32;
    let programs = gdn_programs(n);
    let smem = gdn_recur_smem_words(p.d_k, n32, programs) * 4;
    gpu.allow_dynamic_smem(recur, smem)?;
    let cfg = LaunchConfig {
        grid_dim: (p.n_v, p.d_v.div_ceil(GDN_COLS_PER_BLOCK), 1),
        block_dim: (programs * GDN_RECUR_THREADS, 1, 1),
        shared_mem_bytes: smem,
    };
    unsafe {
        ChainedLaunch::new(gpu, recur)
            .span(nodes)
            .span(replay)
            .span(st.state)
            .span(st.scratch)
            .value(super::Param(p))
            .launch(cfg)?;
    }
    after("gdn_recur")
}

/// The gated RMSNorm of the `n` nodes' recurrence outputs (in `st.scratch`, from
/// [`gdn_recurrence_marked`]) into `io.out [n][n_v·d_v]`: `out = o/√(mean(o²) + eps) · norm_w ⊙
/// silu(z)` per value head. One launch `gdn_gated_norm`, grid `(n, ⌈n_v/8⌉)`, a warp per
/// (node, head). Reads `nodes` (its node count), `w.norm_w`, `io.z`, the scratch's `o` rows;
/// writes `io.out`; the other fields are not used.
#[allow(clippy::too_many_arguments)]
pub fn gdn_gated_norm(
    gpu: &Gpu,
    shape: &GdnShape,
    n: usize,
    nodes: DevSpan<NodeBatch>,
    w: &GdnWeights,
    io: &GdnIo,
    st: &GdnLayerState,
) -> Result<(), GpuError> {
    const K: &str = "gdn_gated_norm";
    let p = norm_params(K, shape, n, w, io, st)?;
    nodes.need(1, K, "nodes (one NodeBatch)")?;
    io.out.need(n * shape.value_len(), K, "out")?;
    let cfg = LaunchConfig { grid_dim: (n as u32, p.n_v.div_ceil(8), 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
    // Safety: arguments match `gdn_gated_norm`'s signature, lengths checked; the kernel waits
    // before touching memory.
    unsafe {
        ChainedLaunch::new(gpu, "gdn_gated_norm")
            .span(nodes)
            .span(st.scratch)
            .span(io.z)
            .span(w.norm_w)
            .span(io.out)
            .value(super::Param(p))
            .launch(cfg)
    }
}

/// [`gdn_gated_norm`] fused with the out projection's input preparation: the `n` nodes'
/// gated-norm rows (`o` from `st.scratch`, `z` from `io.z` at `io.z_stride`, `w.norm_w`) are
/// converted into `ws` exactly as [`QmmWorkspace::prepare`] would convert `gdn_gated_norm`'s
/// `io.out` — bitwise the same activations (GPU test `gdn_norm_prep`) — and `io.out` is neither
/// read nor written. `pairs`: also the bf16 pair F32 weights need. Per activation plane of 32
/// nodes one launch `gdn_norm_prep_dv{64,128,256}` (the smallest that holds `d_v`; any `d_v`
/// beyond 256 takes the `dv256` kernel's long-row path), grid `(nodes, ⌈n_v·d_v / 1024⌉)`,
/// 256 threads (see `gpu-kernels/src/deltanet/norm_prep.rs`). Needs `n_v·d_v` a multiple of 32
/// within the workspace and `n_v ≤ GDN_NORM_PREP_MAX_HEADS`.
#[allow(clippy::too_many_arguments)]
pub fn gdn_norm_prep(
    gpu: &Gpu,
    shape: &GdnShape,
    n: usize,
    w: &GdnWeights,
    io: &GdnIo,
    st: &GdnLayerState,
    ws: &mut QmmWorkspace,
    pairs: bool,
) -> Result<(), GpuError> {
    gdn_norm_prep_with(gpu, shape, n, w, io, st, ws, pairs, GdnNormPrepKernel::Auto)
}

/// Which kernel [`gdn_norm_prep_with`] launches: one block per prep chunk, each computing its
/// column's whole row (`gdn_norm_prep_dv*`), the column's chunks as one cluster, each block only
/// its own chunk (`gdn_norm_prep_cluster_dv128`: `d_v = 128` rows of 2 to 8 whole chunks,
/// [`norm_prep_cluster_size`]), or `Auto`: the cluster kernel where the one-block kernel's blocks
/// of a launch outnumber the SMs (some SMs would run two whole-row blocks: the 27B's 23-node
/// verify, 138 blocks on 132 SMs), else one block per chunk — measured faster alone in the chain
/// at one node (AR 7.10–7.15 → 7.19 ms per step with clusters) and at 22 nodes (132 blocks:
/// 9.41–9.43 → 9.48 ms per forward), slower at 23 (9.55–9.57 → 9.43–9.46 ms), nvidia-h200.
/// `FLASHTREE_GDN_NORM_CLUSTER=0` makes `Auto` the one-block kernel. Both give the same bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GdnNormPrepKernel {
    Auto,
    OneBlock,
    Cluster,
}

/// [`gdn_norm_prep`] with the kernel chosen by `which`.
#[allow(clippy::too_many_arguments)]
pub fn gdn_norm_prep_with(
    gpu: &Gpu,
    shape: &GdnShape,
    n: usize,
    w: &GdnWeights,
    io: &GdnIo,
    st: &GdnLayerState,
    ws: &mut QmmWorkspace,
    pairs: bool,
    which: GdnNormPrepKernel,
) -> Result<(), GpuError> {
    const K: &str = "gdn_norm_prep";
    let p = norm_params(K, shape, n, w, io, st)?;
    if shape.n_v > GDN_NORM_PREP_MAX_HEADS as usize {
        return Err(GpuError::shape(K, format!("n_v = {}: at most {GDN_NORM_PREP_MAX_HEADS}", shape.n_v)));
    }
    let vd = shape.value_len();
    let o0 = kernel_abi::gdn_scratch(shape.n_k, shape.n_v, shape.d_k, shape.d_v).o;
    let kernel = norm_prep_kernel(shape.d_v);
    let size = norm_prep_cluster_size(shape);
    if which == GdnNormPrepKernel::Cluster && size == 0 {
        return Err(GpuError::shape(
            K,
            format!("the cluster kernel needs d_v = 128 and 2..=8 chunks of 1024 values (n_v = {})", shape.n_v),
        ));
    }
    let sms = gpu.sm_count()? as usize;
    ws.prepare_planes(gpu, K, n, vd, pairs, |pl, first, cols, cfg, pp| {
        let chunks = vd.div_ceil(QMM_PREP_CHUNK as usize);
        let cluster = match which {
            GdnNormPrepKernel::OneBlock => 0,
            GdnNormPrepKernel::Cluster => size,
            GdnNormPrepKernel::Auto if cluster_enabled() && cols * chunks > sms => size,
            GdnNormPrepKernel::Auto => 0,
        };
        let kernel = if cluster > 0 { "gdn_norm_prep_cluster_dv128" } else { kernel };
        let o = st.scratch.sub(o0 + first * vd, cols * vd, "scratch o rows")?;
        let z = io.z.sub(first * io.z_stride, strided_len(cols, io.z_stride, vd), "z rows")?;
        // Safety: arguments match `gdn_norm_prep_dv*`'s signature; lengths checked above and by
        // the workspace; the kernel waits (griddepcontrol) before touching memory.
        unsafe {
            let mut l = ChainedLaunch::new(gpu, kernel);
            l.span(o).span(z).span(w.norm_w).args(&pl).value(super::Param(pp)).value(super::Param(p));
            if cluster > 0 {
                l.cluster_y(cluster);
            }
            l.launch(cfg)
        }
    })
}

/// Blocks per cluster of `gdn_norm_prep_cluster_dv128` for this shape (the column's
/// `n_v·d_v / 1024` prep chunks), or 0 where it does not apply: only `d_v = 128` rows of whole
/// chunks, 2 to 8 of them (the portable cluster size).
pub fn norm_prep_cluster_size(shape: &GdnShape) -> u32 {
    let vd = shape.value_len();
    let chunk = QMM_PREP_CHUNK as usize;
    if shape.d_v != 128 || !vd.is_multiple_of(chunk) || !(2..=8).contains(&(vd / chunk)) {
        return 0;
    }
    (vd / chunk) as u32
}

/// `FLASHTREE_GDN_NORM_CLUSTER=0` turns [`GdnNormPrepKernel::Auto`]'s cluster choice off.
fn cluster_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("FLASHTREE_GDN_NORM_CLUSTER").map(|v| v.trim() != "0").unwrap_or(true))
}

/// Commits the accepted path `path` (device memory, one [`CommitPath`] of the last forward) in
/// all `layers` DeltaNet layers at once: each layer's `state` advances through the path's updates
/// in path order (bitwise the state the forward computed for the path's last node), and its
/// `conv_state` becomes the last `K−1` raw inputs along the path (continuing from the old window
/// when the path is shorter). The arenas are contiguous per layer: `state [layers][n_v·d_k·d_v]`,
/// `conv_state [layers][(K−1)·conv_ch]`, `mixed [layers][32][mixed_stride]` (each row's first
/// `conv_ch` values read; `mixed_stride ≥ conv_ch`, the forwards' row stride) and
/// `scratch [layers][gdn_scratch_len]`, the last two as the forward left them. `path_len`: the
/// path's `len` as the host wrote it (`0..=MAX_NODES`), which sizes the shared memory (a device
/// path longer than it is cut there). A path of length 0 changes nothing. One launch
/// `gdn_commit_dk*`, grid `(n_v·⌈d_v/16⌉, layers)`.
#[allow(clippy::too_many_arguments)]
pub fn gdn_commit(
    gpu: &Gpu,
    shape: &GdnShape,
    layers: usize,
    path: DevSpan<CommitPath>,
    path_len: usize,
    mixed: DevSpan<f32>,
    mixed_stride: usize,
    scratch: DevSpan<f32>,
    state: DevSpan<f32>,
    conv_state: DevSpan<f32>,
) -> Result<(), GpuError> {
    const K: &str = "gdn_commit";
    if layers == 0 || layers > 65_535 {
        return Err(GpuError::shape(K, format!("{layers} layers: 1..=65535")));
    }
    if path_len > MAX_NODES as usize {
        return Err(GpuError::shape(K, format!("a path of {path_len} nodes: 0..={MAX_NODES}")));
    }
    let mut p = shape.params(K, layers)?;
    let m = MAX_NODES as usize;
    if mixed_stride < shape.conv_ch() || mixed_stride.saturating_mul(m * layers) > u32::MAX as usize {
        return Err(GpuError::shape(
            K,
            format!("mixed row stride {mixed_stride}: at least conv_ch {}, the arena under 2^32", shape.conv_ch()),
        ));
    }
    p.mixed_stride = mixed_stride as u32;
    path.need(1, K, "path (one CommitPath)")?;
    mixed.need(layers * m * mixed_stride, K, "mixed arena")?;
    scratch.need(layers * gdn_scratch_len(shape), K, "scratch arena")?;
    state.need(layers * shape.state_len(), K, "state arena")?;
    conv_state.need(layers * shape.conv_state_len(), K, "conv_state arena")?;
    let (_, commit) = recur_kernels(shape.d_k);
    if path_len == 0 {
        return Ok(());
    }
    p.smem_nodes = path_len as u32;
    let smem = gdn_commit_smem_words(p.d_k, p.smem_nodes) * 4;
    gpu.allow_dynamic_smem(commit, smem)?;
    let cfg = LaunchConfig {
        grid_dim: (p.n_v * p.d_v.div_ceil(GDN_COLS_PER_BLOCK), p.layers, 1),
        block_dim: (GDN_RECUR_THREADS, 1, 1),
        shared_mem_bytes: smem,
    };
    // Safety: arguments match `gdn_commit_dk*`; lengths checked above; the kernel waits before
    // touching memory.
    unsafe {
        ChainedLaunch::new(gpu, commit)
            .span(path)
            .span(mixed)
            .span(scratch)
            .span(state)
            .span(conv_state)
            .value(super::Param(p))
            .launch(cfg)
    }
}

/// A [`NodeBatch`] as the 4-byte words of its `#[repr(C)]` layout (each `u64` mask low word
/// first) (to upload it with
/// [`Gpu::upload`]; view the buffer with [`DevSpan::from_raw`]`(ptr, 1)`).
pub fn node_batch_words(nb: &NodeBatch) -> Vec<u32> {
    let mut w = vec![nb.n_past, nb.n];
    w.extend_from_slice(&nb.tokens);
    w.extend(nb.parent.iter().map(|&p| p as u32));
    w.extend_from_slice(&nb.depth);
    w.extend(nb.anc.iter().flat_map(|&a| [a as u32, (a >> 32) as u32]));
    debug_assert_eq!(w.len() * 4, std::mem::size_of::<NodeBatch>());
    w
}

/// Programs of a `gdn_recur_*` launch of `n` nodes (threads `64 · programs`): two from
/// `GDN_PROGRAMS_MIN_NODES` to `GDN_PROGRAMS_MAX_NODES` nodes, else one
/// (`kernel_abi::gdn_programs`); `FLASHTREE_GDN_PROGRAMS=<p>` (1 or 2) asks for `p` where the node
/// count allows several (A/B of the split). The launch and its schedule ([`gdn_replay_schedule`])
/// both take it from here.
pub fn gdn_programs(n: usize) -> u32 {
    static V: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    let requested = *V.get_or_init(|| {
        std::env::var("FLASHTREE_GDN_PROGRAMS")
            .ok()
            .and_then(|v| v.trim().parse::<u32>().ok())
            .filter(|v| (1..=kernel_abi::GDN_MAX_PROGRAMS).contains(v))
            .unwrap_or(2)
    });
    gdn_programs_for(n.min(MAX_NODES as usize) as u32, requested)
}

/// The DeltaNet replay schedule of `nb` for its launch's [`gdn_programs`]
/// (`kernel_abi::gdn_replay_programs`); `None` if a parent follows its child.
pub fn gdn_replay_schedule(nb: &NodeBatch) -> Option<GdnReplay> {
    kernel_abi::gdn_replay_programs(nb, gdn_programs(nb.n as usize))
}

/// The DeltaNet replay schedule of `nb` ([`gdn_replay_schedule`]) as the 4-byte words of its
/// `#[repr(C)]` layout, for the `replay` argument of [`gdn_forward`]; an error naming the batch's
/// fault when it has none (a parent after its child).
pub fn gdn_replay_words(nb: &NodeBatch) -> Result<Vec<u32>, GpuError> {
    let r = gdn_replay_schedule(nb).ok_or_else(|| {
        GpuError::shape(
            "gdn_forward",
            format!("no replay schedule for a batch of {} nodes: a parent follows its child", nb.n),
        )
    })?;
    let mut w = vec![r.len];
    w.extend(r.start.chunks_exact(2).map(|p| p[0] as u32 | (p[1] as u32) << 16));
    w.extend(r.ops.chunks_exact(2).map(|p| p[0] as u32 | (p[1] as u32) << 16));
    debug_assert_eq!(w.len() * 4, std::mem::size_of::<GdnReplay>());
    Ok(w)
}

/// A [`CommitPath`] as the 4-byte words of its `#[repr(C)]` layout.
pub fn commit_path_words(p: &CommitPath) -> Vec<u32> {
    let mut w = vec![p.n_past, p.len];
    w.extend_from_slice(&p.nodes);
    debug_assert_eq!(w.len() * 4, std::mem::size_of::<CommitPath>());
    w
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn abi_words_cover_the_structs() {
        let mut nb = NodeBatch::empty(7);
        nb.n = 3;
        nb.parent[2] = 1;
        nb.anc[2] = 0b110;
        nb.anc[63] = 1 << 63 | 1;
        let w = node_batch_words(&nb);
        assert_eq!(w.len() * 4, std::mem::size_of::<NodeBatch>());
        assert_eq!((w[0], w[1]), (7, 3));
        let m = MAX_NODES as usize;
        assert_eq!(w[2 + m + 2], 1);
        assert_eq!(w[2 + m], u32::MAX);
        assert_eq!(w[2 + 3 * m + 2 * 2], 0b110);
        assert_eq!((w[2 + 3 * m + 2 * 63], w[2 + 3 * m + 2 * 63 + 1]), (1, 1 << 31));
        let bytes: Vec<u8> = w.iter().flat_map(|x| x.to_le_bytes()).collect();
        // Safety: `NodeBatch` is plain `#[repr(C)]` integers without padding (checked above).
        let raw = unsafe {
            std::slice::from_raw_parts(&nb as *const NodeBatch as *const u8, std::mem::size_of::<NodeBatch>())
        };
        assert_eq!(bytes, raw);
        let mut p = CommitPath { n_past: 5, len: 2, nodes: [0; MAX_NODES as usize] };
        p.nodes[1] = 9;
        assert_eq!(commit_path_words(&p)[3], 9);
        // The replay schedule's words are its struct's bytes (a 3-node chain: 3 operations).
        let mut chain = NodeBatch::empty(0);
        chain.n = 3;
        chain.parent[..3].copy_from_slice(&[-1, 0, 1]);
        let w = gdn_replay_words(&chain).unwrap();
        let r = gdn_replay_schedule(&chain).unwrap();
        assert_eq!(w.len() * 4, std::mem::size_of::<GdnReplay>());
        assert_eq!(w[0], 3);
        let bytes: Vec<u8> = w.iter().flat_map(|x| x.to_le_bytes()).collect();
        // Safety: `GdnReplay` is a u32 and u16 pairs, `#[repr(C)]`, without padding (size checked).
        let raw = unsafe {
            std::slice::from_raw_parts(&r as *const GdnReplay as *const u8, std::mem::size_of::<GdnReplay>())
        };
        assert_eq!(bytes, raw);
        // A parent after its child has no schedule, and says so.
        chain.parent[1] = 2;
        assert!(gdn_replay_words(&chain).unwrap_err().to_string().contains("a parent follows its child"));
    }

    /// Every kernel name the deltanet launchers pick is an entry point of the embedded PTX.
    #[test]
    fn every_kernel_name_is_in_the_ptx() {
        let mut names = vec!["gdn_prep", "gdn_prep_pairs", "gdn_gated_norm"];
        for d_k in [16, 32, 64, 128] {
            let (recur, commit) = recur_kernels(d_k);
            names.extend([recur, commit]);
        }
        names.extend([8, 64, 72, 128, 136, 256, 384].map(norm_prep_kernel));
        for name in names {
            assert!(crate::gpu::KERNELS_PTX.contains(&format!(".entry {name}(")), "{name} is not in the PTX");
        }
    }

    #[test]
    fn scratch_len_of_27b() {
        let s = GdnShape { n_k: 16, n_v: 48, d_k: 128, d_v: 128, conv_kernel: 4, eps: 1e-6 };
        assert_eq!(gdn_scratch_len(&s), 64 * (2 * 2048 + 2 * 6144 + 96));
        assert_eq!(s.conv_ch(), 10240);
    }
}
