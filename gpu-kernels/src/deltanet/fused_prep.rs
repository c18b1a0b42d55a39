//! The conv/norm step of `gdn_prep` inside the replay block (`gdn_recur_prep_dk{32,64,128}`):
//! one launch per DeltaNet layer instead of `gdn_prep` (or `gdn_prep_pairs`) + `gdn_recur_*`.
//!
//! Block `(j, y)` of the replay needs, for every node `i`, key head `kh = j mod n_k`'s `q_i`,
//! `k_i` (conv + SiLU along the node's ancestors, L2-normalised, q scaled by `1/√d_k`), its 16
//! value columns `16y ..` of `v_i` (conv + SiLU) and `α_i`, `β_i` of head `j`. It stages the
//! nodes' raw `mixed` inputs of those channels where the replay's slots are (they are used only
//! by the replay's loop, later), then:
//! 1. conv + SiLU into the arrays the replay reads (`sq`, `sk`, `sv`), each thread down its own
//!    channel columns two nodes at a time (independent: raw inputs in, outputs elsewhere), taps
//!    past the batch's ancestors from the committed window (registers); for q and k, each warp's
//!    32 channels (one kind, one 32-channel part of a head: `d_k ≥ 32`) give each node's part of
//!    `Σ y²` by `warp_sum_f32` of `fma(y, y, 0)` — `gdn_prep`'s per-warp sums, the same lanes in
//!    the same order — two nodes' butterflies interleaved;
//! 2. per (node, q/k) the parts in channel order from `0.0` (`gdn_prep`'s warps in order), then
//!    `1/√(Σ + 1e-6)`;
//! 3. the scaling in place.
//!
//! Every operation is `gdn_prep`'s on the same operands in the same order (`conv` is its tap
//! loop, [`super::alpha_beta`] its α/β), so `q`, `k`, `v`, α, β — and the replay's outputs — are
//! bitwise those of the two launches (a GPU test compares them). The block also writes what the
//! commit reads from the scratch: `k` (block `(kh, 0)` of each key head), its `v` columns, α and
//! β (blocks `(j, 0)`); `q` stays in shared memory.
//!
//! Conditions (the host takes the two launches otherwise): `d_k ≥ 32`, conv kernel `K ≤ 4`
//! ([`PRE`] taps in registers), `mixed` 16-byte aligned with a row stride of a multiple of 4
//! floats (the raw rows go by 16-byte `cp.async`).
//!
//! Cost in the block against the two launches: the same staging (raw instead of prepared rows),
//! the conv (`(2·d_k + 16)·K` fma and one SiLU per node and channel over 64 or 128 threads — the
//! q/k conv is repeated by the `3·8` blocks of a key head of the 27B), one butterfly per node,
//! channel part and q/k, three block barriers; it saves `gdn_prep`'s launch, its scratch round
//! trip and its place in the chain. Shared memory: [`kernel_abi::gdn_recur_prep_smem_words`].

use kernel_abi::{gdn_scratch, GdnParams, NodeBatch, MAX_NODES};

use super::{alpha_beta, parent_of, stage_v_columns, COLS};
use crate::device::load::{cp_async_16, cp_async_commit, cp_async_wait_all};
use crate::device::math::{div_rn, fma, silu, sqrt_rn};
use crate::device::shared::smem_addr;
use crate::device::sync::sync_threads;
use crate::device::unroll::unroll_below;
use crate::device::warp::shfl_xor_f32;
use crate::device::*;

/// Conv taps held in registers (the host takes the fused kernel for `K ≤ PRE`).
pub const PRE: usize = 4;
/// q/k channels per thread at most: `2·d_k / 64` at `d_k = 128` and 64 threads (one program).
const QK_SLOTS: usize = 4;

/// `gdn_prep`'s inputs, for the fused replay (null in the two-launch kernels).
#[derive(Clone, Copy)]
pub struct PrepInputs {
    pub mixed: *const f32,
    pub conv_state: *const f32,
    pub conv_w: *const f32,
    pub a: *const f32,
    pub b: *const f32,
    pub ssm_a: *const f32,
    pub dt_bias: *const f32,
}

impl PrepInputs {
    pub const NONE: PrepInputs = PrepInputs {
        mixed: core::ptr::null(),
        conv_state: core::ptr::null(),
        conv_w: core::ptr::null(),
        a: core::ptr::null(),
        b: core::ptr::null(),
        ssm_a: core::ptr::null(),
        dt_bias: core::ptr::null(),
    };
}

/// The `mixed` channel of q/k slot `u` (`u < d_k`: q channel `u` of key head `kh`, else k
/// channel `u − d_k`).
#[inline(always)]
fn qk_channel<const DK: usize>(u: usize, kh: usize, n_k: usize) -> usize {
    if u < DK {
        kh * DK + u
    } else {
        (n_k + kh) * DK + (u - DK)
    }
}

/// One level of `warp_sum_f32`'s butterfly (`v += shfl_xor(v, x)`) on `K` values at once.
#[inline(always)]
fn butterfly_level<const K: usize>(ss: &mut [f32; K], x: u32) {
    unroll_below(K, |e| ss[e] += shfl_xor_f32(ss[e], x));
}

/// Node `i`'s conv + SiLU of one channel whose raw inputs are column `c` of `row [node][stride]`
/// (in shared memory), with taps `w` and committed window rows `win` (oldest first): `gdn_prep`'s
/// `w[K−1]·own`, then `fma` over the taps in order, each tap's input its in-batch ancestor
/// `K−1−tap` steps up (`anc[i]`: 6 bits per ancestor, nearest first; their count at bit 24), else
/// the window row past them.
#[inline(always)]
unsafe fn conv(
    row: *const f32,
    stride: usize,
    c: usize,
    w: &[f32; PRE],
    win: &[f32; PRE],
    i: usize,
    kk: usize,
    anc: *const u32,
) -> f32 {
    let word = *anc.add(i);
    let m = (word >> 24) as usize;
    let mut w_last = 0.0f32;
    unroll_below(PRE, |u| {
        if u + 1 == kk {
            w_last = w[u];
        }
    });
    let mut acc = w_last * *row.add(i * stride + c);
    unroll_below(PRE, |tap| {
        if tap + 1 < kk {
            let back = kk - 1 - tap;
            let x = if back <= m {
                let node = ((word >> (6 * (back - 1))) & 63) as usize;
                *row.add(node * stride + c)
            } else {
                let at = kk - 1 - (back - m);
                let mut x = 0.0f32;
                unroll_below(PRE, |r| {
                    if r == at {
                        x = win[r];
                    }
                });
                x
            };
            acc = fma(w[tap], x, acc);
        }
    });
    silu(acc)
}

/// One thread's share of the fused conv/norm step (see the module doc): the conv taps and
/// committed window rows of its q/k channels (slots `u = t + r·threads < 2·d_k`) and, for
/// `t < 16`, of its value column; `dt_bias`, `A` of the head; the shared arrays of the raw inputs,
/// the nodes' ancestors and the norm partials.
pub struct FusedConv<const DK: usize> {
    wqk: [[f32; PRE]; QK_SLOTS],
    xqk: [[f32; PRE]; QK_SLOTS],
    wv: [f32; PRE],
    xv: [f32; PRE],
    bias: f32,
    ssm: f32,
    /// Raw inputs `[m][d_k]` of q, of k, then `[m][16]` of v.
    raw: *mut f32,
    anc: *mut u32,
    /// Per (node, q/k): the four 32-channel parts of `Σ y²` (`[2i + kind][4]`), then the norm
    /// at part 0.
    parts: *mut f32,
}

impl<const DK: usize> FusedConv<DK> {
    /// Loads what no kernel of the forward writes (before the wait): this thread's taps and
    /// window rows, and (threads `t < n`) node `t`'s in-batch ancestors into `ext[t]`. `raw`
    /// holds `m·(2·d_k + 16)` words (`m ≥ n`: the shared arrays' rows), `ext` `9m`.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn load(
        nb: *const NodeBatch,
        pin: PrepInputs,
        p: &GdnParams,
        n: usize,
        m: usize,
        raw: *mut f32,
        ext: *mut u32,
        kh: usize,
        j: usize,
        col0: usize,
        t: usize,
        threads: usize,
    ) -> Self {
        let (n_k, dv) = (p.n_k as usize, p.d_v as usize);
        let (kk, ch) = (p.conv_kernel as usize, p.conv_ch as usize);
        let mut f = FusedConv {
            wqk: [[0.0; PRE]; QK_SLOTS],
            xqk: [[0.0; PRE]; QK_SLOTS],
            wv: [0.0; PRE],
            xv: [0.0; PRE],
            bias: 0.0,
            ssm: 0.0,
            raw,
            anc: ext,
            parts: ext.add(m) as *mut f32,
        };
        let taps = |chn: usize, w: &mut [f32; PRE], x: &mut [f32; PRE]| {
            unroll_below(PRE, |tap| {
                if tap < kk {
                    w[tap] = *pin.conv_w.add(chn * kk + tap);
                }
                if tap + 1 < kk {
                    x[tap] = *pin.conv_state.add(tap * ch + chn);
                }
            });
        };
        unroll_below(QK_SLOTS, |r| {
            let u = t + r * threads;
            if u < 2 * DK {
                taps(qk_channel::<DK>(u, kh, n_k), &mut f.wqk[r], &mut f.xqk[r]);
            }
        });
        if t < COLS && col0 + t < dv {
            taps(2 * n_k * DK + j * dv + col0 + t, &mut f.wv, &mut f.xv);
        }
        if t < n {
            let (mut up, mut m) = (0u32, 0usize);
            let mut x = parent_of(nb, t);
            while m + 1 < kk && x >= 0 && (x as usize) < MAX_NODES as usize {
                up |= (x as u32) << (6 * m);
                x = parent_of(nb, x as usize);
                m += 1;
            }
            *f.anc.add(t) = up | (m as u32) << 24;
            f.bias = *pin.dt_bias.add(j);
            f.ssm = *pin.ssm_a.add(j);
        }
        f
    }

    /// After the wait: stages the raw inputs, computes q, k (into `sq`, `sk`), v (`sv`), α, β
    /// (`sa`, `sb`) as `gdn_prep` does, and writes the commit's rows to the scratch. Ends behind
    /// a block barrier.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn run(
        &self,
        pin: PrepInputs,
        p: &GdnParams,
        n: usize,
        m: usize,
        sk: *mut f32,
        sq: *mut f32,
        sv: *mut f32,
        sa: *mut f32,
        sb: *mut f32,
        scratch: *mut f32,
        j: usize,
        col0: usize,
        t: usize,
        threads: usize,
    ) {
        let (n_k, n_v, dv) = (p.n_k as usize, p.n_v as usize, p.d_v as usize);
        let (kk, ms) = (p.conv_kernel as usize, p.mixed_stride as usize);
        let kh = j % n_k;
        let sc = gdn_scratch(n_k, n_v, DK, dv);
        let (rq, rk, rv) = (self.raw, self.raw.add(m * DK), self.raw.add(2 * m * DK));
        // The nodes' raw q and k channels of key head `kh` and value columns `col0 ..` of head `j`
        // (16-byte `cp.async`: the host checks `mixed`'s alignment and stride), and α, β.
        let chunks = DK / 4;
        let mut e = t;
        while e < n * 2 * chunks {
            let (i, c4) = (e / (2 * chunks), e % (2 * chunks));
            let (dst, base) = if c4 < chunks { (rq, kh * DK) } else { (rk, (n_k + kh) * DK) };
            let c = 4 * (c4 % chunks);
            cp_async_16(smem_addr(dst.add(i * DK + c)), pin.mixed.add(i * ms + base + c) as *const u8);
            e += threads;
        }
        stage_v_columns(rv, pin.mixed.add(2 * n_k * DK + j * dv), n, |i| i, ms, col0, dv, t, threads);
        cp_async_commit();
        if t < n {
            let av = *pin.a.add(t * p.a_stride as usize + j);
            let bv = *pin.b.add(t * p.b_stride as usize + j);
            let (alpha, beta) = alpha_beta(av, bv, self.bias, self.ssm);
            *sa.add(t) = alpha;
            *sb.add(t) = beta;
            if block_y() == 0 {
                *scratch.add(sc.alpha + t * n_v + j) = alpha;
                *scratch.add(sc.beta + t * n_v + j) = beta;
            }
        }
        cp_async_wait_all();
        sync_threads();

        // 1. Conv + SiLU, two nodes at a time; q and k also their warps' parts of `Σ y²`.
        const NODES: usize = 2;
        unroll_below(QK_SLOTS, |r| {
            let u = t + r * threads;
            if u < 2 * DK {
                // Warp-uniform: a warp's 32 slots are 32 consecutive channels of one kind.
                let (src, dst, c, kind) = if u < DK { (rq, sq, u, 0) } else { (rk, sk, u - DK, 1) };
                let mut i = 0;
                while i < n {
                    let mut y = [0.0f32; NODES];
                    unroll_below(NODES, |e| {
                        if i + e < n {
                            y[e] = conv(src, DK, c, &self.wqk[r], &self.xqk[r], i + e, kk, self.anc);
                        }
                    });
                    let mut ss = [0.0f32; NODES];
                    unroll_below(NODES, |e| {
                        if i + e < n {
                            *dst.add((i + e) * DK + c) = y[e];
                        }
                        ss[e] = fma(y[e], y[e], 0.0);
                    });
                    // `warp_sum_f32` of each, the two interleaved.
                    butterfly_level(&mut ss, 16);
                    butterfly_level(&mut ss, 8);
                    butterfly_level(&mut ss, 4);
                    butterfly_level(&mut ss, 2);
                    butterfly_level(&mut ss, 1);
                    if c % 32 == 0 {
                        unroll_below(NODES, |e| {
                            if i + e < n {
                                *self.parts.add((2 * (i + e) + kind) * 4 + c / 32) = ss[e];
                            }
                        });
                    }
                    i += NODES;
                }
            }
        });
        if t < COLS && col0 + t < dv {
            let mut i = 0;
            while i < n {
                let mut y = [0.0f32; NODES];
                unroll_below(NODES, |e| {
                    if i + e < n {
                        y[e] = conv(rv, COLS, t, &self.wv, &self.xv, i + e, kk, self.anc);
                    }
                });
                unroll_below(NODES, |e| {
                    if i + e < n {
                        *sv.add((i + e) * COLS + t) = y[e];
                    }
                });
                i += NODES;
            }
        } else if t < COLS {
            // Columns past `d_v` (a last group of a head): zeros, as the two launches' staging.
            for i in 0..n {
                *sv.add(i * COLS + t) = 0.0;
            }
        }
        sync_threads();

        // 2. Each node's q and k norm `1/√(Σ y² + 1e-6)`, at part 0 of its partials.
        let mut e = t;
        while e < 2 * n {
            let pp = self.parts.add(4 * e);
            let mut total = 0.0f32;
            unroll_below(DK / 32, |part| total += *pp.add(part));
            *pp = div_rn(1.0, sqrt_rn(total + 1e-6));
            e += threads;
        }
        sync_threads();

        // 3. Scaling in place (q also by `1/√d_k`), each thread down its own columns.
        let scale = div_rn(1.0, sqrt_rn(DK as f32));
        unroll_below(QK_SLOTS, |r| {
            let u = t + r * threads;
            if u < 2 * DK {
                let (row, c, kind) = if u < DK { (sq, u, 0) } else { (sk, u - DK, 1) };
                for i in 0..n {
                    let y = *row.add(i * DK + c) * *self.parts.add((2 * i + kind) * 4);
                    *row.add(i * DK + c) = if kind == 0 { y * scale } else { y };
                }
            }
        });
        sync_threads();

        // What the commit reads from the scratch: k (one block per key head), v, α and β (above).
        if j < n_k && block_y() == 0 {
            let mut e = t;
            while e < n * DK {
                let (i, c) = (e / DK, e % DK);
                *scratch.add(sc.k + i * n_k * DK + j * DK + c) = *sk.add(e);
                e += threads;
            }
        }
        let mut e = t;
        while e < n * COLS {
            let (i, c) = (e / COLS, e % COLS);
            if col0 + c < dv {
                *scratch.add(sc.v + i * n_v * dv + j * dv + col0 + c) = *sv.add(e);
            }
            e += threads;
        }
    }
}
