//! `qmm_<format>_nt<T>`: tensor-core `y[c, o] = Σ_i W[o, i] · x[c, i]` for up to `8·T` token
//! columns, every weight format of [`super::formats`] — the warp-level `mma.sync` kernels (the
//! multi-tile kernels listed in `kernel_abi::qmm_wgmma` are in [`super::tile_wg`] instead).
//!
//! Geometry: 256-thread blocks of 8 warps; block `b` of the 1-D grid computes row block `r` and
//! K split `s` of that row block's `k` splits (`kernel_abi::qmm_block_range`: the plan's leading
//! row blocks unsplit, the others in `ksplit` splits — fixed by the shape and the device), and
//! its warp `w` output rows `16·(8·r + w) .. +16` over the split's weight blocks. W is packed per 16-row group in lane order
//! (`host::gpu::qmatmul::PackedWeight::pack`, layout in `kernel_abi::qmm_lanes`): lane `(g, t)`
//! loads exactly the bytes it multiplies — its private 16-byte chunks, which the 32 lanes read
//! as 512 contiguous bytes per load, and the per-row headers of rows `g` and `g + 8` — with
//! plain `ld.global.nc` straight into registers. The loads of the next stage (`PER_STAGE`
//! blocks) are issued before a stage's math, so they are in flight while it computes; no
//! barriers. (v5 fetched each warp's stage with one `cp.async.bulk` into a shared-memory ring:
//! that path alone, with no math at all, reached only 0.55–0.61 of the copy bandwidth at these
//! shapes — see docs/perf/qmatmul.md, session 4; a ring filled by per-lane `cp.async`, session 7,
//! was slower too: these kernels are issue-bound at n = 1 and every copy instruction costs.)
//! For each 32-element unit and each tile of 8 columns the lane reads 16 bytes of prepared x
//! (two k16 steps of B fragments) and issues `mma.m16n8k16`: from global memory (L1), or —
//! multi-tile kernels of the formats listed in `kernel_abi::qmm_stages_x` — from a chunk of
//! `QMM_XS_CHUNK_UNITS` units that the block copies into dynamic shared memory once (two
//! barriers per chunk).
//!
//! Chained launches (`device::griddep`): the kernel lets the next one launch at entry, issues its
//! first stage of weight loads, and only then waits for the previous kernel; x, the sums, the
//! partials, the counters and y are touched after that wait, x through coherent loads.
//!
//! * Scaled formats (Q6_K, F16, BF16, F32) accumulate straight into the f32 accumulators.
//! * Q8_0 takes each unit's product `P` (A = the exact quants `q`) from a zero accumulator and
//!   adds `d·P` (one f32 fma per output).
//! * Q4_K and Q5_K accumulate straight into the f32 accumulators too, with the weights' scaled
//!   part rounded to f16 as A (`f16(q·f16(d·sc_u))`: one `fma.f16x2` per two weights, the
//!   block's `d` folded into the unit scales), after one more tensor-core step per super-block:
//!   the unit mins times the unit sums (`formats::KScales`): no per-block product from zero,
//!   wait or f32 finish.
//!
//! Lanes of padding columns (c ≥ n) load column `n − 1`'s x, so no load is predicated and nothing
//! is zeroed per stage; their results are never stored.
//!
//! Results go to `y` through [`super::epilogue`]: directly, or with `ksplit > 1` through
//! per-split partial sums that the last block of each row group adds in split order; fused
//! SwiGLU kernels (`qmm_<format>_swiglu_nt<T>`, W from `host::gpu::qmatmul::PackedWeight::pack_gate_up`)
//! write `silu(gate)·up` there instead of both products.
//!
//! Traffic: weight bytes once, plus x (`8·T·in·2` per 128-row block, mostly L1/L2 hits),
//! plus `2·ksplit·n·out·4` partial bytes when split.

use kernel_abi::{
    qmm_block_range, qmm_xs_smem_bytes, QmmParams, QMM_ROWS_PER_BLOCK, QMM_ROWS_PER_WARP, QMM_XS_CHUNK_UNITS,
};

use super::formats::{add_unit_product, Bf16, Format, F16, F32W, Q4K, Q5K, Q6K, Q8_0};
use crate::device::griddep::{grid_dependency_wait, launch_dependents};
use crate::device::load::{ld_u32, ld_v4, U32x4};
use crate::device::mma::{mma_bf16_16816, mma_f16_16816, mma_f16_16816_ordered};
use crate::device::shared::{dynamic_smem, ld_shared_v4, smem_addr, st_shared_v4};
use crate::device::sync::sync_threads;
use crate::device::*;

/// The kernel body, monomorphised per format `F`, tile count `T` and epilogue (`SWIGLU`: the
/// fused gate/up epilogue of `QmmParams::swiglu_ff`; a separate kernel so that the plain
/// kernels' code is not touched by it — a runtime flag changed their register allocation).
#[inline(always)]
unsafe fn qmm<F: Format, const T: usize, const SWIGLU: bool, const ACCUM: bool>(
    w: *const u8,
    xh: *const u16,
    xb_hi: *const u16,
    xb_lo: *const u16,
    xscale: *const f32,
    xsum: *const f32,
    partial: *mut f32,
    counters: *mut u32,
    y: *mut f32,
    ymax: *mut u32,
    p: QmmParams,
) {
    // Chained launches: the next kernel may be scheduled as soon as every block of this one runs.
    launch_dependents();
    let lane = lane_id();
    let (g, t) = (lane / 4, lane % 4);
    let xs_on = qmm_xs_smem_bytes(T as u32, F::STAGES_X) > 0;
    let blocks = p.in_features / F::ELEMS;
    let (rb, b0, b1) = block_range(&p, blocks);
    let row0 = rb * QMM_ROWS_PER_BLOCK + warp_id() * QMM_ROWS_PER_WARP;
    let units = F::ELEMS / 32;
    let k = p.in_features as usize;

    // Packed W: row group `row0 / 16`, block `b` (16 rows in lane order, `16·BYTES` bytes) at
    // `((row0/16)·blocks + b)·16·BYTES`. Offsets are u32 (the host keeps packed W < 4 GiB).
    let block16 = 16 * F::BYTES;
    let group = w.add(((row0 / 16) * blocks * block16) as usize);
    let stages = (b1 - b0).div_ceil(F::PER_STAGE);
    // The x column this lane loads (`g`, or `n − 1` for padding columns) and the unit-sum pair.
    let xcol = g.min(p.n - 1) as usize;

    // The lane's data of stage `st` (blocks past `b1` are not loaded): plain 16-byte loads
    // straight into registers, coalesced by the lane layout (`kernel_abi::qmm_lanes`).
    let load_stage = #[inline(always)]
    |st: u32| load_stage::<F, false>(group, b0 + st * F::PER_STAGE, b1, lane);

    // Multi-tile kernels with f16 activations stage x in shared memory per chunk of
    // `QMM_XS_CHUNK_UNITS` units (all 8 warps read the same columns): one cooperative copy per
    // chunk instead of every warp loading every fragment from L1, and the fragments are read just
    // before their mma. The values are the same as in global memory, so results do not change.
    let xs_smem = smem_addr(dynamic_smem());
    let stage_x_chunk = #[inline(always)]
    |unit0: usize, nunits: usize| {
        let n = p.n as usize;
        let total = nunits * n * 4;
        let mut i = thread_x() as usize;
        while i < total {
            let (u, rem) = (i / (4 * n), i % (4 * n));
            let (col, q) = (rem / 4, rem % 4);
            let v = ld_v4(xh.add(col * k + (unit0 + u) * 32 + 8 * q) as *const U32x4).0;
            st_shared_v4(xs_smem + (2 * ((u * 8 * T + col) * 32 + 8 * q)) as u32, v);
            i += block_dim_x() as usize;
        }
    };
    let mut acc = [[0.0f32; 4]; T];
    // Super-block formats: the odd units' products (`super::epilogue::add_odd_units`).
    let mut acc_odd = [[0.0f32; 4]; T];
    // The math of stage `st` on its lane data `cur` (`chunk_unit0`: first unit of the staged x).
    // The `#[inline(always)]` on this file's closures is part of the measured code generation:
    // without it LLVM inlines differently (other register counts, and `qmm_f16_nt3` spills).
    let mut stage_math = #[inline(always)]
    |st: u32, cur: &[F::Lane; MAX_STAGE_BLOCKS], chunk_unit0: usize| {
        let b = b0 + st * F::PER_STAGE;
        let b_end = (b + F::PER_STAGE).min(b1);
        // With one tile (n ≤ 8, the decode case) the x fragments of the whole stage are loaded
        // before any of its math, so their latency overlaps instead of stalling every unit.
        const MAX_STAGE_UNITS: usize = 8;
        let stage_units = (F::PER_STAGE * units) as usize;
        let mut xs = [[0u32; 4]; MAX_STAGE_UNITS];
        let mut xls = [[0u32; 4]; MAX_STAGE_UNITS];
        // Per-stage base pointers; units then sit at compile-time offsets (immediate addresses).
        let unit0 = (b * units) as usize;
        let valid_units = ((b_end - b) * units) as usize;
        // Group sums (K-quant mins steps): this lane's B fragment `[hi, lo]` of block `bb`,
        // column `c`: two words at `prep::group_sum_slot(8·bb + 2t, c)` and 64 halves on.
        let sums_h = xsum as *const u16;
        let sum_frag = #[inline(always)]
        |bb: usize, col: usize| {
            let at = super::prep::group_sum_slot(8 * bb + 2 * t as usize, col);
            [ld_u32(sums_h.add(at) as *const u32), ld_u32(sums_h.add(at + 64) as *const u32)]
        };
        let mut gs = [[0u32; 2]; MAX_STAGE_BLOCKS];
        // Lanes of padding columns (c ≥ n) load column `n − 1` (or 0) instead of nothing: the
        // loads stay unpredicated and nothing is zeroed per stage; a padding column's results
        // are never stored, and a column's products never mix with another's.
        if T == 1 && F::SUPER {
            let mut i = 0;
            while i < MAX_STAGE_BLOCKS {
                if i < F::PER_STAGE as usize && (F::PER_STAGE == 1 || b as usize + i < b_end as usize) {
                    gs[i] = sum_frag(b as usize + i, xcol);
                }
                i += 1;
            }
        }
        if T == 1 {
            let at = xcol * k + unit0 * 32 + 8 * t as usize;
            let (hbase, lbase) = (xh.add(at), xb_lo.add(at));
            let bbase = xb_hi.add(at);
            let mut i = 0;
            while i < MAX_STAGE_UNITS {
                if i < stage_units && (F::PER_STAGE == 1 || i < valid_units) {
                    if F::BF16 {
                        xs[i] = ld_v4(bbase.add(32 * i) as *const U32x4).0;
                        xls[i] = ld_v4(lbase.add(32 * i) as *const U32x4).0;
                    } else {
                        xs[i] = ld_v4(hbase.add(32 * i) as *const U32x4).0;
                    }
                }
                i += 1;
            }
        }
        // B fragments (both k16 steps) of unit `unit` (`u` of stage block `i_blk`) for every tile:
        // column `8·tile + g`, and for BF16 pairs the lo parts. One tile: from the stage prefetch.
        // Padding columns (c ≥ n, never written by `qmm_prep_x`) load column n − 1: same cache
        // lines, so x traffic stays proportional to n.
        let x_frags = #[inline(always)]
        |i_blk: u32, u: u32, unit: usize| {
            let mut xf = [[0u32; 4]; T];
            let mut xl = [[0u32; 4]; T];
            if T == 1 {
                let xi = (i_blk * units + u) as usize;
                xf[0] = xs[xi];
                xl[0] = xls[xi];
            } else {
                let mut tile = 0;
                while tile < T {
                    let col = (8 * tile + g as usize).min(p.n as usize - 1);
                    let at = col * k + unit * 32 + 8 * t as usize;
                    if F::BF16 {
                        xf[tile] = ld_v4(xb_hi.add(at) as *const U32x4).0;
                        xl[tile] = ld_v4(xb_lo.add(at) as *const U32x4).0;
                    } else if xs_on {
                        // Staged chunk: unit-major, 8·T columns of 32 halves (512 contiguous bytes
                        // per warp load: no bank conflict).
                        let at = ((unit - chunk_unit0) * 8 * T + col) * 32 + 8 * t as usize;
                        xf[tile] = ld_shared_v4(xs_smem + 2 * at as u32);
                    } else {
                        xf[tile] = ld_v4(xh.add(at) as *const U32x4).0;
                    }
                    tile += 1;
                }
            }
            (xf, xl)
        };
        unroll_stage_blocks::<F>(
            #[inline(always)]
            |i_blk| {
                let bb = b + i_blk;
                if bb >= b_end {
                    return;
                }
                let lanedata = cur[i_blk as usize];
                if F::SUPER {
                    // K-quant super-block: the block's mins step, then the scaled fragments `ŵ`
                    // straight into the running sums (see `formats::KScales`).
                    let ks = F::super_scales(&lanedata, t);
                    let mut tile = 0;
                    while tile < T {
                        let col = (8 * tile + g as usize).min(p.n as usize - 1);
                        let bs = if T == 1 { gs[i_blk as usize] } else { sum_frag(bb as usize, col) };
                        mma_f16_16816_ordered(&mut acc[tile], ks.mins_frag(), bs);
                        tile += 1;
                    }
                    unroll_units::<F>(
                        #[inline(always)]
                        |u| {
                            let (xf, _) = x_frags(i_blk, u, (bb * units + u) as usize);
                            let d = super::epilogue::unit_sums::<F, T>(u, &mut acc, &mut acc_odd);
                            let a0 = ks.scale_frag(F::frag(&lanedata, u, 0), u);
                            let mut tile = 0;
                            while tile < T {
                                mma_f16_16816_ordered(&mut d[tile], a0, [xf[tile][0], xf[tile][1]]);
                                tile += 1;
                            }
                            let a1 = ks.scale_frag(F::frag(&lanedata, u, 1), u);
                            let mut tile = 0;
                            while tile < T {
                                mma_f16_16816_ordered(&mut d[tile], a1, [xf[tile][2], xf[tile][3]]);
                                tile += 1;
                            }
                        },
                    );
                    return;
                }
                unroll_units::<F>(
                    #[inline(always)]
                    |u| {
                        let unit = (bb * units + u) as usize;
                        // B fragments of both k16 steps for every tile: column = 8·tile + g.
                        let (xf, xl) = x_frags(i_blk, u, unit);
                        if F::PRODUCTS_FROM_ZERO {
                            // P = Σ q·x̂ over the unit from a zero accumulator (A = q exact),
                            // then acc += d·P per (row, column).
                            let mut pu = [[0.0f32; 4]; T];
                            let mut h = 0;
                            while h < 2 {
                                let a = F::frag(&lanedata, u, h);
                                let mut tile = 0;
                                while tile < T {
                                    let bf = [xf[tile][2 * h as usize], xf[tile][2 * h as usize + 1]];
                                    mma_f16_16816_ordered(&mut pu[tile], a, bf);
                                    tile += 1;
                                }
                                h += 1;
                            }
                            add_unit_product(F::unit_scales(&lanedata, u), &pu, &mut acc);
                            return;
                        }
                        let d = super::epilogue::unit_sums::<F, T>(u, &mut acc, &mut acc_odd);
                        let mut step = #[inline(always)]
                        |h: u32| {
                            let a = F::frag(&lanedata, u, h);
                            let a_lo = F::frag_lo(&lanedata, u, h);
                            let mut tile = 0;
                            while tile < T {
                                let bf = [xf[tile][2 * h as usize], xf[tile][2 * h as usize + 1]];
                                if F::BF16 {
                                    let bl = [xl[tile][2 * h as usize], xl[tile][2 * h as usize + 1]];
                                    mma_bf16_16816(&mut d[tile], a, bf);
                                    mma_bf16_16816(&mut d[tile], a, bl);
                                    if let Some(alo) = a_lo {
                                        mma_bf16_16816(&mut d[tile], alo, bf);
                                    }
                                } else {
                                    mma_f16_16816(&mut d[tile], a, bf);
                                }
                                tile += 1;
                            }
                        };
                        step(0);
                        step(1);
                    },
                );
            },
        );
    };
    // Software pipeline in registers, one stage ahead (`run_stages`). Only the weights are read
    // before `griddepcontrol.wait`: they are the one input no kernel of a chain writes.
    let first = load_stage(0);
    grid_dependency_wait();
    let (mut chunk_end, mut chunk_unit0) = (b0, 0usize);
    run_stages(
        two_buffers::<F, T>(),
        stages,
        first,
        load_stage,
        #[inline(always)]
        |st, cur| {
            if xs_on {
                let b = b0 + st * F::PER_STAGE;
                if b >= chunk_end {
                    // Next x chunk (the whole block agrees: every warp has the same split). The
                    // next stage's weights are already in flight.
                    sync_threads();
                    chunk_end = (b + QMM_XS_CHUNK_UNITS * 32 / F::ELEMS).min(b1);
                    chunk_unit0 = (b * units) as usize;
                    stage_x_chunk(chunk_unit0, ((chunk_end - b) * units) as usize);
                    sync_threads();
                }
            }
            stage_math(st, cur, chunk_unit0);
        },
    );
    if super::epilogue::odd_units_apart::<F>() {
        super::epilogue::add_odd_units(&mut acc, &acc_odd);
    }
    let rscale = super::epilogue::row_scales::<F>(w, p);
    super::epilogue::store::<F, T, SWIGLU, ACCUM>(&acc, p, rscale, xscale, partial, counters, y, ymax);
}

/// Whether a `mma.sync` kernel runs its stages over two alternating register buffers
/// ([`run_stages`]): the one-tile kernels of the float formats (F16, BF16, F32: 1 % faster,
/// nvidia-h200, docs/perf/qmatmul.md session 12). The one-tile block-format kernels measured
/// 2–5 % slower that way (Q4_K, Q5_K) or mixed (Q8_0) although they run 5–8 % fewer
/// instructions, and the F16/Q8_0 multi-tile kernels no faster (session 5).
pub(super) const fn two_buffers<F: Format, const T: usize>() -> bool {
    T == 1 && F::ELEMS == 32 && !F::PRODUCTS_FROM_ZERO
}

/// Runs `step(st, &data)` for `st = 0 .. stages` with the loads of stage `st + 1` (`load`) issued
/// before the step of stage `st`, so they are in flight while it computes; `first` is stage 0's
/// data, loaded by the caller. `two` (a compile-time constant at each call): the loop is
/// unrolled twice over two register buffers that swap roles, so no stage's data is copied
/// (`cur = ahead` costs one move per lane word and stage, which `ptxas` does not remove); else
/// one buffer and that copy.
#[inline(always)]
pub(super) fn run_stages<L: Copy>(
    two: bool,
    stages: u32,
    first: L,
    mut load: impl FnMut(u32) -> L,
    mut step: impl FnMut(u32, &L),
) {
    if !two {
        let mut ahead = first;
        let mut st = 0;
        while st < stages {
            let cur = ahead;
            if st + 1 < stages {
                ahead = load(st + 1);
            }
            step(st, &cur);
            st += 1;
        }
        return;
    }
    let (mut even, mut odd) = (first, first);
    let mut st = 0;
    while st < stages {
        if st + 1 < stages {
            odd = load(st + 1);
        }
        step(st, &even);
        if st + 1 >= stages {
            break;
        }
        if st + 2 < stages {
            even = load(st + 2);
        }
        step(st + 1, &odd);
        st += 2;
    }
}

/// This block's row block and weight blocks `b0 .. b1` (`kernel_abi::qmm_block_range`) of a
/// matrix of `blocks` weight blocks per row.
#[inline(always)]
pub(super) fn block_range(p: &QmmParams, blocks: u32) -> (u32, u32, u32) {
    qmm_block_range(
        block_x(),
        p.out_features.div_ceil(QMM_ROWS_PER_BLOCK),
        p.full_row_blocks,
        p.ksplit,
        p.cluster,
        blocks,
    )
}

/// Most weight blocks one pipeline stage holds (`Format::PER_STAGE` ≤ this).
pub(super) const MAX_STAGE_BLOCKS: usize = 4;

/// The lane's data of the stage whose first block is `b` (blocks at or past `b1` are not loaded;
/// with `FULL` the caller knows the stage is whole, and no block is tested): plain 16-byte loads
/// straight into registers, coalesced by the lane layout (`kernel_abi::qmm_lanes`). `group`: the
/// warp's 16-row group of packed W.
#[inline(always)]
pub(super) unsafe fn load_stage<F: Format, const FULL: bool>(
    group: *const u8,
    b: u32,
    b1: u32,
    lane: u32,
) -> [F::Lane; MAX_STAGE_BLOCKS] {
    let block16 = 16 * F::BYTES;
    let mut l = [F::ZERO; MAX_STAGE_BLOCKS];
    let mut i = 0;
    while i < MAX_STAGE_BLOCKS {
        if i < F::PER_STAGE as usize && (FULL || F::PER_STAGE == 1 || b + (i as u32) < b1) {
            l[i] = F::load(group.add(((b + i as u32) * block16) as usize), lane);
        }
        i += 1;
    }
    l
}

/// Calls `f(u)` for every unit `u` of a block with `u` a compile-time constant at each call
/// (so the lane's block data stays in registers; a runtime index would put it in local memory).
#[inline(always)]
fn unroll_units<F: Format>(mut f: impl FnMut(u32)) {
    match F::ELEMS / 32 {
        1 => f(0),
        8 => {
            f(0);
            f(1);
            f(2);
            f(3);
            f(4);
            f(5);
            f(6);
            f(7);
        }
        _ => {
            let mut u = 0;
            while u < F::ELEMS / 32 {
                f(u);
                u += 1;
            }
        }
    }
}

/// Calls `f(i)` for each block `i` of a stage, `i` a compile-time constant at each call.
#[inline(always)]
fn unroll_stage_blocks<F: Format>(mut f: impl FnMut(u32)) {
    match F::PER_STAGE {
        1 => f(0),
        2 => {
            f(0);
            f(1);
        }
        4 => {
            f(0);
            f(1);
            f(2);
            f(3);
        }
        _ => {
            let mut i = 0;
            while i < F::PER_STAGE {
                f(i);
                i += 1;
            }
        }
    }
}

/// Register budgets (`minctasm`: blocks of 256 threads per SM the registers must allow — 3: 85
/// registers, 2: 128, 1: 255). Chosen by measurement (nvidia-h200, docs/perf/qmatmul.md
/// sessions 4–5): more warps beat a deeper pipeline (F16/BF16/F32 one tile: 3 blocks at depth 1
/// gave 0.85–0.94 of copy, 2 blocks at depth 2 0.73–0.87); K-quants at depth 2 or at 85
/// registers spill and were slower. Q6_K nt3/nt4 fit 128 registers once x is staged in shared
/// memory. Every kernel here is spill-free (`cargo xtask ptx --ptxas`); the staged x chunk
/// (≤ 80 KiB) still allows two blocks per SM.
macro_rules! qmm_kernels {
    // One entry point: `$swiglu` picks the epilogue (`QmmParams::swiglu_ff`).
    (@kernel $fmt:ty, $name:ident, $t:literal, $swiglu:literal, $sect:literal) => {
        qmm_entry!($name, $sect, (w, xh, xb_hi, xb_lo, _xcm, xscale, xsum, partial, counters, y, ymax, p) =>
            qmm::<$fmt, $t, $swiglu, false>(w, xh, xb_hi, xb_lo, xscale, xsum, partial, counters, y, ymax, p));
    };
    // The accumulating kernels (`kernel_abi::qmm_accum`): plain (`y`: the i64 accumulators,
    // `ymax`: the columns' scale words) and fused SwiGLU with its split tail accumulated
    // (`partial`: the tail accumulators, `counters`: their scale words).
    (@accum $fmt:ty, $name:ident / $fused:ident, $sect:literal) => {
        qmm_entry!($name, $sect, (w, xh, xb_hi, xb_lo, _xcm, xscale, xsum, partial, counters, y, ymax, p) =>
            qmm::<$fmt, 1, false, true>(w, xh, xb_hi, xb_lo, xscale, xsum, partial, counters, y, ymax, p));
        qmm_entry!($fused, $sect, (w, xh, xb_hi, xb_lo, _xcm, xscale, xsum, partial, counters, y, ymax, p) =>
            qmm::<$fmt, 1, true, true>(w, xh, xb_hi, xb_lo, xscale, xsum, partial, counters, y, ymax, p));
    };
    // Per tile count: the plain kernel and its fused SwiGLU twin.
    ($fmt:ty => $($name:ident / $fused:ident = $t:literal @ $sect:literal),+) => {
        $(
            qmm_kernels!(@kernel $fmt, $name, $t, false, $sect);
            qmm_kernels!(@kernel $fmt, $fused, $t, true, $sect);
        )+
    };
}

// The other tile counts of Q4_K, Q5_K and Q6_K are the warpgroup kernels of `super::tile_wg`
// (`kernel_abi::qmm_wgmma`).
qmm_kernels!(Q4K =>
    qmm_q4k_nt1 / qmm_q4k_swiglu_nt1 = 1 @ "nvvm:maxntid=256;minctasm=2");
qmm_kernels!(Q5K =>
    qmm_q5k_nt1 / qmm_q5k_swiglu_nt1 = 1 @ "nvvm:maxntid=256;minctasm=2");
qmm_kernels!(Q6K =>
    qmm_q6k_nt1 / qmm_q6k_swiglu_nt1 = 1 @ "nvvm:maxntid=256;minctasm=2");
qmm_kernels!(Q8_0 =>
    qmm_q8_0_nt1 / qmm_q8_0_swiglu_nt1 = 1 @ "nvvm:maxntid=256;minctasm=2");
// The accumulating one-tile kernels of the formats `kernel_abi::qmm_accum` lists (not Q5_K).
qmm_kernels!(@accum Q4K, qmm_q4k_accum_nt1 / qmm_q4k_swiglu_accum_nt1, "nvvm:maxntid=256;minctasm=2");
qmm_kernels!(@accum Q6K, qmm_q6k_accum_nt1 / qmm_q6k_swiglu_accum_nt1, "nvvm:maxntid=256;minctasm=2");
qmm_kernels!(@accum Q8_0, qmm_q8_0_accum_nt1 / qmm_q8_0_swiglu_accum_nt1, "nvvm:maxntid=256;minctasm=2");
qmm_kernels!(F16 =>
    qmm_f16_nt1 / qmm_f16_swiglu_nt1 = 1 @ "nvvm:maxntid=256;minctasm=3",
    qmm_f16_nt2 / qmm_f16_swiglu_nt2 = 2 @ "nvvm:maxntid=256;minctasm=3");
qmm_kernels!(Bf16 =>
    qmm_bf16_nt1 / qmm_bf16_swiglu_nt1 = 1 @ "nvvm:maxntid=256;minctasm=3",
    qmm_bf16_nt2 / qmm_bf16_swiglu_nt2 = 2 @ "nvvm:maxntid=256;minctasm=3");
qmm_kernels!(F32W =>
    qmm_f32_nt1 / qmm_f32_swiglu_nt1 = 1 @ "nvvm:maxntid=256;minctasm=3",
    qmm_f32_nt2 / qmm_f32_swiglu_nt2 = 2 @ "nvvm:maxntid=256;minctasm=3",
    qmm_f32_nt3 / qmm_f32_swiglu_nt3 = 3 @ "nvvm:maxntid=256;minctasm=2",
    qmm_f32_nt4 / qmm_f32_swiglu_nt4 = 4 @ "nvvm:maxntid=256;minctasm=2");
