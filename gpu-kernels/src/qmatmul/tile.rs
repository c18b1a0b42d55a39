//! `qmm_<format>_nt<T>`: tensor-core `y[c, o] = Σ_i W[o, i] · x[c, i]` for up to `8·T` token
//! columns, every weight format of [`super::formats`].
//!
//! Geometry: 256-thread blocks of 8 warps; warp `w` of block `(bx, s)` owns output rows
//! `16·(8·bx + w) .. +16` and the weight blocks of K split `s` (`blockIdx.y`, `ksplit` splits
//! fixed by the shape). Each warp streams its 16 rows through a private ring of `QMM_STAGES`
//! shared-memory stages filled with 16-byte `cp.async` copies (three stages in flight while one
//! is consumed: the bytes in flight do not cost registers). Lane `(g, t)` reads its part of
//! rows `g` and `g + 8` from the stage (see [`super::formats`]) and, for each 32-element unit
//! and each tile of 8 columns, loads 16 bytes of prepared x (two k16 steps of B fragments) and
//! issues `mma.m16n8k16`. Scaled formats accumulate straight into the f32 accumulators; offset
//! formats (Q4_K, Q5_K, Q8_0) take the unit's product `P` from a zero accumulator and add
//! `scale·P + bias·S` (two f32 fmas per output, `S` = the unit sums of x̂ from `qmm_prep_x`),
//! in program order (`*_ordered` statements, so every unit's `P` is not kept live at once). The
//! 8 warps of a block read the same x, so x is served from L1.
//!
//! With `ksplit > 1`, each block writes its partial sums to `partial[s][c][o]`, and the last
//! block of a row group to finish (an atomic counter per row group, reset by that block) adds
//! the `ksplit` partials in split order 0, 1, … — never in arrival order — and writes `y`.
//!
//! Traffic: weight bytes once, plus x (`8·T·in·2` per 128-row block, mostly L1/L2 hits),
//! plus `2·ksplit·n·out·4` partial bytes when split.

use kernel_abi::{qmm_row_stride, QmmParams, QMM_MAX_N, QMM_ROWS_PER_BLOCK, QMM_ROWS_PER_WARP, QMM_STAGES};

use super::formats::{Bf16, Format, F16, F32W, Q4K, Q5K, Q6K, Q8_0};
use crate::device::cp_async::{cp_async_16, cp_async_commit, cp_async_wait};
use crate::device::fence::fence_gpu;
use crate::device::load::{ld_cg_f32, ld_nc_v2_f32, ld_nc_v4, U32x4};
use crate::device::math::fma_ordered;
use crate::device::mma::{mma_bf16_16816, mma_f16_16816, mma_f16_16816_ordered};
use crate::device::shared::{dynamic_smem, smem_addr, Shared};
use crate::device::sync::{sync_threads, sync_warp};
use crate::device::*;

#[link_section = ".shared"]
static QMM_IS_LAST: Shared<u32> = Shared::uninit();

/// The kernel body, monomorphised per format `F` and tile count `T`.
#[inline(always)]
unsafe fn qmm<F: Format, const T: usize>(
    w: *const u8,
    xh: *const u16,
    xb_hi: *const u16,
    xb_lo: *const u16,
    xscale: *const f32,
    xsum: *const f32,
    partial: *mut f32,
    counters: *mut u32,
    y: *mut f32,
    p: QmmParams,
) {
    let lane = lane_id();
    let (g, t) = (lane / 4, lane % 4);
    let row0 = block_x() * QMM_ROWS_PER_BLOCK + warp_id() * QMM_ROWS_PER_WARP;
    let last_row = p.out_features - 1;
    let rg = (row0 + g).min(last_row) as usize;
    let rg8 = (row0 + g + 8).min(last_row) as usize;

    let blocks = p.in_features / F::ELEMS;
    let split = block_y();
    let ksplit = p.ksplit.max(1);
    let b0 = split * blocks / ksplit;
    let b1 = (split + 1) * blocks / ksplit;
    let units = F::ELEMS / 32;
    let k = p.in_features as usize;

    // This warp's shared-memory ring: STAGES × 16 rows × RS bytes.
    let rs = qmm_row_stride(F::BYTES, F::PER_STAGE) as usize;
    let ring = dynamic_smem().add(warp_id() as usize * (QMM_STAGES as usize * 16 * rs));
    let row_bytes = p.row_bytes as usize;
    let warp_row0 = row0 as usize;
    let stages = (b1 - b0).div_ceil(F::PER_STAGE);

    // Chunk j of a stage (j = lane, lane + 32, …) is 16-byte chunk `j % cpr` of row `j / cpr`;
    // the row and its base pointer are fixed per lane, so they are computed once here.
    let cpr = rs / 16;
    const MAX_CHUNKS_PER_LANE: usize = 8;
    // Byte offsets as u32 (the host guarantees W < 4 GiB): the row's offset and the chunk's
    // column, so a copy's source is two integer ops from them, not 64-bit address arithmetic.
    let mut chunk_off = [0u32; MAX_CHUNKS_PER_LANE];
    let mut chunk_dst = [0u32; MAX_CHUNKS_PER_LANE];
    let mut chunk_col16 = [0u32; MAX_CHUNKS_PER_LANE];
    let chunks_per_lane = (16 * cpr).div_ceil(32);
    let mut j = 0;
    while j < MAX_CHUNKS_PER_LANE {
        let idx = lane as usize + 32 * j;
        let r = (idx / cpr).min(15);
        let row = (warp_row0 + r).min(last_row as usize);
        chunk_off[j] = (row * row_bytes) as u32;
        chunk_col16[j] = 16 * (idx % cpr) as u32;
        chunk_dst[j] = smem_addr(ring.add(r * rs + 16 * (idx % cpr)));
        j += 1;
    }
    let stage_bytes = (16 * rs) as u32;
    // Issues the cp.async copies of stage `st`: for each of the 16 rows, the 16-byte chunks
    // covering blocks [b, b_end) (from the 16-byte boundary at or below the first byte).
    let issue = |st: u32| {
        let b = b0 + st * F::PER_STAGE;
        let b_end = (b + F::PER_STAGE).min(b1);
        let slot = (st % QMM_STAGES) * stage_bytes;
        let (first, last) = (b * F::BYTES, b_end * F::BYTES);
        let mut j = 0;
        while j < MAX_CHUNKS_PER_LANE && j < chunks_per_lane {
            // Chunks past 16 rows × cpr (the last lanes of the last round) copy nothing.
            let valid = (lane as usize + 32 * j) < 16 * cpr;
            let src = ((chunk_off[j] + first) & !15) + chunk_col16[j];
            if valid && src < chunk_off[j] + last {
                cp_async_16(chunk_dst[j] + slot, w.add(src as usize));
            }
            j += 1;
        }
    };

    let mut acc = [[0.0f32; 4]; T];
    let mut st = 0;
    while st + 1 < QMM_STAGES {
        if st < stages {
            issue(st);
        }
        cp_async_commit();
        st += 1;
    }
    let mut st = 0;
    while st < stages {
        if st + QMM_STAGES - 1 < stages {
            issue(st + QMM_STAGES - 1);
        }
        cp_async_commit();
        cp_async_wait::<{ QMM_STAGES - 1 }>();
        sync_warp();
        let slot = ring.add((st % QMM_STAGES) as usize * 16 * rs);
        let b = b0 + st * F::PER_STAGE;
        let b_end = (b + F::PER_STAGE).min(b1);
        let off_g = (rg * row_bytes + b as usize * F::BYTES as usize) & 15;
        let off_g8 = (rg8 * row_bytes + b as usize * F::BYTES as usize) & 15;
        let sg = slot.add(g as usize * rs + off_g);
        let sg8 = slot.add((g as usize + 8) * rs + off_g8);
        // With one tile (n ≤ 8, the decode case) the x fragments of the whole stage are loaded
        // before any of its math, so their latency overlaps instead of stalling every unit.
        const MAX_STAGE_UNITS: usize = 8;
        let stage_units = (F::PER_STAGE * units) as usize;
        let mut xs = [[0u32; 4]; MAX_STAGE_UNITS];
        let mut xls = [[0u32; 4]; MAX_STAGE_UNITS];
        let mut ss = [[0f32; 2]; MAX_STAGE_UNITS];
        // Per-stage base pointers; units then sit at compile-time offsets (immediate addresses).
        let unit0 = (b * units) as usize;
        let valid_units = ((b_end - b) * units) as usize;
        if T == 1 && F::OFFSET && 2 * t < p.n {
            let sbase = xsum.add(unit0 * QMM_MAX_N as usize + 2 * t as usize);
            let mut i = 0;
            while i < MAX_STAGE_UNITS {
                if i < stage_units && i < valid_units {
                    ss[i] = ld_nc_v2_f32(sbase.add(i * QMM_MAX_N as usize));
                }
                i += 1;
            }
        }
        if T == 1 && g < p.n {
            let at = g as usize * k + unit0 * 32 + 8 * t as usize;
            let (hbase, lbase) = (xh.add(at), xb_lo.add(at));
            let bbase = xb_hi.add(at);
            let mut i = 0;
            while i < MAX_STAGE_UNITS {
                if i < stage_units && i < valid_units {
                    if F::BF16 {
                        xs[i] = ld_nc_v4(bbase.add(32 * i) as *const U32x4).0;
                        xls[i] = ld_nc_v4(lbase.add(32 * i) as *const U32x4).0;
                    } else {
                        xs[i] = ld_nc_v4(hbase.add(32 * i) as *const U32x4).0;
                    }
                }
                i += 1;
            }
        }
        unroll_stage_blocks::<F>(|i_blk| {
            let bb = b + i_blk;
            if bb >= b_end {
                return;
            }
            let boff = (i_blk * F::BYTES) as usize;
            let lanedata = F::load(sg.add(boff), sg8.add(boff), t);
            unroll_units::<F>(|u| {
                let unit = (bb * units + u) as usize;
                // B fragments of both k16 steps for every tile: column = 8·tile + g.
                let mut xf = [[0u32; 4]; T];
                let mut xl = [[0u32; 4]; T];
                if T == 1 {
                    let xi = (i_blk * units + u) as usize;
                    xf[0] = xs[xi];
                    xl[0] = xls[xi];
                } else {
                    let mut tile = 0;
                    while tile < T {
                        let col = 8 * tile + g as usize;
                        let at = col * k + unit * 32 + 8 * t as usize;
                        // Padding columns (c ≥ n) are never loaded (`qmm_prep_x` does not write
                        // them): their fragments stay zero and x traffic stays proportional to n.
                        if col < p.n as usize {
                            if F::BF16 {
                                xf[tile] = ld_nc_v4(xb_hi.add(at) as *const U32x4).0;
                                xl[tile] = ld_nc_v4(xb_lo.add(at) as *const U32x4).0;
                            } else {
                                xf[tile] = ld_nc_v4(xh.add(at) as *const U32x4).0;
                            }
                        }
                        tile += 1;
                    }
                }
                if F::OFFSET {
                    // P = Σ (OFF + q')·x̂ over the unit from a zero accumulator, then
                    // acc += scale·P + bias·S per (row, column).
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
                    let (scale, bias) = F::unit_scales(&lanedata, u);
                    let mut tile = 0;
                    while tile < T {
                        let sums = if T == 1 {
                            ss[(i_blk * units + u) as usize]
                        } else if 8 * tile + 2 * (t as usize) < p.n as usize {
                            ld_nc_v2_f32(xsum.add(unit * QMM_MAX_N as usize + 8 * tile + 2 * t as usize))
                        } else {
                            [0.0; 2]
                        };
                        let mut j = 0;
                        while j < 4 {
                            let r = j / 2;
                            let a = fma_ordered(scale[r], pu[tile][j], acc[tile][j]);
                            acc[tile][j] = fma_ordered(bias[r], sums[j % 2], a);
                            j += 1;
                        }
                        tile += 1;
                    }
                    return;
                }
                let mut step = |h: u32| {
                    let a = F::frag(&lanedata, u, h);
                    let a_lo = F::frag_lo(&lanedata, u, h);
                    let mut tile = 0;
                    while tile < T {
                        let bf = [xf[tile][2 * h as usize], xf[tile][2 * h as usize + 1]];
                        if F::BF16 {
                            let bl = [xl[tile][2 * h as usize], xl[tile][2 * h as usize + 1]];
                            mma_bf16_16816(&mut acc[tile], a, bf);
                            mma_bf16_16816(&mut acc[tile], a, bl);
                            if let Some(alo) = a_lo {
                                mma_bf16_16816(&mut acc[tile], alo, bf);
                            }
                        } else {
                            mma_f16_16816(&mut acc[tile], a, bf);
                        }
                        tile += 1;
                    }
                };
                step(0);
                step(1);
            });
        });
        sync_warp();
        st += 1;
    }
    cp_async_wait::<0>();

    // Lane holds D[g][2t, 2t+1] (acc[.][0..2]) and D[g+8][2t, 2t+1] (acc[.][2..4]).
    let out = p.out_features as usize;
    let rows = [row0 + g, row0 + g + 8];
    // Calls `f(value, col, row)` for each of this lane's outputs that exists.
    let for_each_output = |f: &mut dyn FnMut(f32, usize, usize)| {
        let mut tile = 0;
        while tile < T {
            let mut j = 0;
            while j < 4 {
                let col = (8 * tile + 2 * t as usize + (j % 2)) as u32;
                let row = rows[j / 2];
                if col < p.n && row < p.out_features {
                    f(acc[tile][j], col as usize, row as usize);
                }
                j += 1;
            }
            tile += 1;
        }
    };
    if ksplit == 1 {
        for_each_output(&mut |v, col, row| *y.add(col * out + row) = v * *xscale.add(col));
        return;
    }

    // Split K: publish this split's partials, then the last block of the row group reduces.
    let plane = QMM_MAX_N as usize * out;
    for_each_output(&mut |v, col, row| *partial.add(split as usize * plane + col * out + row) = v);
    fence_gpu();
    sync_threads();
    let flag = QMM_IS_LAST.as_mut_ptr();
    if thread_x() == 0 {
        let prev = crate::device::atomic::atomic_add_u32(counters.add(block_x() as usize), 1);
        *flag = (prev == ksplit - 1) as u32;
    }
    sync_threads();
    if *flag == 0 {
        return;
    }
    fence_gpu();
    // Rows of this group × columns, one output per thread per step; splits added in order.
    let group_rows = QMM_ROWS_PER_BLOCK.min(p.out_features - block_x() * QMM_ROWS_PER_BLOCK).max(1);
    let total = group_rows * p.n;
    let mut i = thread_x();
    while i < total {
        let col = i / group_rows;
        let row = block_x() * QMM_ROWS_PER_BLOCK + i % group_rows;
        let idx = col as usize * out + row as usize;
        let mut sum = 0.0f32;
        let mut s = 0;
        while s < ksplit as usize {
            sum += ld_cg_f32(partial.add(s * plane + idx));
            s += 1;
        }
        *y.add(idx) = sum * *xscale.add(col as usize);
        i += block_dim_x();
    }
    if thread_x() == 0 {
        *counters.add(block_x() as usize) = 0;
    }
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

/// Register budgets: `minctasm=2` caps a thread at 128 registers (two 256-thread blocks per SM,
/// which is also what the shared-memory ring allows); with three or four tiles the K-quant
/// kernels need more than that and get `minctasm=1` (they spill at 128).
macro_rules! qmm_kernels {
    ($fmt:ty => $($name:ident = $t:literal @ $sect:literal),+) => {
        $(
            #[no_mangle]
            #[link_section = $sect]
            pub unsafe extern "ptx-kernel" fn $name(
                w: *const u8,
                xh: *const u16,
                xb_hi: *const u16,
                xb_lo: *const u16,
                xscale: *const f32,
                xsum: *const f32,
                partial: *mut f32,
                counters: *mut u32,
                y: *mut f32,
                p: QmmParams,
            ) {
                qmm::<$fmt, $t>(w, xh, xb_hi, xb_lo, xscale, xsum, partial, counters, y, p)
            }
        )+
    };
}

macro_rules! qmm_family {
    ($fmt:ty => $n1:ident, $n2:ident, $n3:ident, $n4:ident; wide = $wide:literal) => {
        qmm_kernels!($fmt =>
            $n1 = 1 @ "nvvm:maxntid=256;minctasm=2",
            $n2 = 2 @ "nvvm:maxntid=256;minctasm=2",
            $n3 = 3 @ $wide,
            $n4 = 4 @ $wide);
    };
}

qmm_family!(Q4K => qmm_q4k_nt1, qmm_q4k_nt2, qmm_q4k_nt3, qmm_q4k_nt4; wide = "nvvm:maxntid=256;minctasm=1");
// Q5_K spills at 128 registers from two tiles on.
qmm_kernels!(Q5K =>
    qmm_q5k_nt1 = 1 @ "nvvm:maxntid=256;minctasm=2",
    qmm_q5k_nt2 = 2 @ "nvvm:maxntid=256;minctasm=1",
    qmm_q5k_nt3 = 3 @ "nvvm:maxntid=256;minctasm=1",
    qmm_q5k_nt4 = 4 @ "nvvm:maxntid=256;minctasm=1");
qmm_family!(Q6K => qmm_q6k_nt1, qmm_q6k_nt2, qmm_q6k_nt3, qmm_q6k_nt4; wide = "nvvm:maxntid=256;minctasm=1");
qmm_family!(Q8_0 => qmm_q8_0_nt1, qmm_q8_0_nt2, qmm_q8_0_nt3, qmm_q8_0_nt4; wide = "nvvm:maxntid=256;minctasm=2");
qmm_family!(F16 => qmm_f16_nt1, qmm_f16_nt2, qmm_f16_nt3, qmm_f16_nt4; wide = "nvvm:maxntid=256;minctasm=2");
qmm_family!(Bf16 => qmm_bf16_nt1, qmm_bf16_nt2, qmm_bf16_nt3, qmm_bf16_nt4; wide = "nvvm:maxntid=256;minctasm=2");
qmm_family!(F32W => qmm_f32_nt1, qmm_f32_nt2, qmm_f32_nt3, qmm_f32_nt4; wide = "nvvm:maxntid=256;minctasm=2");
