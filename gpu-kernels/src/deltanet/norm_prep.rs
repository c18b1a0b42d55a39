//! `gdn_norm_prep_dv{64,128,256}`: the DeltaNet gated RMSNorm fused with the out projection's
//! input preparation — bitwise [`super::gdn_gated_norm`] followed by
//! [`crate::qmatmul::prep::qmm_prep_x`], in one launch and without the f32 `out` rows.
//!
//! Math, per node `c` (a column of the prep) and value head `j`:
//! `y[j·d_v + i] = ((o_j[i] · r_j) · norm_w[i]) · silu(z_j[i])`, `r_j = 1/√(Σ_i o_j[i]² / d_v + eps)`,
//! then `qmm_prep_x` of the row `y [n_v·d_v]` (its power-of-two scale from `max |y|`, the f16
//! fragment and core-matrix planes, optionally the bf16 pair, the unit and group sums).
//!
//! Every prep block needs the whole row's max, so every block `(c, chunk)` recomputes the gated
//! norm of its whole row (reads `o` and `z` of the node, mostly L2 hits after the first block)
//! and writes only its own chunk. The reduction is `gdn_gated_norm`'s exactly: warp `w` owns the
//! heads `j = w, w + 8, …`, lane `l` the columns `i = l, l + 32, …` of a head (`fma` chain in
//! that order, then [`super::head_inv_rms`]'s butterfly, `div.rn`, `sqrt.rn`), and `y` is
//! [`super::gated`] of the same operands, so `y` is bitwise `gdn_gated_norm`'s output and the
//! prepared activations bitwise those of `gdn_gated_norm` + `qmm_prep_x` (same max, same scale,
//! same unit writer [`write_units`]).
//!
//! Two paths, chosen per launch from the shape (uniform over the block):
//! * registers (`d_v ≤ 32·CPL` and `⌈n_v/8⌉ ≤ 24/CPL` heads per warp; the 27B's `n_v = 48`,
//!   `d_v = 128` with `CPL = 4`: 6 heads × 4 values per thread): each thread loads its `CPL`
//!   norm weights before the wait (model data), then its ≤ 24 values of `o` and `z`, all in
//!   flight together; `r_j`, `y`, the max come from registers, `y` is staged in shared memory
//!   for the unit writer;
//! * otherwise (longer rows): `gdn_gated_norm`'s loop per head, `r_j` kept in shared memory
//!   (`n_v ≤ GDN_NORM_PREP_MAX_HEADS`, checked by the host), and the unit writer recomputes its `y` from `o`,
//!   `z`, `norm_w` (L2).
//!
//! Launch: grid `(n, ⌈n_v·d_v / 1024⌉)`, 256 threads (as `qmm_prep_x`). Arguments: `o` the
//! node rows `[n][n_v·d_v]` (dense: the scratch's `o` rows of this plane's nodes), `z` node rows
//! at stride `g.z_stride`, `norm_w [d_v]`, the prep outputs as `qmm_prep_x`'s; `p.in_features =
//! n_v·d_v`. Traffic: every block reads its node's `o` and `z` (`8·n_v·d_v` bytes, L2 after the
//! first) and `norm_w`; writes like `qmm_prep_x` (`n·in·(2 or 6) + n·in/8` bytes). The f32 `y`
//! is never written to global memory.

use kernel_abi::{GdnParams, QmmPrepParams, GDN_NORM_PREP_MAX_HEADS};

use super::{gated, head_inv_rms};
use crate::device::cluster::{cluster_arrive, cluster_wait, ld_cluster_u32, map_to_rank};
use crate::device::griddep::{grid_dependency_wait, launch_dependents};
use crate::device::math::{fma, silu};
use crate::device::shared::{smem_addr, Shared};
use crate::device::unroll::unroll_below;
use crate::device::*;
use crate::qmatmul::prep::{
    block_max_bits, publish_column_scale, store_column_scale, write_units, PREP_NORM_ROW, REG_ELEMS, STAGED_MAX,
};

const _: () = assert!(GDN_NORM_PREP_MAX_HEADS as usize <= STAGED_MAX);

/// The kernel body for value heads of at most `32·CPL` columns (lane `l` holds columns
/// `l + 32r`, `r < CPL`, of each of its heads). See the module doc.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn norm_prep<const CPL: usize>(
    o: *const f32,
    z: *const f32,
    norm_w: *const f32,
    xh: *mut u16,
    xb_hi: *mut u16,
    xb_lo: *mut u16,
    xcm: *mut u16,
    xscale: *mut f32,
    xsum: *mut f32,
    p: QmmPrepParams,
    g: GdnParams,
) {
    // Chained like `qmm_prep_x`: the out projection may start loading its weights; nothing is
    // touched before the recurrence (which wrote `o`) has finished.
    launch_dependents();
    let c = block_x();
    if c >= p.n {
        return;
    }
    let k = p.in_features as usize;
    let (nv, dv) = (g.n_v as usize, g.d_v as usize);
    let (warp, lane) = (warp_id() as usize, lane_id() as usize);
    let registers = dv <= 32 * CPL && nv.div_ceil(8) <= REG_ELEMS / CPL;
    // Registers path: the lane's norm weights (columns `lane + 32r`, the same for each of its
    // heads) are model data no kernel writes, loaded before the wait: in a chained launch they
    // arrive under the previous kernel's tail (they are not in L2 after a step's weights).
    let mut wcol = [0.0f32; CPL];
    if registers {
        unroll_below(CPL, |r| {
            if lane + 32 * r < dv {
                wcol[r] = *norm_w.add(lane + 32 * r);
            }
        });
    }
    grid_dependency_wait();
    let o = o.add(c as usize * k);
    let z = z.add(c as usize * g.z_stride as usize);
    let row = PREP_NORM_ROW.as_mut_ptr() as *mut f32;
    if registers {
        // Slot `q = m·CPL + r`: head `j = warp + 8m`, column `i = lane + 32r` (when `j < n_v`,
        // `i < d_v`). Every load first, then the arithmetic; `q` is a constant at each call of
        // `each_slot`, so the arrays stay in registers.
        let at = |q: usize| (warp + 8 * (q / CPL), lane + 32 * (q % CPL));
        let mut ov = [0.0f32; REG_ELEMS];
        let mut zv = [0.0f32; REG_ELEMS];
        let mut wv = [0.0f32; REG_ELEMS];
        each_slot(|q| {
            let (j, i) = at(q);
            if j < nv && i < dv {
                ov[q] = *o.add(j * dv + i);
                zv[q] = *z.add(j * dv + i);
                wv[q] = wcol[q % CPL];
            }
        });
        // `r_j` of head `m` at `inv[m]`: the lane's fma chain over its columns in order, then the
        // butterfly (warp-uniform condition: every lane takes part).
        let mut inv = [0.0f32; REG_ELEMS];
        let mut ss = 0.0f32;
        each_slot(|q| {
            let (j, i) = at(q);
            if q % CPL == 0 {
                ss = 0.0;
            }
            if i < dv {
                ss = fma(ov[q], ov[q], ss);
            }
            if q % CPL == CPL - 1 && j < nv {
                inv[q / CPL] = head_inv_rms(ss, &g);
            }
        });
        let mut mx = 0u32;
        each_slot(|q| {
            let (j, i) = at(q);
            if j < nv && i < dv {
                let y = gated(ov[q], inv[q / CPL], wv[q], silu(zv[q]));
                *row.add(j * dv + i) = y;
                mx = mx.max(y.to_bits() & 0x7fff_ffff);
            }
        });
        // The barrier in `publish_column_scale` also orders the row's shared stores before the reads.
        let inv = publish_column_scale(c, mx, xscale);
        write_units(c, k, inv, |e| *row.add(e), xh, xb_hi, xb_lo, xcm, xsum, p);
        return;
    }
    // Long rows: `gdn_gated_norm`'s loop per head; `r_j` to shared memory for the unit writer.
    let invs = row;
    let mut mx = 0u32;
    let mut j = warp;
    while j < nv {
        let (oh, zh) = (o.add(j * dv), z.add(j * dv));
        let mut ss = 0.0f32;
        let mut i = lane;
        while i < dv {
            let v = *oh.add(i);
            ss = fma(v, v, ss);
            i += 32;
        }
        let inv = head_inv_rms(ss, &g);
        if lane == 0 {
            *invs.add(j) = inv;
        }
        let mut i = lane;
        while i < dv {
            let y = gated(*oh.add(i), inv, *norm_w.add(i), silu(*zh.add(i)));
            mx = mx.max(y.to_bits() & 0x7fff_ffff);
            i += 32;
        }
        j += 8;
    }
    let inv = publish_column_scale(c, mx, xscale);
    let y_at = |e: usize| -> f32 {
        let j = e / dv;
        gated(*o.add(e), *invs.add(j), *norm_w.add(e - j * dv), silu(*z.add(e)))
    };
    write_units(c, k, inv, y_at, xh, xb_hi, xb_lo, xcm, xsum, p);
}

/// Calls `f(q)` for `q = 0 .. REG_ELEMS`, each `q` a compile-time constant at its call (a
/// runtime index would put the register arrays in local memory).
#[inline(always)]
fn each_slot(mut f: impl FnMut(usize)) {
    macro_rules! calls {
        ($($q:literal)*) => { $(f($q);)* };
    }
    const _: () = assert!(REG_ELEMS == 24);
    calls!(0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23);
}

macro_rules! norm_prep_kernel {
    ($name:ident, $cpl:literal) => {
        #[no_mangle]
        // ≤ 128 registers (104 at `dv128`, no spills): two blocks per SM, so a 23-node
        // forward's 23 × 6 blocks run in one wave (uncapped, 130 registers: one block per SM,
        // 132 slots).
        #[link_section = "nvvm:maxntid=256;minctasm=2"]
        #[allow(clippy::too_many_arguments)]
        pub unsafe extern "ptx-kernel" fn $name(
            o: *const f32,
            z: *const f32,
            norm_w: *const f32,
            xh: *mut u16,
            xb_hi: *mut u16,
            xb_lo: *mut u16,
            xcm: *mut u16,
            xscale: *mut f32,
            xsum: *mut f32,
            p: QmmPrepParams,
            g: GdnParams,
        ) {
            norm_prep::<$cpl>(o, z, norm_w, xh, xb_hi, xb_lo, xcm, xscale, xsum, p, g)
        }
    };
}

norm_prep_kernel!(gdn_norm_prep_dv64, 2);
norm_prep_kernel!(gdn_norm_prep_dv128, 4);
norm_prep_kernel!(gdn_norm_prep_dv256, 8);

/// This block's share of a column's max (bits) in [`gdn_norm_prep_cluster_dv128`], read by the
/// cluster's other blocks.
#[link_section = ".shared"]
static CLUSTER_MAX: Shared<u32> = Shared::uninit();

/// `gdn_norm_prep` for `d_v = 128` with the column's blocks as one thread-block cluster: grid
/// `(n, chunks)`, cluster `(1, chunks, 1)` (`chunks = n_v·128 / 1024 ≤ 8`), 256 threads. Block
/// `(c, b)` computes only its own chunk — heads `8b .. 8b + 8`, warp `w` head `8b + w`, lane `l`
/// the columns `l + 32r`, `r < 4`: each head's `r_j` is `norm_prep`'s (the lane's fma chain in
/// column order, then `head_inv_rms`), and `y` the same `gated` of the same operands — and the
/// column's max is the max of the blocks' maxima, exchanged through distributed shared memory
/// (an integer max: the same bits as one block's scan of the whole row). So the prepared
/// activations are bitwise `norm_prep`'s, each block doing a sixth of its work (the 27B's 48
/// heads): 4 values of `o` and `z` per thread instead of 24, four `silu` instead of 24.
#[no_mangle]
#[link_section = "nvvm:maxntid=256;minctasm=2"]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "ptx-kernel" fn gdn_norm_prep_cluster_dv128(
    o: *const f32,
    z: *const f32,
    norm_w: *const f32,
    xh: *mut u16,
    xb_hi: *mut u16,
    xb_lo: *mut u16,
    xcm: *mut u16,
    xscale: *mut f32,
    xsum: *mut f32,
    p: QmmPrepParams,
    g: GdnParams,
) {
    const DV: usize = 128;
    const CPL: usize = DV / 32;
    const _: () = assert!(8 * DV == kernel_abi::QMM_PREP_CHUNK as usize);
    launch_dependents();
    // A cluster is one column's blocks: they leave together.
    let c = block_x();
    if c >= p.n {
        return;
    }
    let (warp, lane) = (warp_id() as usize, lane_id() as usize);
    let (nv, k) = (g.n_v as usize, p.in_features as usize);
    let j = 8 * block_y() as usize + warp;
    // The norm weights are model data no kernel writes: loaded before the wait.
    let mut wv = [0.0f32; CPL];
    let mut r = 0;
    while r < CPL {
        wv[r] = *norm_w.add(lane + 32 * r);
        r += 1;
    }
    grid_dependency_wait();
    let o = o.add(c as usize * k);
    let z = z.add(c as usize * g.z_stride as usize);
    let row = PREP_NORM_ROW.as_mut_ptr() as *mut f32;
    let mut mx = 0u32;
    if j < nv {
        let (mut ov, mut zv) = ([0.0f32; CPL], [0.0f32; CPL]);
        let mut r = 0;
        while r < CPL {
            ov[r] = *o.add(j * DV + lane + 32 * r);
            zv[r] = *z.add(j * DV + lane + 32 * r);
            r += 1;
        }
        let mut ss = 0.0f32;
        let mut r = 0;
        while r < CPL {
            ss = fma(ov[r], ov[r], ss);
            r += 1;
        }
        let inv = head_inv_rms(ss, &g);
        let mut r = 0;
        while r < CPL {
            let y = gated(ov[r], inv, wv[r], silu(zv[r]));
            // Staged at its place within the block's chunk (1024 values: any row length).
            *row.add(warp * DV + lane + 32 * r) = y;
            mx = mx.max(y.to_bits() & 0x7fff_ffff);
            r += 1;
        }
    }
    // The block's max (one barrier, which also orders the row's shared stores before the unit
    // writer's reads), then the column's over the cluster.
    let m_block = block_max_bits(mx);
    let word = CLUSTER_MAX.as_mut_ptr();
    if thread_x() == 0 {
        *word = m_block;
    }
    cluster_arrive();
    cluster_wait();
    let mut m = 0u32;
    let mut rank = 0;
    while rank < grid_dim_y() {
        m = m.max(ld_cluster_u32(map_to_rank(smem_addr(word as *const u32), rank)));
        rank += 1;
    }
    // Every block has read every peer's word once all have arrived here: only then may one leave.
    cluster_arrive();
    let inv = store_column_scale(c, m, xscale);
    let chunk0 = block_y() as usize * 8 * DV;
    write_units(c, k, inv, |e| *row.add(e - chunk0), xh, xb_hi, xb_lo, xcm, xsum, p);
    cluster_wait();
}
