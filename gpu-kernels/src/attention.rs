//! `attention`: gated full attention of the qwen35 target over an F16 KV cache, for a batch of
//! tree nodes (`kernel_abi::NodeBatch` in device memory).
//!
//! * [`attn_prep`] — per node: per-head RMSNorm of q and k, partial NeoX RoPE at the node's
//!   position, the raw gate copied out, and K and V rounded to f16 into the node's cache row.
//! * [`attn_tree_split`] + [`attn_tree_combine`] — flash-decoding over each node's visible keys
//!   (the committed rows, then its ancestors and itself), GQA, the sigmoid output gate.
//! * [`kv_commit`] — moves the accepted path's KV rows into place in every plane.
//!
//! Invariant (batch invariance): node `i`'s outputs are a function of its own inputs and of its
//! visible key/value sequence in logical order only. Keys are split and tiled by the node's key
//! count `keys_i = n_past + |anc_i|` alone (`kernel_abi::attn_split_len`), and every reduction
//! order is fixed by that and the head dim; the cache row a logical key is read from (a
//! committed row or a scratch row of the tree) does not enter the arithmetic.
//!
//! Tree design (why a verify is not `n` times an AR step): the nodes of a batch see the same
//! committed prefix and, since `attn_split_len` is a step function of the key count (constant
//! over 2048-key ranges, and 128 up to 8192 keys), nearly always the same split boundaries and
//! tile starts. An `attn_tree_split` block therefore takes one split of one KV head for a chunk
//! of nodes (`AttnTreeParams::chunk`, `⌊24/G⌋` nodes): it loads each 32-key K/V tile into shared
//! memory once and computes the scores, softmax and value sums of every node × query head of the
//! chunk against it; the tree's own rows (≤ 32, rows `n_past..n_past + n`) are loaded once per
//! block and each node reaches its ancestors through its ancestor list. The arithmetic is
//! defined per (node, head, key, output element) with fixed orders (see [`tree_split`]); the
//! batch only decides which thread performs which part, never the operations or their order.
//! The prefix is read `⌈n/chunk⌉` times per layer instead of `n` times (and those reads run
//! concurrently, so mostly from L2).

use kernel_abi::{
    attn_split_len, attn_splits, AttnPrepParams, AttnTreeParams, CommitPath, KvCommitParams, NodeBatch,
    ATTN_MAX_BLOCK_ROWS, ATTN_MAX_HEAD_DIM, ATTN_TILE_KEYS, MAX_NODES,
};

use crate::device::convert::{f16_to_f32, f32_to_f16};
use crate::device::griddep::{grid_dependency_wait, launch_dependents};
use crate::device::load::{cp_async_16, cp_async_commit, cp_async_wait_1, ld_v4, U32x4};
use crate::device::math::{div_rn, ex2, exp_fast, fma, sqrt_rn};
use crate::device::shared::{dynamic_smem, smem_addr, Shared};
use crate::device::sync::{sync_threads, sync_warp};
use crate::device::warp::{shfl_xor_f32, warp_sum_f32};
use crate::device::*;

const WARPS: usize = 8;
const TILE: usize = ATTN_TILE_KEYS as usize;
const MAX_HD: usize = ATTN_MAX_HEAD_DIM as usize;
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

/// Valid nodes of a batch: `min(grid nodes, NodeBatch::n, 32)`.
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

#[link_section = ".shared"]
static PREP_BUF: Shared<[f32; WARPS * MAX_HD]> = Shared::uninit();

/// Per node `i` (`blockIdx.x`) and head vector `v = 8·blockIdx.y + warp` of the
/// `n_head + 2·n_head_kv` vectors of the node: query head `v`, key head `v − n_head`, or value head
/// `v − n_head − n_head_kv`.
///
/// * q: `y = rmsnorm(qg[i, h·2hd .. +hd]) ⊙ q_norm`, then RoPE at `pos = n_past + depth[i]`:
///   for `j < n_rot/2`, `(y_j, y_{j+n_rot/2}) ← (y_j·c − y_{j+r}·s, y_{j+r}·c + y_j·s)` with
///   `(c, s) = rope[pos, j]`; → `q[i, h·hd ..]`. The gate `qg[i, h·2hd + hd ..]` → `gate[i, h·hd ..]`.
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
    grid_dependency_wait();
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
    let pos = n_past as u64 + (*batch).depth[i as usize & 31] as u64;
    let kv_row_elems = nkv as usize * hd;

    // Value heads: a rounded copy.
    if vec >= nh + nkv {
        if row >= p.ctx as u64 {
            return;
        }
        let kvh = (vec - nh - nkv) as usize;
        let src = v.add(i as usize * kv_row_elems + kvh * hd);
        let dst = v_cache.add(row as usize * kv_row_elems + kvh * hd);
        let mut c = lane;
        while c < hd {
            *dst.add(c) = f32_to_f16(*src.add(c));
            c += 32;
        }
        return;
    }

    let is_q = vec < nh;
    let (src, w) = if is_q {
        (qg.add(i as usize * 2 * nh as usize * hd + vec as usize * 2 * hd), q_norm)
    } else {
        (k.add(i as usize * kv_row_elems + (vec - nh) as usize * hd), k_norm)
    };
    if is_q {
        let g = src.add(hd);
        let dst = gate_out.add(i as usize * nh as usize * hd + vec as usize * hd);
        let mut c = lane;
        while c < hd {
            *dst.add(c) = *g.add(c);
            c += 32;
        }
    } else if row >= p.ctx as u64 {
        return;
    }

    // Per-head RMSNorm: lane `l` holds x[l + 32j].
    let mut x = [0.0f32; PREP_PER_LANE];
    let mut acc = 0.0f32;
    let mut j = 0;
    while j < PREP_PER_LANE {
        let c = lane + 32 * j;
        if c < hd {
            x[j] = *src.add(c);
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
            x[j] = x[j] * s * *w.add(c);
            *buf.add(c) = x[j];
        }
        j += 1;
    }
    sync_warp();

    // Partial NeoX RoPE over the first n_rot dims.
    let half = (p.n_rot / 2) as usize;
    let in_table = pos < p.max_pos as u64;
    let table = rope.add(if in_table { pos as usize * half * 2 } else { 0 });
    let mut j = 0;
    while j < PREP_PER_LANE {
        let c = lane + 32 * j;
        if c < 2 * half {
            let (pair, partner) = if c < half { (c, c + half) } else { (c - half, c - half) };
            let cs = *table.add(2 * pair);
            let sn = *table.add(2 * pair + 1);
            let y = *buf.add(partner);
            x[j] = if c < half { fma(x[j], cs, -(y * sn)) } else { fma(x[j], cs, y * sn) };
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
static ATT_ALPHA: Shared<[f32; ROWS]> = Shared::uninit();
#[link_section = ".shared"]
static ATT_M: Shared<[f32; ROWS]> = Shared::uninit();
#[link_section = ".shared"]
static ATT_L: Shared<[f32; ROWS]> = Shared::uninit();
#[link_section = ".shared"]
static ATT_KEYS: Shared<[u32; MAX_NODES as usize]> = Shared::uninit();
#[link_section = ".shared"]
static ATT_ANC: Shared<[u8; (MAX_NODES * MAX_NODES) as usize]> = Shared::uninit();

const ROWS: usize = ATTN_MAX_BLOCK_ROWS as usize;
/// Most heads per score item of `attn_tree_split` (`G ≤ 4`: all `G`; else `⌈G/2⌉`).
const GH: usize = 4;
/// Rows per thread in the value pass: `⌈ROWS / (2048 / hd)⌉ ≤ ROWS / 8`.
const RPT: usize = ROWS / 8;
/// K/V tile slots: committed keys of buffer 0 (`0..32`), the tree's scratch rows (`32..64`),
/// committed keys of buffer 1 (`64..96`).
const SLOTS: usize = 3 * TILE;

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

/// Runs `body` for `k = 0 .. RPT` (3) as separate constant copies, so arrays indexed by `k` stay
/// in registers.
macro_rules! unroll_rpt {
    ($k:ident => $body:block) => {{
        {
            let $k: usize = 0;
            $body
        }
        {
            let $k: usize = 1;
            $body
        }
        {
            let $k: usize = 2;
            $body
        }
    }};
}
const _: () = assert!(RPT == 3);

/// Index of the `n`-th (from 0) set bit of `m`.
#[inline(always)]
fn nth_bit(mut m: u32, n: usize) -> usize {
    let mut i = 0;
    while i < n {
        m &= m.wrapping_sub(1);
        i += 1;
    }
    m.trailing_zeros() as usize
}

/// `attn_tree_split_g{G}`: flash-decoding partials of the `G = n_head / n_kv` query heads of KV
/// head `blockIdx.y`, split `s = blockIdx.x`, for the nodes `z·chunk .. z·chunk + chunk` of the
/// batch (`z = blockIdx.z`) together.
///
/// # Arithmetic (per node, a function of its own key count only)
/// Node `i` sees `keys_i = n_past + |anc_i|` logical keys (key `t < n_past` is cache row `t`; key
/// `n_past + d` is the scratch row `n_past + j` of the `d`-th set bit `j` of `anc[i]`). With
/// `L = attn_split_len(keys_i)`, split `s` covers keys `s·L .. e = min((s+1)·L, keys_i)`, in
/// tiles of 32 keys starting at `s·L` (`σ = scale_log2`, scores in the base-2 domain):
/// 1. score of key `t`, query row `q`: `c_j = fma(q_d, k_d, ·)` chained from 0 over the dims
///    `d = 32j .. 32j + 32` ascending, the `hd/32` partials `c_j` added as a perfect binary tree
///    (`(c_0 + c_1) + (c_2 + c_3)`, …), times `σ`;
/// 2. softmax over the tile's valid keys (lane = key): `m' = max(m, max_t s_t)`,
///    `α = 2^(m − m')`, `p_t = 2^(s_t − m')`, `l = fma(l, α, Σp)` (butterfly sum);
/// 3. values: `acc_d ← acc_d·α`, then `acc_d = fma(p_t, v_td, acc_d)` over the tile's keys in
///    order (one chain per output element, no cross-thread reduction).
///
/// `(acc, m, l)` of the split go to the scratch. Which thread computes a score part or an output
/// element depends on the batch (how many nodes share the block), but never the operations or
/// their order, so the bits of node `i` are those of node `i` alone.
///
/// # Sharing
/// The nodes of a block with the same `L` (nearly always all: `L` steps every 2048 keys) share
/// every split boundary and tile start; a committed key is the same cache row for all of them.
/// So each tile's committed K/V rows are loaded once into shared memory (f16, K rows padded to
/// `hd + 8` against bank conflicts) and used for every node × head of the block; the ≤ 32
/// scratch rows of the tree are loaded once per block into slots `32..64`, and a node's
/// ancestor key indexes them through its ancestor list. Nodes with another `L` are handled in a
/// second pass of the block (same code, their own tiles). The score pass spreads the parts of
/// a dot product over threads (`pg` part groups, a power of two, each a subtree of the parts'
/// tree) when few nodes leave threads idle, and the softmax adds the `pg` subtrees by the same
/// tree; the heads go in groups of `≤ 4` per thread (register pressure).
///
/// # Cost (27B: G = 6, hd = 256, chunk = 4 nodes = 24 query rows per block)
/// Per 32-key tile a block does `24·32·256` fma for scores and as many for values (1536 per
/// thread), and loads 32 K/V rows (32 KiB) once for all 4 nodes. One block per SM (≈ 255
/// registers, no spills; 128 KiB shared memory), so the next tile's committed rows are copied
/// by `cp.async` into the other buffer while this one is computed.
///
/// Scratch (f32): partial accumulators `[n][n_head][slots][hd]`, then `(m, l)` pairs
/// `[n][n_head][slots][2]`. Traffic: each block reads its split's committed K and V head rows
/// once (`2·hd·2` bytes per key, shared by its `chunk` nodes) plus the tree's rows, and writes
/// `chunk·G·(hd + 2)` f32. Launch: grid `(slots, n_kv, ⌈n/chunk⌉)`, 256 threads, dynamic shared
/// memory `attn_tree_smem_bytes(hd, G, chunk)`. Needs `hd ∈ {32, 64, 128, 256}`, `G ≤ 8`,
/// `chunk·G ≤ ATTN_MAX_BLOCK_ROWS` (24; else the block writes nothing), 16-byte aligned cache
/// planes. If `n_past + NodeBatch::n > ctx` every output of the launch is NaN (nothing outside
/// the planes is read).
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
    let nb = batch_nodes(batch, p.n) as usize;
    let chunk = p.chunk as usize;
    let i0 = block_z() as usize * chunk;
    if chunk == 0 || chunk * G > ROWS || i0 >= nb {
        return;
    }
    let n_past = (*batch).n_past;
    if n_past as u64 + nb as u64 > p.ctx as u64 {
        return; // the combine pass writes NaN
    }
    let cn = if nb - i0 < chunk { nb - i0 } else { chunk };
    let mask = if nb >= 32 { u32::MAX } else { (1u32 << nb) - 1 };
    let s = block_x();

    let tid = thread_x() as usize;
    let lane = lane_id() as usize;
    let warp = warp_id() as usize;
    let hd = p.head_dim as usize;
    let hd_shift = p.head_dim.trailing_zeros();
    let kvh = block_y() as usize;
    let row_elems = p.n_head_kv as usize * hd;
    let chunks = hd >> 3;
    let chunk_shift = hd_shift - 3;
    let kstride = hd + 8;

    let ks = dynamic_smem() as *mut u16;
    let vs = ks.add(SLOTS * kstride);
    let qs = vs.add(SLOTS * hd) as *mut f32;
    let red = qs.add(chunk * G * hd);
    let alpha_s = ATT_ALPHA.as_mut_ptr() as *mut f32;
    let m_s = ATT_M.as_mut_ptr() as *mut f32;
    let l_s = ATT_L.as_mut_ptr() as *mut f32;
    let keys_s = ATT_KEYS.as_mut_ptr() as *mut u32;
    let anc_s = ATT_ANC.as_mut_ptr() as *mut u8;

    // Per node: key count and ancestor list; the queries of the block.
    if tid < cn {
        let anc = (*batch).anc[(i0 + tid) & 31] & mask;
        *keys_s.add(tid) = n_past + anc.count_ones();
        let (mut bits, mut d) = (anc, 0usize);
        while bits != 0 {
            *anc_s.add(tid * 32 + (d & 31)) = bits.trailing_zeros() as u8;
            bits &= bits - 1;
            d += 1;
        }
    }
    let mut e = tid;
    while e < cn * G * hd {
        let r = e >> hd_shift;
        let (j, h) = (r / G, r % G);
        *qs.add(e) = *q.add(((i0 + j) * p.n_head as usize + kvh * G + h) * hd + (e & (hd - 1)));
        e += ATTN_THREADS;
    }
    sync_threads();

    // Value geometry: thread (rg, vc) owns dims 8·vc .. +8 of rows rg, rg + rgs, ….
    let vc = tid & (chunks - 1);
    let rg = tid >> chunk_shift;
    let rgs = ATTN_THREADS >> chunk_shift;
    let parts = hd >> 5;
    // Score items take the G heads in `hg_n` groups of `gh ≤ GH` (register pressure).
    let gh = if G <= GH { G } else { G.div_ceil(2) };
    let hg_n = G.div_ceil(gh);

    let full = if cn >= 32 { u32::MAX } else { (1u32 << cn) - 1 };
    let mut done = 0u32;
    let mut tail_loaded = false;
    while done != full {
        // The nodes sharing the first pending node's split length.
        let len = attn_split_len(*keys_s.add((!done).trailing_zeros() as usize));
        let start = s * len;
        let (mut act, mut na, mut emax) = (0u32, 0usize, 0u32);
        let mut j = 0;
        while j < cn {
            let kj = *keys_s.add(j);
            if done >> j & 1 == 0 && attn_split_len(kj) == len {
                done |= 1 << j;
                if start < kj {
                    act |= 1 << j;
                    na += 1;
                    let ej = if start + len < kj { start + len } else { kj };
                    emax = if ej > emax { ej } else { emax };
                }
            }
            j += 1;
        }
        if na == 0 {
            continue;
        }
        let rows_a = na * G;
        sync_threads(); // the previous pass is done with the state and the tiles
        if tid < rows_a {
            *m_s.add(tid) = f32::NEG_INFINITY;
            *l_s.add(tid) = 0.0;
        }
        if emax > n_past && !tail_loaded {
            // The tree's scratch rows n_past + j, j < nb, into slots 32 + j.
            tail_loaded = true;
            let mut e = tid;
            while e < nb * chunks {
                let (jj, c) = (e >> chunk_shift, e & (chunks - 1));
                let off = (n_past as usize + jj) * row_elems + kvh * hd + 8 * c;
                let kv = ld_v4(k_cache.add(off) as *const U32x4);
                let vv = ld_v4(v_cache.add(off) as *const U32x4);
                *(ks.add((TILE + jj) * kstride + 8 * c) as *mut U32x4) = kv;
                *(vs.add((TILE + jj) * hd + 8 * c) as *mut U32x4) = vv;
                e += ATTN_THREADS;
            }
        }
        // Score part groups: the most (≤ parts) that keep `na·32·pg ≤ 256` items.
        let mut pg = parts;
        while pg > 1 && na * TILE * pg * hg_n > ATTN_THREADS {
            pg >>= 1;
        }
        let ppt = parts >> pg.trailing_zeros();
        let pg_log = pg.trailing_zeros();
        let items = na * TILE * pg * hg_n;
        // Committed keys below `lim` are copied tile by tile (`cp.async`, one tile ahead) into
        // slots `64·b .. 64·b + 32` of buffer `b`, alternating.
        let lim = if n_past < emax { n_past } else { emax };
        let issue = |t0: u32, b: usize| {
            let mut x = 0;
            while x < 4 {
                let e = tid + x * ATTN_THREADS;
                let (u, c) = (e >> chunk_shift, e & (chunks - 1));
                if e < TILE * chunks && t0 + (u as u32) < lim {
                    let off = (t0 as usize + u) * row_elems + kvh * hd + 8 * c;
                    let slot = u + 2 * TILE * b;
                    cp_async_16(smem_addr(ks.add(slot * kstride + 8 * c)), k_cache.add(off) as *const u8);
                    cp_async_16(smem_addr(vs.add(slot * hd + 8 * c)), v_cache.add(off) as *const u8);
                }
                x += 1;
            }
            cp_async_commit();
        };
        issue(start, 0);

        let mut acc = [[0.0f32; 8]; RPT];
        let mut t0 = start;
        let mut buf = 0usize;
        while t0 < emax {
            // 0. The next tile's copies start; this tile's have landed (every thread's, after
            //    the barrier). An empty group keeps `wait_group 1` meaning "this tile".
            if t0 + (TILE as u32) < emax {
                issue(t0 + TILE as u32, buf ^ 1);
            } else {
                cp_async_commit();
            }
            cp_async_wait_1();
            sync_threads();
            let cb = 2 * TILE * buf;

            // 1. Scores: item (a, g, hg, u) → the parts g·ppt .. +ppt of node a's key t0 + u for
            //    the heads hg·gh .. +gh, combined as a subtree of the parts' tree →
            //    red[g·rows_a + a·G + h][u].
            let mut it = tid;
            while it < items {
                let u = it & (TILE - 1);
                let w = it >> 5;
                let (hg, w) = (w % hg_n, w / hg_n);
                let (a, g) = (w >> pg_log, w & (pg - 1));
                let j = nth_bit(act, a);
                let kj = *keys_s.add(j);
                let ej = if start + len < kj { start + len } else { kj };
                let t = t0 + u as u32;
                if t < ej {
                    let slot = if t < n_past {
                        u + cb
                    } else {
                        TILE + *anc_s.add(j * 32 + ((t - n_past) as usize & 31)) as usize
                    };
                    let kp = ks.add(slot * kstride) as *const U32x4;
                    let qb = qs.add((j * G + hg * gh) * hd) as *const f32;
                    let mut st = [[0.0f32; 3]; GH];
                    let mut k = 0;
                    while k < 8 {
                        if k < ppt {
                            let part = g * ppt + k;
                            let mut c = [0.0f32; GH];
                            let mut cc = 0;
                            while cc < 4 {
                                let d0 = part * 32 + cc * 8;
                                let kv = unpack8(*kp.add(d0 >> 3));
                                let mut h = 0;
                                while h < GH {
                                    if h < gh && hg * gh + h < G {
                                        let q0: [f32; 4] = core::mem::transmute(*(qb.add(h * hd + d0) as *const U32x4));
                                        let q1: [f32; 4] =
                                            core::mem::transmute(*(qb.add(h * hd + d0 + 4) as *const U32x4));
                                        let mut d = 0;
                                        while d < 4 {
                                            c[h] = fma(q0[d], kv[d], c[h]);
                                            d += 1;
                                        }
                                        let mut d = 0;
                                        while d < 4 {
                                            c[h] = fma(q1[d], kv[4 + d], c[h]);
                                            d += 1;
                                        }
                                    }
                                    h += 1;
                                }
                                cc += 1;
                            }
                            // Push c onto the level stack of the binary tree (left + right);
                            // the last part completes the thread's subtree: its score partial.
                            let ones = (!k).trailing_zeros();
                            let mut h = 0;
                            while h < GH {
                                if h < gh && hg * gh + h < G {
                                    let mut v = c[h];
                                    if ones >= 1 {
                                        v = st[h][0] + v;
                                    }
                                    if ones >= 2 {
                                        v = st[h][1] + v;
                                    }
                                    if ones >= 3 {
                                        v = st[h][2] + v;
                                    }
                                    if k + 1 == ppt {
                                        *red.add((g * rows_a + a * G + hg * gh + h) * TILE + u) = v;
                                    } else if ones == 0 {
                                        st[h][0] = v;
                                    } else if ones == 1 {
                                        st[h][1] = v;
                                    } else {
                                        st[h][2] = v;
                                    }
                                }
                                h += 1;
                            }
                        }
                        k += 1;
                    }
                }
                it += ATTN_THREADS;
            }
            sync_threads();

            // 2. Online softmax, warp per active row (a, h); p_t → red[row][u] (plane 0).
            let mut ar = warp;
            while ar < rows_a {
                let j = nth_bit(act, ar / G);
                let kj = *keys_s.add(j);
                let ej = if start + len < kj { start + len } else { kj };
                if t0 < ej {
                    let sc = if t0 + (lane as u32) < ej {
                        let mut v = [0.0f32; 8];
                        let mut x = 0;
                        while x < 8 {
                            if x < pg {
                                v[x] = *red.add((x * rows_a + ar) * TILE + lane);
                            }
                            x += 1;
                        }
                        if pg >= 2 {
                            v[0] = v[0] + v[1];
                            v[2] = v[2] + v[3];
                            v[4] = v[4] + v[5];
                            v[6] = v[6] + v[7];
                        }
                        if pg >= 4 {
                            v[0] = v[0] + v[2];
                            v[4] = v[4] + v[6];
                        }
                        if pg >= 8 {
                            v[0] = v[0] + v[4];
                        }
                        v[0] * p.scale_log2
                    } else {
                        f32::NEG_INFINITY
                    };
                    let m_old = *m_s.add(ar);
                    let m_new = m_old.max(warp_max_f32(sc));
                    let alpha = ex2(m_old - m_new);
                    let pt = ex2(sc - m_new);
                    let sum = warp_sum_f32(pt);
                    *red.add(ar * TILE + lane) = pt;
                    if lane == 0 {
                        *l_s.add(ar) = fma(*l_s.add(ar), alpha, sum);
                        *m_s.add(ar) = m_new;
                        *alpha_s.add(ar) = alpha;
                    }
                }
                ar += WARPS;
            }
            sync_threads();

            // 3. Values: acc ← acc·α, then fma(p_t, v_t, acc) over the tile's keys in order.
            if t0 + TILE as u32 <= n_past {
                // Every active node sees all 32 keys of the tile, as slots 0..32.
                unroll_rpt!(k => {
                    let ar = rg + rgs * k;
                    if ar < rows_a {
                        let a = *alpha_s.add(ar);
                        let mut d = 0;
                        while d < 8 {
                            acc[k][d] *= a;
                            d += 1;
                        }
                    }
                });
                let mut u = 0;
                while u < TILE {
                    let vv = unpack8(*(vs.add((u + cb) * hd + 8 * vc) as *const U32x4));
                    unroll_rpt!(k => {
                        let ar = rg + rgs * k;
                        if ar < rows_a {
                            let pt = *red.add(ar * TILE + u);
                            let mut d = 0;
                            while d < 8 {
                                acc[k][d] = fma(pt, vv[d], acc[k][d]);
                                d += 1;
                            }
                        }
                    });
                    u += 1;
                }
            } else {
                // Tail tile: per row, its node's valid keys and slots.
                let mut valid = [0u32; RPT];
                let mut node = [0usize; RPT];
                unroll_rpt!(k => {
                    let ar = rg + rgs * k;
                    if ar < rows_a {
                        let j = nth_bit(act, ar / G);
                        let kj = *keys_s.add(j);
                        let ej = if start + len < kj { start + len } else { kj };
                        node[k] = j;
                        if t0 < ej {
                            valid[k] = if ej - t0 < TILE as u32 { ej - t0 } else { TILE as u32 };
                            let a = *alpha_s.add(ar);
                            let mut d = 0;
                            while d < 8 {
                                acc[k][d] *= a;
                                d += 1;
                            }
                        }
                    }
                });
                let mut u = 0u32;
                while u < TILE as u32 {
                    let t = t0 + u;
                    unroll_rpt!(k => {
                        if u < valid[k] {
                            let ar = rg + rgs * k;
                            let slot = if t < n_past {
                                u as usize + cb
                            } else {
                                TILE + *anc_s.add(node[k] * 32 + ((t - n_past) as usize & 31)) as usize
                            };
                            let vv = unpack8(*(vs.add(slot * hd + 8 * vc) as *const U32x4));
                            let pt = *red.add(ar * TILE + u as usize);
                            let mut d = 0;
                            while d < 8 {
                                acc[k][d] = fma(pt, vv[d], acc[k][d]);
                                d += 1;
                            }
                        }
                    });
                    u += 1;
                }
            }
            sync_threads();
            t0 += TILE as u32;
            buf ^= 1;
        }

        // Partials of the active rows: (acc, m, l) → scratch slot s.
        let ml = scratch.add(p.n as usize * p.n_head as usize * p.slots as usize * hd);
        unroll_rpt!(k => {
            let ar = rg + rgs * k;
            if ar < rows_a {
                let j = nth_bit(act, ar / G);
                let row = (i0 + j) * p.n_head as usize + kvh * G + ar % G;
                let hs = row * p.slots as usize + s as usize;
                let dst = scratch.add(hs * hd + 8 * vc);
                let mut d = 0;
                while d < 8 {
                    *dst.add(d) = acc[k][d];
                    d += 1;
                }
                if vc == 0 {
                    *ml.add(2 * hs) = *m_s.add(ar);
                    *ml.add(2 * hs + 1) = *l_s.add(ar);
                }
            }
        });
    }
}

macro_rules! attn_tree_split_kernels {
    ($($name:ident = $g:literal, $bounds:literal);*) => {$(
        /// [`tree_split`] for GQA groups of this many query heads per KV head.
        #[no_mangle]
        #[link_section = $bounds]
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

// One block per SM (≈ 220 registers): capped at 128 for two blocks, ptxas spills once the
// score pass loads q as 16-byte vectors, and the scalar loads cost twice the shared-memory
// instructions in the (compute-bound) tree case.
attn_tree_split_kernels!(
    attn_tree_split_g1 = 1, "nvvm:maxntid=256;minctasm=1";
    attn_tree_split_g2 = 2, "nvvm:maxntid=256;minctasm=1";
    attn_tree_split_g3 = 3, "nvvm:maxntid=256;minctasm=1";
    attn_tree_split_g4 = 4, "nvvm:maxntid=256;minctasm=1";
    attn_tree_split_g5 = 5, "nvvm:maxntid=256;minctasm=1";
    attn_tree_split_g6 = 6, "nvvm:maxntid=256;minctasm=1";
    attn_tree_split_g7 = 7, "nvvm:maxntid=256;minctasm=1";
    attn_tree_split_g8 = 8, "nvvm:maxntid=256;minctasm=1"
);

/// `out[i, h·hd + d] = sigmoid(gate[i, h·hd + d]) · Σ_s 2^(m_s − M)·acc_s[d] / Σ_s 2^(m_s − M)·l_s`
/// over the node's `attn_splits(keys_i)` partials of [`attn_tree_split`], `M = max_s m_s`, both
/// sums in split order (thread `d` of block `(h, i)`). `sigmoid(g) = 1/(1 + e^−g)` (fast `e^x`,
/// correctly rounded division). Traffic: reads `S·(hd + 2)` f32 per (node, head), writes `hd`.
/// Launch: grid `(n_head, n)`, 256 threads.
#[no_mangle]
#[link_section = "nvvm:maxntid=256;minctasm=1"]
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
    let anc = (*batch).anc[i as usize & 31] & if nb >= 32 { u32::MAX } else { (1u32 << nb) - 1 };
    let splits = attn_splits(n_past + anc.count_ones()) as usize;
    let base = (i as usize * p.n_head as usize + h) * p.slots as usize;
    let ml = scratch.add(p.n as usize * p.n_head as usize * p.slots as usize * hd);
    let mut m = f32::NEG_INFINITY;
    let mut s = 0;
    while s < splits {
        m = m.max(*ml.add(2 * (base + s)));
        s += 1;
    }
    let (mut l, mut a) = (0.0f32, 0.0f32);
    let mut s = 0;
    while s < splits {
        let f = ex2(*ml.add(2 * (base + s)) - m);
        l = fma(*ml.add(2 * (base + s) + 1), f, l);
        a = fma(*scratch.add((base + s) * hd + d), f, a);
        s += 1;
    }
    let sig = div_rn(1.0, 1.0 + exp_fast(-*gate.add(o)));
    *out.add(o) = div_rn(a, l) * sig;
}

const ATTN_THREADS: usize = kernel_abi::ATTN_THREADS as usize;

/// Keeps the accepted path's KV rows: for `p < len`, row `n_past + nodes[p]` → row `n_past + p`
/// in each of `planes` planes (plane `k` starts at `k·plane_stride` f16). Thread `x` of block
/// `(b, plane)` owns the f16 pair `256·b + x` of the row in its plane: it loads the pair from
/// the path's source rows eight at a time before storing them, so no value is overwritten before
/// it is read (other threads own other columns). Rows `≥ ctx` are skipped; `p` with
/// `nodes[p] = p` is a no-op. Traffic: `len` rows read and written per plane (at most
/// `32·row_elems·2` bytes each way). Launch: grid `(⌈row_elems/512⌉, planes)`, 256 threads.
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
            let e = (c0 as usize + k) & 31;
            let src = n_past + (*path).nodes[e] as u64;
            if c0 + (k as u32) < len && (*path).nodes[e] as usize != e && src < p.ctx as u64 {
                v[k] = *plane.add(src as usize * pairs + pair);
            }
            k += 1;
        }
        let mut k = 0;
        while k < 8 {
            let e = (c0 as usize + k) & 31;
            let (src, dst) = (n_past + (*path).nodes[e] as u64, n_past + e as u64);
            if c0 + (k as u32) < len && (*path).nodes[e] as usize != e && src < p.ctx as u64 && dst < p.ctx as u64 {
                *plane.add(dst as usize * pairs + pair) = v[k];
            }
            k += 1;
        }
        c0 += 8;
    }
}
