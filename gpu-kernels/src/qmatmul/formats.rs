//! Weight formats for the tensor-core `qmm_*` kernels: how a lane loads its part of one weight
//! block for the two rows it serves (`g` and `g + 8` of the warp's 16), and how it turns that
//! into the A fragment of one k16 step.
//!
//! Lane `(g, t)` (`g = lane / 4`, `t = lane % 4`) serves, in every 32-element unit, elements
//! `8t .. 8t+8` of rows `g` and `g+8`; for k16 step `h` it supplies elements `8t+4h + [0,2,1,3]`
//! as k-slots `2t, 2t+1, 2t+8, 2t+9` — the same order `qmm_prep_x` stores x in, so
//! `Σ_k A[r, k] · B[k, c]` is the dot product of row `r` with column `c` over the unit.
//!
//! Three ways to feed the tensor cores:
//!
//! * **Per-unit format** (Q8_0: one f16 scale `d` per 32-element unit): the A fragment holds
//!   the quant itself, `q` (made exactly as `(1152 + q) − 1152` from the byte), the unit's product
//!   `P = Σ_k q_k·x̂_k` is taken in f32 from a zero accumulator, and the unit adds `d·P` to the
//!   row's f32 sum (one fma per output). No weight is ever rounded; the error is the f32
//!   arithmetic on `P` (magnitude ≤ `128·Σ|x̂|`) and in the fma — bound in
//!   `tests/tests/gpu/qmm.rs`. (Until v11 the fragment was the offset `1152 + q` and the unit
//!   also added `−1152·d·S` with the unit sums `S` of x̂: two fmas per output.)
//! * **K-quant super-blocks** (Q4_K, Q5_K: 6-bit scale and min per 32-element unit, f16 `d`,
//!   `dmin` per 256): the A fragment is the weight's scaled part rounded to f16 as Q6_K's,
//!   `f16(q·f16(d·sc_u))`, made from the offset fragment `1024 + q` by one `fma.f16x2` per two
//!   weights; the block's 16 k16 steps go straight into the row's running sums (even and odd
//!   units apart, `epilogue::add_odd_units`) after one more step for the unit mins (see
//!   [`KScales`]). The per-unit work is per weight, not per output column, and nothing is done
//!   per block and output.
//! * **Scaled formats** (Q6_K: one scale per 16 elements, which a k16 step of this lane layout
//!   straddles; F16, BF16, F32): weights become f16/bf16 values in the fragment. Q6_K:
//!   `w = (q − 32)·(d·sc)` with `d·sc` rounded to f16 and one rounding in the product, so
//!   `|ŵ − w| ≤ 2^-10 |w|` (f16 subnormals add ≤ 2^-25 absolute). BF16 is stored as row-scaled
//!   f16 (see [`Half`]); F32 as bf16 hi + lo (see [`F32W`]).

use kernel_abi::{qmm_format, qmm_lanes, qmm_row_scaled, qmm_stages_x};

use crate::device::convert::pack_bf16x2;
use crate::device::half2::{and_or, hfma2, hfma2_splat, hmul2, hsub2, prmt};
use crate::device::load::{ld_nc_u16_cached, ld_nc_v4, ld_stream_v4, U32x4};

/// Private chunk `j` of lane `lane` in a packed block: `512·j + 16·lane` (streamed once, no L1
/// allocation).
#[inline(always)]
unsafe fn chunk(blk: *const u8, j: usize, lane: u32) -> [u32; 4] {
    ld_stream_v4(blk.add(512 * j + 16 * lane as usize) as *const U32x4).0
}

/// The lane's first `W / 4` private chunks as `W` words, in piece order (`W` a multiple of 4).
#[inline(always)]
unsafe fn private_words<const W: usize>(blk: *const u8, lane: u32) -> [u32; W] {
    let mut wds = [0u32; W];
    let mut j = 0;
    while j < W / 4 {
        let c = chunk(blk, j, lane);
        let mut e = 0;
        while e < 4 {
            wds[4 * j + e] = c[e];
            e += 1;
        }
        j += 1;
    }
    wds
}

/// The 16-byte shared field at `off` of row `r` (`off + 16·r`; the four lanes of a quad read
/// the same address, served by one request).
#[inline(always)]
unsafe fn field16(blk: *const u8, off: u32, r: u32) -> [u32; 4] {
    ld_nc_v4(blk.add((off + 16 * r) as usize) as *const U32x4).0
}

/// The 2-byte shared field at `off` of row `r` (`off + 2·r`).
#[inline(always)]
unsafe fn field2(blk: *const u8, off: u32, r: u32) -> u32 {
    ld_nc_u16_cached(blk.add((off + 2 * r) as usize))
}

/// Moves bit `from` of `v` to bit `to` (a compile-time pair after inlining).
#[inline(always)]
fn move_bit(v: u32, from: u32, to: u32) -> u32 {
    if from >= to {
        v >> (from - to)
    } else {
        v << (to - from)
    }
}

/// A per-unit format's end of unit (Q8_0): `acc += scale_r·P` for every tile's four outputs
/// (rows `g`, `g + 8`: `scale[0]`, `scale[1]`), one ordered fma each — shared by the `mma.sync`
/// and warpgroup kernels so that both do exactly these operations.
#[inline(always)]
pub fn add_unit_product<const T: usize>(scale: [f32; 2], pu: &[[f32; 4]; T], acc: &mut [[f32; 4]; T]) {
    let mut tile = 0;
    while tile < T {
        let mut j = 0;
        while j < 4 {
            acc[tile][j] = crate::device::math::fma_ordered(scale[j / 2], pu[tile][j], acc[tile][j]);
            j += 1;
        }
        tile += 1;
    }
}

/// f16x2 `(1024, 1024)`: `0x6400 | q` is the f16 `1024 + q` for `q < 1024`.
const MAGIC_1024: u32 = 0x6400_6400;

/// A weight storage format as seen by one lane.
pub trait Format {
    /// Elements per block along K.
    const ELEMS: u32;
    /// Bytes per block.
    const BYTES: u32;
    /// Whether the fragments are bf16 (else f16).
    const BF16: bool;
    /// What one lane holds of one block, for its two rows.
    type Lane: Copy;
    /// A lane value for blocks that are not loaded (never used in a product).
    const ZERO: Self::Lane;
    /// Weight blocks per pipeline stage (sized so a warp's stage is 2–4 KiB).
    const PER_STAGE: u32;
    /// Whether the multi-tile kernels stage x in shared memory (`kernel_abi::qmm_stages_x`).
    const STAGES_X: bool;
    /// Loads lane `lane`'s part of the packed 16-row block at `blk` (global memory, layout of
    /// `kernel_abi::qmm_lanes`): its private 16-byte chunks and the shared fields of its rows
    /// `g = lane / 4` and `g + 8`.
    unsafe fn load(blk: *const u8, lane: u32) -> Self::Lane;
    /// A fragment `[a0, a1, a2, a3]` of k16 step `h` (0, 1) of unit `u` (0 .. ELEMS/32).
    fn frag(l: &Self::Lane, u: u32, h: u32) -> [u32; 4];
    /// For split (hi + lo) formats: the A fragment of the low part, else `None`.
    #[inline(always)]
    fn frag_lo(_l: &Self::Lane, _u: u32, _h: u32) -> Option<[u32; 4]> {
        None
    }
    /// Row-scaled formats (`kernel_abi::qmm_row_scaled`): each output is multiplied by its row's
    /// power-of-two scale, stored as f32 after the packed blocks.
    const ROW_SCALED: bool = false;
    /// Products taken from zero and scaled in f32 per unit (Q8_0: `acc += d·P` with
    /// `unit_scales`).
    const PRODUCTS_FROM_ZERO: bool = false;
    /// K-quant super-block formats (Q4_K, Q5_K): per block one mins step
    /// ([`KScales::mins_frag`]), then each fragment scaled by [`KScales::scale_frag`] into the
    /// running sum.
    const SUPER: bool = false;
    /// The block's [`KScales`] for lane `(g, t)` (super-block formats only).
    #[inline(always)]
    fn super_scales(_l: &Self::Lane, _t: u32) -> KScales {
        KScales { sc: [[0; 2]; 2], dd: [0; 2], neg_cd: [0; 2], a_m: [0; 2] }
    }
    /// `[scale_g, scale_g8]` of unit `u` (per-unit formats, Q8_0: `d`).
    #[inline(always)]
    fn unit_scales(_l: &Self::Lane, _u: u32) -> [f32; 2] {
        [0.0; 2]
    }
}

// ---------------------------------------------------------------------------------------------
// Q4_K: 256 elements in 144 bytes: d, dmin (f16), 12 bytes of 6-bit scales/mins, 128 bytes of
// nibbles in four 32-byte groups (group c: sub-block 2c low nibbles, 2c+1 high nibbles).

/// Q4_K lane data: per row the 16-byte header and 2 words of each 32-byte nibble group.
#[derive(Clone, Copy)]
pub struct Q4kLane {
    /// `[row][word]`: word 0 = `d | dmin << 16`, 1..3 = the 12 scale bytes.
    hdr: [[u32; 4]; 2],
    /// `[row][group][word]`: bytes `8t .. 8t+8` of group `c`.
    qs: [[[u32; 2]; 4]; 2],
}

pub struct Q4K;

/// Bytes of the 6-bit scales (`sc`) and mins (`m`) of sub-blocks `4·(j/4) .. +4` of a K-quant
/// header (words 1..3 = the 12 scale bytes), one per byte.
#[inline(always)]
fn k_scale_bytes(hdr: &[u32; 4], j: u32) -> (u32, u32) {
    let (w1, w2, w3) = (hdr[1], hdr[2], hdr[3]);
    if j < 4 {
        (w1 & 0x3f3f_3f3f, w2 & 0x3f3f_3f3f)
    } else {
        (and_or(w3, 0x0f0f_0f0f, (w1 >> 2) & 0x3030_3030), and_or(w3 >> 4, 0x0f0f_0f0f, (w2 >> 2) & 0x3030_3030))
    }
}

/// How a K-quant super-block (Q4_K, Q5_K: `w = d·sc_u·q − dmin·m_u` in unit `u`, 6-bit `sc_u`,
/// `m_u`) is summed, per row and column:
///
/// `Σ_k w_k x̂_k ≈ Σ_blocks (P + M)`, `P = Σ_k ŵ_k·x̂_k`, `M = Σ_u μ_u·S_u/64`,
///
/// with `S_u = Σ_{k∈u} x̂_k`. The A fragments of `P` are the weights' scaled part rounded to f16
/// the way Q6_K's are: `ŵ = f16(q·s_u)` with `s_u = f16(d·sc_u)` (even `u`) or
/// `16·f16(d·sc_u/16)` (odd `u`; the same value wherever `d·sc_u/16` is a normal f16) — the
/// offset fragment `1024 + q` (even `u`) or `1024 + 16q` (odd `u`) goes through one `fma.f16x2`
/// with `(s'_u, −1024·s'_u)`, `s'_u = f16(d·sc_u)` or `f16(d·sc_u/16)`, whose exact result
/// `q·s_u` is rounded once. `M` is one more k16 step per block (`A = (μ_u | μ_u)` with
/// `μ_u = f16(−64·dmin·m_u)`, `B = (hi | lo)` of `S_u/64` in f16, `S` carried to ≈ 2^-22, from
/// the group-sum plane, `prep::group_sum_slot`). So every product of a row range goes straight
/// into two running f32 sums in a fixed order — per block its mins step and its even units' k16
/// steps into one, its odd units' into the other, added at the end
/// (`epilogue::add_odd_units`, as for Q6_K) — with no per-block product from zero, wait or f32
/// scaling (whose cost grew with the number of columns). Error per weight (normal f16):
/// `|ŵ − d·sc·q| ≤ 2^-10·|d·sc·q|`, `|μ_u − (−64·dmin·m_u)| ≤ 2^-11·64·|dmin·m_u|`; f16 range:
/// `1039·d·sc_u < 65504` and `64·63·dmin < 65504` (the host refuses `|d| > 1`, `|dmin| > 16`:
/// `host::gpu::qmatmul::pack::K_QUANT_MAX_D`).
#[derive(Clone, Copy)]
pub struct KScales {
    /// `[row][half]`: the 6-bit `sc_u` of units `4·half .. +4`, one per byte.
    pub sc: [[u32; 2]; 2],
    /// `[row]`: f16x2 `(d, d)`.
    pub dd: [u32; 2],
    /// `[row]`: f16x2 `(−1024·d, −64·d)` (exact).
    pub neg_cd: [u32; 2],
    /// `[row]`: f16x2 `(μ_2t, μ_2t+1)` (A register of the `M` product).
    pub a_m: [u32; 2],
}

impl KScales {
    /// f16x2 `(s'_2c, s'_2c+1) = (f16(d·sc_2c), f16(d·sc_2c+1/16))` and `−1024·s'` of row `r`,
    /// unit pair `c`: one `prmt` puts the two scale bytes into the mantissas of `(1024, 64)`
    /// (whose last mantissa bits weigh 1 and 1/16), one `fma` by `(d, d)` minus `(1024, 64)·d`
    /// gives `(sc, sc/16)·d` rounded once, one multiplication by `−1024` (exact) the biases.
    /// The constant is the `prmt`'s first source and the scale word its second (bytes 4..8), so
    /// that ptxas keeps the constant in one register and encodes each selector as an immediate;
    /// the other way round it made the constant the immediate and moved every selector into a
    /// register first (one `IMAD.U32` per `prmt`: 2–5 % of the Q4_K/Q5_K loops, `cargo xtask sass`).
    #[inline(always)]
    fn pair(&self, r: usize, c: u32) -> (u32, u32) {
        let word = self.sc[r][(c / 2) as usize];
        let lo = 4 + 2 * (c % 2);
        // Bytes: sc_2c, 0x64, sc_2c+1, 0x54 (the constant's bytes 1 and 3).
        let p = prmt(0x5400_6400, word, lo | 1 << 4 | (lo + 1) << 8 | 3 << 12);
        // `p·d − (1024, 64)·d`: the subtrahend is exact (a power of two times d), so the fma's
        // one rounding is that of `(p − (1024, 64))·d = (sc, sc/16)·d`.
        let s = hfma2(p, self.dd[r], self.neg_cd[r]);
        (s, hmul2(s, 0xe400_e400))
    }

    /// The A fragment `ŵ = f16(q·s_u)` of unit `u` from its offset fragment `off`
    /// (`[a0, a1, a2, a3]`: rows `g, g+8, g, g+8`): `fma(off, s'_u, −1024·s'_u)` per f16x2.
    #[inline(always)]
    pub fn scale_frag(&self, off: [u32; 4], u: u32) -> [u32; 4] {
        let mut a = [0u32; 4];
        let mut r = 0;
        while r < 2 {
            let (s, b) = self.pair(r, u / 2);
            let mut j = r;
            while j < 4 {
                a[j] = if u % 2 == 0 { hfma2_splat::<0>(off[j], s, b) } else { hfma2_splat::<1>(off[j], s, b) };
                j += 2;
            }
            r += 1;
        }
        a
    }

    /// The A fragment of the block's mins product (`formats::KScales`): `(μ | μ)` for both row
    /// halves, the same registers for the hi and lo k halves.
    #[inline(always)]
    pub fn mins_frag(&self) -> [u32; 4] {
        [self.a_m[0], self.a_m[1], self.a_m[0], self.a_m[1]]
    }
}

/// f16 `−64` in both halves.
const NEG_64_X2: u32 = 0xd400_d400;

/// [`KScales`] of the two rows' headers (`hdr[row]`: word 0 = `d | dmin << 16`, 1..3 = the 12
/// scale bytes) for lane quad position `t`.
#[inline(always)]
fn k_super_scales(hdr: &[[u32; 4]; 2], t: u32) -> KScales {
    let mut ks = KScales { sc: [[0; 2]; 2], dd: [0; 2], neg_cd: [0; 2], a_m: [0; 2] };
    // Bytes 2t and 2t+1 of the 8 sub-block bytes into halves 0 and 1.
    let sel = 2 * t | (2 * t + 1) << 8;
    let mut r = 0;
    while r < 2 {
        let h = &hdr[r];
        ks.dd[r] = prmt(h[0], h[0], 0x1010);
        ks.neg_cd[r] = hmul2(ks.dd[r], 0xd400_e400);
        // (−64·dmin, −64·dmin): exact (a power of two) for dmin ≤ 1023.
        let nm = hmul2(prmt(h[0], h[0], 0x3232), NEG_64_X2);
        let (sc_lo, m_lo) = k_scale_bytes(h, 0);
        let (sc_hi, m_hi) = k_scale_bytes(h, 4);
        ks.sc[r] = [sc_lo, sc_hi];
        let mp = and_or(prmt(m_lo, m_hi, sel), 0x00ff_00ff, MAGIC_1024);
        ks.a_m[r] = hmul2(hsub2(mp, MAGIC_1024), nm);
        r += 1;
    }
    ks
}

/// The nibble mask of sub-block `j` inside a quant byte (low nibble for even `j`, high for odd),
/// per f16 half.
#[inline(always)]
const fn nibble_mask(j: u32) -> u32 {
    if j % 2 == 0 {
        0x000f_000f
    } else {
        0x00f0_00f0
    }
}

impl Format for Q4K {
    const ELEMS: u32 = qmm_format::Q4_K.0;
    const BYTES: u32 = qmm_format::Q4_K.1;
    const PER_STAGE: u32 = qmm_format::Q4_K.2;
    const STAGES_X: bool = qmm_stages_x::Q4_K;
    const BF16: bool = false;
    type Lane = Q4kLane;
    const ZERO: Q4kLane = Q4kLane { hdr: [[0; 4]; 2], qs: [[[0; 2]; 4]; 2] };

    #[inline(always)]
    unsafe fn load(blk: *const u8, lane: u32) -> Q4kLane {
        let g = lane / 4;
        let hdr_at = qmm_lanes::field_offset(qmm_lanes::Q4_K, 0);
        // 16 private words: per row the four nibble groups, 2 words each (`qmm_lanes::Q4_K`).
        let wds = private_words::<16>(blk, lane);
        let mut l = Q4kLane { hdr: [field16(blk, hdr_at, g), field16(blk, hdr_at, g + 8)], qs: [[[0; 2]; 4]; 2] };
        let mut r = 0;
        while r < 2 {
            let mut gi = 0;
            while gi < 4 {
                l.qs[r][gi] = [wds[8 * r + 2 * gi], wds[8 * r + 2 * gi + 1]];
                gi += 1;
            }
            r += 1;
        }
        l
    }

    /// `A = 1024 + q` (even `u`) or `1024 + 16·q` (odd `u`): one `lop3` per f16x2.
    #[inline(always)]
    fn frag(l: &Q4kLane, u: u32, h: u32) -> [u32; 4] {
        let c = (u / 2) as usize;
        let mask = nibble_mask(u);
        let (v0, v1) = (l.qs[0][c][h as usize], l.qs[1][c][h as usize]);
        [
            and_or(v0, mask, MAGIC_1024),
            and_or(v1, mask, MAGIC_1024),
            and_or(v0 >> 8, mask, MAGIC_1024),
            and_or(v1 >> 8, mask, MAGIC_1024),
        ]
    }

    const SUPER: bool = true;

    #[inline(always)]
    fn super_scales(l: &Q4kLane, t: u32) -> KScales {
        k_super_scales(&l.hdr, t)
    }
}

// ---------------------------------------------------------------------------------------------
// Q5_K: 256 elements in 176 bytes: d, dmin, 12 scale bytes (as Q4_K), qh[32] (bit s of qh[l] is
// the 5th bit of element l of sub-block s), qs[128] (as Q4_K).

#[derive(Clone, Copy)]
pub struct Q5kLane {
    hdr: [[u32; 4]; 2],
    /// `[row][word]`: qh bytes `8t .. 8t+8`.
    qh: [[u32; 2]; 2],
    qs: [[[u32; 2]; 4]; 2],
}

pub struct Q5K;

impl Format for Q5K {
    const ELEMS: u32 = qmm_format::Q5_K.0;
    const BYTES: u32 = qmm_format::Q5_K.1;
    const PER_STAGE: u32 = qmm_format::Q5_K.2;
    const STAGES_X: bool = qmm_stages_x::Q5_K;
    const BF16: bool = false;
    type Lane = Q5kLane;
    const ZERO: Q5kLane = Q5kLane { hdr: [[0; 4]; 2], qh: [[0; 2]; 2], qs: [[[0; 2]; 4]; 2] };

    #[inline(always)]
    unsafe fn load(blk: *const u8, lane: u32) -> Q5kLane {
        let g = lane / 4;
        let hdr_at = qmm_lanes::field_offset(qmm_lanes::Q5_K, 0);
        // 20 private words: per row qh (2 words) then the four nibble groups (2 words each).
        let wds = private_words::<20>(blk, lane);
        let mut l = Q5kLane {
            hdr: [field16(blk, hdr_at, g), field16(blk, hdr_at, g + 8)],
            qh: [[0; 2]; 2],
            qs: [[[0; 2]; 4]; 2],
        };
        let mut r = 0;
        while r < 2 {
            l.qh[r] = [wds[10 * r], wds[10 * r + 1]];
            let mut gi = 0;
            while gi < 4 {
                l.qs[r][gi] = [wds[10 * r + 2 + 2 * gi], wds[10 * r + 3 + 2 * gi]];
                gi += 1;
            }
            r += 1;
        }
        l
    }

    /// As Q4_K with the 5th bit (bit `u` of each qh byte) moved into the f16 mantissa next to
    /// the nibble: `A = 1024 + q` (even `u`) or `1024 + 16·q` (odd `u`), `q < 32`.
    #[inline(always)]
    fn frag(l: &Q5kLane, u: u32, h: u32) -> [u32; 4] {
        let c = (u / 2) as usize;
        let mask = nibble_mask(u);
        // Target bit of the 5th bit in each f16 half: 4 (even u) or 8 (odd u).
        let to = if u % 2 == 0 { 4 } else { 8 };
        let hb = 0x0001_0001u32 << to;
        let mut out = [0u32; 4];
        let mut r = 0;
        while r < 2 {
            let v = l.qs[r][c][h as usize];
            let qh = l.qh[r][h as usize];
            // Bytes 0 and 2: qh bits u and 16 + u; bytes 1 and 3: bits 8 + u and 24 + u.
            let hi02 = and_or(move_bit(qh, u, to), hb, MAGIC_1024);
            let hi13 = and_or(move_bit(qh, u + 8, to), hb, MAGIC_1024);
            out[r] = and_or(v, mask, hi02);
            out[r + 2] = and_or(v >> 8, mask, hi13);
            r += 1;
        }
        out
    }

    const SUPER: bool = true;

    #[inline(always)]
    fn super_scales(l: &Q5kLane, t: u32) -> KScales {
        k_super_scales(&l.hdr, t)
    }
}

// ---------------------------------------------------------------------------------------------
// Q6_K: 256 elements in 210 bytes (2-byte aligned): ql[128], qh[64], scales[16] (i8), d (f16).
// Element e: half hf = e/128, quarter tq = (e%128)/32, l = e%32;
// low = nibble (tq/2 ? high : low) of ql[64hf + 32(tq%2) + l]; high = (qh[32hf + l] >> 2tq) & 3;
// q = (low | high << 4) − 32; x = d · scales[e/16] · q. Unit u (32 elements) = (hf, tq) = (u/4, u%4).

#[derive(Clone, Copy)]
pub struct Q6kLane {
    /// `[row][hf][parity][word]`: ql bytes `64hf + 32·parity + 8t .. +8`.
    ql: [[[[u32; 2]; 2]; 2]; 2],
    /// `[row][hf][word]`: qh bytes `32hf + 8t .. +8`.
    qh: [[[u32; 2]; 2]; 2],
    /// `[row][j]`: f16x2 `(d·sc, d·sc)` of units `2j` and `2j + 1` (the lane's scale of unit `u`
    /// is `scales[8hf + 2tq + t/2]`), each rounded once to f16 — decoded once per block, not per
    /// unit and k16 step.
    dsc: [[u32; 4]; 2],
}

pub struct Q6K;

impl Format for Q6K {
    const ELEMS: u32 = qmm_format::Q6_K.0;
    const BYTES: u32 = qmm_format::Q6_K.1;
    const PER_STAGE: u32 = qmm_format::Q6_K.2;
    const STAGES_X: bool = qmm_stages_x::Q6_K;
    const BF16: bool = false;
    type Lane = Q6kLane;
    const ZERO: Q6kLane = Q6kLane { ql: [[[[0; 2]; 2]; 2]; 2], qh: [[[0; 2]; 2]; 2], dsc: [[0; 4]; 2] };

    #[inline(always)]
    unsafe fn load(blk: *const u8, lane: u32) -> Q6kLane {
        let (g, t) = (lane / 4, lane % 4);
        let sc_at = qmm_lanes::field_offset(qmm_lanes::Q6_K, 0);
        let d_at = qmm_lanes::field_offset(qmm_lanes::Q6_K, 1);
        // 24 private words: per row and half hf: ql (parity 0), ql (parity 1), qh, 2 words each.
        let wds = private_words::<24>(blk, lane);
        let mut l = Q6kLane { ql: [[[[0; 2]; 2]; 2]; 2], qh: [[[0; 2]; 2]; 2], dsc: [[0; 4]; 2] };
        // Unit u = 4hf + tq uses scale 8hf + 2tq + t/2: bytes (0, 2, 4, 6) + t/2 of each 8.
        let sel = if t / 2 == 0 { 0x6420 } else { 0x7531 };
        let mut r = 0;
        while r < 2 {
            let mut hf = 0;
            while hf < 2 {
                let o = 12 * r + 6 * hf;
                l.ql[r][hf][0] = [wds[o], wds[o + 1]];
                l.ql[r][hf][1] = [wds[o + 2], wds[o + 3]];
                l.qh[r][hf] = [wds[o + 4], wds[o + 5]];
                hf += 1;
            }
            let sc = field16(blk, sc_at, g + 8 * r as u32);
            // The lane's 8 signed scale bytes, unit u at byte u % 4 of word u / 4.
            let bytes = [prmt(sc[0], sc[1], sel), prmt(sc[2], sc[3], sel)];
            let d = field2(blk, d_at, g + 8 * r as u32);
            let dd = d | (d << 16);
            let mut j = 0;
            while j < 4 {
                // Bytes 2(j%2), 2(j%2)+1 of word j/2 into the low bytes of halves 0 and 1, then
                // f16 `1024 + (sc + 128)` (`i8_pair_offset`) − 1152 = sc exactly, then · d.
                let pair = prmt(bytes[j / 2], 0, if j % 2 == 0 { 0x4140 } else { 0x4342 });
                let scf = hsub2(i8_pair_offset(pair), 0x6480_6480);
                l.dsc[r][j] = hmul2(scf, dd);
                j += 1;
            }
            r += 1;
        }
        l
    }

    #[inline(always)]
    fn frag(l: &Q6kLane, u: u32, h: u32) -> [u32; 4] {
        let hf = (u / 4) as usize;
        let tq = u % 4;
        let mut out = [0u32; 4];
        let mut r = 0;
        while r < 2 {
            let qh = l.qh[r][hf][h as usize];
            // The unit's two high bits of every byte, at bits 4..6 and nothing else (masked
            // before the shift, so no neighbour's bits come in).
            let hi = match tq {
                0 => (qh & 0x0303_0303) << 4,
                1 => (qh & 0x0c0c_0c0c) << 2,
                2 => qh & 0x3030_3030,
                _ => (qh & 0xc0c0_c0c0) >> 2,
            };
            // q = low | high << 4: 0..63 in every byte, nothing above bit 5; the weight is
            // (q − 32)·d·sc.
            let q = and_or(l.ql[r][hf][(tq % 2) as usize][h as usize] >> (4 * (tq / 2)), 0x0f0f_0f0f, hi);
            // (d·sc, d·sc) of unit u from the block's decoded pairs.
            let pair = l.dsc[r][(u / 2) as usize];
            let dsc = prmt(pair, pair, if u % 2 == 0 { 0x1010 } else { 0x3232 });
            // f16x2 `1024 + q` of q's bytes (0, 2) and (1, 3): one `prmt` each puts the magic's
            // 0x64 above them (the magic as the first source, so the selector is an immediate;
            // `KScales::pair`); then q − 32 = (1024 + q) − (1024 + 32) exactly.
            let a = hsub2(prmt(MAGIC_1024, q, 0x3614), 0x6420_6420);
            let b = hsub2(prmt(MAGIC_1024, q, 0x3715), 0x6420_6420);
            out[r] = hmul2(a, dsc);
            out[r + 2] = hmul2(b, dsc);
            r += 1;
        }
        out
    }
}

// ---------------------------------------------------------------------------------------------
// Q8_0: 32 elements in 34 bytes (2-byte aligned): d (f16), qs[32] (i8).

#[derive(Clone, Copy)]
pub struct Q8_0Lane {
    qs: [[u32; 2]; 2],
    d: [u32; 2],
}

pub struct Q8_0;

/// f16x2 `1024 + (q + 128)` of signed bytes 0 and 2 of `v`: `(v & 0x00ff00ff) ^ 0x64806480`
/// sets the f16 exponent of 1024 and flips the sign bit of the byte (`q ^ 0x80 = q + 128`).
#[inline(always)]
fn i8_pair_offset(v: u32) -> u32 {
    crate::device::half2::and_xor(v, 0x00ff_00ff, 0x6480_6480)
}

impl Format for Q8_0 {
    const ELEMS: u32 = qmm_format::Q8_0.0;
    const BYTES: u32 = qmm_format::Q8_0.1;
    const PER_STAGE: u32 = qmm_format::Q8_0.2;
    const STAGES_X: bool = qmm_stages_x::Q8_0;
    const BF16: bool = false;
    const PRODUCTS_FROM_ZERO: bool = true;
    type Lane = Q8_0Lane;
    const ZERO: Q8_0Lane = Q8_0Lane { qs: [[0; 2]; 2], d: [0; 2] };

    #[inline(always)]
    unsafe fn load(blk: *const u8, lane: u32) -> Q8_0Lane {
        let g = lane / 4;
        let d_at = qmm_lanes::field_offset(qmm_lanes::Q8_0, 0);
        let c = chunk(blk, 0, lane);
        Q8_0Lane { qs: [[c[0], c[1]], [c[2], c[3]]], d: [field2(blk, d_at, g), field2(blk, d_at, g + 8)] }
    }

    /// `A = q`, exact: `(1152 + q) − 1152` per f16x2.
    #[inline(always)]
    fn frag(l: &Q8_0Lane, _u: u32, h: u32) -> [u32; 4] {
        let (v0, v1) = (l.qs[0][h as usize], l.qs[1][h as usize]);
        let q = |v: u32| hsub2(i8_pair_offset(v), 0x6480_6480);
        [q(v0), q(v1), q(v0 >> 8), q(v1 >> 8)]
    }

    /// `w = d·q`.
    #[inline(always)]
    fn unit_scales(l: &Q8_0Lane, _u: u32) -> [f32; 2] {
        [crate::device::convert::f16_to_f32(l.d[0] as u16), crate::device::convert::f16_to_f32(l.d[1] as u16)]
    }
}

// ---------------------------------------------------------------------------------------------
// Half-precision weights: F16 and BF16 (32-element "blocks" of 64 bytes, 16-byte aligned rows).

#[derive(Clone, Copy)]
pub struct HalfLane {
    /// `[row]`: elements `8t .. 8t+8` (4 words of 2 halves).
    v: [[u32; 4]; 2],
}

#[inline(always)]
unsafe fn load_half(blk: *const u8, lane: u32) -> HalfLane {
    HalfLane { v: [chunk(blk, 0, lane), chunk(blk, 1, lane)] }
}

/// `(e0, e2)` and `(e1, e3)` of step `h` from words `(e0,e1), (e2,e3)`.
#[inline(always)]
fn half_frag(l: &HalfLane, h: u32) -> [u32; 4] {
    let h2 = 2 * h as usize;
    let (g0, g1) = (l.v[0][h2], l.v[0][h2 + 1]);
    let (r0, r1) = (l.v[1][h2], l.v[1][h2 + 1]);
    [prmt(g0, g1, 0x5410), prmt(r0, r1, 0x5410), prmt(g0, g1, 0x7632), prmt(r0, r1, 0x7632)]
}

/// f16 weights: F16 as stored (`ROW_SCALED = false`), or BF16 (`ROW_SCALED = true`) packed by
/// the host as f16 values `ŵ = w / s_r` with one power-of-two scale `s_r` per row
/// (`kernel_abi::qmm_row_scaled`): `s_r` puts the row's largest `|ŵ|` in `[2^14, 2^15)`, where a
/// bf16 significand (8 bits) is exact in f16 (11 bits) for every `|ŵ| ≥ 2^-17` (the f16 normal
/// range plus the subnormals whose spacing 2^-24 still holds 8 bits); smaller values round to
/// the subnormal grid, `|ŵ − w/s_r| ≤ 2^-25`, i.e. `≤ 2^-39·max_r |w|` per weight. The same
/// lane layout, fragments and f16 tensor-core product for both; the epilogue multiplies each
/// output by its row's `s_r` (exact: a power of two).
pub struct Half<const ROW_SCALED: bool>;

pub type F16 = Half<false>;
pub type Bf16 = Half<true>;

impl<const B: bool> Format for Half<B> {
    const ELEMS: u32 = if B { qmm_format::BF16.0 } else { qmm_format::F16.0 };
    const BYTES: u32 = if B { qmm_format::BF16.1 } else { qmm_format::F16.1 };
    const PER_STAGE: u32 = if B { qmm_format::BF16.2 } else { qmm_format::F16.2 };
    const STAGES_X: bool = if B { qmm_stages_x::BF16 } else { qmm_stages_x::F16 };
    const BF16: bool = false;
    const ROW_SCALED: bool = B && qmm_row_scaled::BF16;
    type Lane = HalfLane;
    const ZERO: HalfLane = HalfLane { v: [[0; 4]; 2] };

    #[inline(always)]
    unsafe fn load(blk: *const u8, lane: u32) -> HalfLane {
        load_half(blk, lane)
    }

    #[inline(always)]
    fn frag(l: &HalfLane, _u: u32, h: u32) -> [u32; 4] {
        half_frag(l, h)
    }
}

// ---------------------------------------------------------------------------------------------
// F32 weights (32-element blocks of 128 bytes): split as W = hi + lo, both bf16, and multiplied
// with x = hi + lo as hi·hi + hi·lo + lo·hi (the lo·lo term, ≤ 2^-18 |W x|, is dropped).
// Error ≤ 2^-15 |W| |x| per product.

#[derive(Clone, Copy)]
pub struct F32Lane {
    /// `[row][h]`: elements `8t + 4h .. +4` as f32 bits.
    v: [[[u32; 4]; 2]; 2],
}

pub struct F32W;

/// bf16 `hi` and `lo` parts of an f32 (`hi = rn(x)`, `lo = rn(x − hi)`), as f32 values.
#[inline(always)]
fn split(x: u32) -> (f32, f32) {
    let xf = f32::from_bits(x);
    let hi = f32::from_bits((crate::device::convert::f32_to_bf16(xf) as u32) << 16);
    (hi, xf - hi)
}

impl F32W {
    /// `(hi, lo)` A fragments of step `h`: per row, pairs `(e0, e2)` and `(e1, e3)`.
    #[inline(always)]
    fn frags(l: &F32Lane, h: u32) -> ([u32; 4], [u32; 4]) {
        let mut hi = [0u32; 4];
        let mut lo = [0u32; 4];
        let mut r = 0;
        while r < 2 {
            let e = l.v[r][h as usize];
            let (h0, l0) = split(e[0]);
            let (h1, l1) = split(e[1]);
            let (h2, l2) = split(e[2]);
            let (h3, l3) = split(e[3]);
            hi[r] = pack_bf16x2(h0, h2);
            hi[r + 2] = pack_bf16x2(h1, h3);
            lo[r] = pack_bf16x2(l0, l2);
            lo[r + 2] = pack_bf16x2(l1, l3);
            r += 1;
        }
        (hi, lo)
    }
}

impl Format for F32W {
    const ELEMS: u32 = qmm_format::F32.0;
    const BYTES: u32 = qmm_format::F32.1;
    const PER_STAGE: u32 = qmm_format::F32.2;
    const STAGES_X: bool = qmm_stages_x::F32;
    const BF16: bool = true;
    type Lane = F32Lane;
    const ZERO: F32Lane = F32Lane { v: [[[0; 4]; 2]; 2] };

    #[inline(always)]
    unsafe fn load(blk: *const u8, lane: u32) -> F32Lane {
        F32Lane { v: [[chunk(blk, 0, lane), chunk(blk, 1, lane)], [chunk(blk, 2, lane), chunk(blk, 3, lane)]] }
    }

    #[inline(always)]
    fn frag(l: &F32Lane, _u: u32, h: u32) -> [u32; 4] {
        Self::frags(l, h).0
    }

    #[inline(always)]
    fn frag_lo(l: &F32Lane, _u: u32, h: u32) -> Option<[u32; 4]> {
        Some(Self::frags(l, h).1)
    }
}
