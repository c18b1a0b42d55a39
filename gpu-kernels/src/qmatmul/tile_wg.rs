//! `qmm_<format>_nt<T>` for `T ≥ 2` tiles of the f16-fragment formats listed in
//! `kernel_abi::qmm_wgmma`: the same products as [`super::tile`], issued as Hopper warpgroup
//! products (`wgmma.mma_async.m64n{8T}k16`, A from registers, B = x from shared memory) instead
//! of `T` warp-level `mma.sync` per k16 step.
//!
//! Why: the multi-tile `mma.sync` kernels spend per k16 step `T` products and `T` x-fragment
//! loads (with their address arithmetic) in every warp's issue stream; with 200–255 registers
//! they run 8 warps per SM and are latency-bound (docs/perf/qmatmul.md, session 7). Here one
//! asynchronous product per k16 step covers every column, x is never loaded into registers, and
//! the dequantization of the next unit overlaps the products in flight; every kernel here fits
//! 128 registers (two blocks, 16 warps per SM).
//!
//! Same values, same order, same bits: each tile's accumulators receive exactly the operations
//! of the `mma.sync` kernel (the k16 steps in order, each K-quant super-block's mins step before
//! its units, or Q8_0's per-unit `d·P` in unit order — each unit's product goes into one of two
//! buffers, so unit `i`'s product runs while unit `i − 1` is scaled), and `wgmma` gives the same
//! bits as `mma.sync` on the same operands (`device::wgmma`), so column `c` is bitwise the same
//! at every `n` (the GPU batch-invariance test covers it).
//!
//! Geometry, packed W, the register pipeline of weight stages and the epilogue are those of
//! [`super::tile`] (the stage loop unrolled over two register buffers, `super::tile::run_stages`,
//! except Q4_K/Q5_K nt4, which would spill); warps `0..4` and `4..8` of a block are its two
//! warpgroups (rows `0..64`, `64..128`). x comes from the core-matrix plane of `qmm_prep_x`
//! (`prep::core_matrix_slot`), tile-major: tile `j` (columns `8j..`) holds its k16 steps
//! contiguously, 256 bytes each (k half `kk` at `+ 128·kk`, column `c % 8` at `+ 16·(c % 8)`).
//! Per chunk of `CHUNK_UNITS` units, thread 0 issues one bulk copy per tile (`cp.async.bulk`,
//! the TMA copy engine) into one of two shared-memory buffers, completing on that buffer's
//! transaction barrier (`device::mbarrier`); in shared memory the tiles' slabs are `TILE_SLAB`
//! bytes apart — the wgmma no-swizzle K-major layout with LBO 128 and SBO `TILE_SLAB`. The next
//! chunk is copied while the current one is multiplied: no registers, no per-thread copy
//! instructions, and no load latency in the warps' issue streams. (Session 9's kernels copied
//! each chunk through registers with a 4 × 4 word transpose: ncu put 27 % of the warps' stall
//! samples on those loads; sessions 10–11 used 16-byte `cp.async` by every thread, about 110
//! instructions per warp and chunk, and two block barriers per chunk instead of one.)
//!
//! Traffic: weight bytes once; x `8·T·in·2` bytes per 128-row block from L2 into shared memory
//! (K-quants also their group sums, `in/256` KiB per block: `prep::group_sum_slot`).

use kernel_abi::{QmmParams, QMM_MAX_N, QMM_ROWS_PER_BLOCK, QMM_ROWS_PER_WARP, QMM_XS_CHUNK_UNITS, QMM_XS_SUMS_BYTES};

use super::formats::{add_unit_product, Bf16, Format, F16, Q4K, Q5K, Q6K, Q8_0};
use super::tile::{block_range, load_stage, run_stages, MAX_STAGE_BLOCKS};
use crate::device::griddep::{grid_dependency_wait, launch_dependents};
use crate::device::mbarrier;
use crate::device::shared::{dynamic_smem, smem_addr, Shared};
use crate::device::sync::sync_threads;
use crate::device::unroll::unroll_below;
use crate::device::wgmma;
use crate::device::*;

/// Units of x per shared-memory buffer (two buffers: the `QMM_XS_CHUNK_UNITS` of
/// `kernel_abi::qmm_xs_smem_bytes`).
const CHUNK_UNITS: u32 = QMM_XS_CHUNK_UNITS / 2;

/// The two x buffers' transaction barriers: barrier `i` completes once per chunk copied into
/// buffer `i`.
#[link_section = ".shared"]
static X_BARS: Shared<[u64; 2]> = Shared::uninit();

/// Bytes of one block's group sums for every column (`prep::group_sum_slot`).
const GROUP_BYTES: u32 = QMM_MAX_N * 32;

/// Bytes between the tiles' slabs of a shared-memory x buffer: each holds `2·CHUNK_UNITS` k16
/// steps of one tile (8 columns × 16 k × 2 bytes = 256 bytes per step).
const TILE_SLAB: u32 = CHUNK_UNITS * 2 * 256;

/// Product groups (units) in flight per warpgroup: the A registers of each stay live until it
/// completes. 3 measured no faster for Q4_K and spills Q5_K/Q6_K (docs/perf/qmatmul.md,
/// session 11).
const DEPTH: usize = 2;

/// The kernel body for every format: [`qmm_wg_stages`] without `FULL`. With the experiment
/// feature `qmm-q8-full-stages` (not shipped: docs/perf/qmatmul.md, nineteenth session), with
/// `FULL` where the block's weight blocks fill whole stages (formats of several blocks per stage,
/// Q8_0 / F16 / BF16; the K-quants' stages are single blocks, so they keep only the general path).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn qmm_wg<F: Format, const T: usize, const TWO: bool, const SWIGLU: bool, const ACCUM: bool>(
    w: *const u8,
    xcm: *const u16,
    xsum: *const f32,
    xscale: *const f32,
    partial: *mut f32,
    counters: *mut u32,
    y: *mut f32,
    ymax: *mut u32,
    p: QmmParams,
) {
    #[cfg(feature = "qmm-q8-full-stages")]
    if F::PER_STAGE > 1 {
        let (_, b0, b1) = block_range(&p, p.in_features / F::ELEMS);
        if (b1 - b0) % F::PER_STAGE == 0 {
            return qmm_wg_stages::<F, T, TWO, SWIGLU, ACCUM, true>(
                w, xcm, xsum, xscale, partial, counters, y, ymax, p,
            );
        }
    }
    qmm_wg_stages::<F, T, TWO, SWIGLU, ACCUM, false>(w, xcm, xsum, xscale, partial, counters, y, ymax, p)
}

/// The kernel body (see the module doc); `SWIGLU` as in [`super::tile`]; `TWO`: the stages run
/// over two register buffers (`super::tile::run_stages`); `FULL`: every stage holds
/// `F::PER_STAGE` weight blocks (no per-block load predicates or unit checks: the same
/// operations on the same values as the general path).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn qmm_wg_stages<
    F: Format,
    const T: usize,
    const TWO: bool,
    const SWIGLU: bool,
    const ACCUM: bool,
    const FULL: bool,
>(
    w: *const u8,
    xcm: *const u16,
    xsum: *const f32,
    xscale: *const f32,
    partial: *mut f32,
    counters: *mut u32,
    y: *mut f32,
    ymax: *mut u32,
    p: QmmParams,
) {
    launch_dependents();
    let lane = lane_id();
    let t = lane % 4;
    let blocks = p.in_features / F::ELEMS;
    let (rb, b0, b1) = block_range(&p, blocks);
    let row0 = rb * QMM_ROWS_PER_BLOCK + warp_id() * QMM_ROWS_PER_WARP;
    let units = F::ELEMS / 32;
    let k = p.in_features as usize;
    let block16 = 16 * F::BYTES;
    let group = w.add(((row0 / 16) * blocks * block16) as usize);
    let stages = (b1 - b0).div_ceil(F::PER_STAGE);

    let load_stage = #[inline(always)]
    |st: u32| load_stage::<F, FULL>(group, b0 + st * F::PER_STAGE, b1, lane);

    // x: two buffers of `CHUNK_UNITS` units in the core-matrix layout, filled by bulk copies
    // straight from the `qmm_prep_x` plane (`prep::core_matrix_slot`): chunk `k + 1` is copied
    // while chunk `k` is multiplied.
    let xs = smem_addr(dynamic_smem());
    let buf_bytes = T as u32 * TILE_SLAB;
    let chunk_blocks = CHUNK_UNITS * 32 / F::ELEMS;
    let chunks = (b1 - b0).div_ceil(chunk_blocks);
    // Transaction barrier `i` completes once per chunk copied into buffer `i`. Thread 0 issues
    // every chunk's copies; the other threads first wait on a barrier after the loop's first
    // block-wide barrier, which orders them after the initialisation.
    let bars = smem_addr(X_BARS.as_mut_ptr() as *const u8);
    if thread_x() == 0 {
        mbarrier::init(bars, 1);
        mbarrier::init(bars + 8, 1);
        mbarrier::fence_init();
    }
    // Chunk `kc` into buffer `kc % 2`: per tile one bulk copy of its contiguous run of k16
    // steps (`prep::core_matrix_slot`: tile-major plane, 256 bytes per tile and step) to the
    // buffer's tile slab (`TILE_SLAB` bytes apart), all counted off barrier `kc % 2`.
    let steps_total = 2 * (k as u32 / 32);
    // K-quants: the group-sum plane (`prep::group_sum_slot`: group-major, `GROUP_BYTES` per
    // block) and its two shared-memory buffers after the x buffers, `QMM_XS_SUMS_BYTES` each.
    let sums = xsum as *const u8;
    let sums_smem = xs + 2 * buf_bytes;
    let issue_chunk = #[inline(always)]
    |kc: u32| {
        if thread_x() != 0 {
            return;
        }
        let cb0 = b0 + kc * chunk_blocks;
        let (s0, nsteps) = (2 * cb0 * units, 2 * ((cb0 + chunk_blocks).min(b1) - cb0) * units);
        let bar = bars + 8 * (kc % 2);
        // K-quants: the chunk's blocks of the group-sum plane too (one k16 step of B per block
        // for all `QMM_MAX_N / 8` tiles: one contiguous copy).
        let sums_bytes = if F::SUPER { nsteps / (2 * units) * GROUP_BYTES } else { 0 };
        mbarrier::arrive_expect_tx(bar, T as u32 * nsteps * 256 + sums_bytes);
        let mut tile = 0;
        while tile < T as u32 {
            let src = (xcm as *const u8).add(((tile * steps_total + s0) * 256) as usize);
            mbarrier::bulk_copy_g2s(xs + (kc % 2) * buf_bytes + tile * TILE_SLAB, src, nsteps * 256, bar);
            tile += 1;
        }
        if F::SUPER {
            let src = sums.add((cb0 * GROUP_BYTES) as usize);
            mbarrier::bulk_copy_g2s(sums_smem + (kc % 2) * QMM_XS_SUMS_BYTES, src, sums_bytes, bar);
        }
    };
    // The descriptor of k16 step `h` of unit `unit_in_chunk` of buffer `buf`: core matrices
    // K-adjacent at 128 bytes (LBO), N-adjacent (the next tile) at `TILE_SLAB` (SBO).
    // (Start address and LBO are the low word: steps are added there, as 32-bit adds.)
    let desc0 = wgmma::b_desc(xs, 128, TILE_SLAB);
    // All offsets are multiples of 16 bytes, so they are added in 16-byte units.
    let desc = #[inline(always)]
    |buf: u32, unit_in_chunk: u32, h: u32| {
        let lo = desc0 as u32 + buf * (buf_bytes >> 4) + (2 * unit_in_chunk + h) * (256 >> 4);
        (lo, (desc0 >> 32) as u32)
    };
    // The mins step's B: block `block_in_chunk`'s k16 step of group sums (its k halves, hi and
    // lo, 128 bytes apart; tiles 256 bytes apart).
    let sdesc0 = wgmma::b_desc(sums_smem, 128, 256);
    let sums_desc = #[inline(always)]
    |buf: u32, block_in_chunk: u32| {
        let lo = sdesc0 as u32 + buf * (QMM_XS_SUMS_BYTES >> 4) + block_in_chunk * (GROUP_BYTES >> 4);
        (lo, (sdesc0 >> 32) as u32)
    };

    let mut acc = [[0.0f32; 4]; T];
    // Super-block formats: the odd units' products (`super::epilogue::add_odd_units`).
    let mut acc_odd = [[0.0f32; 4]; T];
    // Per-unit formats: the two unit-product buffers (only defined by products: `ptxas`
    // serializes the products if another instruction writes an accumulator inside a stage).
    let (mut pu0, mut pu1) = ([[0.0f32; 4]; T], [[0.0f32; 4]; T]);

    // One stage's math on its lane data `cur` (`chunk_unit0`: first unit of the staged chunk).
    let mut stage_math = #[inline(always)]
    |st: u32, cur: &[F::Lane; MAX_STAGE_BLOCKS], chunk_unit0: u32, buf: u32| {
        let b = b0 + st * F::PER_STAGE;
        let b_end = (b + F::PER_STAGE).min(b1);
        let stage_units = (b_end - b) * units;
        // Units of a whole stage (a compile-time constant); a stage is partial only at the end
        // of a K split whose block count is not a multiple of PER_STAGE.
        let max_units = F::PER_STAGE * units;
        let full = FULL || F::PER_STAGE == 1 || stage_units == max_units;
        let valid = #[inline(always)]
        |i: u32| i < max_units && (FULL || F::PER_STAGE == 1 || i < stage_units);
        let su0 = b * units - chunk_unit0;
        // K-quant super-blocks (PER_STAGE = 1): the scales of the stage's one block.
        let ks = F::super_scales(&cur[0], t);
        // Issues unit `i` of the stage (its two k16 steps) into `d`: from zero (`fresh`) or onto d;
        // K-quants: the block's mins step before its first unit, in the same group.
        let issue = #[inline(always)]
        |i: u32, d: &mut [[f32; 4]; T], fresh: bool| {
            let (blk, u) = (i / units, i % units);
            let (mut a0, mut a1) = (F::frag(&cur[blk as usize], u, 0), F::frag(&cur[blk as usize], u, 1));
            if F::SUPER {
                a0 = ks.scale_frag(a0, u);
                a1 = ks.scale_frag(a1, u);
            }
            wgmma::fence();
            let mins = F::SUPER && u == 0;
            if mins {
                wgmma::mma_f16::<T>(d, ks.mins_frag(), sums_desc(buf, su0 / units), !fresh);
            }
            wgmma::mma_f16::<T>(d, a0, desc(buf, su0 + i, 0), !fresh || mins);
            wgmma::mma_f16::<T>(d, a1, desc(buf, su0 + i, 1), true);
            wgmma::commit();
        };
        // Waits until unit `i`'s product is complete, with units up to `i + DEPTH − 1` issued.
        let wait_unit = #[inline(always)]
        |i: u32| {
            let later = (max_units - 1 - i).min(DEPTH as u32 - 1);
            if !full || later == 0 {
                wgmma::wait::<0>();
            } else if later == 1 {
                wgmma::wait::<1>();
            } else if later == 2 {
                wgmma::wait::<2>();
            } else {
                wgmma::wait::<3>();
            }
        };
        if !F::PRODUCTS_FROM_ZERO {
            // Scaled formats (and the K-quants' super-block stages, with their mins step): every
            // product straight into the accumulators, in unit order; at most DEPTH groups in
            // flight (their A registers stay live until they complete).
            unroll_below(
                8,
                #[inline(always)]
                |i| {
                    let i = i as u32;
                    if valid(i) {
                        // Super-block formats: a stage is one block, so `i` is its unit.
                        issue(i, super::epilogue::unit_sums::<F, T>(i, &mut acc, &mut acc_odd), false);
                        if i + 1 >= DEPTH as u32 {
                            wait_unit(i + 1 - DEPTH as u32);
                        }
                    }
                },
            );
            // Super-block formats over one register buffer (Q4_K/Q5_K/Q6_K nt4): no product in
            // flight past the block. Without this wait their results raced (the spread-reduction
            // test saw other bits run to run, nvidia-h200, s20 r05); the two-buffer kernels keep
            // the last unit's group in flight into the next block and test bitwise stable.
            if super::epilogue::odd_units_apart::<F>() && !TWO {
                wgmma::wait::<0>();
            }
            return;
        }
        // Per-unit formats (Q8_0): units in pairs — unit `i`'s product from zero into buffer
        // `i % 2`, both products of a pair issued back to back, one `wait_group 0`, then both
        // `acc += d·P` in unit order (the order of `super::tile`: the same bits). Scaling one
        // unit while the next one's product runs instead reads a buffer under an asynchronous
        // product, which makes ptxas serialize every product of the kernel (remark C7514: each
        // `HGMMA` followed by a full wait; docs/perf/qmatmul.md sessions 16–17).
        // Ends unit `i` from its buffer (`i % 2`: a compile-time choice at each call).
        let finish = #[inline(always)]
        |i: u32, pu0: &mut [[f32; 4]; T], pu1: &mut [[f32; 4]; T], acc: &mut [[f32; 4]; T]| {
            let pu = if i % 2 == 0 { pu0 } else { pu1 };
            wgmma::fence_operands(pu);
            add_unit_product(F::unit_scales(&cur[(i / units) as usize], i % units), pu, acc);
        };
        unroll_below(
            8,
            #[inline(always)]
            |i| {
                let i = i as u32;
                if valid(i) {
                    issue(i, if i % 2 == 0 { &mut pu0 } else { &mut pu1 }, true);
                    if i % 2 == 1 || !valid(i + 1) {
                        wgmma::wait::<0>();
                        if i % 2 == 1 {
                            finish(i - 1, &mut pu0, &mut pu1, &mut acc);
                        }
                        finish(i, &mut pu0, &mut pu1, &mut acc);
                    }
                }
            },
        );
    };

    // Register pipeline of weight stages as in `super::tile`. x chunk `k` starts at block
    // `b0 + k·chunk_blocks`: there every product reading buffer `(k + 1) % 2` (chunk `k − 1`) has
    // completed and every thread is past it (the block barrier), chunk `k + 1` is requested into
    // it, and chunk `k` (requested a chunk earlier) is waited for on its transaction barrier.
    let first = load_stage(0);
    grid_dependency_wait();
    issue_chunk(0);
    let (mut chunk_unit0, mut buf) = (0u32, 0u32);
    run_stages(
        TWO,
        stages,
        first,
        load_stage,
        #[inline(always)]
        |st, cur| {
            let b = b0 + st * F::PER_STAGE;
            if (b - b0) % chunk_blocks == 0 {
                let kc = (b - b0) / chunk_blocks;
                // Every product reading buffer `(kc + 1) % 2` (chunk `kc − 1`) has completed
                // and every thread is past it: chunk `kc + 1` may be copied into it.
                wgmma::wait::<0>();
                sync_threads();
                if kc + 1 < chunks {
                    issue_chunk(kc + 1);
                }
                mbarrier::wait_parity(bars + 8 * (kc % 2), (kc / 2) % 2);
                chunk_unit0 = b * units;
                buf = kc % 2;
            }
            stage_math(st, cur, chunk_unit0, buf);
        },
    );
    wgmma::wait::<0>();
    wgmma::fence_operands(&mut acc);
    if super::epilogue::odd_units_apart::<F>() {
        wgmma::fence_operands(&mut acc_odd);
        super::epilogue::add_odd_units(&mut acc, &acc_odd);
    }
    let rscale = super::epilogue::row_scales::<F>(w, p);
    super::epilogue::store::<F, T, SWIGLU, ACCUM>(&acc, p, rscale, xscale, partial, counters, y, ymax);
}

/// Every kernel here has blocks of 256 threads and a budget of 128 registers (two blocks per
/// SM; `minctasm=2`), spill-free (`cargo xtask ptx --ptxas`). `(one buffer)`: the stage loop keeps
/// one register buffer (two would spill).
macro_rules! qmm_wg_kernels {
    (@kernel $fmt:ty, $name:ident, $t:literal, $two:literal, $swiglu:literal) => {
        qmm_entry!($name, "nvvm:maxntid=256;minctasm=2", (w, _xh, _xb_hi, _xb_lo, xcm, xscale, xsum, partial, counters, y, ymax, p) =>
            qmm_wg::<$fmt, $t, $two, $swiglu, false>(w, xcm, xsum, xscale, partial, counters, y, ymax, p));
    };
    // The accumulating kernels (`kernel_abi::qmm_accum`), plain and fused SwiGLU (its split tail
    // accumulated), with their reducing twins' stage buffers.
    (@accum $fmt:ty, $name:ident / $fused:ident, $t:literal, $two:literal) => {
        qmm_entry!($name, "nvvm:maxntid=256;minctasm=2", (w, _xh, _xb_hi, _xb_lo, xcm, xscale, xsum, partial, counters, y, ymax, p) =>
            qmm_wg::<$fmt, $t, $two, false, true>(w, xcm, xsum, xscale, partial, counters, y, ymax, p));
        qmm_entry!($fused, "nvvm:maxntid=256;minctasm=2", (w, _xh, _xb_hi, _xb_lo, xcm, xscale, xsum, partial, counters, y, ymax, p) =>
            qmm_wg::<$fmt, $t, $two, true, true>(w, xcm, xsum, xscale, partial, counters, y, ymax, p));
    };
    (@pair $fmt:ty, $name:ident, $fused:ident, $t:literal, $two:literal) => {
        qmm_wg_kernels!(@kernel $fmt, $name, $t, $two, false);
        qmm_wg_kernels!(@kernel $fmt, $fused, $t, $two, true);
    };
    (@buffers $fmt:ty, $name:ident, $fused:ident, $t:literal, []) => {
        qmm_wg_kernels!(@pair $fmt, $name, $fused, $t, true);
    };
    (@buffers $fmt:ty, $name:ident, $fused:ident, $t:literal, [one]) => {
        qmm_wg_kernels!(@pair $fmt, $name, $fused, $t, false);
    };
    ($fmt:ty => $($name:ident / $fused:ident = $t:literal $(($one:ident buffer))?),+) => {
        $( qmm_wg_kernels!(@buffers $fmt, $name, $fused, $t, [$($one)?]); )+
    };
}

// Which tile counts of which format are warpgroup kernels: `kernel_abi::qmm_wgmma` (measured
// per kernel against the `mma.sync` kernels of `super::tile`, docs/perf/qmatmul.md sessions
// 9–12).
qmm_wg_kernels!(Q4K =>
    qmm_q4k_nt2 / qmm_q4k_swiglu_nt2 = 2,
    qmm_q4k_nt3 / qmm_q4k_swiglu_nt3 = 3,
    qmm_q4k_nt4 / qmm_q4k_swiglu_nt4 = 4 (one buffer));
qmm_wg_kernels!(Q5K =>
    qmm_q5k_nt2 / qmm_q5k_swiglu_nt2 = 2,
    qmm_q5k_nt3 / qmm_q5k_swiglu_nt3 = 3,
    qmm_q5k_nt4 / qmm_q5k_swiglu_nt4 = 4 (one buffer));
qmm_wg_kernels!(Q6K =>
    qmm_q6k_nt2 / qmm_q6k_swiglu_nt2 = 2,
    qmm_q6k_nt3 / qmm_q6k_swiglu_nt3 = 3,
    qmm_q6k_nt4 / qmm_q6k_swiglu_nt4 = 4 (one buffer));
// Q8_0 takes its units in pairs: two register buffers of stages would spill at 3 and 4 tiles.
qmm_wg_kernels!(Q8_0 =>
    qmm_q8_0_nt2 / qmm_q8_0_swiglu_nt2 = 2,
    qmm_q8_0_nt3 / qmm_q8_0_swiglu_nt3 = 3 (one buffer),
    qmm_q8_0_nt4 / qmm_q8_0_swiglu_nt4 = 4 (one buffer));
qmm_wg_kernels!(F16 =>
    qmm_f16_nt3 / qmm_f16_swiglu_nt3 = 3,
    qmm_f16_nt4 / qmm_f16_swiglu_nt4 = 4);
qmm_wg_kernels!(Bf16 =>
    qmm_bf16_nt3 / qmm_bf16_swiglu_nt3 = 3,
    qmm_bf16_nt4 / qmm_bf16_swiglu_nt4 = 4);
// The accumulating kernels (`kernel_abi::qmm_accum`), with their reducing twins' stage buffers.
qmm_wg_kernels!(@accum Q4K, qmm_q4k_accum_nt2 / qmm_q4k_swiglu_accum_nt2, 2, true);
qmm_wg_kernels!(@accum Q4K, qmm_q4k_accum_nt3 / qmm_q4k_swiglu_accum_nt3, 3, true);
qmm_wg_kernels!(@accum Q4K, qmm_q4k_accum_nt4 / qmm_q4k_swiglu_accum_nt4, 4, false);
qmm_wg_kernels!(@accum Q6K, qmm_q6k_accum_nt2 / qmm_q6k_swiglu_accum_nt2, 2, true);
qmm_wg_kernels!(@accum Q6K, qmm_q6k_accum_nt3 / qmm_q6k_swiglu_accum_nt3, 3, true);
qmm_wg_kernels!(@accum Q6K, qmm_q6k_accum_nt4 / qmm_q6k_swiglu_accum_nt4, 4, true);
qmm_wg_kernels!(@accum Q8_0, qmm_q8_0_accum_nt2 / qmm_q8_0_swiglu_accum_nt2, 2, true);
qmm_wg_kernels!(@accum Q8_0, qmm_q8_0_accum_nt3 / qmm_q8_0_swiglu_accum_nt3, 3, false);
qmm_wg_kernels!(@accum Q8_0, qmm_q8_0_accum_nt4 / qmm_q8_0_swiglu_accum_nt4, 4, false);
