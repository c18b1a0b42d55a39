//! `deltanet`: the Gated DeltaNet layer core over a tree of nodes, and its commit.
//!
//! Math (per node `i`, value head `j`, key head `kh = j mod n_k`; `reference/src/deltanet.rs`):
//!
//! ```text
//! y_i[c]  = silu(Σ_{t<K−1} w[c][t]·win_i[t][c] + w[c][K−1]·mixed_i[c])   (window along ancestors)
//! q, k    = l2norm(y_q), l2norm(y_k) per key head (eps 1e-6), q·1/√d_k;   v = y_v
//! α = exp(ssm_a·softplus(a + dt_bias)),   β = sigmoid(b)
//! S_i     = step(S_parent(i)) :  u = α·(Sᵀk);  δ = β(v − u);  S = α S + k δᵀ
//! o_i     = S_iᵀ q = α·(S_parentᵀq) + δ·(kᵀq);   out_i = rmsnorm(o_i) · norm_w ⊙ silu(z_i)
//! ```
//!
//! A node's output is computed from its parent's state (both dot products of the same state,
//! then `δ`), so a leaf needs no state of its own and its parent's state stays in the registers
//! for the next sibling.
//!
//! Kernels (one forward = `gdn_prep` → `gdn_recur_dk{16,32,64,128}` → `gdn_gated_norm`; the
//! commit of an accepted path = one `gdn_commit_dk*` launch over all layers):
//!
//! * `gdn_prep` — conv window gathered along the node's ancestors (continuing into the committed
//!   window), SiLU, the L2 norms, the q scale, α and β, into the layer's scratch
//!   (`kernel_abi::gdn_scratch`).
//! * `gdn_recur_*` — the replay: block `(j, column group)` loads its columns of the committed
//!   state once and computes every inner node's state on chip by the forward's replay schedule
//!   (`kernel_abi::gdn_replay`, built on the host from the node batch: depth first, each node
//!   once from its parent's state, leaves without a state of their own, branch points kept in
//!   shared-memory slots for their later inner children). Nothing per node is written but `o`.
//! * `gdn_gated_norm` — per (node, value head) RMSNorm of `o` times `norm_w ⊙ silu(z)`.
//! * `gdn_norm_prep_dv*` ([`norm_prep`]) — the gated norm fused with the out projection's
//!   `qmm_prep_x` (the engine's default in place of `gdn_gated_norm`).
//! * `gdn_commit_*` — per (layer, value head, column group): applies the path's updates to the
//!   stored state with the same [`delta_step`], so the committed state is bitwise the state the
//!   forward computed for the path's last node (and the state AR reaches); shifts the path's raw
//!   inputs into the conv window.
//!
//! Invariant (batch invariance): a node's result depends only on its own ancestors' inputs and
//! the committed state/window. Every reduction has a fixed order chosen from the head dims: the
//! per-column dot products `Σ_r S[r][c]·x[r]` are 4 lanes × `d_k/4` rows (4 interleaved
//! accumulators per lane, summed `(a0+a1)+(a2+a3)`, then the butterfly over the lanes xor 8, 16),
//! `kᵀq` is 8 lanes × 4-row groups (fma chain per lane, butterfly xor 1, 2, 4), the L2 and RMS
//! norms are butterfly sums in warp order. The replay schedule (the order, which saved state a
//! node restarts from, whether a node is a leaf) changes which work is done, never the bits:
//! every state is the same chain of [`delta_step`]s from the root, and every output the same
//! [`readout_from_parent`] of its parent's state.

use kernel_abi::{
    gdn_replay_max_ops, gdn_scratch, gdn_slot_count, CommitPath, GdnParams, GdnReplay, NodeBatch, GDN_COLS_PER_BLOCK,
    GDN_MAX_PROGRAMS, GDN_OP_KIND, GDN_OP_LEAF, GDN_OP_LOAD, GDN_OP_SAVE, GDN_OP_STEP, GDN_PREP_NODES_PER_BLOCK,
    GDN_PREP_THREADS, GDN_RECUR_THREADS, MAX_NODES,
};

use crate::device::griddep::{grid_dependency_wait, launch_dependents};
use crate::device::load::{cp_async_16, cp_async_commit, cp_async_wait_all};
use crate::device::math::{div_rn, ex2, exp_fast, fma, lg2, rcp_approx, silu, sqrt_rn};
use crate::device::shared::{dynamic_smem, ld_shared_v4, smem_addr, Shared};
use crate::device::sync::sync_threads;
use crate::device::unroll::unroll_below;
use crate::device::warp::{shfl_xor_f32, warp_sum_f32};
use crate::device::*;

pub mod norm_prep;

const COLS: usize = GDN_COLS_PER_BLOCK as usize;
/// Threads of `gdn_commit_*`, and of each program of `gdn_recur_*`.
const THREADS: usize = GDN_RECUR_THREADS as usize;
// `stage_kq` splits the nodes over two warps.
const _: () = assert!(THREADS == 64);

#[link_section = ".shared"]
static PREP_PARTIALS: Shared<[f32; 32]> = Shared::uninit();

/// Nodes of the batch (`min(n, MAX_NODES)`).
#[inline(always)]
unsafe fn node_count(nb: *const NodeBatch) -> usize {
    ((*nb).n).min(MAX_NODES) as usize
}

#[inline(always)]
unsafe fn parent_of(nb: *const NodeBatch, i: usize) -> i32 {
    *(*nb).parent.as_ptr().add(i)
}

/// `Σ_r s[r]·x[r]` over the lane's rows: `min(4, RPL)` interleaved accumulators (row `r` goes to
/// accumulator `r mod 4`, in row order), summed `(a0 + a1) + (a2 + a3)`.
#[inline(always)]
fn lane_dot<const RPL: usize>(s: &[f32; RPL], x: &[f32; RPL]) -> f32 {
    const A: usize = 4;
    let mut acc = [0.0f32; A];
    #[allow(clippy::needless_range_loop)]
    for a in 0..A {
        if a < RPL {
            acc[a] = s[a] * x[a];
        }
    }
    let mut r = A;
    while r < RPL {
        acc[r % A] = fma(s[r], x[r], acc[r % A]);
        r += 1;
    }
    (acc[0] + acc[1]) + (acc[2] + acc[3])
}

/// Sum over the 4 lanes of a column (lanes `l`, `l ^ 8`, `l ^ 16`, `l ^ 24`); all four get the
/// same bits (each add is commutative).
#[inline(always)]
fn column_sum(v: f32) -> f32 {
    let v = v + shfl_xor_f32(v, 8);
    v + shfl_xor_f32(v, 16)
}

/// `δ = β (v − α·d)` of one column from `d = sᵀk` (`column_sum` of `lane_dot`) — shared by
/// [`delta_step`] and [`readout_from_parent`], so both get the same `δ` from the same state.
#[inline(always)]
fn delta_of(d: f32, alpha: f32, beta: f32, v: f32) -> f32 {
    beta * (v - alpha * d)
}

/// `s ← α s + k δ` on this lane's rows (`α s` rounded, then the fma).
#[inline(always)]
fn apply_update<const RPL: usize>(s: &mut [f32; RPL], k: &[f32; RPL], alpha: f32, delta: f32) {
    for r in 0..RPL {
        s[r] = fma(k[r], delta, s[r] * alpha);
    }
}

/// One delta-rule update of one value column, on this lane's `RPL` key rows `s` (the column's
/// other rows live in the lanes xor 8, 16, 24), with the rows `k` of the key:
/// `u = α·(sᵀk);  δ = β (v − u);  s ← α s + k δ`. The one definition of the per-token update:
/// the forward's replay and the commit both call it (the replay's output kinds through
/// [`delta_of`] and [`apply_update`], the same operations), so a committed state is bitwise the
/// state the forward computed (and the state AR reaches).
#[inline(always)]
pub fn delta_step<const RPL: usize>(s: &mut [f32; RPL], k: &[f32; RPL], alpha: f32, beta: f32, v: f32) {
    let delta = delta_of(column_sum(lane_dot(s, k)), alpha, beta, v);
    apply_update(s, k, alpha, delta);
}

/// A node's output `o = S_nodeᵀq` of one column from its parent's state `s` (this lane's rows),
/// without changing `s`: with `S_node = α s + k δ`, `S_nodeᵀq = α·(sᵀq) + δ·(kᵀq)`, computed as
/// `fma(δ, kq, α·(sᵀq))` with `δ` from `sᵀk` ([`delta_of`]) — both dot products of the same `s`,
/// independent of each other; `kq = kᵀq` of the node (the same for every column). Returns
/// `(o, δ)`; the node's own state, where needed, is [`apply_update`] with this `δ` — bitwise
/// [`delta_step`]'s.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn readout_from_parent<const RPL: usize>(
    s: &[f32; RPL],
    k: &[f32; RPL],
    q: &[f32; RPL],
    alpha: f32,
    beta: f32,
    v: f32,
    kq: f32,
) -> (f32, f32) {
    let (dk, dq) = (lane_dot(s, k), lane_dot(s, q));
    let (dk, dq) = (column_sum(dk), column_sum(dq));
    let delta = delta_of(dk, alpha, beta, v);
    (fma(delta, kq, alpha * dq), delta)
}

/// This lane's `RPL` consecutive rows of a staged k or q vector in shared memory, as
/// `RPL / 4` 16-byte loads (`p` is 16-byte aligned: row offsets are multiples of 4). The 8 lanes
/// of a quarter warp read the same rows (one broadcast wavefront per load); scalar loads hit
/// the same bank from the 4 row slices of a warp (a 4-way conflict per row).
#[inline(always)]
unsafe fn load_rows<const RPL: usize>(p: *const f32) -> [f32; RPL] {
    let mut x = [0.0f32; RPL];
    let a = smem_addr(p);
    let mut c = 0;
    while c < RPL / 4 {
        let v = ld_shared_v4(a + 16 * c as u32);
        x[4 * c] = f32::from_bits(v[0]);
        x[4 * c + 1] = f32::from_bits(v[1]);
        x[4 * c + 2] = f32::from_bits(v[2]);
        x[4 * c + 3] = f32::from_bits(v[3]);
        c += 1;
    }
    x
}

/// Thread `t`'s slice of a state slot: row `r` at `slot + r·THREADS + t` (conflict-free).
#[inline(always)]
unsafe fn slot_store<const RPL: usize>(slot: *mut f32, t: usize, s: &[f32; RPL]) {
    for (r, e) in s.iter().enumerate() {
        *slot.add(r * THREADS + t) = *e;
    }
}

#[inline(always)]
unsafe fn slot_load<const RPL: usize>(slot: *const f32, t: usize, s: &mut [f32; RPL]) {
    for (r, e) in s.iter_mut().enumerate() {
        *e = *slot.add(r * THREADS + t);
    }
}

/// Per-node conv + SiLU + norms, α and β. Grid `(n, 2·n_k + n_v)`, 128 threads: block `(i, g)`
/// does node `i`'s q head `g` (`g < n_k`), k head `g − n_k` (`g < 2·n_k`) or v head
/// `g − 2·n_k` (whose thread 0 also computes α, β). Thread `t` owns channels `t, t + 128, …` of
/// the head. Window tap `t < K−1` of node `i` is the raw input `K−1−t` steps back along
/// `i`'s ancestors, then the committed window rows (newest last). q/k: `x / √(Σx² + 1e-6)`
/// (sum: per-thread fma chain, butterfly, warps in order), q also `· 1/√d_k`. `a`, `b`: node
/// `i`'s row at `i·p.a_stride`, `i·p.b_stride` (`n_v` values each), of `mixed` at
/// `i·p.mixed_stride` (`conv_ch` values).
/// Traffic: `n·conv_ch·(K + 1)·4` bytes read (mostly L2), `n·(conv_ch + 2·n_v)·4` written.
/// Registers capped at 48 (`minctasm=10`, no spills; 90 uncapped): the 27B's 80 blocks per node
/// are short and latency-bound, so what counts is how many are resident — 10 per SM instead of
/// 5, a 22-node forward's 1,760 blocks in two waves instead of three.
#[no_mangle]
#[link_section = "nvvm:maxntid=128;minctasm=10"]
pub unsafe extern "ptx-kernel" fn gdn_prep(
    nb: *const NodeBatch,
    mixed: *const f32,
    conv_state: *const f32,
    conv_w: *const f32,
    a: *const f32,
    b: *const f32,
    ssm_a: *const f32,
    dt_bias: *const f32,
    scratch: *mut f32,
    p: GdnParams,
) {
    launch_dependents();
    // Everything up to the wait reads data no kernel of the forward writes (the node batch,
    // uploaded before the forward; the conv weights; the committed conv window, written only
    // by the commit): it overlaps the previous kernel's tail in a chained launch.
    let i = block_x() as usize;
    if i >= node_count(nb) {
        return;
    }
    let (n_k, n_v, d_k, d_v) = (p.n_k as usize, p.n_v as usize, p.d_k as usize, p.d_v as usize);
    let (kk, ch, ms) = (p.conv_kernel as usize, p.conv_ch as usize, p.mixed_stride as usize);
    let sc = gdn_scratch(n_k, n_v, d_k, d_v);
    let g = block_y() as usize;
    // (first channel, channels, destination, kind: 0 = q, 1 = k, 2 = v)
    let (base, d, dst, kind) = if g < n_k {
        (g * d_k, d_k, scratch.add(sc.q + i * n_k * d_k + g * d_k), 0)
    } else if g < 2 * n_k {
        (g * d_k, d_k, scratch.add(sc.k + i * n_k * d_k + (g - n_k) * d_k), 1)
    } else {
        let jv = g - 2 * n_k;
        (2 * n_k * d_k + jv * d_v, d_v, scratch.add(sc.v + i * n_v * d_v + jv * d_v), 2)
    };
    // In-batch ancestors, nearest first (6 bits each), at most K − 1 of them.
    let mut up: u64 = 0;
    let mut m = 0usize;
    let mut x = parent_of(nb, i);
    while m + 1 < kk && x >= 0 && (x as usize) < MAX_NODES as usize {
        up |= (x as u64) << (6 * m);
        x = parent_of(nb, x as usize);
        m += 1;
    }
    let t = thread_x() as usize;
    // The first channel's taps and committed-window inputs (kernels of up to `PRE` taps).
    const PRE: usize = 4;
    let (mut w0, mut x0) = ([0.0f32; PRE], [0.0f32; PRE]);
    if t < d && kk <= PRE {
        let chn = base + t;
        unroll_below(PRE, |tap| {
            if tap < kk {
                w0[tap] = *conv_w.add(chn * kk + tap);
                let back = kk - 1 - tap;
                if back > m {
                    x0[tap] = *conv_state.add((kk - 1 - (back - m)) * ch + chn);
                }
            }
        });
    }
    grid_dependency_wait();
    let mut ss = 0.0f32;
    // The first channel's output, kept for the normalization below (no reload).
    let mut y0 = 0.0f32;
    let mut c = t;
    while c < d {
        let chn = base + c;
        let taps = conv_w.add(chn * kk);
        // Tap `tap`'s input: in-batch ancestor `back` steps up, else the committed window.
        let input = |tap: usize| {
            let back = kk - 1 - tap;
            if back <= m {
                let node = ((up >> (6 * (back - 1))) & 63) as usize;
                *mixed.add(node * ms + chn)
            } else {
                *conv_state.add((kk - 1 - (back - m)) * ch + chn)
            }
        };
        let mut acc;
        if c == t && kk <= PRE {
            // The preloaded first channel (constant indices: the arrays stay in registers).
            let mut w_last = 0.0f32;
            unroll_below(PRE, |u| {
                if u + 1 == kk {
                    w_last = w0[u];
                }
            });
            acc = w_last * *mixed.add(i * ms + chn);
            unroll_below(PRE, |tap| {
                if tap + 1 < kk {
                    let back = kk - 1 - tap;
                    let xv = if back <= m { input(tap) } else { x0[tap] };
                    acc = fma(w0[tap], xv, acc);
                }
            });
        } else {
            acc = *taps.add(kk - 1) * *mixed.add(i * ms + chn);
            for tap in 0..kk - 1 {
                acc = fma(*taps.add(tap), input(tap), acc);
            }
        }
        let y = silu(acc);
        *dst.add(c) = y;
        if c == t {
            y0 = y;
        }
        ss = fma(y, y, ss);
        c += GDN_PREP_THREADS as usize;
    }
    if kind < 2 {
        let parts = PREP_PARTIALS.as_mut_ptr() as *mut f32;
        let w = warp_sum_f32(ss);
        if lane_id() == 0 {
            *parts.add(warp_id() as usize) = w;
        }
        sync_threads();
        let mut total = 0.0f32;
        for wi in 0..(GDN_PREP_THREADS / 32) as usize {
            total += *parts.add(wi);
        }
        let inv = div_rn(1.0, sqrt_rn(total + 1e-6));
        let scale = if kind == 0 { div_rn(1.0, sqrt_rn(d_k as f32)) } else { 1.0 };
        let mut c = t;
        while c < d {
            let y = if c == t { y0 } else { *dst.add(c) } * inv;
            *dst.add(c) = if kind == 0 { y * scale } else { y };
            c += GDN_PREP_THREADS as usize;
        }
    } else if t == 0 {
        store_alpha_beta(a, b, ssm_a, dt_bias, scratch, &p, i, g - 2 * n_k);
    }
}

/// Node `i`'s `α = exp(A·softplus(a + dt_bias))` and `β = sigmoid(b)` of value head `jv` into the
/// scratch (`gdn_prep`, `gdn_prep_pairs`). Every input is loaded before either store: a store to
/// the scratch could alias `b` for the compiler, which would otherwise load it one round trip later.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn store_alpha_beta(
    a: *const f32,
    b: *const f32,
    ssm_a: *const f32,
    dt_bias: *const f32,
    scratch: *mut f32,
    p: &GdnParams,
    i: usize,
    jv: usize,
) {
    let sc = gdn_scratch(p.n_k as usize, p.n_v as usize, p.d_k as usize, p.d_v as usize);
    let n_v = p.n_v as usize;
    let (av, bv) = (*a.add(i * p.a_stride as usize + jv), *b.add(i * p.b_stride as usize + jv));
    let (bias, ssm) = (*dt_bias.add(jv), *ssm_a.add(jv));
    let u = av + bias;
    // softplus(u) = ln(1 + e^u), u past 20 as is (PyTorch's threshold).
    let sp = if u > 20.0 { u } else { lg2(1.0 + exp_fast(u)) * core::f32::consts::LN_2 };
    let gl = ssm * sp;
    *scratch.add(sc.alpha + i * n_v + jv) = ex2(gl * core::f32::consts::LOG2_E);
    *scratch.add(sc.beta + i * n_v + jv) = rcp_approx(1.0 + exp_fast(-bv));
}

/// [`gdn_prep`] for two nodes per block: grid `(⌈n / 2⌉, 2·n_k + n_v)`, 128 threads; block
/// `(b, g)` does nodes `2b` and `2b + 1` (when present) of head group `g`, thread `t` channels
/// `t, t + 128, …` of both, and the first threads of a v-head block α and β (one node each). Both
/// nodes' inputs are loaded before either's arithmetic, which is exactly `gdn_prep`'s (the same
/// operations in the same order, so the same bits); the committed-window inputs are loaded after
/// the wait (preloading both nodes' would spill at 64 registers). Why: the blocks are short and
/// latency-bound, so what counts is how many are resident — `gdn_prep` keeps 10 per SM, one wave
/// up to 16 nodes of the 27B (80 blocks per node), two waves at 22; this kernel 8 per SM (≤ 64
/// registers, `minctasm=8`; 56 spill), one wave of 960 blocks at 23 nodes. The host takes it past
/// one `gdn_prep` wave.
#[no_mangle]
#[link_section = "nvvm:maxntid=128;minctasm=8"]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "ptx-kernel" fn gdn_prep_pairs(
    nb: *const NodeBatch,
    mixed: *const f32,
    conv_state: *const f32,
    conv_w: *const f32,
    a: *const f32,
    b: *const f32,
    ssm_a: *const f32,
    dt_bias: *const f32,
    scratch: *mut f32,
    p: GdnParams,
) {
    launch_dependents();
    // Everything up to the wait reads data no kernel of the forward writes (the node batch,
    // uploaded before the forward; the conv weights; the committed conv window, written only
    // by the commit): it overlaps the previous kernel's tail in a chained launch.
    const NB: usize = GDN_PREP_NODES_PER_BLOCK as usize;
    let n = node_count(nb);
    let i0 = NB * block_x() as usize;
    if i0 >= n {
        return;
    }
    // Nodes of this block: `i0 + e` for `e < nodes` (block-uniform).
    let nodes = (n - i0).min(NB);
    let (n_k, n_v, d_k, d_v) = (p.n_k as usize, p.n_v as usize, p.d_k as usize, p.d_v as usize);
    let (kk, ch, ms) = (p.conv_kernel as usize, p.conv_ch as usize, p.mixed_stride as usize);
    let sc = gdn_scratch(n_k, n_v, d_k, d_v);
    let g = block_y() as usize;
    // (first channel, channels, destination of node `i0`, node stride, kind: 0 = q, 1 = k, 2 = v)
    let (base, d, dst0, dst_step, kind) = if g < n_k {
        (g * d_k, d_k, scratch.add(sc.q + i0 * n_k * d_k + g * d_k), n_k * d_k, 0)
    } else if g < 2 * n_k {
        (g * d_k, d_k, scratch.add(sc.k + i0 * n_k * d_k + (g - n_k) * d_k), n_k * d_k, 1)
    } else {
        let jv = g - 2 * n_k;
        (2 * n_k * d_k + jv * d_v, d_v, scratch.add(sc.v + i0 * n_v * d_v + jv * d_v), n_v * d_v, 2)
    };
    // Per node: in-batch ancestors, nearest first (6 bits each), at most K − 1 of them.
    let mut up = [0u64; NB];
    let mut m = [0usize; NB];
    unroll_below(NB, |e| {
        if e < nodes {
            let mut x = parent_of(nb, i0 + e);
            while m[e] + 1 < kk && x >= 0 && (x as usize) < MAX_NODES as usize {
                up[e] |= (x as u64) << (6 * m[e]);
                x = parent_of(nb, x as usize);
                m[e] += 1;
            }
        }
    });
    let t = thread_x() as usize;
    // The first channel's taps, shared by the nodes (kernels of up to `PRE` taps).
    const PRE: usize = 4;
    let mut w0 = [0.0f32; PRE];
    if t < d && kk <= PRE {
        let chn = base + t;
        unroll_below(PRE, |tap| {
            if tap < kk {
                w0[tap] = *conv_w.add(chn * kk + tap);
            }
        });
    }
    grid_dependency_wait();
    let mut ss = [0.0f32; NB];
    // Each node's first-channel output, kept for the normalization below (no reload).
    let mut y0 = [0.0f32; NB];
    // Tap `tap`'s input of node `e` (`back = K − 1 − tap ≥ 1` steps back): its in-batch
    // ancestor `back` steps up, else the committed window.
    let tap_input = |e: usize, back: usize, chn: usize| {
        if back <= m[e] {
            let node = ((up[e] >> (6 * (back - 1))) & 63) as usize;
            *mixed.add(node * ms + chn)
        } else {
            *conv_state.add((kk - 1 - (back - m[e])) * ch + chn)
        }
    };
    let mut c = t;
    while c < d {
        let chn = base + c;
        if c == t && kk <= PRE {
            // The preloaded first channel (constant indices: the arrays stay in registers): every
            // node's inputs are loaded first, then each node's sum in the one-node order.
            let mut w_last = 0.0f32;
            unroll_below(PRE, |u| {
                if u + 1 == kk {
                    w_last = w0[u];
                }
            });
            let mut xin = [[0.0f32; PRE]; NB];
            let mut own = [0.0f32; NB];
            unroll_below(NB, |e| {
                if e < nodes {
                    own[e] = *mixed.add((i0 + e) * ms + chn);
                    unroll_below(PRE, |tap| {
                        if tap + 1 < kk {
                            xin[e][tap] = tap_input(e, kk - 1 - tap, chn);
                        }
                    });
                }
            });
            unroll_below(NB, |e| {
                if e < nodes {
                    let mut acc = w_last * own[e];
                    unroll_below(PRE, |tap| {
                        if tap + 1 < kk {
                            acc = fma(w0[tap], xin[e][tap], acc);
                        }
                    });
                    let y = silu(acc);
                    *dst0.add(e * dst_step + c) = y;
                    y0[e] = y;
                    ss[e] = fma(y, y, ss[e]);
                }
            });
        } else {
            let taps = conv_w.add(chn * kk);
            unroll_below(NB, |e| {
                if e < nodes {
                    let mut acc = *taps.add(kk - 1) * *mixed.add((i0 + e) * ms + chn);
                    for tap in 0..kk - 1 {
                        acc = fma(*taps.add(tap), tap_input(e, kk - 1 - tap, chn), acc);
                    }
                    let y = silu(acc);
                    *dst0.add(e * dst_step + c) = y;
                    ss[e] = fma(y, y, ss[e]);
                }
            });
        }
        c += GDN_PREP_THREADS as usize;
    }
    if kind < 2 {
        // Node `e`'s warp sums at `parts[16·e + warp]`; one barrier for both.
        let parts = PREP_PARTIALS.as_mut_ptr() as *mut f32;
        unroll_below(NB, |e| {
            let w = warp_sum_f32(ss[e]);
            if lane_id() == 0 {
                *parts.add(16 * e + warp_id() as usize) = w;
            }
        });
        sync_threads();
        let scale = if kind == 0 { div_rn(1.0, sqrt_rn(d_k as f32)) } else { 1.0 };
        unroll_below(NB, |e| {
            if e < nodes {
                let mut total = 0.0f32;
                for wi in 0..(GDN_PREP_THREADS / 32) as usize {
                    total += *parts.add(16 * e + wi);
                }
                let inv = div_rn(1.0, sqrt_rn(total + 1e-6));
                let dst = dst0.add(e * dst_step);
                let mut c = t;
                while c < d {
                    let y = if c == t && kk <= PRE { y0[e] } else { *dst.add(c) } * inv;
                    *dst.add(c) = if kind == 0 { y * scale } else { y };
                    c += GDN_PREP_THREADS as usize;
                }
            }
        });
    } else if t < nodes {
        store_alpha_beta(a, b, ssm_a, dt_bias, scratch, &p, i0 + t, g - 2 * n_k);
    }
}

/// Thread `t`'s share (of `threads`) of staging the block's value columns `col0 .. col0 + 16`
/// of `rows` nodes into `sv [rows][16]`: row `i` from node `node(i)` of the value head at `v_head` (node stride
/// `vd`). Where the group lies within `d_v`, by `cp.async` (16 bytes, every copy in flight; the
/// caller commits and waits; offsets are multiples of 4 floats by `gdn_scratch`); past `d_v`,
/// element by element with zeros. Shared by [`recur`] (node `i` is row `i`) and [`commit`] (the
/// path's nodes).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn stage_v_columns(
    sv: *mut f32,
    v_head: *const f32,
    rows: usize,
    node: impl Fn(usize) -> usize,
    vd: usize,
    col0: usize,
    dv: usize,
    t: usize,
    threads: usize,
) {
    if col0 + COLS <= dv {
        let mut e = t;
        while e < rows * (COLS / 4) {
            let (i, c) = (e / (COLS / 4), 4 * (e % (COLS / 4)));
            let src = v_head.add(node(i) * vd + col0 + c);
            cp_async_16(smem_addr(sv.add(i * COLS + c)), src as *const u8);
            e += threads;
        }
    } else {
        let mut e = t;
        while e < rows * COLS {
            let (i, c) = (e / COLS, col0 + e % COLS);
            *sv.add(e) = if c < dv { *v_head.add(node(i) * vd + c) } else { 0.0 };
            e += threads;
        }
    }
}

/// The tree replay for key head dim `DK` (`RPL = DK / 4` rows per lane). Grid
/// `(n_v, ⌈d_v / 16⌉)`, `64 · P` threads for `P` programs (`kernel_abi::gdn_programs_for`; at
/// least 64 threads: α and β are staged one node per thread, `n ≤ MAX_NODES ≤ 64`),
/// `gdn_recur_smem_words(DK, p.smem_nodes, P)·4` bytes of dynamic shared memory (arrays of
/// `p.smem_nodes` rows, the launch's node count; nodes past it are not computed). Block
/// `(j, y)` owns value columns `16y .. 16y + 16` of head `j`; in each program lane `l` of its
/// warp `w` (0 or 1) column `16y + 8w + l mod 8`, key rows `(l / 8)·RPL ..`. The block stages the
/// nodes' k, q (key head `j mod n_k`), v, α, β and the forward's replay schedule
/// (`kernel_abi::GdnReplay`, the same for every block) in shared memory and computes every
/// node's `kᵀq` there; each program loads its slice of the committed state into the registers
/// (`n_v·d_k·d_v·4` bytes per launch from DRAM: the only DRAM-sized traffic; a second program's
/// copy comes from L2) and runs its part of the schedule: load or save the registers from or to
/// a slot (each program's root copy and saved branch points), apply a node's update
/// (`delta_step`), and for each node it owns once its `o_i` from the registers' (its parent's)
/// state ([`readout_from_parent`], written to scratch), then its update unless it is a leaf.
/// The programs' schedules split the tree into subtrees (each node's output written by one
/// program, its ancestors' states recomputed by every program that needs them), so a block's
/// serial chain is its longest program's. The committed state is only read.
#[inline(always)]
unsafe fn recur<const DK: usize, const RPL: usize>(
    nb: *const NodeBatch,
    replay: *const GdnReplay,
    state: *const f32,
    scratch: *mut f32,
    p: GdnParams,
) {
    launch_dependents();
    // Shared arrays hold `m = smem_nodes` rows (the launch's node count).
    let m = (p.smem_nodes as usize).min(MAX_NODES as usize);
    let (n_k, n_v, dv) = (p.n_k as usize, p.n_v as usize, p.d_v as usize);
    let (kd, vd) = (n_k * DK, n_v * dv);
    let sc = gdn_scratch(n_k, n_v, DK, dv);
    let j = block_x() as usize;
    let kh = j % n_k;
    let col0 = block_y() as usize * COLS;
    let t = thread_x() as usize;
    let threads = block_dim_x() as usize;
    let programs = (threads / THREADS).min(GDN_MAX_PROGRAMS as usize);
    let (prog, tp) = (t / THREADS, t % THREADS);
    let lane = lane_id() as usize;
    let cw = (tp / 32) * 8 + lane % 8;
    let col = col0 + cw;
    let r0 = (lane / 8) * RPL;
    // The committed state is written only by the commit, never inside a forward, and every
    // forward starts behind the upload of its node batch and schedule, which the stream orders
    // after all earlier kernels (the commit included). So the state and the schedule are loaded
    // before the wait on the previous kernel: in a chained launch they overlap that kernel's tail.
    let mut s = [0.0f32; RPL];
    if col < dv && prog < programs {
        let src = state.add(j * DK * dv + r0 * dv + col);
        for (r, x) in s.iter_mut().enumerate() {
            *x = *src.add(r * dv);
        }
    }
    let n = node_count(nb).min(m);
    let sk = dynamic_smem() as *mut f32;
    let sq = sk.add(m * DK);
    let sv = sq.add(m * DK);
    let sa = sv.add(m * COLS);
    let sb = sa.add(m);
    let skq = sb.add(m);
    let sops = skq.add(m) as *mut u32;
    let max_ops = gdn_replay_max_ops(m as u32, programs as u32) as usize;
    let slots = sops.add(max_ops.div_ceil(2)) as *mut f32;
    let slot_count = gdn_slot_count(m as u32, programs as u32) as usize;
    let len = ((*replay).len as usize).min(max_ops);
    let (op0, op1) = if prog < programs {
        let st = (*replay).start.as_ptr();
        ((*st.add(prog) as usize).min(len), (*st.add(prog + 1) as usize).min(len))
    } else {
        (0, 0)
    };
    let ops = (*replay).ops.as_ptr() as *const u32;
    let mut w = t;
    while w < len.div_ceil(2) {
        *sops.add(w) = *ops.add(w);
        w += threads;
    }
    grid_dependency_wait();
    // k and q rows of the key head (`DK` floats each, node `i` at `i·kd`) and the block's 16
    // columns of v, copied by `cp.async` (16 bytes, all of a thread's copies in flight at once:
    // no round trip through registers per element); α and β are strided (one load per node).
    // Every offset is a multiple of 4 floats (`gdn_scratch`) and the host checks that the scratch
    // starts 16-byte aligned; a column group that passes `d_v` takes the element loop.
    let chunks = DK / 4;
    let mut e = t;
    while e < n * chunks {
        let (i, c) = (e / chunks, 4 * (e % chunks));
        let src = scratch.add(i * kd + kh * DK + c);
        cp_async_16(smem_addr(sk.add(i * DK + c)), src.add(sc.k) as *const u8);
        cp_async_16(smem_addr(sq.add(i * DK + c)), src.add(sc.q) as *const u8);
        e += threads;
    }
    stage_v_columns(sv, scratch.add(sc.v + j * dv), n, |i| i, vd, col0, dv, t, threads);
    cp_async_commit();
    if t < n {
        *sa.add(t) = *scratch.add(sc.alpha + t * n_v + j);
        *sb.add(t) = *scratch.add(sc.beta + t * n_v + j);
    }
    cp_async_wait_all();
    sync_threads();
    if t < THREADS {
        stage_kq::<DK>(sk, sq, skq, n, t);
    }
    sync_threads();

    if col >= dv || op0 >= op1 {
        return; // d_v is a multiple of 8: whole warps leave, after the block's last barrier
    }
    // The program's slots: its root copy (saved by its schedule's first operation if it reloads
    // the committed state) and its saved branch points; indices are the block's.
    let slot = |k: usize| slots.add(k.min(slot_count.max(1) - 1) * RPL * THREADS);
    let sops = sops as *const u16;
    let out = scratch.add(sc.o + j * dv + col);
    let mut next = *sops.add(op0);
    let mut i = op0;
    while i < op1 {
        let op = next;
        if i + 1 < op1 {
            next = *sops.add(i + 1);
        }
        let x = (op & 63) as usize;
        let kind = op & GDN_OP_KIND;
        if kind == GDN_OP_LOAD {
            slot_load(slot(x), tp, &mut s);
        } else if kind == GDN_OP_SAVE {
            slot_store(slot(x), tp, &s);
        } else if x < n {
            let k = load_rows::<RPL>(sk.add(x * DK + r0));
            let (alpha, beta, v) = (*sa.add(x), *sb.add(x), *sv.add(x * COLS + cw));
            if kind == GDN_OP_STEP {
                delta_step(&mut s, &k, alpha, beta, v);
            } else {
                let q = load_rows::<RPL>(sq.add(x * DK + r0));
                let (o, delta) = readout_from_parent(&s, &k, &q, alpha, beta, v, *skq.add(x));
                if kind != GDN_OP_LEAF {
                    apply_update(&mut s, &k, alpha, delta);
                }
                if lane < 8 {
                    *out.add(x * vd) = o;
                }
            }
        }
        i += 1;
    }
}

/// `kq[i] = k_iᵀq_i` of the block's `n` staged nodes (`sk`, `sq`: `[n][DK]`) into `skq`, by the
/// block's 64 threads: quarter warp `g` of warp `w` takes node `8·it + 4·w + g`, its lane `j`
/// the 4-row groups `j, j + 8, …` (16-byte loads, an fma chain in row order), then the butterfly
/// over the quarter (xor 1, 2, 4) — a fixed order whatever `n`. Every thread calls it.
#[inline(always)]
unsafe fn stage_kq<const DK: usize>(sk: *const f32, sq: *const f32, skq: *mut f32, n: usize, t: usize) {
    let (lane, w) = (t % 32, t / 32);
    let (g, j) = (lane / 8, lane % 8);
    let mut base = 0;
    while base < n {
        let node = base + 4 * w + g;
        let mut acc = 0.0f32;
        if node < n {
            let (ka, qa) = (smem_addr(sk.add(node * DK)), smem_addr(sq.add(node * DK)));
            let mut c = j;
            while c < DK / 4 {
                let (kv, qv) = (ld_shared_v4(ka + 16 * c as u32), ld_shared_v4(qa + 16 * c as u32));
                for e in 0..4 {
                    acc = fma(f32::from_bits(kv[e]), f32::from_bits(qv[e]), acc);
                }
                c += 8;
            }
        }
        acc += shfl_xor_f32(acc, 1);
        acc += shfl_xor_f32(acc, 2);
        acc += shfl_xor_f32(acc, 4);
        if j == 0 && node < n {
            *skq.add(node) = acc;
        }
        base += 8;
    }
}

/// Per (node, value head) gated RMSNorm: `out = o / √(mean(o²) + eps) · norm_w ⊙ silu(z)`.
/// Grid `(n, ⌈n_v / 8⌉)`, 256 threads, one warp per head (lane `l` owns `c = l, l + 32, …`;
/// fma chain then butterfly); node `i`'s `z` row at `i·p.z_stride`, `out` dense `[n][n_v·d_v]`.
/// Traffic: `n·n_v·d_v·12` bytes.
#[no_mangle]
#[link_section = "nvvm:maxntid=256;minctasm=1"]
pub unsafe extern "ptx-kernel" fn gdn_gated_norm(
    nb: *const NodeBatch,
    scratch: *const f32,
    z: *const f32,
    norm_w: *const f32,
    out: *mut f32,
    p: GdnParams,
) {
    launch_dependents();
    grid_dependency_wait();
    let i = block_x() as usize;
    let j = block_y() as usize * 8 + warp_id() as usize;
    let (n_v, dv) = (p.n_v as usize, p.d_v as usize);
    if i >= node_count(nb) || j >= n_v {
        return;
    }
    let sc = gdn_scratch(p.n_k as usize, n_v, p.d_k as usize, dv);
    let row = i * n_v * dv + j * dv;
    let o = scratch.add(sc.o + row);
    let z = z.add(i * p.z_stride as usize + j * dv);
    let lane = lane_id() as usize;
    let mut ss = 0.0f32;
    let mut c = lane;
    while c < dv {
        let v = *o.add(c);
        ss = fma(v, v, ss);
        c += 32;
    }
    let inv = head_inv_rms(ss, &p);
    let mut c = lane;
    while c < dv {
        *out.add(row + c) = gated(*o.add(c), inv, *norm_w.add(c), silu(*z.add(c)));
        c += 32;
    }
}

/// `1/√(mean(o²) + eps)` of one value head from each lane's part `ss` of `Σ o²` (the lanes'
/// strided fma chains): butterfly over the warp, then correctly rounded divide and sqrt. Every
/// lane gets the same value. Shared by [`gdn_gated_norm`] and `gdn_norm_prep`, which must agree
/// bit for bit.
#[inline(always)]
pub(crate) fn head_inv_rms(ss: f32, p: &GdnParams) -> f32 {
    inv_rms_of_sum(warp_sum_f32(ss), p)
}

/// `1/√(sum / d_v + eps)` with correctly rounded divide and sqrt: the second half of
/// [`head_inv_rms`], given the head's whole `Σ o²`.
#[inline(always)]
pub(crate) fn inv_rms_of_sum(sum: f32, p: &GdnParams) -> f32 {
    div_rn(1.0, sqrt_rn(div_rn(sum, p.d_v as usize as f32) + p.eps))
}

/// One gated-norm output `((o · inv) · w) · silu(z)`, in this order (given `silu(z)`).
#[inline(always)]
pub(crate) fn gated(o: f32, inv: f32, w: f32, silu_z: f32) -> f32 {
    o * inv * w * silu_z
}

/// Commit of an accepted path over `p.layers` layers (contiguous arenas; layer `l`'s `mixed`
/// rows at `l·MAX_NODES·p.mixed_stride`, row stride `p.mixed_stride`). Grid
/// `(n_v·⌈d_v/16⌉, layers)`, 64 threads, `gdn_commit_smem_words(DK, p.smem_nodes)·4` bytes of
/// dynamic shared memory (arrays of `len` rows; a path longer than `p.smem_nodes` is cut
/// there). Block `(j·⌈d_v/16⌉ + y, l)`: columns `16y ..` of head `j` of layer `l` (the lane
/// layout of [`recur`]) advance through the path's updates in path order with [`delta_step`] and
/// are written back; the layer's blocks also shift the path's raw inputs into the conv window
/// (channel by channel, in place: row `r` takes row `r + len` of `old window ++ path inputs`,
/// all of a channel's values loaded before any is stored). Traffic: the state read and written
/// once (`2·layers·n_v·d_k·d_v·4` bytes), the windows and path rows.
///
/// Latency (a block's time is its chain of dependent loads, and the 27B's 48 layers are ≈ 23
/// waves of blocks): the state slice is requested first; the path's node indices go to shared
/// memory in one round trip; then the conv window's values, the k and v rows (`cp.async`, all of
/// a thread's copies in flight at once) and α, β are all requested before any is used — two L2
/// round trips before the first update (same updates in the same order: same bits).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn commit<const DK: usize, const RPL: usize>(
    path: *const CommitPath,
    mixed: *const f32,
    scratch: *const f32,
    state: *mut f32,
    conv_state: *mut f32,
    p: GdnParams,
) {
    launch_dependents();
    grid_dependency_wait();
    let (n_k, n_v, dv) = (p.n_k as usize, p.n_v as usize, p.d_v as usize);
    let (kk, ch) = (p.conv_kernel as usize, p.conv_ch as usize);
    let (kd, vd) = (n_k * DK, n_v * dv);
    let sc = gdn_scratch(n_k, n_v, DK, dv);
    let layer = block_y() as usize;
    let rows = MAX_NODES as usize;
    let scratch = scratch.add(layer * sc.len);
    let ms = p.mixed_stride as usize;
    let mixed = mixed.add(layer * rows * ms);
    let conv_state = conv_state.add(layer * (kk - 1) * ch);
    let state = state.add(layer * n_v * DK * dv);
    let t = thread_x() as usize;
    let (blocks, b) = (grid_dim_x() as usize, block_x() as usize);
    let groups = dv.div_ceil(COLS);
    let (j, col0) = (b / groups, (b % groups) * COLS);
    let kh = j % n_k;
    let lane = lane_id() as usize;
    let cw = warp_id() as usize * 8 + lane % 8;
    let col = col0 + cw;
    let r0 = (lane / 8) * RPL;
    // The state slice first: the only DRAM-sized load, in flight while the path is staged.
    let base = state.add(j * DK * dv + r0 * dv + col);
    let mut s = [0.0f32; RPL];
    if col < dv {
        for (r, x) in s.iter_mut().enumerate() {
            *x = *base.add(r * dv);
        }
    }
    // The path's node indices (clamped into the batch) into shared memory: one round trip.
    let snodes = COMMIT_NODES.as_mut_ptr() as *mut u32;
    let len = ((*path).len).min(p.smem_nodes).min(MAX_NODES) as usize;
    if t < rows {
        *snodes.add(t) = (*(*path).nodes.as_ptr().add(t)).min(MAX_NODES - 1);
    }
    sync_threads();
    if len == 0 {
        return;
    }
    let node_of = |i: usize| *snodes.add(i) as usize;

    // Conv window: every block of the layer takes a share of the channels. The first channel's
    // `K − 1` new rows (old rows `r + len`, or the path's inputs) are loaded here and stored
    // after the staging below is requested; any further channel of this thread (past the first
    // `blocks · THREADS`) is shifted at the end.
    let conv_at = |c: usize, r: usize| -> f32 {
        let s = r + len;
        if s < kk - 1 {
            *conv_state.add(s * ch + c)
        } else {
            *mixed.add(node_of(s - (kk - 1)) * ms + c)
        }
    };
    let c0 = b * THREADS + t;
    let batched = kk - 1 <= COMMIT_CONV_ROWS && c0 < ch;
    let mut win = [0.0f32; COMMIT_CONV_ROWS];
    if batched {
        unroll_below(COMMIT_CONV_ROWS, |r| {
            if r + 1 < kk {
                win[r] = conv_at(c0, r);
            }
        });
    }

    let m = len;
    let sk = dynamic_smem() as *mut f32;
    let sv = sk.add(m * DK);
    let sa = sv.add(m * COLS);
    let sb = sa.add(m);
    // k rows of the key head (`DK` floats of node `nodes[i]` at `i·DK`) and the block's 16
    // columns of v, by `cp.async` (16 bytes; every offset is a multiple of 4 floats:
    // `gdn_scratch`, and the scratch starts 16-byte aligned, as for `recur`); a column group past
    // `d_v` takes the element loop. α and β: one load per path entry.
    let chunks = DK / 4;
    let mut e = t;
    while e < len * chunks {
        let (i, c) = (e / chunks, 4 * (e % chunks));
        let src = scratch.add(sc.k + node_of(i) * kd + kh * DK + c);
        cp_async_16(smem_addr(sk.add(i * DK + c)), src as *const u8);
        e += THREADS;
    }
    stage_v_columns(sv, scratch.add(sc.v + j * dv), len, node_of, vd, col0, dv, t, THREADS);
    cp_async_commit();
    let (mut a, mut bt) = (0.0f32, 0.0f32);
    if t < len {
        let node = node_of(t);
        a = *scratch.add(sc.alpha + node * n_v + j);
        bt = *scratch.add(sc.beta + node * n_v + j);
    }
    if batched {
        unroll_below(COMMIT_CONV_ROWS, |r| {
            if r + 1 < kk {
                *conv_state.add(r * ch + c0) = win[r];
            }
        });
    }
    let mut c = if batched { c0 + blocks * THREADS } else { c0 };
    while c < ch {
        for r in 0..kk - 1 {
            let v = conv_at(c, r);
            *conv_state.add(r * ch + c) = v;
        }
        c += blocks * THREADS;
    }
    if t < len {
        *sa.add(t) = a;
        *sb.add(t) = bt;
    }
    cp_async_wait_all();
    sync_threads();
    if col >= dv {
        return;
    }
    for pi in 0..len {
        let k = load_rows::<RPL>(sk.add(pi * DK + r0));
        delta_step(&mut s, &k, *sa.add(pi), *sb.add(pi), *sv.add(pi * COLS + cw));
    }
    for (r, x) in s.iter().enumerate() {
        *base.add(r * dv) = *x;
    }
}

/// The path's node indices of a [`commit`] block (`MAX_NODES` entries).
#[link_section = ".shared"]
static COMMIT_NODES: Shared<[u32; MAX_NODES as usize]> = Shared::uninit();

/// Most conv-window rows (`K − 1`) a [`commit`] thread loads at once before storing them; a
/// longer conv kernel shifts its rows one at a time.
const COMMIT_CONV_ROWS: usize = 4;

macro_rules! gdn_kernels {
    ($recur:ident, $commit:ident, $dk:literal) => {
        #[no_mangle]
        #[link_section = "nvvm:maxntid=128;minctasm=1"]
        pub unsafe extern "ptx-kernel" fn $recur(
            nb: *const NodeBatch,
            replay: *const GdnReplay,
            state: *const f32,
            scratch: *mut f32,
            p: GdnParams,
        ) {
            recur::<$dk, { $dk / 4 }>(nb, replay, state, scratch, p)
        }

        #[no_mangle]
        #[link_section = "nvvm:maxntid=64;minctasm=1"]
        pub unsafe extern "ptx-kernel" fn $commit(
            path: *const CommitPath,
            mixed: *const f32,
            scratch: *const f32,
            state: *mut f32,
            conv_state: *mut f32,
            p: GdnParams,
        ) {
            commit::<$dk, { $dk / 4 }>(path, mixed, scratch, state, conv_state, p)
        }
    };
}

gdn_kernels!(gdn_recur_dk16, gdn_commit_dk16, 16);
gdn_kernels!(gdn_recur_dk32, gdn_commit_dk32, 32);
gdn_kernels!(gdn_recur_dk64, gdn_commit_dk64, 64);
gdn_kernels!(gdn_recur_dk128, gdn_commit_dk128, 128);
