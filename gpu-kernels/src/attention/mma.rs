//! `attn_tree_mma_hd{64,128,256}`: the split pass of `attn_tree` on tensor cores, with the K/V
//! tiles of the committed prefix loaded once for every node of a block.
//!
//! Block `(s, kvh, z)` serves split `s` of KV head `kvh` for nodes `z·NB .. (z+1)·NB`,
//! `NB = 4·npm`, `npm = max(1, 16 / G)` nodes per 16-row tensor-core tile (`G = n_head / n_kv`):
//! warp `w` owns row tile `w % 4` (rows `(node, head)`, node `mt·npm + rr / G`, head `rr % G`;
//! rows past `npm·G` are padding) and the half `w / 4` of the head dims of the output.
//! Node `i` sees `keys_i = n_past + |anc_i|` logical keys (the committed rows, then its ancestors
//! in depth order) and its split `s` covers keys `s·L_i .. min((s+1)·L_i, keys_i)`,
//! `L_i = attn_split_len_min(keys_i)` — the rule of [`super::attn_tree_split_g1`], so the
//! combine pass and the scratch layout are shared.
//!
//! Per tile of 64 logical keys `a .. a + 64` (a multiple of 64) and row tile:
//! 1. `S = Q·Kᵀ` (`mma.m16n8k16`, f16 inputs, f32 accumulation in `d/16` steps of 16 dims), then
//!    `s_t = S_t·σ` (`σ = scale_log2`, base-2 domain); keys past the node's split end are `−∞`.
//! 2. Online softmax per row (its own max and sum): `m' = max(m, max_t s_t)`, `α = 2^(m − m')`,
//!    `p_t = f16(2^(s_t − m'))`, `l = l·α + Σ_t p_t` (the lane's 16 keys in order, then the
//!    quad's butterfly).
//! 3. `acc ← acc·α + P·V` (`mma`, `P` from the score fragments, `V` by `ldmatrix.trans`).
//! The query is rounded to f16 once (`q̂ = f16(q)`); that and `p_t`'s rounding are the two
//! roundings this kernel adds to [`super::attn_tree_split_g1`]'s f32 arithmetic.
//!
//! Loads: a tile entirely below `n_past` holds the committed rows `a .. a + 64` for every node
//! and is copied once into shared memory for all of the block's rows. The first tile that
//! reaches past `n_past` starts the tail: the rows `a .. n_past + nb` (the last committed rows
//! and every tree node's row, at most `64 + nb`) are copied once, and each node's tail tiles
//! address its own keys there through its ancestor list (`ldmatrix` takes a row address per
//! lane), one node at a time per row tile, the other rows of the tile masked.
//!
//! Invariant (batch invariance): a row's arithmetic — which tiles it takes, in which order, the
//! key in each slot of a tile, every product's dims — is fixed by its node's key count and its
//! own keys; a tensor-core product's row depends only on that row of `A`. Rows of other nodes in
//! the same tile only ever see their own masks: a masked row keeps `m`, `l` and `acc` (`α = 1`,
//! `P = 0`: the product adds exact zeros). So a node's output is the same bits alone (AR) or in
//! any tree, and the same at any position of the batch.
//!
//! Launch: grid `(slots, n_kv, ⌈n / NB⌉)`, 256 threads, dynamic shared memory
//! `(64 + 2·max(128, 64 + n))·d·2` bytes ([`kernel_abi::attn_mma_smem_bytes`]); `NB` is
//! [`kernel_abi::attn_mma_nodes_per_block`]. Traffic per block: its
//! split's committed K/V rows once (`4·d` bytes per key), the tail rows once, `q` of its rows.

use kernel_abi::{attn_split_len_min, attn_splits_min, AttnTreeParams, NodeBatch, ATTN_TILE_KEYS, MAX_NODES};

use super::{batch_anc, batch_nodes};
use crate::device::convert::{f16_to_f32, pack_f16x2};
use crate::device::griddep::{grid_dependency_wait, launch_dependents};
use crate::device::load::{cp_async_16, cp_async_commit, cp_async_wait_all, cp_async_wait_all_but_one, ld_v4, U32x4};
use crate::device::math::{ex2, fma};
use crate::device::mma::{ldmatrix_x4, ldmatrix_x4_trans, mma_f16_16816};
use crate::device::shared::{dynamic_smem, smem_addr, st_shared_v4, Shared};
use crate::device::sync::sync_threads;
use crate::device::unroll::unroll_below;
use crate::device::warp::{shfl_xor_f32, shfl_xor_u32};
use crate::device::*;

const TILE: u32 = ATTN_TILE_KEYS;
/// Row tiles (of 16 rows) per block; warps `w` and `w + 4` share tile `w % 4`.
const ROW_TILES: u32 = 4;
/// Most nodes per block (`4·npm` with `npm ≤ 16`).
const MAX_BLOCK_NODES: usize = 64;
/// Rows of the Q plane in shared memory (4 row tiles of 16).
const Q_ROWS: u32 = 64;
/// 16-byte pieces of the Q plane per thread at the largest head dim: `Q_ROWS · 256 / 8 / 256`.
const Q_PIECES: usize = 8;

/// Per node of the block: first and end key of its split (`start = end` when the node has no
/// split `s`), its ancestor count.
#[link_section = ".shared"]
static NODE_START: Shared<[u32; MAX_BLOCK_NODES]> = Shared::uninit();
#[link_section = ".shared"]
static NODE_END: Shared<[u32; MAX_BLOCK_NODES]> = Shared::uninit();
#[link_section = ".shared"]
static NODE_CNT: Shared<[u32; MAX_BLOCK_NODES]> = Shared::uninit();
/// Per node of the block: its ancestors' batch indices in depth order.
#[link_section = ".shared"]
static NODE_ANC: Shared<[u8; MAX_BLOCK_NODES * MAX_NODES as usize]> = Shared::uninit();
/// The block's key range: `[min start, max end]` over its nodes.
#[link_section = ".shared"]
static RANGE: Shared<[u32; 2]> = Shared::uninit();

/// Byte offset of 16-byte chunk `c` of row `r` in a plane of `HD`-element f16 rows, XOR-swizzled
/// over 8 rows so the 8 row addresses of an `ldmatrix` tile hit different banks.
#[inline(always)]
fn swz<const HD: u32>(r: u32, c: u32) -> u32 {
    r * HD * 2 + ((c ^ (r & 7)) << 4)
}

/// Warp-uniform OR of a flag.
#[inline(always)]
fn warp_any(v: bool) -> bool {
    let mut x = v as u32;
    x |= shfl_xor_u32(x, 16);
    x |= shfl_xor_u32(x, 8);
    x |= shfl_xor_u32(x, 4);
    x |= shfl_xor_u32(x, 2);
    x |= shfl_xor_u32(x, 1);
    x != 0
}

/// The kernel body for head dim `HD` (see the module doc).
#[inline(always)]
unsafe fn tree_mma<const HD: u32>(
    batch: *const NodeBatch,
    q: *const f32,
    k_cache: *const u16,
    v_cache: *const u16,
    scratch: *mut f32,
    p: AttnTreeParams,
) {
    launch_dependents();
    // Up to the wait only the node batch is read (uploaded before the forward; no kernel writes
    // it): the nodes' split ranges and ancestor lists are built under the previous kernel's tail.
    let nb = batch_nodes(batch, p.n);
    let n_past = (*batch).n_past;
    if n_past as u64 + nb as u64 > p.ctx as u64 || p.head_dim != HD || p.n_head_kv == 0 {
        return; // the combine pass writes NaN (or the launcher refused the shape)
    }
    let (s, kvh) = (block_x(), block_y());
    let g = (p.n_head / p.n_head_kv).max(1);
    let npm = kernel_abi::attn_mma_nodes_per_tile(g);
    let nbk = ROW_TILES * npm;
    let node0 = block_z() * nbk;
    if node0 >= nb || kvh >= p.n_head_kv {
        return;
    }
    let tid = thread_x();
    let (lane, warp) = (lane_id(), warp_id());
    let (mt, dh) = (warp % ROW_TILES, warp / ROW_TILES);
    let row_elems = (p.n_head_kv * HD) as usize;

    // Per-node split ranges and ancestor lists.
    let starts = NODE_START.as_mut_ptr() as *mut u32;
    let ends = NODE_END.as_mut_ptr() as *mut u32;
    let cnts = NODE_CNT.as_mut_ptr() as *mut u32;
    let ancs = NODE_ANC.as_mut_ptr() as *mut u8;
    let range = RANGE.as_mut_ptr() as *mut u32;
    if tid < nbk {
        let node = node0 + tid;
        let (mut st, mut en, mut cnt) = (0u32, 0u32, 0u32);
        if node < nb {
            let anc = batch_anc(batch, node, nb);
            cnt = anc.count_ones();
            let keys = n_past + cnt;
            if s < attn_splits_min(keys, p.min_split_keys) {
                let len = attn_split_len_min(keys, p.min_split_keys);
                st = s * len;
                en = if st + len < keys { st + len } else { keys };
            }
            let (mut bits, mut d) = (anc, 0usize);
            while bits != 0 {
                *ancs.add(tid as usize * MAX_NODES as usize + d) = bits.trailing_zeros() as u8;
                bits &= bits - 1;
                d += 1;
            }
        }
        *starts.add(tid as usize) = st;
        *ends.add(tid as usize) = en;
        *cnts.add(tid as usize) = cnt;
    }

    sync_threads();
    // The block's key range, from the node batch alone (before the wait).
    if warp == 0 {
        let (mut lo, mut hi) = (u32::MAX, 0u32);
        let mut j = lane;
        while j < nbk {
            let (st, en) = (*starts.add(j as usize), *ends.add(j as usize));
            if en > st {
                lo = lo.min(st);
                hi = hi.max(en);
            }
            j += 32;
        }
        let mut o = 16;
        while o > 0 {
            lo = lo.min(shfl_xor_u32(lo, o));
            hi = hi.max(shfl_xor_u32(hi, o));
            o /= 2;
        }
        if lane == 0 {
            *range = lo;
            *range.add(1) = hi;
        }
    }
    sync_threads();
    let (lo, hi) = (*range, *range.add(1));
    if hi == 0 {
        return;
    }
    let qs = smem_addr(dynamic_smem());
    let ks = qs + Q_ROWS * HD * 2;
    let region = kernel_abi::attn_mma_region_rows(p.n);
    let vs = ks + region * HD * 2;
    let chunks = HD / 8;

    // Starts copying rows `base .. base + count` of the K and V planes into region rows
    // `at .. at + count` (one commit group per thread; wait with `cp_async_wait_*`).
    let load_rows = #[inline(always)]
    |base: u32, count: u32, at: u32| {
        let total = count * chunks;
        let mut e = tid;
        while e < total {
            let (r, c) = (e / chunks, e % chunks);
            let off = (base + r) as usize * row_elems + (kvh * HD + 8 * c) as usize;
            cp_async_16(ks + swz::<HD>(at + r, c), k_cache.add(off) as *const u8);
            cp_async_16(vs + swz::<HD>(at + r, c), v_cache.add(off) as *const u8);
            e += 256;
        }
        cp_async_commit();
    };
    // Committed tiles: one copy for every row of the block, double-buffered (region rows
    // `0..64` and `64..128`: the next tile is in flight while this one is multiplied).
    let shared_tile = |a: u32| a < hi && a + TILE <= n_past;

    grid_dependency_wait();
    // The first committed tile's copy starts before the Q plane is built (they are independent).
    if shared_tile(lo) {
        load_rows(lo, TILE, 0);
    }
    // The Q plane: row `16·mt + rr` = (node `mt·npm + rr / g`, head `rr % g`) as f16. Every
    // 16-byte piece a thread converts is requested before any is stored (one round trip to L2,
    // not one per piece: up to `HD / 32` pieces per thread).
    let mut xq = [[U32x4([0; 4]), U32x4([0; 4])]; Q_PIECES];
    unroll_below(Q_PIECES, |j| {
        let e = tid + 256 * j as u32;
        if e < Q_ROWS * chunks {
            let (r, c) = (e / chunks, e % chunks);
            let (rt, rr) = (r / 16, r % 16);
            let node = node0 + rt * npm + rr / g;
            if rr < npm * g && node < nb {
                let head = kvh * g + rr % g;
                let src = q.add(((node * p.n_head + head) * HD + 8 * c) as usize) as *const U32x4;
                xq[j] = [ld_v4(src), ld_v4(src.add(1))];
            }
        }
    });
    unroll_below(Q_PIECES, |j| {
        let e = tid + 256 * j as u32;
        if e < Q_ROWS * chunks {
            let (r, c) = (e / chunks, e % chunks);
            let (x0, x1) = (xq[j][0].0, xq[j][1].0);
            let v = [
                pack_f16x2(f32::from_bits(x0[0]), f32::from_bits(x0[1])),
                pack_f16x2(f32::from_bits(x0[2]), f32::from_bits(x0[3])),
                pack_f16x2(f32::from_bits(x1[0]), f32::from_bits(x1[1])),
                pack_f16x2(f32::from_bits(x1[2]), f32::from_bits(x1[3])),
            ];
            st_shared_v4(qs + swz::<HD>(r, c), v);
        }
    });

    // This lane's two rows (`g4 = lane / 4` and `+ 8` of the row tile): node (block-local) or none.
    let (g4, t4) = (lane / 4, lane % 4);
    let row_node = #[inline(always)]
    |rr: u32| -> u32 {
        if rr < npm * g && node0 + mt * npm + rr / g < nb {
            mt * npm + rr / g
        } else {
            u32::MAX
        }
    };
    let rn = [row_node(g4), row_node(g4 + 8)];

    const NT: usize = 16; // n8 tiles of the output per warp at HD = 256 (HD / 16 in general)
    let nt = (HD / 16) as usize;
    let mut acc = [[0.0f32; 4]; NT];
    let mut m_run = [f32::NEG_INFINITY; 2];
    let mut l_run = [0.0f32; 2];

    // One tile `a .. a + 64` for this warp's rows, the region holding rows `base ..`: logical key
    // `t < n_past` is region row `t − base`, key `n_past + d` (`d < cnt`) the row of ancestor
    // `anc[d]` (keys past them are masked; they read row 0). Only rows of node `only`
    // (block-local; `u32::MAX`: every node) take part.
    let mut tile_math = #[inline(always)]
    |a: u32, only: u32, base: u32, cnt: u32, anc: *const u8| {
        let slot = #[inline(always)]
        |j: u32| -> u32 {
            let t = a + j;
            if t < n_past {
                t - base
            } else if t - n_past < cnt {
                n_past - base + *anc.add((t - n_past) as usize) as u32
            } else {
                0
            }
        };
        let mut part = [false; 2];
        let mut kend = [0u32; 2];
        unroll_below(2, |r| {
            let nl = rn[r];
            if nl != u32::MAX && (only == u32::MAX || nl == only) {
                let (st, en) = (*starts.add(nl as usize), *ends.add(nl as usize));
                if st <= a && a < en {
                    part[r] = true;
                    kend[r] = en - a;
                }
            }
        });
        if !warp_any(part[0] || part[1]) {
            return;
        }
        // 1. Scores.
        let mut sc = [[0.0f32; 4]; 8];
        let mut kslot = [0u32; 4];
        unroll_below(4, |jp| kslot[jp] = slot(16 * jp as u32 + 8 * (lane / 16) + lane % 8));
        let mut kk = 0;
        while kk < HD / 16 {
            let af = ldmatrix_x4(qs + swz::<HD>(16 * mt + lane % 16, 2 * kk + lane / 16));
            unroll_below(4, |jp| {
                let b = ldmatrix_x4(ks + swz::<HD>(kslot[jp], 2 * kk + (lane / 8) % 2));
                mma_f16_16816(&mut sc[2 * jp], af, [b[0], b[1]]);
                mma_f16_16816(&mut sc[2 * jp + 1], af, [b[2], b[3]]);
            });
            kk += 1;
        }
        // 2. Online softmax per row.
        let mut alpha = [1.0f32; 2];
        let mut pk = [[0u32; 2]; 8];
        unroll_below(2, |r| {
            let mut mx = f32::NEG_INFINITY;
            unroll_below(8, |j| {
                unroll_below(2, |e| {
                    let key = 8 * j as u32 + 2 * t4 + e as u32;
                    let v = if part[r] && key < kend[r] { sc[j][2 * r + e] * p.scale_log2 } else { f32::NEG_INFINITY };
                    sc[j][2 * r + e] = v;
                    mx = mx.max(v);
                });
            });
            mx = mx.max(shfl_xor_f32(mx, 1));
            mx = mx.max(shfl_xor_f32(mx, 2));
            let m_new = m_run[r].max(mx);
            let live = part[r] && m_new != f32::NEG_INFINITY;
            let mut sum = 0.0f32;
            unroll_below(8, |j| {
                let (p0, p1) =
                    if live { (ex2(sc[j][2 * r] - m_new), ex2(sc[j][2 * r + 1] - m_new)) } else { (0.0, 0.0) };
                let h = pack_f16x2(p0, p1);
                pk[j][r] = h;
                sum += f16_to_f32(h as u16);
                sum += f16_to_f32((h >> 16) as u16);
            });
            sum += shfl_xor_f32(sum, 1);
            sum += shfl_xor_f32(sum, 2);
            if live {
                alpha[r] = ex2(m_run[r] - m_new);
                l_run[r] = fma(l_run[r], alpha[r], sum);
                m_run[r] = m_new;
            }
        });
        // 3. acc ← acc·α + P·V over this warp's half of the dims.
        unroll_below(nt, |d| {
            acc[d][0] *= alpha[0];
            acc[d][1] *= alpha[0];
            acc[d][2] *= alpha[1];
            acc[d][3] *= alpha[1];
        });
        let mut vslot = [0u32; 4];
        unroll_below(4, |kk| vslot[kk] = slot(16 * kk as u32 + 8 * ((lane / 8) % 2) + lane % 8));
        unroll_below(4, |kk| {
            let af = [pk[2 * kk][0], pk[2 * kk][1], pk[2 * kk + 1][0], pk[2 * kk + 1][1]];
            unroll_below(8, |dp| {
                if dp < nt / 2 {
                    let c = dh * (HD / 16) + 2 * dp as u32 + lane / 16;
                    let b = ldmatrix_x4_trans(vs + swz::<HD>(vslot[kk], c));
                    mma_f16_16816(&mut acc[2 * dp], af, [b[0], b[1]]);
                    mma_f16_16816(&mut acc[2 * dp + 1], af, [b[2], b[3]]);
                }
            });
        });
    };

    // The committed tiles (the first one's copy started above).
    let mut a = lo;
    let mut buf = 0u32;
    while shared_tile(a) {
        if shared_tile(a + TILE) {
            load_rows(a + TILE, TILE, TILE * (buf ^ 1));
            cp_async_wait_all_but_one();
        } else {
            cp_async_wait_all();
        }
        sync_threads();
        // Region row of key `t` is `t − (a − 64·buf)`.
        tile_math(a, u32::MAX, a - TILE * buf, 0, ancs);
        sync_threads();
        a += TILE;
        buf ^= 1;
    }
    // The tail: rows `base .. n_past + nb` (≤ 64 + nb) once, each node's keys addressed through
    // its ancestors.
    if a < hi {
        let base = if a < n_past { a } else { n_past };
        load_rows(base, n_past + nb - base, 0);
        cp_async_wait_all();
        sync_threads();
        let mut ta = a;
        while ta < hi {
            let mut qn = 0;
            while qn < npm {
                let nl = mt * npm + qn;
                if node0 + nl < nb {
                    let cnt = *cnts.add(nl as usize);
                    tile_math(ta, nl, base, cnt, ancs.add(nl as usize * MAX_NODES as usize));
                }
                qn += 1;
            }
            ta += TILE;
        }
    }

    // Partials of the rows that have split `s`.
    let ml = scratch.add(p.n as usize * p.n_head as usize * p.slots as usize * HD as usize);
    unroll_below(2, |r| {
        let nl = rn[r];
        if nl != u32::MAX && *ends.add(nl as usize) > *starts.add(nl as usize) {
            let rr = g4 + 8 * r as u32;
            let node = node0 + nl;
            let head = kvh * g + rr % g;
            let slot = ((node * p.n_head + head) * p.slots + s) as usize;
            unroll_below(nt, |d| {
                let dim = (dh * (HD / 2) + 8 * d as u32 + 2 * t4) as usize;
                let o = scratch.add(slot * HD as usize + dim);
                *o = acc[d][2 * r];
                *o.add(1) = acc[d][2 * r + 1];
            });
            if dh == 0 && t4 == 0 {
                *ml.add(2 * slot) = m_run[r];
                *ml.add(2 * slot + 1) = l_run[r];
            }
        }
    });
}

macro_rules! attn_tree_mma_kernels {
    ($($name:ident = $hd:literal),*) => {$(
        /// [`tree_mma`] for this head dim.
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
            tree_mma::<$hd>(batch, q, k_cache, v_cache, scratch, p)
        }
    )*};
}

attn_tree_mma_kernels!(attn_tree_mma_hd64 = 64, attn_tree_mma_hd128 = 128, attn_tree_mma_hd256 = 256);
