//! `qmm_<format>_nt<T>` for `T ≥ 2` tiles of the f16-fragment formats listed in
//! `kernel_abi::qmm_wgmma`: the same products as [`super::tile`], issued as Hopper warpgroup
//! products (`wgmma.mma_async.m64n{8T}k16`, A from registers, B = x from shared memory) instead
//! of `T` warp-level `mma.sync` per k16 step.
//!
//! Why: the multi-tile `mma.sync` kernels spend per k16 step `T` products and `T` x-fragment
//! loads (with their address arithmetic) in every warp's issue stream, and wait for each unit's
//! product before scaling it; with 235–255 registers they run 8 warps per SM and are
//! latency-bound (docs/perf/qmatmul.md, session 7). Here one asynchronous product per k16 step
//! covers every column, x is never loaded into registers, and a unit's dequantization overlaps
//! the previous unit's product.
//!
//! Same values, same order, same bits: each tile's accumulators receive exactly the operations
//! of the `mma.sync` kernel (a unit's two k16 steps, the per-unit scaling `fma`s, the
//! super-block corrections), and `wgmma` gives the same bits as `mma.sync` on the same operands
//! (`device::wgmma`), so column `c` is bitwise the same at every `n` (the GPU batch-invariance
//! test covers it).
//!
//! Geometry, packed W, the register pipeline of weight stages and the epilogue are those of
//! [`super::tile`]; warps `0..4` and `4..8` of a block are its two warpgroups (rows `0..64`,
//! `64..128`). x is staged per chunk of `QMM_XS_CHUNK_UNITS` units in the wgmma core-matrix
//! layout: k16 step `s` of the chunk (`s = 2·unit + h`) at `s·256·T` bytes, core matrix
//! (8 columns `8j..`, k half `kk`) at `+ 256·j + 128·kk`, column `c % 8` at `+ 16·(c % 8)` —
//! one thread per (unit, column) moves its 64 bytes with a 4 × 4 word transpose out of the
//! fragment order of `qmm_prep_x` (word `2h + kk` of lane quad position `t` holds k slots
//! `8kk + 2t, +1` of step `h`).
//!
//! Traffic: weight bytes once; x `n·in·2` bytes per 128-row block from L2 into shared memory.

use kernel_abi::{QmmParams, QMM_MAX_N, QMM_ROWS_PER_BLOCK, QMM_ROWS_PER_WARP, QMM_XS_CHUNK_UNITS};

use super::formats::{Format, Q4K, Q5K, Q6K};
use super::tile::{load_stage, MAX_STAGE_BLOCKS};
use crate::device::griddep::{grid_dependency_wait, launch_dependents};
use crate::device::load::{ld_v2_f32, ld_v4, U32x4};
use crate::device::shared::{dynamic_smem, smem_addr, st_shared_v4};
use crate::device::sync::sync_threads;
use crate::device::wgmma;
use crate::device::*;

/// Bytes of one staged k16 step (`8·T` columns × 16 k × 2 bytes).
const fn step_bytes(t: usize) -> u32 {
    256 * t as u32
}

/// The kernel body (see the module doc); `SWIGLU` as in [`super::tile`].
#[inline(always)]
unsafe fn qmm_wg<F: Format, const T: usize, const D: usize, const SWIGLU: bool>(
    w: *const u8,
    xh: *const u16,
    xsum: *const f32,
    xscale: *const f32,
    partial: *mut f32,
    counters: *mut u32,
    y: *mut f32,
    p: QmmParams,
) {
    launch_dependents();
    let lane = lane_id();
    let (g, t) = (lane / 4, lane % 4);
    let row0 = block_x() * QMM_ROWS_PER_BLOCK + warp_id() * QMM_ROWS_PER_WARP;
    let blocks = p.in_features / F::ELEMS;
    let split = block_y();
    let ksplit = p.ksplit.max(1);
    let b0 = split * blocks / ksplit;
    let b1 = (split + 1) * blocks / ksplit;
    let units = F::ELEMS / 32;
    let k = p.in_features as usize;
    let n = p.n as usize;
    let block16 = 16 * F::BYTES;
    let group = w.add(((row0 / 16) * blocks * block16) as usize);
    let stages = (b1 - b0).div_ceil(F::PER_STAGE);

    let load_stage = #[inline(always)]
    |st: u32| load_stage::<F>(group, b0 + st * F::PER_STAGE, b1, lane);

    let xs = smem_addr(dynamic_smem());
    // Descriptor of the chunk's first k16 step; step `s` adds `s·step_bytes(T) / 16`.
    let desc0 = wgmma::b_desc(xs, 128, 256);
    let stage_x_chunk = #[inline(always)]
    |unit0: usize, nunits: usize| {
        let cols = 8 * T;
        let total = nunits * cols;
        let mut i = thread_x() as usize;
        while i < total {
            let (u, c) = (i / cols, i % cols);
            // Padding columns (c ≥ n) copy column n − 1: finite values, never stored.
            let src = xh.add(c.min(n - 1) * k + (unit0 + u) * 32) as *const U32x4;
            let v = [ld_v4(src).0, ld_v4(src.add(1)).0, ld_v4(src.add(2)).0, ld_v4(src.add(3)).0];
            let col_at = (c / 8) as u32 * 256 + (c % 8) as u32 * 16;
            let mut word = 0;
            while word < 4 {
                let (h, kk) = (word / 2, word % 2);
                let at = (2 * u as u32 + h as u32) * step_bytes(T) + col_at + 128 * kk as u32;
                st_shared_v4(xs + at, [v[0][word], v[1][word], v[2][word], v[3][word]]);
                word += 1;
            }
            i += block_dim_x() as usize;
        }
        wgmma::fence_proxy_async_shared();
    };
    // The descriptor of k16 step `h` of unit `unit` (chunk-relative).
    let desc = #[inline(always)]
    |unit_in_chunk: u32, h: u32| desc0 + (((2 * unit_in_chunk + h) * step_bytes(T)) >> 4) as u64;

    let mut acc = [[0.0f32; 4]; T];
    // `D` unit-product buffers: unit `i` is scaled from buffer `i % D` while units `i + 1 ..
    // i + D − 1` are in flight. Kept for the whole kernel: only products define them (`ptxas`
    // serializes the products if another instruction writes an accumulator inside a pipeline
    // stage).
    let mut bufs = [[[0.0f32; 4]; T]; D];
    let sums_h = xsum.add((k / 32) * QMM_MAX_N as usize) as *const u16;

    // One stage's math on its lane data `cur` (`chunk_unit0`: first unit of the staged chunk).
    let mut stage_math = #[inline(always)]
    |st: u32, cur: &[F::Lane; MAX_STAGE_BLOCKS], chunk_unit0: u32| {
        let b = b0 + st * F::PER_STAGE;
        let b_end = (b + F::PER_STAGE).min(b1);
        let stage_units = (b_end - b) * units;
        // Units of a whole stage (a compile-time constant); a stage is partial only at the end
        // of a K split whose block count is not a multiple of PER_STAGE.
        let max_units = F::PER_STAGE * units;
        let full = F::PER_STAGE == 1 || stage_units == max_units;
        let valid = #[inline(always)]
        |i: u32| i < max_units && (F::PER_STAGE == 1 || i < stage_units);
        let su0 = b * units - chunk_unit0;
        // Issues unit `i` of the stage (its two k16 steps) into `d`: from zero (`fresh`) or onto d.
        let issue = #[inline(always)]
        |i: u32, d: &mut [[f32; 4]; T], fresh: bool| {
            let (blk, u) = (i / units, i % units);
            let a0 = F::frag(&cur[blk as usize], u, 0);
            let a1 = F::frag(&cur[blk as usize], u, 1);
            wgmma::fence();
            wgmma::mma_f16::<T>(d, a0, desc(su0 + i, 0), !fresh);
            wgmma::mma_f16::<T>(d, a1, desc(su0 + i, 1), true);
            wgmma::commit();
        };
        // Waits until unit `i`'s product is complete, with units up to `i + D − 1` issued.
        let wait_unit = #[inline(always)]
        |i: u32| {
            let later = (max_units - 1 - i).min(D as u32 - 1);
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
        if !F::OFFSET {
            // Scaled formats: every product straight into the accumulators, in unit order; at
            // most D groups in flight (their A registers stay live until they complete).
            unroll::<8>(
                #[inline(always)]
                |i| {
                    if valid(i) {
                        issue(i, &mut acc, false);
                        if i + 1 >= D as u32 {
                            wait_unit(i + 1 - D as u32);
                        }
                    }
                },
            );
            return;
        }
        // K-quant super-blocks (PER_STAGE = 1): unit products from zero, `D` in flight, each
        // scaled when complete; then the block's corrections (`formats::KScales`), exactly as
        // `super::tile`.
        if !F::SUPER {
            return;
        }
        unroll::<8>(
            #[inline(always)]
            |i| {
                if i + 1 < D as u32 && valid(i) {
                    issue(i, &mut bufs[i as usize % D], true);
                }
            },
        );
        {
            let lanedata = &cur[0];
            let ks = F::super_scales(lanedata, t);
            let mut bs = [[0u32; 2]; T];
            let mut tile = 0;
            while tile < T {
                let col = (8 * tile + g as usize).min(n - 1);
                let at = (b as usize * QMM_MAX_N as usize + col) * 16 + 4 * t as usize;
                let v = ld_v2_f32(sums_h.add(at) as *const f32);
                bs[tile] = [v[0].to_bits(), v[1].to_bits()];
                tile += 1;
            }
            let mut sb = [[0.0f32; 4]; T];
            unroll::<8>(
                #[inline(always)]
                |u| {
                    if u >= units {
                        return;
                    }
                    let next = u + D as u32 - 1;
                    if next < units {
                        issue(next, &mut bufs[next as usize % D], true);
                    }
                    wait_unit(u);
                    let pu = &mut bufs[u as usize % D];
                    wgmma::fence_operands(pu);
                    ks.add_unit(u, pu, &mut sb);
                },
            );
            let mut tile = 0;
            while tile < T {
                ks.finish_tile(bs[tile], &sb[tile], &mut acc[tile]);
                tile += 1;
            }
        }
        // Offset formats with one scale per unit (Q8_0) have no warpgroup kernel: measured
        // slower than their `mma.sync` kernels (docs/perf/qmatmul.md session 9).
    };

    // Register pipeline of weight stages as in `super::tile`; x chunks staged between barriers
    // (every product reading the old chunk has completed before the first barrier).
    let mut ahead = load_stage(0);
    grid_dependency_wait();
    let mut st = 0;
    let (mut chunk_end, mut chunk_unit0) = (b0, 0u32);
    while st < stages {
        let cur = ahead;
        if st + 1 < stages {
            ahead = load_stage(st + 1);
        }
        let b = b0 + st * F::PER_STAGE;
        if b >= chunk_end {
            wgmma::wait::<0>();
            sync_threads();
            chunk_end = (b + QMM_XS_CHUNK_UNITS * 32 / F::ELEMS).min(b1);
            chunk_unit0 = b * units;
            stage_x_chunk(chunk_unit0 as usize, ((chunk_end - b) * units) as usize);
            sync_threads();
        }
        stage_math(st, &cur, chunk_unit0);
        st += 1;
    }
    wgmma::wait::<0>();
    wgmma::fence_operands(&mut acc);
    super::epilogue::store::<F, T, SWIGLU>(&acc, row0, p, xscale, partial, counters, y);
}

/// Calls `f(i)` for `i = 0 .. N` (N ≤ 8), each `i` a compile-time constant at its call.
#[inline(always)]
fn unroll<const N: u32>(mut f: impl FnMut(u32)) {
    f(0);
    if N > 1 {
        f(1);
    }
    if N > 2 {
        f(2);
        f(3);
    }
    if N > 4 {
        f(4);
        f(5);
        f(6);
        f(7);
    }
}

/// Register budgets as for `super::tile` (`minctasm`: blocks of 256 threads per SM); every
/// kernel spill-free (`cargo xtask ptx --ptxas`).
macro_rules! qmm_wg_kernels {
    (@kernel $fmt:ty, $name:ident, $t:literal, $d:literal, $swiglu:literal, $sect:literal) => {
        #[no_mangle]
        #[link_section = $sect]
        pub unsafe extern "ptx-kernel" fn $name(
            w: *const u8,
            xh: *const u16,
            _xb_hi: *const u16,
            _xb_lo: *const u16,
            xscale: *const f32,
            xsum: *const f32,
            partial: *mut f32,
            counters: *mut u32,
            y: *mut f32,
            p: QmmParams,
        ) {
            qmm_wg::<$fmt, $t, $d, $swiglu>(w, xh, xsum, xscale, partial, counters, y, p)
        }
    };
    ($fmt:ty => $($name:ident / $fused:ident = $t:literal, depth $d:literal @ $sect:literal),+) => {
        $(
            qmm_wg_kernels!(@kernel $fmt, $name, $t, $d, false, $sect);
            qmm_wg_kernels!(@kernel $fmt, $fused, $t, $d, true, $sect);
        )+
    };
}

// Which tile counts of which format are warpgroup kernels: `kernel_abi::qmm_wgmma` (measured
// per kernel against the `mma.sync` kernels of `super::tile`, docs/perf/qmatmul.md session 9).
qmm_wg_kernels!(Q4K =>
    qmm_q4k_nt2 / qmm_q4k_swiglu_nt2 = 2, depth 2 @ "nvvm:maxntid=256;minctasm=2",
    qmm_q4k_nt4 / qmm_q4k_swiglu_nt4 = 4, depth 2 @ "nvvm:maxntid=256;minctasm=1");
qmm_wg_kernels!(Q5K =>
    qmm_q5k_nt2 / qmm_q5k_swiglu_nt2 = 2, depth 2 @ "nvvm:maxntid=256;minctasm=2");
qmm_wg_kernels!(Q6K =>
    qmm_q6k_nt2 / qmm_q6k_swiglu_nt2 = 2, depth 2 @ "nvvm:maxntid=256;minctasm=2",
    qmm_q6k_nt3 / qmm_q6k_swiglu_nt3 = 3, depth 2 @ "nvvm:maxntid=256;minctasm=2");
