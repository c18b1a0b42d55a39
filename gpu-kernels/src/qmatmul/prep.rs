//! `qmm_prep_x`: activations f32 `[n, in]` → the tensor-core input format (see the module doc).
//!
//! Launch: grid `(n, ⌈in / 1024⌉)`, 256 threads. Block `(c, b)` first finds `max |x[c, :]|`
//! over the whole column (every block of the column reads it, 16-byte loads, mostly L2 hits;
//! the max is order-independent, so every block gets the same scale), then writes its 1024
//! elements (32 units of 32, four per warp, eight lanes per unit: [`write_unit_values`]): scaled
//! by the exact power of two `1 / s_c`, rounded to f16 at its fragment position, optionally also
//! as bf16 hi + lo; the f16 values also go to the core-matrix plane of the warpgroup kernels
//! ([`core_matrix_slot`]), and each unit's sum `S = Σ_i f16(x̂_i)` (f32, a fixed butterfly order,
//! so it is the same for every launch) as f16 hi + lo of `S / 64` in groups of 8 units, a
//! core-matrix plane ([`group_sum_slot`]) that the K-quant kernels' mins steps read. Padding
//! columns `c ≥ n` are not written: the matmul never reads them.
//! Traffic: reads `n·in·4·⌈in/1024⌉` bytes (L2), writes `n·in·(4 or 8) + n·in/8` bytes.
//!
//! With `max_parts = m > 0` (the input is the `y` of a fused SwiGLU product, whose epilogue
//! published each row group's `max |y|` bits per column: `epilogue.rs`), the scan is replaced by
//! the max of the column's `m` words `ymax[c·m ..]` — the same integer max over the same values,
//! so the scale, and every prepared value, are bitwise those of the scan: the math is unchanged,
//! and so is its reference (`flashtree_reference::model::tensor::round_f16_scaled`). Reads then
//! `n·in·4 + n·m·4·⌈in/1024⌉` bytes.

use kernel_abi::qmm_accum::FRAC_BITS;
use kernel_abi::{
    QmmPrepNormParams, QmmPrepParams, QmmSwigluTail, QMM_MAX_N, QMM_PREP_CHUNK as PREP_CHUNK, QMM_ROWS_PER_BLOCK,
};

use crate::device::convert::{f16_to_f32, f32_to_bf16, f32_to_f16, i64_to_f32_rn};
use crate::device::griddep::{grid_dependency_wait, launch_dependents};
use crate::device::load::{ld_v4, U32x4};
use crate::device::math::{fma, silu};
use crate::device::shared::Shared;
use crate::device::sync::sync_threads;
use crate::device::unroll::unroll_below;
use crate::device::warp::{shfl_xor_f32, shfl_xor_u32, warp_sum_f32};
use crate::device::*;
use crate::norm::inv_rms;

/// Where element `e` (0..32) of a 32-element block is stored: lane `t = e / 8` of a fragment
/// quad owns elements `8t .. 8t+8`; within them, k16 step `h = (e % 8) / 4` and the order
/// `[e0, e2, e1, e3]` makes the lane's 4-byte words exactly the B registers
/// `b0 = (k 2t, 2t+1)`, `b1 = (k 2t+8, 2t+9)` of step `h`.
#[inline(always)]
pub const fn position_in_block(e: u32) -> u32 {
    let t = e / 8;
    let r = e % 8;
    let i = r % 4;
    let swapped = if i == 1 {
        2
    } else if i == 2 {
        1
    } else {
        i
    };
    8 * t + 4 * (r / 4) + swapped
}

/// Index (in u16) of the f16 `hi` part of unit `unit`'s sum for column `c` in the group-sum
/// area (`lo` is 64 further on), in groups of 8 units (one K-quant super-block each). The area
/// is a core-matrix plane with one k16 step per group, `k = j` (the hi parts) and `k = 8 + j`
/// (the lo parts) for unit `j` of the group: group-major (a group's `QMM_MAX_N / 8` tiles of 8
/// columns contiguous, 256 bytes each: 1 KiB per group), then k half `kk` at `+ 128·kk` bytes,
/// column `c % 8` at `+ 16·(c % 8)`, unit `j` at `+ 2j`. The warpgroup kernels copy a chunk's
/// groups with one bulk copy and read them as the B operand of the mins step (tiles 256 bytes
/// apart); a warp-level kernel's lane `(g, t)` reads its B fragment `b0 = hi(S_2t), hi(S_2t+1)`
/// and `b1 = lo(S_2t), lo(S_2t+1)` as two 4-byte words.
#[inline(always)]
pub const fn group_sum_slot(unit: usize, c: usize) -> usize {
    let (group, j) = (unit / 8, unit % 8);
    (group * (QMM_MAX_N as usize / 8) + c / 8) * 128 + (c % 8) * 8 + j
}

/// Index (in u16) of element `e` (0..32) of unit `unit`, column `c`, in the core-matrix plane
/// that the warpgroup kernels (`qmatmul::tile_wg`) copy into shared memory unchanged, for a
/// matrix of `steps = in / 16` k16 steps. Tile-major: the 8-column group `j = c / 8` holds its
/// steps contiguously, step `s = 2·unit + h` at `256·(j·steps + s)` bytes, then k half `kk` at
/// `+ 128·kk`, column `c % 8` at `+ 16·(c % 8)`: one 16-byte row of an 8 × 8 core matrix, holding
/// the four fragment words `(2h + kk)` of the lane quad positions `t = 0..4` (so `2t + half`),
/// where `position_in_block(e) = 8t + 2·(2h + kk) + half`. A chunk of steps of one tile is one
/// contiguous run (one bulk copy per tile and chunk).
#[inline(always)]
pub const fn core_matrix_slot(unit: usize, e: u32, c: usize, steps: usize) -> usize {
    let pos = position_in_block(e) as usize;
    let (t, word, half) = (pos / 8, (pos % 8) / 2, pos % 2);
    let (h, kk) = (word / 2, word % 2);
    ((c / 8) * steps + 2 * unit + h) * 128 + kk * 64 + (c % 8) * 8 + 2 * t + half
}

/// 16-byte vectors per thread and chunk of `qmm_prep_x`'s max scan.
const SCAN_VECS: usize = 8;

#[link_section = ".shared"]
pub(crate) static PREP_MAX: Shared<[u32; 8]> = Shared::uninit();

/// `2^k` as f32 for `k ∈ [-126, 127]`.
#[inline(always)]
fn pow2(k: i32) -> f32 {
    f32::from_bits(((k + 127) as u32) << 23)
}

#[no_mangle]
#[link_section = "nvvm:maxntid=256;minctasm=1"]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "ptx-kernel" fn qmm_prep_x(
    x: *const f32,
    ymax: *const u32,
    xh: *mut u16,
    xb_hi: *mut u16,
    xb_lo: *mut u16,
    xcm: *mut u16,
    xscale: *mut f32,
    xsum: *mut f32,
    p: QmmPrepParams,
) {
    // Chained launches (see `device::griddep`): let the matmul that follows start loading its
    // weights, and touch nothing before the previous kernel (which wrote x, and may still read
    // the prepared buffers) has finished.
    launch_dependents();
    let c = block_x();
    if c >= p.n {
        return;
    }
    grid_dependency_wait();
    let k = p.in_features as usize;
    let t = thread_x() as usize;
    let base = c as usize * k;
    // This block's elements, loaded with the column's max (they do not depend on its scale): one
    // round trip to L2 for both instead of two in a row.
    let vals = unit_values(k, |e| *x.add(base + e));
    if p.max_parts > 0 {
        // The column's max from the producer's row-group maxima (see the module doc).
        let parts = p.max_parts as usize;
        let m = words_max(ymax.add(c as usize * parts), parts, t);
        let inv = publish_column_scale(c, m, xscale);
        write_unit_values(c, k, inv, vals, xh, xb_hi, xb_lo, xcm, xsum, p);
        return;
    }
    // Pass 1: max |x| over the column (as bits: for non-negative floats the integer order is the
    // float order; NaN bits sort above +inf, so a NaN column gets a NaN scale and NaN results).
    // `in` is a multiple of 32, so the column is whole 16-byte vectors.
    // Chunks of `SCAN_VECS` vectors per thread, every load of a chunk issued before any is used:
    // one L2 round trip per chunk (a column of up to 8,192 elements is one chunk).
    let col = x.add(base) as *const U32x4;
    let vecs = k / 4;
    let mut m = 0u32;
    let mut i0 = t;
    while i0 < vecs {
        let mut v = [[0u32; 4]; SCAN_VECS];
        unroll_below(SCAN_VECS, |j| {
            if i0 + 256 * j < vecs {
                v[j] = ld_v4(col.add(i0 + 256 * j)).0;
            }
        });
        unroll_below(SCAN_VECS, |j| {
            let a = v[j];
            m = m.max(a[0] & 0x7fff_ffff).max(a[1] & 0x7fff_ffff).max(a[2] & 0x7fff_ffff).max(a[3] & 0x7fff_ffff);
        });
        i0 += SCAN_VECS * 256;
    }
    let inv = publish_column_scale(c, m, xscale);
    // Pass 2: this block's units.
    write_unit_values(c, k, inv, vals, xh, xb_hi, xb_lo, xcm, xsum, p);
}

/// Thread `t`'s max of the words `words[t], words[t + 256], …` below `count` (a column's row-group
/// `max |y|` bits, `epilogue.rs`): chunks of up to 4 words per thread, all requested before any
/// is used (the 27B's gate/up has 272 row groups: threads 0..16 read two, in one round trip).
#[inline(always)]
unsafe fn words_max(words: *const u32, count: usize, t: usize) -> u32 {
    let mut m = 0u32;
    let mut i0 = t;
    while i0 < count {
        let mut v = [0u32; 4];
        unroll_below(4, |j| {
            if i0 + 256 * j < count {
                v[j] = *words.add(i0 + 256 * j);
            }
        });
        unroll_below(4, |j| m = m.max(v[j]));
        i0 += 4 * 256;
    }
    m
}

/// `s_c` and `1/s_c` for a column whose largest |x| has the bits `m` (see pass 1 of
/// [`qmm_prep_x`]): `s_c = 2^(E − 14)`, `E = ⌊log2 max⌋`, so `max / s_c ∈ [2^14, 2^15)`.
#[inline(always)]
fn column_scale(m: u32) -> (f32, f32) {
    if m == 0 || m >= 0x7f80_0000 {
        (if m > 0x7f80_0000 { f32::NAN } else { 1.0 }, 1.0)
    } else {
        let e = ((m >> 23) as i32 - 127).max(-126);
        let k2 = (e - 14).clamp(-126, 127);
        (pow2(k2), pow2((-k2).clamp(-126, 127)))
    }
}

/// The column's scale from every thread's `m` (bits of `|x|`, see pass 1 of [`qmm_prep_x`]):
/// [`block_max_bits`] then [`column_scale`]; block `(c, 0)`'s thread 0 stores `s_c` to
/// `xscale[c]`. Returns `1/s_c` for [`write_units`]. Every thread of the block calls it once.
#[inline(always)]
pub(crate) unsafe fn publish_column_scale(c: u32, m: u32, xscale: *mut f32) -> f32 {
    store_column_scale(c, block_max_bits(m), xscale)
}

/// [`column_scale`] of the column max `m` (bits, already over the whole column); block `(c, 0)`'s
/// thread 0 stores `s_c` to `xscale[c]`. Returns `1/s_c` for [`write_units`].
#[inline(always)]
pub(crate) unsafe fn store_column_scale(c: u32, m: u32, xscale: *mut f32) -> f32 {
    let (scale, inv) = column_scale(m);
    if thread_x() == 0 && block_y() == 0 {
        *xscale.add(c as usize) = scale;
    }
    inv
}

/// Pass 2 of the prep kernels: block `(c, block_y)` writes its chunk's units of column `c`,
/// four per warp (eight lanes per unit, four elements per lane: [`unit_values`]), from
/// `value(e)` (element `e` of the column, before scaling): the f16 fragment plane, the
/// core-matrix plane, optionally the bf16 pair, and the group sums ([`write_unit_values`]).
/// A lane's four values are loaded before any is stored.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(crate) unsafe fn write_units(
    c: u32,
    k: usize,
    inv: f32,
    value: impl Fn(usize) -> f32,
    xh: *mut u16,
    xb_hi: *mut u16,
    xb_lo: *mut u16,
    xcm: *mut u16,
    xsum: *mut f32,
    p: QmmPrepParams,
) {
    let vals = unit_values(k, value);
    write_unit_values(c, k, inv, vals, xh, xb_hi, xb_lo, xcm, xsum, p);
}

/// The four elements this lane converts in [`write_units`] (before scaling), loaded together:
/// a caller can issue these loads before it knows the column's scale. Warp `w` of block
/// `(c, b)` converts the units `32b + 4w .. + 4` of the column (`PREP_CHUNK / 32` per block),
/// eight lanes per unit: lane `l` the elements `4·(l mod 8) .. + 4` of unit `l / 8`.
#[inline(always)]
pub(crate) unsafe fn unit_values(k: usize, value: impl Fn(usize) -> f32) -> [f32; 4] {
    let (unit, e0) = lane_unit();
    let mut vals = [0f32; 4];
    if unit < k / 32 {
        unroll_below(4, |i| vals[i] = value(unit * 32 + e0 + i));
    }
    vals
}

/// This lane's unit and first element in it (see [`unit_values`]).
#[inline(always)]
fn lane_unit() -> (usize, usize) {
    let lane = lane_id() as usize;
    let first = (block_y() * PREP_CHUNK) as usize / 32 + warp_id() as usize * 4;
    (first + lane / 8, 4 * (lane % 8))
}

/// [`write_units`] of values already loaded by [`unit_values`]. Lane `l` (elements
/// `e = 4q .. 4q + 4` of its unit, `q = l mod 8`) rounds `x̂ = v · inv` to f16 and stores the
/// four halves with one 8-byte store to the fragment plane (positions `4q + [0, 2, 1, 3]`: see
/// [`position_in_block`]) and two 4-byte stores to the core-matrix plane (elements `4q, 4q + 2`
/// and `4q + 1, 4q + 3` are adjacent there: [`core_matrix_slot`]). The unit sum is
/// `S = Σ f16(x̂_e)` in f32 as `(x_4q + x_4q+1) + (x_4q+2 + x_4q+3)`, then the butterfly over
/// the unit's eight lanes (xor 1, 2, 4): the same additions in the same order as a 32-lane
/// butterfly with lane = element, so `S` is the same for every launch and column count; lane
/// `q = 0` stores `S / 64` as f16 hi + lo at the unit's [`group_sum_slot`].
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(crate) unsafe fn write_unit_values(
    c: u32,
    k: usize,
    inv: f32,
    vals: [f32; 4],
    xh: *mut u16,
    xb_hi: *mut u16,
    xb_lo: *mut u16,
    xcm: *mut u16,
    xsum: *mut f32,
    p: QmmPrepParams,
) {
    let base = c as usize * k;
    let units = k / 32;
    let (unit, e0) = lane_unit();
    let q = e0 / 4;
    let mut h = [0u16; 4];
    unroll_below(4, |i| h[i] = f32_to_f16(vals[i] * inv));
    let pair = |a: u16, b: u16| a as u32 | (b as u32) << 16;
    let valid = unit < units;
    if valid {
        let dst = base + unit * 32 + e0;
        *(xh.add(dst) as *mut u64) = pair(h[0], h[2]) as u64 | (pair(h[1], h[3]) as u64) << 32;
        let cm = core_matrix_slot(unit, e0 as u32, c as usize, 2 * units);
        *(xcm.add(cm) as *mut u32) = pair(h[0], h[2]);
        *(xcm.add(cm + 64) as *mut u32) = pair(h[1], h[3]);
        if p.pairs != 0 {
            unroll_below(4, |i| {
                let v = vals[i] * inv;
                let hi = f32_to_bf16(v);
                let lo = f32_to_bf16(v - f32::from_bits((hi as u32) << 16));
                let at = base + unit * 32 + position_in_block((e0 + i) as u32) as usize;
                *xb_hi.add(at) = hi;
                *xb_lo.add(at) = lo;
            });
        }
    }
    // Every lane takes part in the butterfly (a lane past the last unit adds zeros of its own
    // unit's group only).
    let x = |i: usize| f16_to_f32(h[i]);
    let mut sum = (x(0) + x(1)) + (x(2) + x(3));
    let mut s = 1;
    while s < 8 {
        sum += shfl_xor_f32(sum, s);
        s <<= 1;
    }
    if valid && q == 0 {
        // `S / 64` (a power of two, so `|S/64| < 2^15` fits f16) as f16 hi + lo, at its
        // B-fragment slot of the unit's group of 8 (see `group_sum_slot`).
        let s64 = sum * 0.015625;
        let hi = f32_to_f16(s64);
        let lo = f32_to_f16(s64 - f16_to_f32(hi));
        let sums_h = xsum as *mut u16;
        let at = group_sum_slot(unit, c as usize);
        *sums_h.add(at) = hi;
        *sums_h.add(at + 64) = lo;
    }
}

#[link_section = ".shared"]
static PREP_NORM_PARTIALS: Shared<[f32; 8]> = Shared::uninit();

/// Strides of the row a thread loads together in [`qmm_prep_norm`]'s long-row path (as `norm`'s
/// batch).
const ROW_BATCH: usize = 8;

/// Elements of a row each thread of [`qmm_prep_norm`] keeps in registers: rows up to
/// `256 · REG_ELEMS` are read from global memory once; longer rows take the three-pass path.
pub(crate) const REG_ELEMS: usize = 24;

/// The longest row whose `x̂` [`qmm_prep_norm`] stages in shared memory (`256 · REG_ELEMS`).
pub(crate) const STAGED_MAX: usize = 256 * REG_ELEMS;

/// A column staged in shared memory by the fused prep kernels (`qmm_prep_norm`,
/// `deltanet::norm_prep`) for [`write_units`].
#[link_section = ".shared"]
pub(crate) static PREP_NORM_ROW: Shared<[f32; STAGED_MAX]> = Shared::uninit();

/// The largest of the 256 threads' `m` (bits of non-negative floats, see pass 1 of
/// [`qmm_prep_x`]): butterfly within the warp, then the 8 warp maxima through [`PREP_MAX`]
/// (one barrier; a block calls it once, every thread).
#[inline(always)]
pub(crate) unsafe fn block_max_bits(mut m: u32) -> u32 {
    let maxes = PREP_MAX.as_mut_ptr() as *mut u32;
    let mut sh = 16;
    while sh > 0 {
        m = m.max(shfl_xor_u32(m, sh));
        sh >>= 1;
    }
    if lane_id() == 0 {
        *maxes.add(warp_id() as usize) = m;
    }
    sync_threads();
    let mut m = 0u32;
    let mut wi = 0;
    while wi < 8 {
        m = m.max(*maxes.add(wi));
        wi += 1;
    }
    m
}

/// The residual add, RMSNorm and `qmm_prep_x` in one launch: `v = h (+ a)`, `x̂ = v · s · w` with
/// `s = 1/sqrt(Σ v² / in + eps)`, then exactly [`qmm_prep_x`] of `x̂`; with `np.add ≠ 0`, block
/// `(c, 0)` also stores `v` to `h_out` (the next residual stream: a different buffer than `h`,
/// because every block reads `h` whole). The sum of squares runs in `norm`'s order (thread `t`:
/// `c = t, t+256, …` by fma; butterfly; the 8 warp sums in order) and `x̂` is `(v·s)·w`, so `x̂`
/// is bitwise `add_rms_norm_rows`'s (or `rms_norm_rows`'s) output and the prepared activations
/// are bitwise those of `add_rms_norm_rows` + `qmm_prep_x`.
///
/// Rows of `in ≤ 256 · REG_ELEMS` (every hidden size up to 6144): each thread loads its
/// elements of `h`, `a`, `w` once, all loads in flight together; `Σ v²`, then `x̂` and its max
/// come from registers, and `x̂` is staged in shared memory for the unit writer — one global
/// read pass and two block reductions. Longer rows re-read `h`, `a`, `w` (L2) in three passes.
/// Launch: grid `(n, ⌈in/1024⌉)`, 256 threads. Traffic: every block reads its column's `h`,
/// `a`, `w` (L2), writes its chunk like `qmm_prep_x`; one launch instead of two.
#[no_mangle]
#[link_section = "nvvm:maxntid=256;minctasm=1"]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "ptx-kernel" fn qmm_prep_norm(
    h: *const f32,
    a: *const f32,
    w: *const f32,
    h_out: *mut f32,
    xh: *mut u16,
    xb_hi: *mut u16,
    xb_lo: *mut u16,
    xcm: *mut u16,
    xscale: *mut f32,
    xsum: *mut f32,
    p: QmmPrepParams,
    np: QmmPrepNormParams,
) {
    launch_dependents();
    let c = block_x();
    if c >= p.n {
        return;
    }
    let k = p.in_features as usize;
    let t = thread_x() as usize;
    // The norm weights are model data no kernel writes: loaded before the wait, so in a chained
    // launch they arrive under the previous kernel's tail.
    let mut wv = [0.0f32; REG_ELEMS];
    if k <= STAGED_MAX {
        let mut j = 0;
        while j < REG_ELEMS {
            let e = t + 256 * j;
            if e < k {
                wv[j] = *w.add(e);
            }
            j += 1;
        }
    }
    grid_dependency_wait();
    let base = c as usize * k;
    let add = np.add != 0;
    let store = add && block_y() == 0;
    let v_at = |e: usize| -> f32 {
        let mut v = *h.add(base + e);
        if add {
            v += *a.add(base + e);
        }
        v
    };
    if k <= STAGED_MAX {
        let mut v = [0.0f32; REG_ELEMS];
        let mut j = 0;
        while j < REG_ELEMS {
            let e = t + 256 * j;
            if e < k {
                v[j] = *h.add(base + e);
            }
            j += 1;
        }
        if add {
            let mut j = 0;
            while j < REG_ELEMS {
                let e = t + 256 * j;
                if e < k {
                    v[j] += *a.add(base + e);
                }
                j += 1;
            }
        }
        let mut acc = 0.0f32;
        let mut j = 0;
        while j < REG_ELEMS {
            let e = t + 256 * j;
            if e < k {
                if store {
                    *h_out.add(base + e) = v[j];
                }
                acc = fma(v[j], v[j], acc);
            }
            j += 1;
        }
        let s = inv_rms(block_sum8(acc), p.in_features, np.eps);
        finish_staged_row(c, k, &v, &wv, s, xh, xb_hi, xb_lo, xcm, xscale, xsum, p);
        return;
    }
    // Long rows: pass 0, Σ v² in `norm`'s order; block (c, 0) stores v.
    let mut acc = 0.0f32;
    let mut at = t;
    while at < k {
        let mut v = [0.0f32; ROW_BATCH];
        let mut j = 0;
        while j < ROW_BATCH {
            let e = at + j * 256;
            if e < k {
                v[j] = v_at(e);
            }
            j += 1;
        }
        let mut j = 0;
        while j < ROW_BATCH {
            let e = at + j * 256;
            if e < k {
                if store {
                    *h_out.add(base + e) = v[j];
                }
                acc = fma(v[j], v[j], acc);
            }
            j += 1;
        }
        at += ROW_BATCH * 256;
    }
    let s = inv_rms(block_sum8(acc), p.in_features, np.eps);
    let y_at = |e: usize| -> f32 { v_at(e) * s * *w.add(e) };
    // Pass 1: max |x̂| over the column (bits, as `qmm_prep_x`).
    let mut m = 0u32;
    let mut at = t;
    while at < k {
        let mut y = [0.0f32; ROW_BATCH];
        let mut j = 0;
        while j < ROW_BATCH {
            let e = at + j * 256;
            if e < k {
                y[j] = y_at(e);
            }
            j += 1;
        }
        let mut j = 0;
        while j < ROW_BATCH {
            m = m.max(y[j].to_bits() & 0x7fff_ffff);
            j += 1;
        }
        at += ROW_BATCH * 256;
    }
    let inv = publish_column_scale(c, m, xscale);
    write_units(c, k, inv, y_at, xh, xb_hi, xb_lo, xcm, xsum, p);
}

const _: () = assert!(STAGED_MAX == kernel_abi::qmm_accum::MAX_IN as usize);

/// `2^-FRAC_BITS` (exact).
const ACC_UNIT_INV: f32 = 1.0 / (1u64 << FRAC_BITS) as f32;

/// [`qmm_prep_norm`] with `add` whose addend is an accumulated product (`kernel_abi::qmm_accum`:
/// a `qmm_*_accum_*` launch's i64 fixed-point sums `acc [n, in]` and its columns' scale words
/// `words [n]`): element `(c, e)` of the addend is `(f32(acc[c, e]) · 2^-FRAC_BITS) · s_c` with
/// `s_c = f32::from_bits(words[c])` (NaN where the producer marked the column), `v = h + a` is
/// stored to `h_out` by block `(c, 0)`, and everything after is [`qmm_prep_norm`]'s register
/// path — the same sum order, so the same bits for the same `v`. It also zeroes `zero` and
/// `zero_words` (the other accumulator pair, which the next accumulating product adds into) over
/// its columns: each block its chunk, block `(c, 0)` the column's word — never the accumulators
/// it reads, which every block of a column reads whole.
///
/// Rows of `in ≤ 256 · REG_ELEMS` only (the host checks; longer rows take the plain product).
/// A separate body from [`qmm_prep_norm`] on purpose: a shared generic body changed that
/// kernel's code layout (its SASS), and its launches are on the critical path of every step.
/// Launch as [`qmm_prep_norm`]. Traffic: as [`qmm_prep_norm`] with 8-byte addends, plus `n·in·8`
/// bytes of zeroing writes.
#[no_mangle]
#[link_section = "nvvm:maxntid=256;minctasm=1"]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "ptx-kernel" fn qmm_prep_norm_accum(
    h: *const f32,
    acc: *const u64,
    words: *const u32,
    zero: *mut u64,
    zero_words: *mut u32,
    w: *const f32,
    h_out: *mut f32,
    xh: *mut u16,
    xb_hi: *mut u16,
    xb_lo: *mut u16,
    xcm: *mut u16,
    xscale: *mut f32,
    xsum: *mut f32,
    p: QmmPrepParams,
    np: QmmPrepNormParams,
) {
    launch_dependents();
    let c = block_x();
    let k = p.in_features as usize;
    if c >= p.n || k > STAGED_MAX {
        return;
    }
    let t = thread_x() as usize;
    // The norm weights: model data no kernel writes, loaded before the wait.
    let mut wv = [0.0f32; REG_ELEMS];
    unroll_below(REG_ELEMS, |j| {
        let e = t + 256 * j;
        if e < k {
            wv[j] = *w.add(e);
        }
    });
    grid_dependency_wait();
    let base = c as usize * k;
    let mut v = [0.0f32; REG_ELEMS];
    let mut q = [0u64; REG_ELEMS];
    unroll_below(REG_ELEMS, |j| {
        let e = t + 256 * j;
        if e < k {
            v[j] = *h.add(base + e);
            q[j] = *acc.add(base + e);
        }
    });
    let a_scale = f32::from_bits(*words.add(c as usize));
    // The other accumulators, this block's chunk (their last reader finished before this launch).
    let first = (block_y() * PREP_CHUNK) as usize;
    unroll_below(PREP_CHUNK as usize / 256, |i| {
        let e = first + t + 256 * i;
        if e < k {
            *zero.add(base + e) = 0;
        }
    });
    if block_y() == 0 && t == 0 {
        *zero_words.add(c as usize) = 0;
    }
    let store = np.add != 0 && block_y() == 0;
    let mut sq = 0.0f32;
    unroll_below(REG_ELEMS, |j| {
        let e = t + 256 * j;
        if e < k {
            v[j] += i64_to_f32_rn(q[j] as i64) * ACC_UNIT_INV * a_scale;
            if store {
                *h_out.add(base + e) = v[j];
            }
            sq = fma(v[j], v[j], sq);
        }
    });
    let s = inv_rms(block_sum8(sq), p.in_features, np.eps);
    finish_staged_row(c, k, &v, &wv, s, xh, xb_hi, xb_lo, xcm, xscale, xsum, p);
}

/// The block's sum of its 8 warps' `acc` (256 threads): a butterfly per warp, then the 8 warp
/// sums added in warp order (`norm`'s order). One barrier; every thread calls it, once.
#[inline(always)]
unsafe fn block_sum8(acc: f32) -> f32 {
    let partials = PREP_NORM_PARTIALS.as_mut_ptr() as *mut f32;
    let acc = warp_sum_f32(acc);
    if lane_id() == 0 {
        *partials.add(warp_id() as usize) = acc;
    }
    sync_threads();
    let mut total = 0.0f32;
    let mut i = 0;
    while i < 8 {
        total += *partials.add(i);
        i += 1;
    }
    total
}

/// The end of the fused norm kernels' register path: `x̂ = (v·s)·w` of this thread's elements
/// `t + 256·j` staged in shared memory with their max, the column's scale, then the block's units
/// written as `qmm_prep_x` writes them.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn finish_staged_row(
    c: u32,
    k: usize,
    v: &[f32; REG_ELEMS],
    wv: &[f32; REG_ELEMS],
    s: f32,
    xh: *mut u16,
    xb_hi: *mut u16,
    xb_lo: *mut u16,
    xcm: *mut u16,
    xscale: *mut f32,
    xsum: *mut f32,
    p: QmmPrepParams,
) {
    let t = thread_x() as usize;
    let row = PREP_NORM_ROW.as_mut_ptr() as *mut f32;
    let mut m = 0u32;
    let mut j = 0;
    while j < REG_ELEMS {
        let e = t + 256 * j;
        if e < k {
            let y = v[j] * s * wv[j];
            *row.add(e) = y;
            m = m.max(y.to_bits() & 0x7fff_ffff);
        }
        j += 1;
    }
    // The barrier in `block_max_bits` also orders the row's shared stores before the reads below.
    let inv = publish_column_scale(c, m, xscale);
    write_units(c, k, inv, |e| *row.add(e), xh, xb_hi, xb_lo, xcm, xsum, p);
}

/// `qmm_prep_x` of a fused SwiGLU product whose split tail accumulated (`kernel_abi::qmm_accum`,
/// `qmm_*_swiglu_accum_*`): features `0 .. 64·full` are in `y` with their row-group maxima in
/// `ymax` (the first `tp.full` of each column's `p.max_parts` words); the tail's features come
/// from the accumulators `tail [n][tp.tail_rows]` (gate and up rows interleaved by 8, as the
/// product's rows) and the columns' scale words: `y_f = silu(g · s_c) · (u · s_c)` with
/// `g = f32(Σ_g) · 2^-FRAC_BITS` — the product's own SwiGLU epilogue on exactly summed gate and
/// up. Every block computes the column's tail features for the column max (≤ 4 per thread), the
/// block whose chunk holds a tail feature also stores it to `y` (so `y` holds the whole SwiGLU
/// output), then everything is `qmm_prep_x`'s. Block `(c, 0)` zeroes the other accumulator pair's
/// column (`zero`, `zero_words`). Launch as `qmm_prep_x`. Traffic: `qmm_prep_x`'s with the words
/// of `full` row groups, plus `tail_rows · 8` bytes per block and column.
///
/// Every load is issued before any loaded value is used or `y` is stored (in-order issue; and
/// `y` may alias the accumulators for the compiler), so a tail lane takes one L2 round trip, not
/// one per element. At most 80 registers (`minctasm=3`, 77, no spills): three blocks per SM, so a
/// 23-column launch's 391 blocks are one wave (at 84 registers uncapped, two blocks per SM made
/// it two waves and the verify 0.05 ms slower: docs/perf/qmatmul.md, twenty-first session).
#[no_mangle]
#[link_section = "nvvm:maxntid=256;minctasm=3"]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "ptx-kernel" fn qmm_prep_swiglu_accum(
    y: *mut f32,
    ymax: *const u32,
    tail: *const u64,
    words: *const u32,
    zero: *mut u64,
    zero_words: *mut u32,
    xh: *mut u16,
    xb_hi: *mut u16,
    xb_lo: *mut u16,
    xcm: *mut u16,
    xscale: *mut f32,
    xsum: *mut f32,
    p: QmmPrepParams,
    tp: QmmSwigluTail,
) {
    launch_dependents();
    let c = block_x();
    if c >= p.n {
        return;
    }
    grid_dependency_wait();
    let k = p.in_features as usize;
    let t = thread_x() as usize;
    let base = c as usize * k;
    let full_feats = tp.full as usize * (QMM_ROWS_PER_BLOCK / 2) as usize;
    let tail_rows = tp.tail_rows as usize;
    let tail_feats = (tail_rows / 2).min(k.saturating_sub(full_feats));
    let col_tail = tail.add(c as usize * tail_rows);
    let s = f32::from_bits(*words.add(c as usize));
    // Tail feature `f`: its gate row `16·(f/8) + f%8` of the tail, the up row 8 below: the two
    // accumulators (`tail_raw`), then `silu(g·s)·(u·s)` (`tail_y`); all loads first (doc above).
    let tail_raw = |f: usize| -> (u64, u64) {
        let g = 16 * (f / 8) + f % 8;
        (*col_tail.add(g), *col_tail.add(g + 8))
    };
    let tail_y = |(g, u): (u64, u64)| -> f32 {
        let gate = i64_to_f32_rn(g as i64) * ACC_UNIT_INV;
        let up = i64_to_f32_rn(u as i64) * ACC_UNIT_INV;
        silu(gate * s) * (up * s)
    };
    // This lane's elements (`unit_values`' lanes): `y` for the unsplit features, the
    // accumulators for the tail's.
    let (unit, e0) = lane_unit();
    let lane_ok = unit < k / 32;
    let mut raw = [0u64; 8];
    let mut vals = [0f32; 4];
    if lane_ok {
        unroll_below(4, |i| {
            let e = unit * 32 + e0 + i;
            if e < full_feats {
                vals[i] = *y.add(base + e);
            } else {
                (raw[2 * i], raw[2 * i + 1]) = tail_raw(e - full_feats);
            }
        });
    }
    // The column max: the unsplit row groups' words, then the tail's features.
    const PER_THREAD: usize = kernel_abi::qmm_accum::MAX_SWIGLU_TAIL_ROWS as usize / 2 / 256;
    let mut traw = [(0u64, 0u64); PER_THREAD];
    unroll_below(PER_THREAD, |j| {
        let f = t + 256 * j;
        if f < tail_feats {
            traw[j] = tail_raw(f);
        }
    });
    let mut m = words_max(ymax.add(c as usize * p.max_parts as usize), tp.full as usize, t);
    unroll_below(PER_THREAD, |j| {
        let f = t + 256 * j;
        if f < tail_feats {
            m = m.max(tail_y(traw[j]).to_bits() & 0x7fff_ffff);
        }
    });
    // The lane's tail elements, and to `y` (so `y` holds the whole SwiGLU output).
    if lane_ok {
        unroll_below(4, |i| {
            let e = unit * 32 + e0 + i;
            if e >= full_feats {
                vals[i] = tail_y((raw[2 * i], raw[2 * i + 1]));
                *y.add(base + e) = vals[i];
            }
        });
    }
    if block_y() == 0 {
        let zc = zero.add(c as usize * tail_rows);
        let mut i = t;
        while i < tail_rows {
            *zc.add(i) = 0;
            i += 256;
        }
        if t == 0 {
            *zero_words.add(c as usize) = 0;
        }
    }
    let inv = publish_column_scale(c, m, xscale);
    write_unit_values(c, k, inv, vals, xh, xb_hi, xb_lo, xcm, xsum, p);
}
