//! `sample`: argmax over rows of logits.
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

use kernel_abi::{ArgmaxParams, ARGMAX_SPLITS};

use crate::device::load::{ld_nc_v4, U32x4};
use crate::device::shared::Shared;
use crate::device::sync::sync_threads;
use crate::device::warp::shfl_xor_u32;
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
        let step = 4 * block_dim_x();
        let mut i = start + 4 * t;
        while i < end {
            let mut v = [U32x4::default(); 4];
            let mut u = 0;
            while u < 4 {
                let j = i + u as u32 * step;
                if j < end {
                    v[u] = ld_nc_v4(xr.add(j as usize) as *const U32x4);
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
