//! `sample`: argmax and top-k log-probabilities over rows of logits.
//!
//! Order: `(v, i)` beats `(w, j)` iff `v > w`, or `v == w` and `i < j` (lowest index wins ties);
//! NaN never wins; a row of only NaN yields index `u32::MAX`. This is a total order on the
//! non-NaN candidates, so the result does not depend on the reduction order at all.
//!
//! Two passes, so that a single 248 320-wide row uses the whole GPU:
//! 1. `argmax_partial`: grid `(ARGMAX_SPLITS, rows)`, 256 threads; block `s` scans segment `s`
//!    of its row (16-byte loads where `cols % 4 == 0`) and writes one `(value, index)`.
//! 2. `argmax_finish`: one warp per row reduces its `ARGMAX_SPLITS` partials.
//!
//! Traffic: `rows·cols·4` bytes read (pass 1) plus `rows·ARGMAX_SPLITS·8` written and read.
//!
//! Top-k (`topk_partial`, `topk_finish`): see [`topk_partial`]. Seeded sampling (`sample_rows`):
//! [`draw`]. Every kernel here is chainable
//! (programmatic dependent launch: `launch_dependents(); grid_dependency_wait();` first).

use kernel_abi::{ArgmaxParams, TopkParams, ARGMAX_SPLITS, TOPK_ITEMS, TOPK_MAX_K, TOPK_SEGMENT};

use crate::device::atomic::atomic_add_u32;
use crate::device::griddep::{grid_dependency_wait, launch_dependents};
use crate::device::load::{ld_v4, U32x4};
use crate::device::math::{exp_accurate, lg2};
use crate::device::shared::Shared;
use crate::device::sync::sync_threads;
use crate::device::warp::{shfl_xor_u32, warp_inclusive_scan_u32, warp_max_u32, warp_sum_f32};
use crate::device::*;

#[derive(Clone, Copy)]
struct Best {
    v: f32,
    i: u32,
}

impl Best {
    const NONE: Best = Best { v: f32::NEG_INFINITY, i: u32::MAX };

    #[inline(always)]
    fn offer(&mut self, v: f32, i: u32) {
        if v > self.v || (v == self.v && i < self.i) {
            self.v = v;
            self.i = i;
        }
    }

    #[inline(always)]
    fn warp_reduce(mut self) -> Best {
        let mut m = 16;
        while m > 0 {
            let v = f32::from_bits(shfl_xor_u32(self.v.to_bits(), m));
            let i = shfl_xor_u32(self.i, m);
            self.offer(v, i);
            m >>= 1;
        }
        self
    }
}

#[link_section = ".shared"]
static ARGMAX_VALS: Shared<[f32; 32]> = Shared::uninit();
#[link_section = ".shared"]
static ARGMAX_IDXS: Shared<[u32; 32]> = Shared::uninit();

/// Segment length of one split: `ceil(cols / SPLITS)` rounded up to a multiple of 4 so that
/// segments start 16-byte aligned.
#[inline(always)]
pub fn segment_len(cols: u32) -> u32 {
    cols.div_ceil(ARGMAX_SPLITS).div_ceil(4) * 4
}

/// Pass 1: partial argmax of segment `blockIdx.x` of row `blockIdx.y`.
#[no_mangle]
#[link_section = "nvvm:maxntid=256;minctasm=1"]
pub unsafe extern "ptx-kernel" fn argmax_partial(
    x: *const f32,
    part_val: *mut f32,
    part_idx: *mut u32,
    p: ArgmaxParams,
) {
    launch_dependents();
    grid_dependency_wait();
    let split = block_x();
    let row = block_y();
    if row >= p.rows {
        return;
    }
    let seg = segment_len(p.cols);
    let start = (split * seg).min(p.cols);
    let end = (start + seg).min(p.cols);
    let xr = x.add(row as usize * p.cols as usize);
    let t = thread_x();
    let mut best = Best::NONE;
    if p.cols % 4 == 0 {
        // start and end are multiples of 4 here. Each round issues all 4 (predicated) vector
        // loads before any compare, so a thread never waits on two DRAM latencies in a row.
        // Coherent loads (not `.nc`): the logits may come from the previous kernel of a chain.
        let step = 4 * block_dim_x();
        let mut i = start + 4 * t;
        while i < end {
            let mut v = [U32x4::default(); 4];
            let mut u = 0;
            while u < 4 {
                let j = i + u as u32 * step;
                if j < end {
                    v[u] = ld_v4(xr.add(j as usize) as *const U32x4);
                }
                u += 1;
            }
            let mut u = 0;
            while u < 4 {
                let j = i + u as u32 * step;
                if j < end {
                    best.offer(f32::from_bits(v[u].0[0]), j);
                    best.offer(f32::from_bits(v[u].0[1]), j + 1);
                    best.offer(f32::from_bits(v[u].0[2]), j + 2);
                    best.offer(f32::from_bits(v[u].0[3]), j + 3);
                }
                u += 1;
            }
            i += 4 * step;
        }
    } else {
        let mut i = start + t;
        while i < end {
            best.offer(*xr.add(i as usize), i);
            i += block_dim_x();
        }
    }
    let best = best.warp_reduce();
    let vals = ARGMAX_VALS.as_mut_ptr() as *mut f32;
    let idxs = ARGMAX_IDXS.as_mut_ptr() as *mut u32;
    if lane_id() == 0 {
        *vals.add(warp_id() as usize) = best.v;
        *idxs.add(warp_id() as usize) = best.i;
    }
    sync_threads();
    if t == 0 {
        let mut b = Best::NONE;
        let mut w = 0;
        while w < block_dim_x() / 32 {
            b.offer(*vals.add(w as usize), *idxs.add(w as usize));
            w += 1;
        }
        let o = (row * ARGMAX_SPLITS + split) as usize;
        *part_val.add(o) = b.v;
        *part_idx.add(o) = b.i;
    }
}

/// Pass 2: one warp per row reduces the row's `ARGMAX_SPLITS` partials into `out_idx[row]`,
/// `out_val[row]`.
#[no_mangle]
#[link_section = "nvvm:maxntid=256;minctasm=1"]
pub unsafe extern "ptx-kernel" fn argmax_finish(
    part_val: *const f32,
    part_idx: *const u32,
    out_idx: *mut u32,
    out_val: *mut f32,
    p: ArgmaxParams,
) {
    launch_dependents();
    grid_dependency_wait();
    let row = block_x() * (block_dim_x() / 32) + warp_id();
    if row >= p.rows {
        return;
    }
    let mut best = Best::NONE;
    let mut s = lane_id();
    while s < ARGMAX_SPLITS {
        let o = (row * ARGMAX_SPLITS + s) as usize;
        best.offer(*part_val.add(o), *part_idx.add(o));
        s += 32;
    }
    let best = best.warp_reduce();
    if lane_id() == 0 {
        *out_idx.add(row as usize) = best.i;
        *out_val.add(row as usize) = best.v;
    }
}

// ---------------------------------------------------------------------------------------------
// Top-k log-probabilities.

/// Order key of an f32 (its bits): larger key = larger value, the order of `f32::total_cmp` on
/// non-NaN values (so `−0 < +0`, `−inf` lowest); every NaN maps to 0, below everything.
#[inline(always)]
pub fn order_key(bits: u32) -> u32 {
    if bits & 0x7fff_ffff > 0x7f80_0000 {
        0
    } else if bits & 0x8000_0000 != 0 {
        !bits
    } else {
        bits | 0x8000_0000
    }
}

/// The f32 of an order key (NaN for key 0).
#[inline(always)]
pub fn key_value(key: u32) -> f32 {
    f32::from_bits(if key & 0x8000_0000 != 0 { key & 0x7fff_ffff } else { !key })
}

/// A candidate as one u64 whose integer order is the top-k order: logit descending (order key
/// in the high word), then token id ascending (`!id` in the low word). Distinct ids give
/// distinct candidates, so "the k largest" is always exactly one set.
#[inline(always)]
fn candidate(key: u32, id: u32) -> u64 {
    ((key as u64) << 32) | (!id) as u64
}

#[link_section = ".shared"]
static TOPK_HIST: Shared<[u32; 256]> = Shared::uninit();
/// `[digit, above, in_bin, slot counter]` of the radix select.
#[link_section = ".shared"]
static TOPK_STATE: Shared<[u32; 4]> = Shared::uninit();
#[link_section = ".shared"]
static TOPK_WARP_MAX: Shared<[u32; 8]> = Shared::uninit();
#[link_section = ".shared"]
static TOPK_WARP_SUM: Shared<[f32; 8]> = Shared::uninit();
#[link_section = ".shared"]
static TOPK_SEL: Shared<[u64; TOPK_MAX_K as usize]> = Shared::uninit();

const ITEMS: usize = TOPK_ITEMS as usize;

/// `$body` for `$i` = 0..16 as constants (the per-thread item arrays must stay in registers:
/// a loop LLVM leaves rolled indexes them dynamically and moves them to local memory).
macro_rules! for_items {
    ($i:ident, $body:block) => {
        for_items!(@ $i, $body, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)
    };
    (@ $i:ident, $body:block, $($n:literal),*) => {
        $({
            const $i: usize = $n;
            $body
        })*
    };
}
const _: () = assert!(ITEMS == 16, "for_items! unrolls 16 items");

/// Radix select over the block's `256 × ITEMS` distinct u64 items (`blockDim = 256`): the `k`
/// largest (`1 ≤ k ≤ 256·ITEMS`). Eight passes at most, one byte each from the top: a 256-bin
/// histogram (shared atomics: the counts are exact integers, so their order does not matter) of
/// the items that share the prefix found so far, then warp 0 finds the digit whose bin holds
/// the `need`-th largest. Stops as soon as that whole bin is needed. Returns `(prefix, shift)`:
/// the selected items are exactly those with `item >> shift ≥ prefix >> shift`.
#[inline(always)]
unsafe fn select_top(items: &[u64; ITEMS], k: u32) -> (u64, u32) {
    let hist = TOPK_HIST.as_mut_ptr() as *mut u32;
    let state = TOPK_STATE.as_mut_ptr() as *mut u32;
    let t = thread_x();
    let mut prefix = 0u64;
    let mut need = k;
    let mut shift = 64u32;
    while shift > 0 {
        let digit_shift = shift - 8;
        *hist.add(t as usize) = 0;
        sync_threads();
        for_items!(I, {
            let v = items[I];
            if shift == 64 || v >> shift == prefix >> shift {
                atomic_add_u32(hist.add(((v >> digit_shift) & 255) as usize), 1);
            }
        });
        sync_threads();
        if warp_id() == 0 {
            // Lane l owns digits 255 − 8l down to 248 − 8l (descending).
            let lane = lane_id();
            let mut c = [0u32; 8];
            let mut tot = 0;
            let mut j = 0;
            while j < 8 {
                c[j] = *hist.add((255 - 8 * lane - j as u32) as usize);
                tot += c[j];
                j += 1;
            }
            let incl = warp_inclusive_scan_u32(tot);
            let excl = incl - tot;
            if excl < need && need <= incl {
                let (mut above, mut digit, mut in_bin, mut found) = (excl, 0u32, 0u32, false);
                let mut j = 0;
                while j < 8 {
                    if !found {
                        if above + c[j] >= need {
                            (digit, in_bin, found) = (255 - 8 * lane - j as u32, c[j], true);
                        } else {
                            above += c[j];
                        }
                    }
                    j += 1;
                }
                *state = digit;
                *state.add(1) = above;
                *state.add(2) = in_bin;
            }
        }
        sync_threads();
        let (digit, above, in_bin) = (*state, *state.add(1), *state.add(2));
        prefix |= (digit as u64) << digit_shift;
        need -= above;
        shift = digit_shift;
        if in_bin == need {
            break;
        }
    }
    (prefix, shift)
}

/// Whether `v` is among the items [`select_top`] selected.
#[inline(always)]
fn selected(v: u64, (prefix, shift): (u64, u32)) -> bool {
    v >> shift >= prefix >> shift
}

/// Block maximum of a u32 (`blockDim = 256`); every thread gets it. Ends with the block past a
/// barrier, so [`TOPK_WARP_MAX`] may be reused after the next one.
#[inline(always)]
unsafe fn block_max_u32(v: u32) -> u32 {
    let m = TOPK_WARP_MAX.as_mut_ptr() as *mut u32;
    let v = warp_max_u32(v);
    if lane_id() == 0 {
        *m.add(warp_id() as usize) = v;
    }
    sync_threads();
    let mut r = 0;
    let mut w = 0;
    while w < 8 {
        r = r.max(*m.add(w));
        w += 1;
    }
    r
}

/// Block sum of an f32 in a fixed order (butterfly within warps, then the 8 warp sums in warp
/// order from 0.0); every thread gets the same bits.
#[inline(always)]
unsafe fn block_sum_f32(v: f32) -> f32 {
    let m = TOPK_WARP_SUM.as_mut_ptr() as *mut f32;
    let v = warp_sum_f32(v);
    if lane_id() == 0 {
        *m.add(warp_id() as usize) = v;
    }
    sync_threads();
    let mut r = 0.0f32;
    let mut w = 0;
    while w < 8 {
        r += *m.add(w);
        w += 1;
    }
    r
}

/// Position within its segment of item `i` of thread `t`: items are 4 runs of 4 consecutive
/// logits, run `j` at `4·(t + 256·j)`, so one 16-byte load per run, coalesced over the warp.
#[inline(always)]
fn item_pos(t: u32, i: usize) -> u32 {
    4 * (t + 256 * (i as u32 / 4)) + i as u32 % 4
}

/// Top-k pass 1: segment `s = blockIdx.x` (logits `s·TOPK_SEGMENT ..`, [`TOPK_SEGMENT`] = 4096)
/// of row `r = blockIdx.y`; grid `(splits, rows)`, 256 threads, 16 logits per thread.
///
/// Writes to the scratch (layout in `kernel_abi::TopkParams`): the segment's `k` best
/// candidates `(order key, token)` in the top-k order (logit descending, then token ascending;
/// slot order arbitrary — pass 2 does not depend on it), padded past the row's end with
/// `(0, u32::MAX)`, which loses to every real logit; its maximum `m_s` (as an order key); and
/// `Σ_{x in segment} e^{x − m_s}` in f32 (thread chain in item order, butterfly, warps in order;
/// [`exp_accurate`]; `x = −inf` adds 0).
///
/// Top-k of a row = top-k of the union of its segments' top-k, so pass 2 sees every winner.
/// Reduction orders depend on `vocab` only (segments are fixed-size), never on `rows`.
/// Traffic: `rows·vocab·4` bytes read, `rows·splits·(8k + 8)` written.
#[no_mangle]
#[link_section = "nvvm:maxntid=256;minctasm=1"]
pub unsafe extern "ptx-kernel" fn topk_partial(x: *const f32, scratch: *mut u32, p: TopkParams) {
    launch_dependents();
    let (split, row) = (block_x(), block_y());
    if row >= p.rows || split >= p.splits {
        return;
    }
    grid_dependency_wait();
    let t = thread_x();
    let seg0 = split * TOPK_SEGMENT;
    let xr = x.add(row as usize * p.vocab as usize);
    let mut keys = [0u32; ITEMS];
    if p.vec4 != 0 {
        // vocab % 4 == 0, so a run is either wholly inside the row or wholly past it.
        let mut v = [U32x4::default(); ITEMS / 4];
        for_items!(I, {
            if I % 4 == 0 {
                let q = seg0 + item_pos(t, I);
                if q < p.vocab {
                    v[I / 4] = ld_v4(xr.add(q as usize) as *const U32x4);
                }
            }
        });
        for_items!(I, {
            if seg0 + item_pos(t, I) < p.vocab {
                keys[I] = order_key(v[I / 4].0[I % 4]);
            }
        });
    } else {
        for_items!(I, {
            let q = seg0 + item_pos(t, I);
            if q < p.vocab {
                keys[I] = order_key((*xr.add(q as usize)).to_bits());
            }
        });
    }
    // Segment maximum (order-free), then the f32 sum of e^{x − m} in item order.
    let mut kmax = 0u32;
    for_items!(I, {
        kmax = kmax.max(keys[I]);
    });
    let kmax = block_max_u32(kmax);
    let m = key_value(kmax);
    let mut sum = 0.0f32;
    for_items!(I, {
        if seg0 + item_pos(t, I) < p.vocab {
            let v = key_value(keys[I]);
            sum += if v == f32::NEG_INFINITY { 0.0 } else { exp_accurate(v - m) };
        }
    });
    let sum = block_sum_f32(sum);
    // The k best of the segment. Past-the-end items get key 0 and their (unique) position as
    // id, so they rank below every real logit (NaN included) and all items stay distinct.
    let mut items = [0u64; ITEMS];
    for_items!(I, {
        items[I] = candidate(keys[I], seg0 + item_pos(t, I));
    });
    let state = TOPK_STATE.as_mut_ptr() as *mut u32;
    if t == 0 {
        *state.add(3) = 0;
    }
    let sel = select_top(&items, p.k);
    let segs = p.rows as usize * p.splits as usize;
    let seg = row as usize * p.splits as usize + split as usize;
    let cand_key = scratch;
    let cand_id = scratch.add(segs * p.k as usize);
    let base = seg * p.k as usize;
    for_items!(I, {
        if selected(items[I], sel) {
            let slot = atomic_add_u32(state.add(3), 1);
            if slot < p.k {
                let q = seg0 + item_pos(t, I);
                *cand_key.add(base + slot as usize) = keys[I];
                *cand_id.add(base + slot as usize) = if q < p.vocab { q } else { u32::MAX };
            }
        }
    });
    if t == 0 {
        let stats = scratch.add(2 * segs * p.k as usize);
        *stats.add(seg) = kmax;
        *stats.add(segs + seg) = sum.to_bits();
    }
}

/// Top-k pass 2: row `r = blockIdx.x` (grid `rows`, 256 threads). Holds the row's
/// `splits·k ≤ 4096` candidates in registers (16 per thread, candidate `t + 256·i`), selects
/// the `k` best with the same radix select, ranks them (rank = number of selected candidates
/// that beat it: the top-k order is total, so ranks are distinct) and writes
/// `tokens[r·k + rank]` and `logprobs[r·k + rank] = (x − M) − ln S`, where `M = max_s m_s` and
/// `S = Σ_s sum_s · e^{m_s − M}` (f32: thread `t` takes segments `t, t+256, …` in order,
/// butterfly, warps in order; `ln S = lg2(S)·ln 2`). A row with a NaN gets NaN log-probs; a row
/// of only −inf too. Traffic: `rows·splits·(8k + 8)` bytes read, `rows·k·8` written.
#[no_mangle]
#[link_section = "nvvm:maxntid=256;minctasm=1"]
pub unsafe extern "ptx-kernel" fn topk_finish(
    scratch: *const u32,
    tokens: *mut u32,
    logprobs: *mut f32,
    p: TopkParams,
) {
    launch_dependents();
    let row = block_x();
    if row >= p.rows {
        return;
    }
    grid_dependency_wait();
    let t = thread_x();
    let segs = p.rows as usize * p.splits as usize;
    let n = p.splits * p.k;
    let cand_key = scratch.add(row as usize * n as usize);
    let cand_id = scratch.add(segs * p.k as usize + row as usize * n as usize);
    let stats = scratch.add(2 * segs * p.k as usize + row as usize * p.splits as usize);
    let sums = stats.add(segs);
    let mut items = [0u64; ITEMS];
    for_items!(I, {
        let c = t + 256 * I as u32;
        if c < n {
            items[I] = candidate(*cand_key.add(c as usize), *cand_id.add(c as usize));
        }
    });
    // log-sum-exp of the row from the segments' (m_s, sum_s).
    let mut kmax = 0u32;
    let mut s = t;
    while s < p.splits {
        kmax = kmax.max(*stats.add(s as usize));
        s += 256;
    }
    let big_m = key_value(block_max_u32(kmax));
    let mut acc = 0.0f32;
    let mut s = t;
    while s < p.splits {
        let w = exp_accurate(key_value(*stats.add(s as usize)) - big_m);
        acc += f32::from_bits(*sums.add(s as usize)) * w;
        s += 256;
    }
    let ln_s = lg2(block_sum_f32(acc)) * core::f32::consts::LN_2;
    let state = TOPK_STATE.as_mut_ptr() as *mut u32;
    if t == 0 {
        *state.add(3) = 0;
    }
    let sel = select_top(&items, p.k);
    let chosen = TOPK_SEL.as_mut_ptr() as *mut u64;
    for_items!(I, {
        if selected(items[I], sel) {
            let slot = atomic_add_u32(state.add(3), 1);
            if slot < p.k {
                *chosen.add(slot as usize) = items[I];
            }
        }
    });
    sync_threads();
    if t < p.k {
        let me = *chosen.add(t as usize);
        let mut rank = 0u32;
        let mut j = 0;
        while j < p.k {
            rank += (*chosen.add(j as usize) > me) as u32;
            j += 1;
        }
        let o = row as usize * p.k as usize + rank as usize;
        *tokens.add(o) = !(me as u32);
        *logprobs.add(o) = (key_value((me >> 32) as u32) - big_m) - ln_s;
    }
}

// ---------------------------------------------------------------------------------------------
// Seeded sampling (after `for_items!`, which it uses).
pub mod draw;
