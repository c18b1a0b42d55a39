//! `attention`: gated full attention of the qwen35 target over an F16 KV cache, for a batch of
//! tree nodes (`kernel_abi::NodeBatch` in device memory).
//!
//! * [`attn_prep`] — per node: per-head RMSNorm of q and k, partial NeoX RoPE at the node's
//!   position, the raw gate copied out, and K and V rounded to f16 into the node's cache row.
//! * [`attn_tree_split`] (f32) or [`mma`] (tensor cores, committed tiles shared by a block of
//!   nodes; head dims 64–256 without a window) + [`attn_tree_combine`] — flash-decoding over each
//!   node's visible keys (the committed rows, then its ancestors and itself), GQA, the sigmoid
//!   output gate.
//! * [`kv_commit`] — moves the accepted path's KV rows into place in every plane.
//!
//! Invariant (batch invariance): node `i`'s outputs are a function of its own inputs and of its
//! visible key/value sequence in logical order only. Keys are split and tiled by the node's key
//! count `keys_i = nc_i + |anc_i|` alone (`nc_i` committed rows: all `n_past`, or the last ones
//! a sliding window leaves) (`kernel_abi::attn_split_len`), and every reduction
//! order is fixed by that and the head dim; the cache row a logical key is read from (a
//! committed row or a scratch row of the tree) does not enter the arithmetic.

use kernel_abi::{
    attn_split_len_min, attn_splits_min, attn_window_lo, AttnPrepParams, AttnTreeParams, CommitPath, KvCommitParams,
    NodeBatch, ATTN_MAX_GROUP, ATTN_MAX_HEAD_DIM, ATTN_TILE_KEYS, MAX_NODES,
};

use crate::device::convert::{f16_to_f32, f32_to_f16};
use crate::device::griddep::{grid_dependency_wait, launch_dependents};
use crate::device::load::{ld_v4, U32x4};
use crate::device::math::{div_rn, ex2, exp_fast, fma, sqrt_rn};
use crate::device::shared::Shared;
use crate::device::sync::{sync_threads, sync_warp};
use crate::device::unroll::unroll_below;
use crate::device::warp::{shfl_xor_f32, warp_sum_f32};
use crate::device::*;

pub mod mma;

const WARPS: usize = 8;
const TILE: usize = ATTN_TILE_KEYS as usize;
const MAX_HD: usize = ATTN_MAX_HEAD_DIM as usize;
const MAX_G: usize = ATTN_MAX_GROUP as usize;
/// Head-dim elements per lane in `attn_prep` (one warp per head vector).
const PREP_PER_LANE: usize = MAX_HD / 32;

/// Butterfly max over the 32 lanes (exact, so order does not matter).
#[inline(always)]
fn warp_max_f32(mut v: f32) -> f32 {
    v = v.max(shfl_xor_f32(v, 16));
    v = v.max(shfl_xor_f32(v, 8));
    v = v.max(shfl_xor_f32(v, 4));
    v = v.max(shfl_xor_f32(v, 2));
    v = v.max(shfl_xor_f32(v, 1));
    v
}

/// Index mask of the per-node arrays (`MAX_NODES` is a power of two): keeps every index in bounds.
const NODE_MASK: usize = MAX_NODES as usize - 1;

/// Node `i`'s ancestor mask (itself included) restricted to the batch's `nb` valid nodes.
#[inline(always)]
unsafe fn batch_anc(batch: *const NodeBatch, i: u32, nb: u32) -> u64 {
    let valid = if nb >= 64 { u64::MAX } else { (1u64 << nb) - 1 };
    (*batch).anc[i as usize & NODE_MASK] & valid
}

/// Valid nodes of a batch: `min(grid nodes, NodeBatch::n, MAX_NODES)`.
#[inline(always)]
unsafe fn batch_nodes(b: *const NodeBatch, grid_n: u32) -> u32 {
    let n = (*b).n;
    let n = if n < grid_n { n } else { grid_n };
    if n < MAX_NODES {
        n
    } else {
        MAX_NODES
    }
}

/// Lane `lane`'s values `src[lane + 32j]` (`j < PREP_PER_LANE`, below `hd`) of one head vector,
/// every load issued before any value is used (a copy loop's load → store pairs would otherwise
/// be one L2 round trip each: eight at `hd = 256`).
#[inline(always)]
unsafe fn lane_values(src: *const f32, hd: usize, lane: usize) -> [f32; PREP_PER_LANE] {
    let mut vals = [0.0f32; PREP_PER_LANE];
    let mut j = 0;
    while j < PREP_PER_LANE {
        let c = lane + 32 * j;
        if c < hd {
            vals[j] = *src.add(c);
        }
        j += 1;
    }
    vals
}

#[link_section = ".shared"]
static PREP_BUF: Shared<[f32; WARPS * MAX_HD]> = Shared::uninit();

/// Per node `i` (`blockIdx.x`) and head vector `v = 8·blockIdx.y + warp` of the
/// `n_head + 2·n_head_kv` vectors of the node: query head `v`, key head `v − n_head`, or value head
/// `v − n_head − n_head_kv`.
///
/// Node `i`'s input rows start at `i·q_stride`, `i·k_stride`, `i·v_stride` of `qg`, `k`, `v`
/// (`AttnPrepParams`; dense rows, or column ranges of one merged `[q | k | v]` product);
/// below, `qg[i, c]` is value `c` of that row.
///
/// * q: `y = rmsnorm(qg[i, h·2hd .. +hd]) ⊙ q_norm`, then RoPE at `pos = n_past + depth[i]`:
///   for `j < n_rot/2`, `(y_j, y_{j+n_rot/2}) ← (y_j·c − y_{j+r}·s, y_{j+r}·c + y_j·s)` with
///   `(c, s) = rope[pos, j]`; → `q[i, h·hd ..]`. The gate `qg[i, h·2hd + hd ..]` → `gate[i, h·hd ..]`.
///   With `p.gated = 0` the input is plain `q [n, n_head·hd]` (`qg[i, h·hd ..]`) and no gate is
///   written (the DFlash draft's attention).
/// * k: the same with `k_norm` → f16 into `k_cache[n_past + i, kvh·hd ..]`.
/// * v: raw → f16 into `v_cache[n_past + i, kvh·hd ..]`.
///
/// The RMSNorm is `norm::rms_norm_heads`' arithmetic (lane `l` sums `x[c]²` for
/// `c = l, l+32, …` by fma, butterfly, `1/√(ss/hd + eps)` correctly rounded, `x·s·w`); RoPE is
/// `fma(y_j, c, −(y_p·s))`, `fma(y_p, c, y_j·s)`. Rows `n_past + i ≥ ctx` are not written; a node
/// with `pos ≥ max_pos` gets NaN queries. Traffic per node: reads `(2·n_head + 2·n_kv)·hd` f32,
/// writes `2·n_head·hd` f32 and `2·n_kv·hd` f16. Launch: grid `(n, ⌈(n_head + 2·n_kv)/8⌉)`,
/// 256 threads.
#[no_mangle]
#[link_section = "nvvm:maxntid=256;minctasm=1"]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "ptx-kernel" fn attn_prep(
    batch: *const NodeBatch,
    qg: *const f32,
    k: *const f32,
    v: *const f32,
    q_norm: *const f32,
    k_norm: *const f32,
    rope: *const f32,
    q_out: *mut f32,
    gate_out: *mut f32,
    k_cache: *mut u16,
    v_cache: *mut u16,
    p: AttnPrepParams,
) {
    launch_dependents();
    // Up to the wait only the node batch is read (uploaded before the forward; no kernel writes
    // it), so a chained launch does this under the previous kernel's tail.
    let i = block_x();
    if i >= batch_nodes(batch, p.n) {
        return;
    }
    let vec = block_y() * WARPS as u32 + warp_id();
    let (nh, nkv, hd) = (p.n_head, p.n_head_kv, p.head_dim as usize);
    if vec >= nh + 2 * nkv {
        return;
    }
    let lane = lane_id() as usize;
    let n_past = (*batch).n_past;
    let row = n_past as u64 + i as u64;
    let pos = n_past as u64 + (*batch).depth[i as usize & NODE_MASK] as u64;
    let kv_row_elems = nkv as usize * hd;
    let is_q = vec < nh;
    let is_k = !is_q && vec < nh + nkv;
    // Model data no kernel writes (the norm weights, the RoPE table at the node's position),
    // loaded before the wait: in a chained launch they arrive under the previous kernel's tail.
    let half = (p.n_rot / 2) as usize;
    let in_table = pos < p.max_pos as u64;
    let mut wv = [0.0f32; PREP_PER_LANE];
    let mut cs = [0.0f32; PREP_PER_LANE];
    let mut sn = [0.0f32; PREP_PER_LANE];
    if is_q || is_k {
        wv = lane_values(if is_q { q_norm } else { k_norm }, hd, lane);
        let table = rope.add(if in_table { pos as usize * half * 2 } else { 0 });
        let mut j = 0;
        while j < PREP_PER_LANE {
            let c = lane + 32 * j;
            if c < 2 * half {
                let pair = if c < half { c } else { c - half };
                cs[j] = *table.add(2 * pair);
                sn[j] = *table.add(2 * pair + 1);
            }
            j += 1;
        }
    }
    grid_dependency_wait();

    // Value heads: a rounded copy.
    if !is_q && !is_k {
        if row >= p.ctx as u64 {
            return;
        }
        let kvh = (vec - nh - nkv) as usize;
        let src = v.add(i as usize * p.v_stride as usize + kvh * hd);
        let dst = v_cache.add(row as usize * kv_row_elems + kvh * hd);
        let vals = lane_values(src, hd, lane);
        let mut j = 0;
        while j < PREP_PER_LANE {
            let c = lane + 32 * j;
            if c < hd {
                *dst.add(c) = f32_to_f16(vals[j]);
            }
            j += 1;
        }
        return;
    }

    let gated = p.gated != 0;
    // Values per head in the query input: `[q | gate]` (gated) or `q`.
    let q_head = if gated { 2 * hd } else { hd };
    let src = if is_q {
        qg.add(i as usize * p.q_stride as usize + vec as usize * q_head)
    } else {
        k.add(i as usize * p.k_stride as usize + (vec - nh) as usize * hd)
    };
    if !(is_q && gated) && row >= p.ctx as u64 {
        return;
    }
    // The head's values and (gated queries) its gate, all requested before any is used.
    let mut x = lane_values(src, hd, lane);
    if is_q && gated {
        let gv = lane_values(src.add(hd), hd, lane);
        let dst = gate_out.add(i as usize * nh as usize * hd + vec as usize * hd);
        let mut j = 0;
        while j < PREP_PER_LANE {
            let c = lane + 32 * j;
            if c < hd {
                *dst.add(c) = gv[j];
            }
            j += 1;
        }
    }

    // Per-head RMSNorm: lane `l` holds x[l + 32j].
    let mut acc = 0.0f32;
    let mut j = 0;
    while j < PREP_PER_LANE {
        if lane + 32 * j < hd {
            acc = fma(x[j], x[j], acc);
        }
        j += 1;
    }
    let s = div_rn(1.0, sqrt_rn(div_rn(warp_sum_f32(acc), hd as f32) + p.eps));
    let buf = (PREP_BUF.as_mut_ptr() as *mut f32).add(warp_id() as usize * MAX_HD);
    let mut j = 0;
    while j < PREP_PER_LANE {
        let c = lane + 32 * j;
        if c < hd {
            x[j] = x[j] * s * wv[j];
            *buf.add(c) = x[j];
        }
        j += 1;
    }
    sync_warp();

    // Partial NeoX RoPE over the first n_rot dims.
    let mut j = 0;
    while j < PREP_PER_LANE {
        let c = lane + 32 * j;
        if c < 2 * half {
            let partner = if c < half { c + half } else { c - half };
            let y = *buf.add(partner);
            x[j] = if c < half { fma(x[j], cs[j], -(y * sn[j])) } else { fma(x[j], cs[j], y * sn[j]) };
        }
        j += 1;
    }

    if is_q {
        let dst = q_out.add(i as usize * nh as usize * hd + vec as usize * hd);
        let mut j = 0;
        while j < PREP_PER_LANE {
            let c = lane + 32 * j;
            if c < hd {
                *dst.add(c) = if in_table { x[j] } else { f32::NAN };
            }
            j += 1;
        }
    } else if in_table {
        let dst = k_cache.add(row as usize * kv_row_elems + (vec - nh) as usize * hd);
        let mut j = 0;
        while j < PREP_PER_LANE {
            let c = lane + 32 * j;
            if c < hd {
                *dst.add(c) = f32_to_f16(x[j]);
            }
            j += 1;
        }
    }
}

#[link_section = ".shared"]
static ATT_Q: Shared<[f32; MAX_G * MAX_HD]> = Shared::uninit();
#[link_section = ".shared"]
static ATT_RED: Shared<[f32; WARPS * MAX_G * TILE]> = Shared::uninit();
#[link_section = ".shared"]
static ATT_P: Shared<[f32; MAX_G * TILE]> = Shared::uninit();
#[link_section = ".shared"]
static ATT_ALPHA: Shared<[f32; MAX_G]> = Shared::uninit();
#[link_section = ".shared"]
static ATT_ROWS: Shared<[u32; MAX_NODES as usize]> = Shared::uninit();

/// 8 f16 of a 16-byte vector → f32 (element `2k` is the low half of word `k`).
#[inline(always)]
fn unpack8(v: U32x4) -> [f32; 8] {
    let mut o = [0.0f32; 8];
    let mut k = 0;
    while k < 4 {
        o[2 * k] = f16_to_f32(v.0[k] as u16);
        o[2 * k + 1] = f16_to_f32((v.0[k] >> 16) as u16);
        k += 1;
    }
    o
}

/// Cache row of node-logical key `t` when the node sees the `nc` committed rows `lo .. lo + nc`:
/// committed row `lo + t`, or the ancestor scratch row.
#[inline(always)]
unsafe fn key_row(t: u32, nc: u32, lo: u32, rows: *const u32) -> u32 {
    if t < nc {
        lo + t
    } else {
        *rows.add((t - nc) as usize & NODE_MASK)
    }
}

/// `(lo, nc)`: node `i` sees committed rows `lo .. lo + nc` (`lo = 0`, `nc = n_past` without a
/// window; [`attn_window_lo`] with one).
#[inline(always)]
unsafe fn committed_keys(batch: *const NodeBatch, i: u32, n_past: u32, window: u32) -> (u32, u32) {
    let lo = attn_window_lo(n_past, (*batch).depth[i as usize & NODE_MASK], window);
    (lo, n_past - lo)
}

/// `attn_tree_split_g{G}`: one split of one node's attention for `G` query heads of one KV head.
/// The `n_head / n_kv = G·r` query heads of a KV head are spread over `r = p.head_groups`
/// blocks: block `y = blockIdx.y` serves KV head `y / r` and query heads `y·G .. (y+1)·G`. Node
/// `i = blockIdx.z`, split `s = blockIdx.x` of its `keys_i = nc + |anc_i|`
/// logical keys, where the node sees the committed rows `lo .. n_past` (`nc = n_past − lo`;
/// `lo = 0` without a sliding window, else `attn_window_lo(n_past, depth_i, window)`): key
/// `t < nc` is cache row `lo + t`; key `nc + d` is the scratch row `n_past + j` of the `d`-th set
/// bit `j` of `anc[i]`), keys `s·L .. min((s+1)·L, keys_i)` with
/// `L = attn_split_len(keys_i)`; blocks past `attn_splits(keys_i)` exit.
///
/// Per tile of 64 keys (scores in the base-2 domain, `σ = scale_log2`):
/// 1. scores: warp `w` takes head-dim chunks `w·cpw .. (w+1)·cpw` (8 dims each,
///    `cpw = ⌈hd/64⌉`), lane `l` keys `l` and `l + 32`; the 8 per-warp fma chains are added in
///    warp order and multiplied by `σ`;
/// 2. softmax (warp `h` for head `h`, its own max and sum): `m' = max(m, max_t s_t)`, `α = 2^(m − m')`,
///    `p_t = 2^(s_t − m')`, `l = l·α + Σp` (pairs, then butterfly);
/// 3. values: thread `(kg, c)` (`c` a chunk of 8 dims, `kg < KG = 2048/hd` a key group) keeps
///    `acc[h][8]` over keys `t ≡ kg (mod KG)`: `acc ← acc·α`, then `fma(p_t, v_t, acc)` in key order.
/// At the end the key groups are added in order and `(acc[hd], m, l)` written to the scratch.
///
/// Invariant (head-group invariance): every value a query head's output depends on — its score
/// chains, max, sum, rescales and accumulators — is computed for that head alone, in an order
/// fixed by the head dim and the node's split; no reduction runs across the block's heads. So a
/// head's bits are the same in `attn_tree_split_g{G}` at any `r`, and `r` may follow the launch's
/// size (node count, context) without breaking batch invariance.
///
/// Scratch (f32): partial accumulators `[n][n_head][slots][hd]`, then `(m, l)` pairs
/// `[n][n_head][slots][2]`. Traffic: each block reads its keys' K and V head rows once
/// (`2·hd·2` bytes per key: `r` blocks read the same rows, the later ones mostly from L2) and
/// writes `G·(hd + 2)` f32. Launch: grid `(slots, n_kv·r, n)`, 256
/// threads, static shared memory ≈ 26 KiB. Needs `hd ∈ {32, 64, 128, 256}`, `G ≤ 8`, 16-byte
/// aligned cache planes. If `n_past + NodeBatch::n > ctx` every output of the launch is NaN
/// (nothing outside the planes is read).
#[inline(always)]
unsafe fn tree_split<const G: usize>(
    batch: *const NodeBatch,
    q: *const f32,
    k_cache: *const u16,
    v_cache: *const u16,
    scratch: *mut f32,
    p: AttnTreeParams,
) {
    launch_dependents();
    grid_dependency_wait();
    let i = block_z();
    let nb = batch_nodes(batch, p.n);
    if i >= nb {
        return;
    }
    let n_past = (*batch).n_past;
    if n_past as u64 + nb as u64 > p.ctx as u64 {
        return; // the combine pass writes NaN
    }
    let anc = batch_anc(batch, i, nb);
    let (lo, nc) = committed_keys(batch, i, n_past, p.window);
    let keys = nc + anc.count_ones();
    let split_len = attn_split_len_min(keys, p.min_split_keys);
    let s = block_x();
    if s >= attn_splits_min(keys, p.min_split_keys) {
        return;
    }
    let start = s * split_len;
    let end = if start + split_len < keys { start + split_len } else { keys };

    let tid = thread_x() as usize;
    let lane = lane_id() as usize;
    let warp = warp_id() as usize;
    let hd = p.head_dim as usize;
    let hd_shift = p.head_dim.trailing_zeros();
    let g = G;
    let r = if p.head_groups == 0 { 1 } else { p.head_groups as usize };
    let kvh = block_y() as usize / r;
    if kvh >= p.n_head_kv as usize {
        return;
    }
    // First query head of the block: `kvh·(G·r) + (y mod r)·G`.
    let q0 = block_y() as usize * g;
    let row_elems = p.n_head_kv as usize * hd;

    let qs = ATT_Q.as_mut_ptr() as *mut f32;
    let red = ATT_RED.as_mut_ptr() as *mut f32;
    let ps = ATT_P.as_mut_ptr() as *mut f32;
    let alpha_s = ATT_ALPHA.as_mut_ptr() as *mut f32;
    let rows = ATT_ROWS.as_mut_ptr() as *mut u32;

    // Queries of the group, and the ancestor rows in depth order.
    let qn = q.add((i as usize * p.n_head as usize + q0) * hd);
    let mut e = tid;
    while e < g * hd {
        *qs.add((e >> hd_shift) * MAX_HD + (e & (hd - 1))) = *qn.add(e);
        e += ATTN_THREADS;
    }
    if tid == 0 {
        let (mut bits, mut d) = (anc, 0usize);
        while bits != 0 {
            let j = bits.trailing_zeros();
            *rows.add(d & NODE_MASK) = n_past + j;
            bits &= bits - 1;
            d += 1;
        }
    }
    sync_threads();

    // Score geometry: warp w owns chunks [w·cpw, min((w+1)·cpw, chunks)).
    let chunks = hd >> 3;
    let chunk_shift = hd_shift - 3;
    let (cpw, score_warps) = if chunks <= WARPS { (1, chunks) } else { (chunks >> 3, WARPS) };
    // Value geometry: thread (kg, c).
    let vc = tid & (chunks - 1);
    let kg = tid >> chunk_shift;
    let kgs = ATTN_THREADS >> chunk_shift;

    let mut acc = [[0.0f32; 8]; G];
    // Softmax state of head `warp` (kept by that warp).
    let mut m_run = f32::NEG_INFINITY;
    let mut l_run = 0.0f32;

    let mut t0 = start;
    while t0 < end {
        let valid = if end - t0 < TILE as u32 { (end - t0) as usize } else { TILE };

        // 1. Partial scores over this warp's dims for keys `lane` and `lane + 32`.
        if warp < score_warps {
            let mut kb = [[U32x4::default(); 4]; 2];
            let mut kk = 0;
            while kk < 2 {
                let t = lane + 32 * kk;
                if t < valid {
                    let r = key_row(t0 + t as u32, nc, lo, rows);
                    let base = k_cache.add(r as usize * row_elems + kvh * hd) as *const U32x4;
                    let mut j = 0;
                    while j < 4 {
                        let c = warp * cpw + j;
                        if j < cpw && c < chunks {
                            kb[kk][j] = ld_v4(base.add(c));
                        }
                        j += 1;
                    }
                }
                kk += 1;
            }
            let mut sc = [[0.0f32; 2]; G];
            let mut j = 0;
            while j < 4 {
                let c = warp * cpw + j;
                if j < cpw && c < chunks {
                    // Constant-index selection keeps `kb` in registers (the loop is not unrolled).
                    let (mut ka, mut kc) = (U32x4::default(), U32x4::default());
                    let mut jj = 0;
                    while jj < 4 {
                        if jj == j {
                            (ka, kc) = (kb[0][jj], kb[1][jj]);
                        }
                        jj += 1;
                    }
                    let k0 = unpack8(ka);
                    let k1 = unpack8(kc);
                    let mut h = 0;
                    while h < G {
                        let qp = qs.add(h * MAX_HD + 8 * c);
                        let mut d = 0;
                        while d < 8 {
                            let qv = *qp.add(d);
                            sc[h][0] = fma(qv, k0[d], sc[h][0]);
                            sc[h][1] = fma(qv, k1[d], sc[h][1]);
                            d += 1;
                        }
                        h += 1;
                    }
                }
                j += 1;
            }
            let mut h = 0;
            while h < G {
                *red.add((warp * MAX_G + h) * TILE + lane) = sc[h][0];
                *red.add((warp * MAX_G + h) * TILE + lane + 32) = sc[h][1];
                h += 1;
            }
        }
        sync_threads();

        // 2. Online softmax of head `warp` over the tile.
        if warp < g {
            let h = warp;
            let mut s2 = [f32::NEG_INFINITY; 2];
            let mut kk = 0;
            while kk < 2 {
                let t = lane + 32 * kk;
                if t < valid {
                    let mut sum = 0.0f32;
                    let mut w = 0;
                    while w < score_warps {
                        sum += *red.add((w * MAX_G + h) * TILE + t);
                        w += 1;
                    }
                    s2[kk] = sum * p.scale_log2;
                }
                kk += 1;
            }
            let m_new = m_run.max(warp_max_f32(s2[0].max(s2[1])));
            let alpha = ex2(m_run - m_new);
            let p0 = ex2(s2[0] - m_new);
            let p1 = ex2(s2[1] - m_new);
            l_run = fma(l_run, alpha, warp_sum_f32(p0 + p1));
            m_run = m_new;
            *ps.add(h * TILE + lane) = p0;
            *ps.add(h * TILE + lane + 32) = p1;
            if lane == 0 {
                *alpha_s.add(h) = alpha;
            }
        }
        sync_threads();

        // 3. Values: acc ← acc·α + Σ_t p_t·v_t over this thread's keys.
        let mut vb = [U32x4::default(); 8];
        let mut j = 0;
        while j < 8 {
            let t = kg + kgs * j;
            if t < valid {
                let r = key_row(t0 + t as u32, nc, lo, rows);
                vb[j] = ld_v4((v_cache.add(r as usize * row_elems + kvh * hd) as *const U32x4).add(vc));
            }
            j += 1;
        }
        let mut h = 0;
        while h < G {
            let a = *alpha_s.add(h);
            let mut d = 0;
            while d < 8 {
                acc[h][d] *= a;
                d += 1;
            }
            h += 1;
        }
        let mut j = 0;
        while j < 8 {
            let t = kg + kgs * j;
            if t < valid {
                let mut vj = U32x4::default();
                let mut jj = 0;
                while jj < 8 {
                    if jj == j {
                        vj = vb[jj];
                    }
                    jj += 1;
                }
                let vv = unpack8(vj);
                let mut h = 0;
                while h < G {
                    let pt = *ps.add(h * TILE + t);
                    let mut d = 0;
                    while d < 8 {
                        acc[h][d] = fma(pt, vv[d], acc[h][d]);
                        d += 1;
                    }
                    h += 1;
                }
            }
            j += 1;
        }
        t0 += TILE as u32;
    }

    // Partials: key groups added in order, one head at a time through `red`.
    let slot = ((i as usize * p.n_head as usize + q0) * p.slots as usize) + s as usize;
    let ml = scratch.add(p.n as usize * p.n_head as usize * p.slots as usize * hd);
    let mut h = 0;
    while h < G {
        let mut row = [0.0f32; 8];
        let mut hh = 0;
        while hh < G {
            if hh == h {
                row = acc[hh];
            }
            hh += 1;
        }
        sync_threads();
        let mut d = 0;
        while d < 8 {
            *red.add(kg * hd + vc * 8 + d) = row[d];
            d += 1;
        }
        sync_threads();
        let hs = slot + h * p.slots as usize;
        if tid < hd {
            let mut sum = 0.0f32;
            let mut k = 0;
            while k < kgs {
                sum += *red.add(k * hd + tid);
                k += 1;
            }
            *scratch.add(hs * hd + tid) = sum;
        }
        if warp == h && lane == 0 {
            *ml.add(2 * hs) = m_run;
            *ml.add(2 * hs + 1) = l_run;
        }
        h += 1;
    }
}

macro_rules! attn_tree_split_kernels {
    ($($name:ident = $g:literal),*) => {$(
        /// [`tree_split`] for GQA groups of this many query heads per KV head.
        #[no_mangle]
        #[link_section = "nvvm:maxntid=256;minctasm=1"]
        pub unsafe extern "ptx-kernel" fn $name(
            batch: *const NodeBatch,
            q: *const f32,
            k_cache: *const u16,
            v_cache: *const u16,
            scratch: *mut f32,
            p: AttnTreeParams,
        ) {
            tree_split::<$g>(batch, q, k_cache, v_cache, scratch, p)
        }
    )*};
}

attn_tree_split_kernels!(
    attn_tree_split_g1 = 1,
    attn_tree_split_g2 = 2,
    attn_tree_split_g3 = 3,
    attn_tree_split_g4 = 4,
    attn_tree_split_g5 = 5,
    attn_tree_split_g6 = 6,
    attn_tree_split_g7 = 7,
    attn_tree_split_g8 = 8
);

/// `out[i, h·hd + d] = sigmoid(gate[i, h·hd + d]) · Σ_s 2^(m_s − M)·acc_s[d] / Σ_s 2^(m_s − M)·l_s`
/// (without the sigmoid factor, and `gate` never read, when `p.gated = 0`)
/// over the node's `attn_splits(keys_i)` partials of [`attn_tree_split`], `M = max_s m_s`, both
/// sums in split order (thread `d` of block `(h, i)`). `sigmoid(g) = 1/(1 + e^−g)` (fast `e^x`,
/// correctly rounded division). Traffic: reads `S·(hd + 2)` f32 per (node, head), writes `hd`.
/// Launch: grid `(n_head, n)`, 256 threads.
#[no_mangle]
// 48 registers (56 uncapped, no spills): five blocks per SM, so a 23-node forward's 24 × 23
// blocks run in one wave (four per SM would be 528 slots).
#[link_section = "nvvm:maxntid=256;minctasm=5"]
pub unsafe extern "ptx-kernel" fn attn_tree_combine(
    batch: *const NodeBatch,
    gate: *const f32,
    scratch: *const f32,
    out: *mut f32,
    p: AttnTreeParams,
) {
    launch_dependents();
    grid_dependency_wait();
    let (h, i) = (block_x() as usize, block_y());
    let nb = batch_nodes(batch, p.n);
    let d = thread_x() as usize;
    let hd = p.head_dim as usize;
    if i >= nb || d >= hd {
        return;
    }
    let n_past = (*batch).n_past;
    let o = (i as usize * p.n_head as usize + h) * hd + d;
    if n_past as u64 + nb as u64 > p.ctx as u64 {
        *out.add(o) = f32::NAN;
        return;
    }
    let anc = batch_anc(batch, i, nb);
    let (_, nc) = committed_keys(batch, i, n_past, p.window);
    let splits = attn_splits_min(nc + anc.count_ones(), p.min_split_keys) as usize;
    let base = (i as usize * p.n_head as usize + h) * p.slots as usize;
    let ml = scratch.add(p.n as usize * p.n_head as usize * p.slots as usize * hd);
    // The gate was written before the attention kernel: requested beside the splits' values.
    let g = if p.gated != 0 { *gate.add(o) } else { 0.0 };
    // Up to `COMBINE_CHUNK` splits (every node below 1,025 keys): every split's `(m_s, l_s, a_s)`
    // is requested before any is used (one L2 round trip, not one per split); the max and both
    // sums run over the splits in order, as the loop below does.
    let (mut l, mut a) = (0.0f32, 0.0f32);
    let mut m = f32::NEG_INFINITY;
    if splits <= COMBINE_CHUNK {
        let (mv, lv, av) = combine_chunk(ml, scratch, base, hd, d, splits);
        unroll_below(COMBINE_CHUNK, |j| {
            if j < splits {
                m = m.max(mv[j]);
            }
        });
        unroll_below(COMBINE_CHUNK, |j| {
            if j < splits {
                let f = ex2(mv[j] - m);
                l = fma(lv[j], f, l);
                a = fma(av[j], f, a);
            }
        });
    } else {
        // Long contexts (up to `ATTN_MAX_SPLITS`): one split at a time, as LLVM unrolls it
        // (chunks of 8 here measured 1.7 µs slower at 8K keys, n = 1: `docs/perf/attention.md`).
        let mut s = 0;
        while s < splits {
            m = m.max(*ml.add(2 * (base + s)));
            s += 1;
        }
        let mut s = 0;
        while s < splits {
            let f = ex2(*ml.add(2 * (base + s)) - m);
            l = fma(*ml.add(2 * (base + s) + 1), f, l);
            a = fma(*scratch.add((base + s) * hd + d), f, a);
            s += 1;
        }
    }
    let r = div_rn(a, l);
    *out.add(o) = if p.gated != 0 { r * div_rn(1.0, 1.0 + exp_fast(-g)) } else { r };
}

/// Splits per chunk of [`attn_tree_combine`]'s loads (a node has 7 at 771 keys).
const COMBINE_CHUNK: usize = 8;

/// Splits `0 .. splits` (`≤ COMBINE_CHUNK`) of one (node, head) of [`attn_tree_combine`]:
/// `(m_s, l_s, a_s[d])`, every load issued before any is returned (the arrays are indexed by
/// compile-time constants, so they stay in registers); slots past `splits` hold `(−inf, 0, 0)`.
#[inline(always)]
unsafe fn combine_chunk(
    ml: *const f32,
    scratch: *const f32,
    base: usize,
    hd: usize,
    d: usize,
    splits: usize,
) -> ([f32; COMBINE_CHUNK], [f32; COMBINE_CHUNK], [f32; COMBINE_CHUNK]) {
    let mut mv = [f32::NEG_INFINITY; COMBINE_CHUNK];
    let mut lv = [0.0f32; COMBINE_CHUNK];
    let mut av = [0.0f32; COMBINE_CHUNK];
    unroll_below(COMBINE_CHUNK, |j| {
        if j < splits {
            let s = base + j;
            mv[j] = *ml.add(2 * s);
            lv[j] = *ml.add(2 * s + 1);
            av[j] = *scratch.add(s * hd + d);
        }
    });
    (mv, lv, av)
}

const ATTN_THREADS: usize = kernel_abi::ATTN_THREADS as usize;

/// Keeps the accepted path's KV rows: for `p < len`, row `n_past + nodes[p]` → row `n_past + p`
/// in each of `planes` planes (plane `k` starts at `k·plane_stride` f16). Thread `x` of block
/// `(b, plane)` owns the f16 pair `256·b + x` of the row in its plane: it loads the pair from
/// the path's source rows eight at a time before storing them, so no value is overwritten before
/// it is read (other threads own other columns). Rows `≥ ctx` are skipped; `p` with
/// `nodes[p] = p` is a no-op. Traffic: `len` rows read and written per plane (at most
/// `MAX_NODES·row_elems·2` bytes each way). Launch: grid `(⌈row_elems/512⌉, planes)`, 256 threads.
#[no_mangle]
#[link_section = "nvvm:maxntid=256;minctasm=1"]
pub unsafe extern "ptx-kernel" fn kv_commit(path: *const CommitPath, cache: *mut u16, p: KvCommitParams) {
    launch_dependents();
    grid_dependency_wait();
    let pair = block_x() as usize * ATTN_THREADS + thread_x() as usize;
    if 2 * pair >= p.row_elems as usize || block_y() >= p.planes {
        return;
    }
    let plane = (cache as *mut u32).add((block_y() as u64 * p.plane_stride / 2) as usize);
    let pairs = p.row_elems as usize / 2;
    let n_past = (*path).n_past as u64;
    let len = (*path).len;
    // Chunks of 8 path entries: all loads of a chunk, then its stores. A source row
    // `n_past + nodes[p]` (≥ `n_past + p`) is never the destination of an earlier entry, so
    // later chunks read values no store has touched.
    let mut c0 = 0u32;
    while c0 < len && c0 < MAX_NODES {
        let mut v = [0u32; 8];
        let mut k = 0;
        while k < 8 {
            let e = (c0 as usize + k) & NODE_MASK;
            let src = n_past + (*path).nodes[e] as u64;
            if c0 + (k as u32) < len && (*path).nodes[e] as usize != e && src < p.ctx as u64 {
                v[k] = *plane.add(src as usize * pairs + pair);
            }
            k += 1;
        }
        let mut k = 0;
        while k < 8 {
            let e = (c0 as usize + k) & NODE_MASK;
            let (src, dst) = (n_past + (*path).nodes[e] as u64, n_past + e as u64);
            if c0 + (k as u32) < len && (*path).nodes[e] as usize != e && src < p.ctx as u64 && dst < p.ctx as u64 {
                *plane.add(dst as usize * pairs + pair) = v[k];
            }
            k += 1;
        }
        c0 += 8;
    }
}
