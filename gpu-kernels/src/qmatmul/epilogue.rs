//! The end of a `qmm_*` kernel (`super::tile`): from each lane's f32 accumulators to `y`.
//!
//! * `ksplit = 1`: every lane writes its outputs, times the column's x scale (and, row-scaled
//!   formats, its row's scale first: `(v·s_r)·s_c`, both powers of two) — or, fused SwiGLU,
//!   `silu(g)·u` from its gate row `g` and up row `g + 8` (W interleaved by 8 rows).
//! * `ksplit > 1` (the split count of the block's row block, `kernel_abi::qmm_block_work`):
//!   every block writes its partial sums to `partial[s][c][o]`; the last block of a row group to finish (an atomic counter per row group, reset by that block) adds the `ksplit`
//!   partials in split order 0, 1, … — never in arrival order — and writes `y` (or the SwiGLU of
//!   the gate and up sums). That block holds its SM while it reduces, so the reduction is
//!   latency-critical: in the block formats' kernels each thread requests the partials of 4
//!   outputs × 4 splits before adding any ([`ordered_split_sums`]); the float formats'
//!   80-register kernels keep one output per step (any change there made ptxas spill).
//! * `ksplit > 1`, `QmmParams::reduce_spread` (block formats, global memory): every block writes
//!   its partials as above and arrives on the row group's counter; once all `ksplit` have arrived
//!   (an acquire load, spinning; a trap after `SPREAD_SPIN_LIMIT` back-offs), split `s` adds the
//!   partials of the columns `c ≡ s (mod ksplit)` — the same adds in the same order, so the same
//!   bits — and departs; the last to depart resets the counter. No lone last block: the
//!   reduction's loads are spread over the splits, one batch each instead of several. The host
//!   sets it only when every split block fits the device at once (a waiting block must not hold
//!   a slot a sibling needs).
//! * `ksplit > 1` in a cluster launch (`QmmParams::cluster`, block formats only: every row block
//!   split, one thread-block cluster of `ksplit` blocks per row block, split = cluster rank):
//!   each block keeps its partials in its own shared memory; after a cluster barrier, block `s`
//!   of the cluster reduces every `ksplit`-th share of the row block's outputs, reading each
//!   split's partial from that split's block (`ld.shared::cluster`), added in split order from
//!   0.0 — the global path's additions, so its bits — with no partial-sum traffic through L2, no
//!   counter and no lone last block; a final cluster barrier keeps every block's shared memory
//!   alive until its peers have read it.
//! * Accumulating kernels (`ACCUM`, `kernel_abi::qmm_accum`; plain products, any plan): no
//!   reduction here — every block adds its outputs' raw sums to i64 fixed-point accumulators
//!   (`red.global.add.u64`, exact and order-free) and the consumer converts them ([`accumulate`]).
//!   Fused SwiGLU with `ACCUM`: the unsplit row blocks store `y` and their row maxima as above;
//!   only the split row blocks (the plan's tail) accumulate, their gate and up rows both.
//! * Fused SwiGLU, every path: the block that writes a row group's `y` (spread: each split, for the
//!   columns it wrote) also publishes, per column `c < n`, the largest `|y|` it wrote (as bits `y.to_bits() & 0x7fff_ffff`: an integer
//!   max, NaN above inf, order-independent) at `ymax[c · row_blocks + rb]` (`rb`: the row block): a shared word
//!   per column (zeroed, a barrier, `atom.shared.max` from every stored value, a barrier), then
//!   one global word per column. Every launch writes all `n × row_blocks` words, so the max over a
//!   column's words is bitwise `qmm_prep_x`'s scan of that column of `y` (`prep.rs`).
//!
//! Everything here is inlined into the kernel (`#[inline(always)]`): a separate function measured
//! a 24-byte stack frame in every kernel and spills in five (docs/perf/qmatmul.md, session 8).

use kernel_abi::qmm_accum::FRAC_BITS;
use kernel_abi::{qmm_block_bytes, qmm_block_work, QmmParams, QMM_MAX_N, QMM_ROWS_PER_BLOCK, QMM_ROWS_PER_WARP};

use super::formats::Format;
use crate::device::atomic::{atomic_max_u32, red_add_u64, red_max_u32};
use crate::device::cluster::{cluster_sync, ld_cluster_f32, ld_cluster_u32, map_to_rank};
use crate::device::convert::f32_to_i64_rn;
use crate::device::fence::fence_gpu;
use crate::device::load::ld_cg_f32;
use crate::device::math::silu;
use crate::device::shared::{smem_addr, Shared};
use crate::device::sync::sync_threads;
use crate::device::unroll::unroll_below;
use crate::device::*;

/// Back-offs (`nanosleep(100)`, ≥ 0.1 µs each) a split of the spread reduction waits for its row
/// group's other splits before it traps (≈ 2^24: seconds, where a legitimate wait is microseconds).
const SPREAD_SPIN_LIMIT: u32 = 1 << 24;

#[link_section = ".shared"]
static QMM_IS_LAST: Shared<u32> = Shared::uninit();

/// Per column, the largest `|y|` bits this block stored (fused SwiGLU only).
#[link_section = ".shared"]
static QMM_YMAX: Shared<[u32; QMM_MAX_N as usize]> = Shared::uninit();

/// A cluster launch's partial sums of this block's split, `[8·T columns][128 rows]` (one static
/// per tile count, so a kernel holds only its own width: 4–16 KiB).
#[link_section = ".shared"]
static QMM_PART1: Shared<[f32; 8 * QMM_ROWS_PER_BLOCK as usize]> = Shared::uninit();
#[link_section = ".shared"]
static QMM_PART2: Shared<[f32; 16 * QMM_ROWS_PER_BLOCK as usize]> = Shared::uninit();
#[link_section = ".shared"]
static QMM_PART3: Shared<[f32; 24 * QMM_ROWS_PER_BLOCK as usize]> = Shared::uninit();
#[link_section = ".shared"]
static QMM_PART4: Shared<[f32; 32 * QMM_ROWS_PER_BLOCK as usize]> = Shared::uninit();

#[inline(always)]
fn cluster_partials<const T: usize>() -> *mut f32 {
    match T {
        1 => QMM_PART1.as_mut_ptr() as *mut f32,
        2 => QMM_PART2.as_mut_ptr() as *mut f32,
        3 => QMM_PART3.as_mut_ptr() as *mut f32,
        _ => QMM_PART4.as_mut_ptr() as *mut f32,
    }
}

/// The gate row (within its row block) of the block's fused SwiGLU feature `f`: W interleaves
/// gate and up by 8 rows, so feature `f` is gate row `16·(f/8) + f%8`, its up row 8 below.
#[inline(always)]
fn swiglu_gate_row(f: u32) -> u32 {
    16 * (f / 8) + f % 8
}

/// Whether format `F`'s kernels have the cluster path (the block formats: Q4_K, Q5_K, Q6_K,
/// Q8_0 — `kernel_abi::qmm_cluster_plan` launches; the float formats' 80-register kernels keep
/// the global-memory reduction only).
#[inline(always)]
const fn cluster_capable<F: Format>() -> bool {
    !(F::ELEMS == 32 && !F::PRODUCTS_FROM_ZERO)
}

/// Zeroes the block's per-column maxima, then a barrier (every thread of the block calls it).
#[inline(always)]
unsafe fn ymax_begin() -> *mut u32 {
    let smax = QMM_YMAX.as_mut_ptr() as *mut u32;
    if thread_x() < QMM_MAX_N {
        *smax.add(thread_x() as usize) = 0;
    }
    sync_threads();
    smax
}

/// `|v|` (bits) into column `col`'s shared max.
#[inline(always)]
unsafe fn ymax_add(smax: *mut u32, col: usize, v: f32) {
    atomic_max_u32(smax.add(col), v.to_bits() & 0x7fff_ffff);
}

/// A barrier, then column `c < n`'s max to `ymax[c · row_blocks + rb]` (every thread calls it).
#[inline(always)]
unsafe fn ymax_publish(smax: *mut u32, ymax: *mut u32, n: u32, rb: u32, row_blocks: u32) {
    sync_threads();
    let c = thread_x();
    if c < n {
        *ymax.add((c * row_blocks + rb) as usize) = *smax.add(c as usize);
    }
}

/// The row scales of a row-scaled format's packed W `w` (`kernel_abi::qmm_row_scaled`: one f32
/// per packed row after the blocks), or null for the other formats (never read).
#[inline(always)]
pub(super) unsafe fn row_scales<F: Format>(w: *const u8, p: QmmParams) -> *const f32 {
    if F::ROW_SCALED {
        w.add(qmm_block_bytes(p.out_features, p.in_features, F::ELEMS, F::BYTES) as usize) as *const f32
    } else {
        core::ptr::null()
    }
}

/// `v` times row `row`'s scale for row-scaled formats (`rscale` from [`row_scales`]), else `v`.
#[inline(always)]
unsafe fn row_scaled<F: Format>(v: f32, rscale: *const f32, row: usize) -> f32 {
    if F::ROW_SCALED {
        v * *rscale.add(row)
    } else {
        v
    }
}

/// Writes the results of a warp's 16 rows `row0 ..` (the block's row block, this warp's 16;
/// `acc[tile]`: lane `(g, t)` holds
/// `D[g][2t, 2t+1]` in `[0..2]` and `D[g+8][2t, 2t+1]` in `[2..4]`); `rscale`: the row scales
/// of a row-scaled format ([`row_scales`]); `ymax`: the fused SwiGLU's per-column maxima (see
/// the module doc; unused by the plain epilogue).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(super) unsafe fn store<F: Format, const T: usize, const SWIGLU: bool, const ACCUM: bool>(
    acc: &[[f32; 4]; T],
    p: QmmParams,
    rscale: *const f32,
    xscale: *const f32,
    partial: *mut f32,
    counters: *mut u32,
    y: *mut f32,
    ymax: *mut u32,
) {
    let lane = lane_id();
    let (g, t) = (lane / 4, lane % 4);
    // Row block, split and the row block's split count (`kernel_abi::qmm_block_work`; recomputed
    // here rather than kept live through the kernel's main loop).
    let row_blocks = p.out_features.div_ceil(QMM_ROWS_PER_BLOCK);
    let (rb, split, ksplit) = qmm_block_work(block_x(), row_blocks, p.full_row_blocks, p.ksplit, p.cluster);
    let row0 = rb * QMM_ROWS_PER_BLOCK + warp_id() * QMM_ROWS_PER_WARP;
    let out = p.out_features as usize;
    let rows = [row0 + g, row0 + g + 8];
    // Fused SwiGLU (`p.swiglu_ff > 0`): rows `g` and `g + 8` of a warp's 16 are the gate and up
    // rows of the same feature `row0/2 + g`, so a lane holds both operands of its outputs.
    let ff = if SWIGLU { p.swiglu_ff as usize } else { 0 };
    if SWIGLU && ksplit == 1 {
        let smax = ymax_begin();
        let f = (row0 / 2 + g) as usize;
        let (gate_row, up_row) = (rows[0] as usize, rows[1] as usize);
        let mut tile = 0;
        while tile < T {
            let mut j = 0;
            while j < 2 {
                let col = 8 * tile + 2 * t as usize + j;
                if col < p.n as usize && f < ff {
                    let s = *xscale.add(col);
                    let gate = row_scaled::<F>(acc[tile][j], rscale, gate_row);
                    let up = row_scaled::<F>(acc[tile][j + 2], rscale, up_row);
                    let v = silu(gate * s) * (up * s);
                    *y.add(col * ff + f) = v;
                    ymax_add(smax, col, v);
                }
                j += 1;
            }
            tile += 1;
        }
        ymax_publish(smax, ymax, p.n, rb, row_blocks);
        return;
    }
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
    if ACCUM && SWIGLU {
        // A fused SwiGLU product's split tail (its unsplit row blocks took the branch above): the
        // raw gate and up sums into the tail accumulators (`partial`, `[col][tail rows]` from the
        // first split row block's first row) and the scale words (`counters`), raised by the
        // tail's first block; the down projection's prep applies the SwiGLU.
        let tail0 = (p.full_row_blocks * QMM_ROWS_PER_BLOCK) as usize;
        let tail_rows = ((row_blocks - p.full_row_blocks) * QMM_ROWS_PER_BLOCK) as usize;
        let first = rb == p.full_row_blocks && split == 0;
        accumulate::<F>(for_each_output, p.n, tail_rows, tail0, first, rscale, xscale, partial as *mut u64, counters);
        return;
    }
    if ACCUM {
        accumulate::<F>(for_each_output, p.n, out, 0, block_x() == 0, rscale, xscale, y as *mut u64, ymax);
        return;
    }
    if ksplit == 1 {
        for_each_output(&mut |v, col, row| {
            *y.add(col * out + row) = row_scaled::<F>(v, rscale, row) * *xscale.add(col)
        });
        return;
    }

    if cluster_capable::<F>() && p.cluster != 0 {
        // Split K through the cluster: this split's partials into this block's shared memory,
        // a cluster barrier, then every block of the cluster reduces a share of the row block's
        // outputs, reading split `s`'s partial from block `s` — added in split order 0, 1, …
        // from 0.0 as below, so the bits are those of the global-memory path.
        let part = cluster_partials::<T>();
        let row_base = rb * QMM_ROWS_PER_BLOCK;
        for_each_output(&mut |v, col, row| {
            *part.add(col * QMM_ROWS_PER_BLOCK as usize + (row - row_base as usize)) = v
        });
        let smax = if SWIGLU { ymax_begin() } else { core::ptr::null_mut() };
        cluster_sync();
        let part_addr = smem_addr(part);
        // Split `s`'s partial of output `local`, summed in split order: 8 remote loads in flight
        // per chunk of splits.
        let sum_splits = |local: usize| {
            let addr = part_addr + 4 * local as u32;
            let mut sum = 0.0f32;
            let mut s0 = 0u32;
            while s0 < ksplit {
                let mut v = [0.0f32; 8];
                unroll_below(
                    8,
                    #[inline(always)]
                    |s| {
                        if s0 + (s as u32) < ksplit {
                            v[s] = ld_cluster_f32(map_to_rank(addr, s0 + s as u32));
                        }
                    },
                );
                unroll_below(
                    8,
                    #[inline(always)]
                    |s| {
                        if s0 + (s as u32) < ksplit {
                            sum += v[s];
                        }
                    },
                );
                s0 += 8;
            }
            sum
        };
        let group_rows = QMM_ROWS_PER_BLOCK.min(p.out_features - row_base).max(1);
        let per_col = if SWIGLU { group_rows / 2 } else { group_rows };
        let total = per_col * p.n;
        let stride = ksplit * block_dim_x();
        let mut i = split * block_dim_x() + thread_x();
        while i < total {
            let (col, local) = (i / per_col, i % per_col);
            let s = *xscale.add(col as usize);
            let pcol = col as usize * QMM_ROWS_PER_BLOCK as usize;
            if SWIGLU {
                let f = (row_base / 2 + local) as usize;
                let gl = swiglu_gate_row(local) as usize;
                if f < ff {
                    let v = silu(sum_splits(pcol + gl) * s) * (sum_splits(pcol + gl + 8) * s);
                    *y.add(col as usize * ff + f) = v;
                    ymax_add(smax, col as usize, v);
                }
            } else {
                let row = (row_base + local) as usize;
                *y.add(col as usize * out + row) = sum_splits(pcol + local as usize) * s;
            }
            i += stride;
        }
        if SWIGLU {
            // The row block's max per column: block 0 of the cluster takes the max of every
            // block's shared word once all of them are final.
            sync_threads();
            cluster_sync();
            let c = thread_x();
            if split == 0 && c < p.n {
                let addr = smem_addr(smax.add(c as usize));
                let mut m = 0u32;
                let mut r = 0;
                while r < ksplit {
                    m = m.max(ld_cluster_u32(map_to_rank(addr, r)));
                    r += 1;
                }
                *ymax.add((c * row_blocks + rb) as usize) = m;
            }
        }
        // No block leaves while a peer may still read its shared memory.
        cluster_sync();
        return;
    }

    // Split K: publish this split's partials, then the last block of the row group reduces —
    // or, `p.reduce_spread`, every split reduces its share of the columns once all have published.
    let plane = QMM_MAX_N as usize * out;
    for_each_output(&mut |v, col, row| *partial.add(split as usize * plane + col * out + row) = v);
    fence_gpu();
    sync_threads();
    let group_rows = QMM_ROWS_PER_BLOCK.min(p.out_features - rb * QMM_ROWS_PER_BLOCK).max(1);
    if cluster_capable::<F>() && p.reduce_spread != 0 {
        let counter = counters.add(rb as usize);
        // Arrive, then wait until every split of the row group has arrived (the acquire load and
        // the barrier order this block's reads of the partials after their writers' fences).
        // The host sets `reduce_spread` only when every split block of the launch can be resident
        // at once, so the wait ends within microseconds; should that ever not hold (another
        // context holding SMs), the spin gives up after ≈ 2^24 back-offs (seconds) and traps, so
        // the launch fails with an error instead of hanging the stream.
        if thread_x() == 0 {
            crate::device::atomic::atomic_add_u32(counter, 1);
            let mut tries = 0u32;
            while crate::device::atomic::ld_acquire_gpu_u32(counter) < ksplit {
                crate::device::atomic::nanosleep(100);
                tries += 1;
                if tries == SPREAD_SPIN_LIMIT {
                    crate::device::atomic::trap();
                }
            }
        }
        sync_threads();
        fence_gpu();
        let smax = if SWIGLU { ymax_begin() } else { core::ptr::null_mut() };
        // This split's columns: `split, split + ksplit, …` below `n`.
        let cols = if p.n > split { (p.n - split).div_ceil(ksplit) } else { 0 };
        reduce_columns::<SWIGLU>(
            partial,
            plane,
            ksplit,
            rb,
            group_rows,
            out,
            ff,
            cols,
            |c| split + c * ksplit,
            xscale,
            y,
            smax,
        );
        if SWIGLU {
            sync_threads();
            let c = thread_x();
            if c < p.n && c % ksplit == split {
                *ymax.add((c * row_blocks + rb) as usize) = *smax.add(c as usize);
            }
        }
        // Depart: the last split of the row group to leave resets its counter for the next launch
        // (which the stream orders after this grid).
        sync_threads();
        if thread_x() == 0 {
            let prev = crate::device::atomic::atomic_add_u32(counter, 1);
            if prev == 2 * ksplit - 1 {
                *counter = 0;
            }
        }
        return;
    }
    let flag = QMM_IS_LAST.as_mut_ptr();
    if thread_x() == 0 {
        let prev = crate::device::atomic::atomic_add_u32(counters.add(rb as usize), 1);
        *flag = (prev == ksplit - 1) as u32;
    }
    sync_threads();
    if *flag == 0 {
        return;
    }
    fence_gpu();
    let smax = if SWIGLU { ymax_begin() } else { core::ptr::null_mut() };
    // Rows of this group (`group_rows`) × columns: the outputs this block reduces; splits added
    // in order.
    // The float formats' kernels run at 80 registers (3 blocks per SM), where any change to this
    // loop made ptxas spill: they keep one output per thread and step (its splits' loads are
    // unrolled by the compiler).
    // (The row-scaled formats are float formats: they take this branch.)
    if F::ELEMS == 32 && !F::PRODUCTS_FROM_ZERO {
        let sum_splits = |idx: usize| {
            let mut sum = 0.0f32;
            let mut s = 0;
            while s < ksplit as usize {
                sum += ld_cg_f32(partial.add(s * plane + idx));
                s += 1;
            }
            sum
        };
        let total = group_rows * p.n;
        let mut i = thread_x();
        while i < total {
            let col = i / group_rows;
            let row = rb * QMM_ROWS_PER_BLOCK + i % group_rows;
            let idx = col as usize * out + row as usize;
            let row = row as usize;
            if !SWIGLU {
                *y.add(idx) = row_scaled::<F>(sum_splits(idx), rscale, row) * *xscale.add(col as usize);
            } else if row % 16 < 8 {
                // Fused SwiGLU: the thread of a gate row also reduces the up row 8 below it.
                let f = row / 16 * 8 + row % 16;
                if f < ff {
                    let s = *xscale.add(col as usize);
                    let gate = row_scaled::<F>(sum_splits(idx), rscale, row);
                    let up = row_scaled::<F>(sum_splits(idx + 8), rscale, row + 8);
                    let v = silu(gate * s) * (up * s);
                    *y.add(col as usize * ff + f) = v;
                    ymax_add(smax, col as usize, v);
                }
            }
            i += block_dim_x();
        }
    } else {
        reduce_columns::<SWIGLU>(partial, plane, ksplit, rb, group_rows, out, ff, p.n, |c| c, xscale, y, smax);
    }
    if SWIGLU {
        ymax_publish(smax, ymax, p.n, rb, row_blocks);
    }
    if thread_x() == 0 {
        *counters.add(rb as usize) = 0;
    }
}

/// The accumulating epilogue (`kernel_abi::qmm_accum`, the `qmm_*_accum_*` kernels, any plan):
/// each of this lane's outputs adds its raw sum `P` (row-scaled formats: `P · s_r`, a power of
/// two) as the i64 `round(P · 2^FRAC_BITS)` to `acc[col · pitch + row − row0]` — no partials, no
/// counter, no waiting: the sum of a row block's splits is exact and order-free. A `|P| ≥ 2^39`
/// (or non-finite) sum marks its column's scale word NaN; the `publish` block raises every
/// column's word to the bits of its x scale `s_c` (an integer max: NaN bits stay above). The
/// consumer reads `f32(acc) · 2^-FRAC_BITS · s_c` and zeroes the accumulators it does not read.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn accumulate<F: Format>(
    for_each_output: impl Fn(&mut dyn FnMut(f32, usize, usize)),
    n: u32,
    pitch: usize,
    row0: usize,
    publish: bool,
    rscale: *const f32,
    xscale: *const f32,
    acc: *mut u64,
    scale_words: *mut u32,
) {
    const LIMIT: f32 = (1u64 << (63 - FRAC_BITS)) as f32;
    const UNIT: f32 = (1u64 << FRAC_BITS) as f32;
    for_each_output(&mut |v, col, row| {
        let v = row_scaled::<F>(v, rscale, row);
        if !(v.abs() < LIMIT) {
            red_max_u32(scale_words.add(col), f32::NAN.to_bits());
        }
        red_add_u64(acc.add(col * pitch + row - row0), f32_to_i64_rn(v * UNIT) as u64);
    });
    if publish && thread_x() < n {
        let c = thread_x() as usize;
        red_max_u32(scale_words.add(c), (*xscale.add(c)).to_bits());
    }
}

/// The block formats' split-K adds for `cols` columns of row group `rb` (column `col_of(j)`,
/// `j < cols`): every output's `ksplit` partials (`partial[s·plane + col·out + row]`) added in
/// split order 0, 1, … from 0.0, times the column's x scale, into `y` (fused SwiGLU: the
/// feature's `silu(gate)·up`, and its `|y|` into the block's shared column max `smax`).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn reduce_columns<const SWIGLU: bool>(
    partial: *mut f32,
    plane: usize,
    ksplit: u32,
    rb: u32,
    group_rows: u32,
    out: usize,
    ff: usize,
    cols: u32,
    col_of: impl Fn(u32) -> u32,
    xscale: *const f32,
    y: *mut f32,
    smax: *mut u32,
) {
    // Each thread reduces a batch of items at a time (plain: 4 outputs; SwiGLU: 2 features,
    // each a gate row and the up row 8 below it): every partial of the batch is requested before
    // any is added, so a batch costs one L2 round trip instead of one per output (or per gate and
    // up). The adds stay in split order 0, 1, … for every output.
    // Slots of loaded partials per batch: one per output (plain), two per feature (SwiGLU).
    const SLOTS: usize = 4;
    let (items_per_batch, operands) = if SWIGLU { (SLOTS / 2, 2) } else { (SLOTS, 1) };
    // Every index into the arrays below is a compile-time constant (`unroll_below`), so they stay in
    // registers: per batch 4 slots × 4 splits of loads in flight at once.
    let per_col = if SWIGLU { group_rows / 2 } else { group_rows };
    let total = per_col * cols;
    let stride = block_dim_x();
    let mut i0 = thread_x();
    while i0 < total {
        // Per slot: the partial index it sums (`usize::MAX`: none); per item: column and y index.
        let mut src = [usize::MAX; SLOTS];
        let mut dst = [(0usize, usize::MAX); SLOTS];
        unroll_below(
            4,
            #[inline(always)]
            |j| {
                let i = i0 + j as u32 * stride;
                if j >= items_per_batch || i >= total {
                    return;
                }
                let (col, local) = (col_of(i / per_col), i % per_col);
                let (row, out_idx) = if SWIGLU {
                    let f = (rb * QMM_ROWS_PER_BLOCK / 2 + local) as usize;
                    let row = (rb * QMM_ROWS_PER_BLOCK + swiglu_gate_row(local)) as usize;
                    (row, if f < ff { col as usize * ff + f } else { usize::MAX })
                } else {
                    let row = (rb * QMM_ROWS_PER_BLOCK + local) as usize;
                    (row, col as usize * out + row)
                };
                if out_idx == usize::MAX {
                    return;
                }
                dst[j] = (col as usize, out_idx);
                src[j * operands] = col as usize * out + row;
                if SWIGLU {
                    src[j * operands + 1] = col as usize * out + row + 8;
                }
            },
        );
        let sums = ordered_split_sums(partial, plane, ksplit as usize, &src);
        unroll_below(
            4,
            #[inline(always)]
            |j| {
                let (col, out_idx) = dst[j];
                if j < items_per_batch && out_idx != usize::MAX {
                    let s = *xscale.add(col);
                    let v = if SWIGLU { silu(sums[2 * j] * s) * (sums[2 * j + 1] * s) } else { sums[j] * s };
                    *y.add(out_idx) = v;
                    if SWIGLU {
                        ymax_add(smax, col, v);
                    }
                }
            },
        );
        i0 += items_per_batch as u32 * stride;
    }
}

/// The split-K sums `Σ_s partial[s·plane + src[k]]`, added in split order `s = 0, 1, …` from
/// 0.0, of the four sources `k` with `src[k] != usize::MAX`: each chunk of 4 splits loads every
/// source's partials (16 loads in flight) before adding them, so a chunk costs one L2 round trip.
/// Every index is a compile-time constant, so the 16 values stay in registers. (Giving a lone
/// source all 16 loads of a chunk measured no faster at n = 1: docs/perf/qmatmul.md, session 8.)
#[inline(always)]
unsafe fn ordered_split_sums(partial: *const f32, plane: usize, ksplit: usize, src: &[usize; 4]) -> [f32; 4] {
    let mut sums = [0.0f32; 4];
    let mut s0 = 0usize;
    while s0 < ksplit {
        let mut v = [[0.0f32; 4]; 4];
        unroll4x4(|r, s1| {
            if src[r] != usize::MAX && s0 + s1 < ksplit {
                v[r][s1] = ld_cg_f32(partial.add((s0 + s1) * plane + src[r]));
            }
        });
        unroll4x4(|r, s1| {
            if s0 + s1 < ksplit {
                sums[r] += v[r][s1];
            }
        });
        s0 += 4;
    }
    sums
}

/// Calls `f(r, s)` for `r`, `s` in `0..4` (row-major), each index a compile-time constant.
#[inline(always)]
fn unroll4x4(mut f: impl FnMut(usize, usize)) {
    unroll_below(
        4,
        #[inline(always)]
        |r| unroll_below(4, |s| f(r, s)),
    );
}

/// Whether `F`'s products run as two sums ([`add_odd_units`]): the super-block formats (Q4_K,
/// Q5_K, Q6_K: 8 units per block, one block per stage) whose products go straight into the
/// accumulators.
#[inline(always)]
pub(super) const fn odd_units_apart<F: Format>() -> bool {
    F::ELEMS == 256 && !F::PRODUCTS_FROM_ZERO
}

/// The accumulator set that unit `u`'s products go into: `acc_odd` for an odd unit of a format
/// whose units run as two sums ([`odd_units_apart`]), else `acc`.
#[inline(always)]
pub(super) fn unit_sums<'a, F: Format, const T: usize>(
    u: u32,
    acc: &'a mut [[f32; 4]; T],
    acc_odd: &'a mut [[f32; 4]; T],
) -> &'a mut [[f32; 4]; T] {
    if odd_units_apart::<F>() && u % 2 == 1 {
        acc_odd
    } else {
        acc
    }
}

/// Super-block products run as two sums — units 0, 2, 4, 6 of every block (with a K-quant's
/// mins step) into `acc`, units 1, 3, 5, 7 into `acc_odd`, each in K order — so that a unit's
/// products do not wait on the previous unit's; this adds them, element by element
/// (`acc + acc_odd`, one f32 rounding). The `mma.sync` and warpgroup kernels hold the same
/// accumulator elements per lane and split the same way, so a column's bits still do not
/// depend on the tile count.
#[inline(always)]
pub(super) fn add_odd_units<const T: usize>(acc: &mut [[f32; 4]; T], acc_odd: &[[f32; 4]; T]) {
    let mut j = 0;
    while j < T {
        let mut e = 0;
        while e < 4 {
            acc[j][e] += acc_odd[j][e];
            e += 1;
        }
        j += 1;
    }
}
