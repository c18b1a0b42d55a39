//! `sample_rows`: one seeded draw per row of logits under temperature → top-k → top-p → min-p,
//! bit for bit the token of `flashtree_reference::sample::draw::sample_row` (the definition;
//! every weight, threshold and target comes from `kernel_abi::sampling`, shared with it).
//!
//! **Geometry.** One block of [`SAMPLE_THREADS`] = 512 threads per row (grid `rows`; up to 128
//! registers a thread, no spills); every pass reads the row in chunks of 8192 logits, thread `t` taking the 16 consecutive logits
//! `chunk + 16t ..` (four 16-byte loads when rows are 16-byte aligned). Nothing but the row's
//! logits is read, nothing but its token written.
//!
//! **Algorithm.** Each logit becomes its 32-bit order key (`kernel_abi::sampling::order_key`);
//! the sampling order is key descending, then token id ascending. A *cut* `(b, t)` is a prefix of
//! that order: the drawable tokens with key `> b`, plus the first `t` (lowest ids) with key
//! `== b`; the kept set is the shortest of the three rules' cuts.
//! 1. `max + count`: the largest key (→ `l_max`) and the number of drawable tokens.
//! 2. top-k (when `0 < top_k < drawable`): radix select on the key, 8 bits per pass from the top
//!    (≤ 4 passes): a 256-bin histogram of the tokens sharing the prefix found so far, then the
//!    bin holding the `need`-th token; stops early when the whole bin is needed.
//! 3. top-p (when `top_p < 1`): the same select with each bin holding the *weight* of its tokens
//!    of the top-k set (4 passes; the first one's total is the top-k mass `S_k`), for the
//!    shortest prefix reaching `top_p_need(top_p, S_k)`; at the boundary key all ties weigh
//!    the same, so the ties needed are `⌈need / W⌉`.
//! 4. min-p (when `min_p > 0`): the largest key in the top-k set whose weight is below the
//!    threshold (a max: order-free); the cut keeps the keys above it.
//! 5. the kept weight `Σ`, then the target `⌊u · Σ⌋`, then a scan in token-id order (block-wide
//!    exclusive scans per chunk, the ties' ranks by a second scan when the cut splits them)
//!    to the first kept token whose cumulative weight exceeds the target.
//!
//! Every histogram bin, sum and scan is an integer (per-warp shared-memory histograms — the
//! count passes add once per distinct bin of a warp — summed in warp order; shuffles on u32 /
//! u64), so nothing depends on the order threads or warps run in: the token is a function of
//! the row's bits, the rule and `(seed, position)` only — whatever the launch or row count.
//!
//! **Traffic.** `vocab · 4` bytes per pass; passes: 1 + (≤ 4 top-k) + (4 top-p) + (1 min-p) +
//! 1 + (≤ 1 draw, stopping at the drawn token): ≤ 12 reads of the row, mostly from L2 (the
//! logits were just written by the LM head). Weights (an f64 `exp`) are computed only for
//! tokens that can matter: the prefix bin of each top-p pass, the top-k set, the kept set.
//! Chainable (programmatic dependent launch).

use kernel_abi::sampling::{
    self, draw_target, key_value, min_p_threshold, order_key, top_p_need, uniform_bits, NEG_INF_KEY,
};
use kernel_abi::{SampleParams, SAMPLE_MAX_ROWS, SAMPLE_THREADS};

use crate::device::atomic::atomic_add_u64;
use crate::device::griddep::{grid_dependency_wait, launch_dependents};
use crate::device::load::{ld_v4, U32x4};
use crate::device::shared::Shared;
use crate::device::sync::sync_threads;
use crate::device::warp::{
    group_sum_u48, match_any_u32, shfl_idx_u32, warp_inclusive_scan_u64, warp_max_u32, warp_sum_u64,
};
use crate::device::*;

const ITEMS: usize = 16;
const _: () = assert!(ITEMS == super::ITEMS, "for_items! unrolls 16 items");
/// Logits per chunk of a pass.
const CHUNK: u32 = SAMPLE_THREADS * ITEMS as u32;
const WARPS: usize = SAMPLE_THREADS as usize / 32;

/// The radix select's histograms: one 256-bin histogram per warp (so the atomics of a pass
/// contend within a warp only — logits crowd into a few bins of the top digits), summed into
/// warp 0's bins before each scan (integer sums: the order cannot matter).
#[link_section = ".shared"]
static HIST: Shared<[u64; 256 * WARPS]> = Shared::uninit();
#[link_section = ".shared"]
static RED64: Shared<[u64; WARPS]> = Shared::uninit();
#[link_section = ".shared"]
static RED32: Shared<[u32; WARPS]> = Shared::uninit();
/// `[digit, above, in_bin, need]` of the radix select, broadcast by warp 0.
#[link_section = ".shared"]
static PICK: Shared<[u64; 4]> = Shared::uninit();

/// `fma.rn.f64`, the fused multiply-add of `kernel_abi::sampling`.
#[inline(always)]
fn fma64(a: f64, b: f64, c: f64) -> f64 {
    core::f64::math::mul_add(a, b, c)
}

/// A prefix of the sampling order: drawable tokens with key `> b`, plus the first `t` (lowest
/// ids) with key `== b` (`t` ≤ their number).
#[derive(Clone, Copy)]
struct Cut {
    b: u32,
    t: u32,
}

/// Every drawable token.
const ALL: Cut = Cut { b: NEG_INF_KEY, t: 0 };

/// The shorter of two prefixes of the same order.
#[inline(always)]
fn shorter(a: Cut, c: Cut) -> Cut {
    if a.b > c.b || (a.b == c.b && a.t <= c.t) {
        a
    } else {
        c
    }
}

/// One row and what its weights need.
struct Row {
    x: *const f32,
    vocab: u32,
    vec4: bool,
    l_max: f32,
    inv_t: f64,
}

impl Row {
    /// The fixed-point weight of a drawable key.
    #[inline(always)]
    fn weight(&self, key: u32) -> u64 {
        sampling::weight(key_value(key), self.l_max, self.inv_t, fma64)
    }

    /// Order keys of this thread's 16 logits of the chunk at `c0` (ids `c0 + 16t + i`); 0 (not
    /// drawable) past the row's end.
    #[inline(always)]
    unsafe fn keys(&self, c0: u32) -> [u32; ITEMS] {
        let b = c0 + ITEMS as u32 * thread_x();
        let mut k = [0u32; ITEMS];
        if self.vec4 {
            // vocab % 4 == 0 and b % 4 == 0: a run of 4 is wholly inside the row or past it.
            let mut v = [U32x4::default(); ITEMS / 4];
            for_items!(I, {
                if I % 4 == 0 && b + (I as u32) < self.vocab {
                    v[I / 4] = ld_v4(self.x.add((b + I as u32) as usize) as *const U32x4);
                }
            });
            for_items!(I, {
                if b + (I as u32) < self.vocab {
                    k[I] = order_key(v[I / 4].0[I % 4]);
                }
            });
        } else {
            for_items!(I, {
                if b + (I as u32) < self.vocab {
                    k[I] = order_key((*self.x.add((b + I as u32) as usize)).to_bits());
                }
            });
        }
        k
    }
}

/// Block maximum of a u32; every thread gets it.
#[inline(always)]
unsafe fn block_max_u32(v: u32) -> u32 {
    let m = RED32.as_mut_ptr() as *mut u32;
    let v = warp_max_u32(v);
    sync_threads();
    if lane_id() == 0 {
        *m.add(warp_id() as usize) = v;
    }
    sync_threads();
    let mut r = 0;
    let mut w = 0;
    while w < WARPS {
        r = r.max(*m.add(w));
        w += 1;
    }
    r
}

/// Block exclusive prefix sum of a u64 in thread order and the block total; every thread gets
/// its own prefix and the total.
#[inline(always)]
unsafe fn block_scan_u64(v: u64) -> (u64, u64) {
    let m = RED64.as_mut_ptr() as *mut u64;
    let incl = warp_inclusive_scan_u64(v);
    sync_threads();
    if lane_id() == 31 {
        *m.add(warp_id() as usize) = incl;
    }
    sync_threads();
    let (me, mut before, mut total) = (warp_id() as usize, 0u64, 0u64);
    let mut w = 0;
    while w < WARPS {
        let s = *m.add(w);
        if w < me {
            before += s;
        }
        total += s;
        w += 1;
    }
    (before + incl - v, total)
}

/// Block sum of a u64; every thread gets it.
#[inline(always)]
unsafe fn block_sum_u64(v: u64) -> u64 {
    let m = RED64.as_mut_ptr() as *mut u64;
    let v = warp_sum_u64(v);
    sync_threads();
    if lane_id() == 0 {
        *m.add(warp_id() as usize) = v;
    }
    sync_threads();
    let mut r = 0;
    let mut w = 0;
    while w < WARPS {
        r += *m.add(w);
        w += 1;
    }
    r
}

/// Whether `key` shares the radix select's prefix above bit `shift` (always at `shift = 32`).
#[inline(always)]
fn in_prefix(key: u32, prefix: u32, shift: u32) -> bool {
    (key as u64) >> shift == (prefix as u64) >> shift
}

/// Zeroes every warp's histogram (ends past a barrier).
#[inline(always)]
unsafe fn clear_hist() {
    sync_threads();
    let h = HIST.as_mut_ptr() as *mut u64;
    let mut i = thread_x() as usize;
    while i < 256 * WARPS {
        *h.add(i) = 0;
        i += SAMPLE_THREADS as usize;
    }
    sync_threads();
}

/// This warp's histogram.
#[inline(always)]
unsafe fn warp_hist() -> *mut u64 {
    (HIST.as_mut_ptr() as *mut u64).add(warp_id() as usize * 256)
}

/// Adds one to bin `bin` of this warp's histogram for every lane with `bin < 256`: one atomic
/// per distinct bin of the warp (the lanes sharing a bin are counted by their leader).
#[inline(always)]
unsafe fn count_into(hist: *mut u64, bin: u32) {
    let peers = match_any_u32(bin);
    if bin < 256 && lane_id() == peers.trailing_zeros() {
        atomic_add_u64(hist.add(bin as usize), peers.count_ones() as u64);
    }
}

/// Adds `w` (a weight, ≤ 2^44) to bin `bin` of this warp's histogram for every lane with
/// `bin < 256`: one atomic per distinct bin of the warp, with the group's exact integer sum.
#[inline(always)]
unsafe fn weigh_into(hist: *mut u64, bin: u32, w: u64) {
    let peers = match_any_u32(bin);
    let sum = group_sum_u48(w, peers);
    if bin < 256 && sum > 0 && lane_id() == peers.trailing_zeros() {
        atomic_add_u64(hist.add(bin as usize), sum);
    }
}

/// After a histogram pass: the digit (bins taken from 255 down) whose bin holds the `need`-th
/// unit, with the units in the bins above it and in it, and `need` itself — which, when
/// `first_top_p` is set, is computed here as `top_p_need(top_p, total)` from the histogram's
/// total. Warp 0 scans, everyone gets `(digit, above, in_bin, need)`. Requires
/// `1 ≤ need ≤ total`.
#[inline(always)]
unsafe fn find_bin(need: u64, first_top_p: Option<f32>) -> (u32, u64, u64, u64) {
    let hist = HIST.as_mut_ptr() as *mut u64;
    let pick = PICK.as_mut_ptr() as *mut u64;
    sync_threads();
    // Warp histograms → bins 0..256 (warp 0's), each bin summed in warp order.
    if thread_x() < 256 {
        let b = thread_x() as usize;
        let mut t = *hist.add(b);
        let mut w = 1;
        while w < WARPS {
            t += *hist.add(w * 256 + b);
            w += 1;
        }
        *hist.add(b) = t;
    }
    sync_threads();
    if warp_id() == 0 {
        // Lane l owns digits 255 − 8l down to 248 − 8l.
        let lane = lane_id();
        let mut c = [0u64; 8];
        let mut tot = 0;
        let mut j = 0;
        while j < 8 {
            c[j] = *hist.add((255 - 8 * lane - j as u32) as usize);
            tot += c[j];
            j += 1;
        }
        let incl = warp_inclusive_scan_u64(tot);
        let total = ((shfl_idx_u32((incl >> 32) as u32, 31) as u64) << 32) | shfl_idx_u32(incl as u32, 31) as u64;
        let need = match first_top_p {
            Some(p) => top_p_need(p, total),
            None => need,
        };
        let excl = incl - tot;
        if excl < need && need <= incl {
            let (mut above, mut digit, mut in_bin, mut found) = (excl, 0u32, 0u64, false);
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
            *pick = digit as u64;
            *pick.add(1) = above;
            *pick.add(2) = in_bin;
            *pick.add(3) = need;
        }
    }
    sync_threads();
    (*pick as u32, *pick.add(1), *pick.add(2), *pick.add(3))
}

/// The top-k cut: the first `k` drawable tokens (`1 ≤ k < drawable`).
#[inline(always)]
unsafe fn select_count(row: &Row, k: u32) -> Cut {
    let (mut prefix, mut need, mut shift) = (0u32, k as u64, 32u32);
    while shift > 0 {
        let ds = shift - 8;
        clear_hist();
        let hist = warp_hist();
        let mut c0 = 0;
        while c0 < row.vocab {
            let keys = row.keys(c0);
            for_items!(I, {
                let key = keys[I];
                let hit = key > NEG_INF_KEY && in_prefix(key, prefix, shift);
                count_into(hist, if hit { (key >> ds) & 255 } else { 256 });
            });
            c0 += CHUNK;
        }
        let (digit, above, in_bin, _) = find_bin(need, None);
        prefix |= digit << ds;
        need -= above;
        shift = ds;
        if in_bin == need {
            // The whole bin: every key ≥ prefix (its low bits are zero).
            return Cut { b: prefix.saturating_sub(1), t: 0 };
        }
    }
    Cut { b: prefix, t: need as u32 }
}

/// The top-p cut within the top-k cut `k`: the shortest prefix whose weight reaches
/// `top_p_need(top_p, S_k)`.
#[inline(always)]
unsafe fn select_weight(row: &Row, k: Cut, top_p: f32) -> Cut {
    let (mut prefix, mut need, mut shift) = (0u32, 0u64, 32u32);
    while shift > 0 {
        let ds = shift - 8;
        clear_hist();
        let hist = warp_hist();
        let mut c0 = 0;
        while c0 < row.vocab {
            let keys = row.keys(c0);
            for_items!(I, {
                let key = keys[I];
                // The top-k set's ties at `k.b` are added below, `k.t` of them.
                let hit = key > NEG_INF_KEY && key > k.b && in_prefix(key, prefix, shift);
                let w = if hit { row.weight(key) } else { 0 };
                weigh_into(hist, if hit { (key >> ds) & 255 } else { 256 }, w);
            });
            c0 += CHUNK;
        }
        if thread_x() == 0 && k.t > 0 && in_prefix(k.b, prefix, shift) {
            atomic_add_u64(hist.add(((k.b >> ds) & 255) as usize), k.t as u64 * row.weight(k.b));
        }
        let (digit, above, _, n) = find_bin(need, if shift == 32 { Some(top_p) } else { None });
        prefix |= digit << ds;
        need = n - above;
        shift = ds;
    }
    // All tokens of key `prefix` weigh the same, and the bin reached `need` > 0, so w > 0.
    let w = row.weight(prefix);
    Cut { b: prefix, t: need.div_ceil(w) as u32 }
}

/// The min-p cut within the top-k cut `k`: the largest key ≥ `k.b` whose weight is below
/// `thr` (the first failing token in the order); `None` when none fails.
#[inline(always)]
unsafe fn min_p_cut(row: &Row, k: Cut, thr: u64) -> Option<Cut> {
    let mut fail = 0u32;
    let mut c0 = 0;
    while c0 < row.vocab {
        let keys = row.keys(c0);
        for_items!(I, {
            let key = keys[I];
            // Only a larger key than the thread's worst so far can change the maximum.
            if key > NEG_INF_KEY && key >= k.b && key > fail && row.weight(key) < thr {
                fail = key;
            }
        });
        c0 += CHUNK;
    }
    let fail = block_max_u32(fail);
    (fail != 0).then_some(Cut { b: fail, t: 0 })
}

/// The kept weight `Σ` of a cut.
#[inline(always)]
unsafe fn kept_weight(row: &Row, cut: Cut) -> u64 {
    let mut s = 0u64;
    let mut c0 = 0;
    while c0 < row.vocab {
        let keys = row.keys(c0);
        for_items!(I, {
            let key = keys[I];
            if key > NEG_INF_KEY && key > cut.b {
                s += row.weight(key);
            }
        });
        c0 += CHUNK;
    }
    let ties = if cut.t > 0 { cut.t as u64 * row.weight(cut.b) } else { 0 };
    block_sum_u64(s) + ties
}

/// Whether the token of `key` is kept by `cut`, given its rank among the ties at `cut.b` (in id
/// order).
#[inline(always)]
fn kept(key: u32, cut: Cut, tie_rank: u32) -> bool {
    key > NEG_INF_KEY && (key > cut.b || (key == cut.b && tie_rank < cut.t))
}

/// The first kept token in id order whose cumulative weight exceeds `target` (< the kept
/// weight); `u32::MAX` if the row ends first (cannot happen: the target is below the total).
#[inline(always)]
#[allow(unused_assignments)] // the unrolled items' last rank increment
unsafe fn draw(row: &Row, cut: Cut, target: u64) -> u32 {
    let pick = PICK.as_mut_ptr() as *mut u64;
    let (mut cum, mut ties_before) = (0u64, 0u64);
    let mut c0 = 0;
    while c0 < row.vocab {
        let keys = row.keys(c0);
        // Rank of this thread's first tie at `cut.b` among all ties (needed only when the cut
        // splits them).
        let mut rank = 0u64;
        if cut.t > 0 {
            let mut n = 0u64;
            for_items!(I, {
                n += (keys[I] == cut.b) as u64;
            });
            let (excl, total) = block_scan_u64(n);
            rank = ties_before + excl;
            ties_before += total;
        }
        let mut local = 0u64;
        let mut r = rank;
        for_items!(I, {
            let key = keys[I];
            if kept(key, cut, r.min(u32::MAX as u64) as u32) {
                local += row.weight(key);
            }
            r += (key == cut.b) as u64;
        });
        let (excl, total) = block_scan_u64(local);
        if cum + total > target {
            let mut acc = cum + excl;
            if acc <= target && target < acc + local {
                let mut r = rank;
                let mut found = u32::MAX;
                for_items!(I, {
                    let key = keys[I];
                    if found == u32::MAX && kept(key, cut, r.min(u32::MAX as u64) as u32) {
                        acc += row.weight(key);
                        if acc > target {
                            found = c0 + ITEMS as u32 * thread_x() + I as u32;
                        }
                    }
                    r += (key == cut.b) as u64;
                });
                *pick = found as u64;
            }
            sync_threads();
            return *pick as u32;
        }
        cum += total;
        c0 += CHUNK;
    }
    u32::MAX
}

/// Samples row `r = blockIdx.x` of `x` (`[rows, vocab]` f32 logits) into `out[r]`: the token of
/// `flashtree_reference::sample::draw::sample_row` with the rule of `p` at `p.positions[r]`;
/// `u32::MAX` for a row with nothing to draw (all NaN / −∞). Grid `rows`, [`SAMPLE_THREADS`]
/// threads. See the module doc for the passes and the traffic.
#[no_mangle]
#[link_section = "nvvm:maxntid=512;minctasm=1"]
pub unsafe extern "ptx-kernel" fn sample_rows(x: *const f32, out: *mut u32, p: SampleParams) {
    launch_dependents();
    let r = block_x();
    if r >= p.rows || r >= SAMPLE_MAX_ROWS {
        return;
    }
    grid_dependency_wait();
    let mut row = Row {
        x: x.add(r as usize * p.vocab as usize),
        vocab: p.vocab,
        vec4: p.vec4 != 0,
        l_max: 0.0,
        inv_t: p.inv_temperature,
    };
    // 1. The largest key and the number of drawable tokens.
    let (mut kmax, mut n) = (0u32, 0u64);
    let mut c0 = 0;
    while c0 < row.vocab {
        let keys = row.keys(c0);
        for_items!(I, {
            kmax = kmax.max(keys[I]);
            n += (keys[I] > NEG_INF_KEY) as u64;
        });
        c0 += CHUNK;
    }
    let kmax = block_max_u32(kmax);
    let n = block_sum_u64(n);
    if kmax <= NEG_INF_KEY {
        if thread_x() == 0 {
            *out.add(r as usize) = u32::MAX;
        }
        return;
    }
    row.l_max = key_value(kmax);
    // 2–4. The cuts.
    let cut_k = if p.top_k != 0 && (p.top_k as u64) < n { select_count(&row, p.top_k) } else { ALL };
    let mut cut = cut_k;
    if p.top_p < 1.0 {
        cut = shorter(cut, select_weight(&row, cut_k, p.top_p));
    }
    if p.min_p > 0.0 {
        if let Some(m) = min_p_cut(&row, cut_k, min_p_threshold(p.min_p)) {
            cut = shorter(cut, m);
        }
    }
    // 5. The draw.
    let total = kept_weight(&row, cut);
    // A select over constant indices (a dynamic index would copy the array to local memory).
    let mut position = 0u64;
    let mut i = 0;
    while i < SAMPLE_MAX_ROWS as usize {
        if i as u32 == r {
            position = p.positions[i];
        }
        i += 1;
    }
    let token = draw(&row, cut, draw_target(uniform_bits(p.seed, position), total));
    if thread_x() == 0 {
        *out.add(r as usize) = token;
    }
}
