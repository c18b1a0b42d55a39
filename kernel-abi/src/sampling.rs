//! The integer arithmetic of exact sampling (temperature / top-k / top-p / min-p), shared by the
//! CPU definition (`flashtree_reference::sample::draw`) and the device kernel
//! (`gpu-kernels` `sample::draw`), so that both compute every weight, threshold and draw target
//! from one source: the same operations in the same order give the same bits.
//!
//! Weights are fixed point: a token's weight is `W = ⌊w · 2^44⌋` with `w = e^d ≤ 1` its
//! probability relative to the most likely token, so every sum of weights is an exact integer
//! and any reduction order gives the same total (a vocabulary below 2^20 sums below 2^64).
//! Tokens with `w < 2^-44` get weight 0 and are never drawn: the sampled distribution differs
//! from the exact softmax by at most a total mass of `V · 2^-44` (< 2^-26 at V = 248 320),
//! plus the few-ulp error of [`exp`].
//!
//! Every function takes the fused multiply-add `fma(a, b, c) = a·b + c` (one rounding) as an
//! argument: `f64::mul_add` on the host, `core::f64::math::mul_add` (`fma.rn.f64`) on the device.
//! No other operation may fuse: plain `a * b + c` is two roundings on both targets (rustc emits
//! no contraction; ptxas fuses nothing it is not given).

/// A sampling rule (definition: `flashtree_reference::sample::draw`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SampleRule {
    /// Softmax temperature, finite and > 0 (T = 0 is the argmax: not a sampling rule).
    pub temperature: f32,
    /// Keep the `top_k` most likely tokens (0 = all; more than the vocabulary = all).
    pub top_k: usize,
    /// Nucleus mass in (0, 1] (1 = no cut).
    pub top_p: f32,
    /// Minimum probability relative to the most likely token, in [0, 1] (0 = no cut).
    pub min_p: f32,
    /// The seed of the random stream.
    pub seed: u64,
}

impl SampleRule {
    /// The first field out of range: `(field, value, what was expected)`.
    pub fn range_error(&self) -> Option<(&'static str, f32, &'static str)> {
        if !(self.temperature.is_finite() && self.temperature > 0.0) {
            return Some(("temperature", self.temperature, "a finite value > 0"));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Some(("top_p", self.top_p, "a value in (0, 1]"));
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return Some(("min_p", self.min_p, "a value in [0, 1]"));
        }
        None
    }

    /// `1 / f64(temperature)`, the factor of every weight.
    pub fn inv_temperature(&self) -> f64 {
        1.0 / self.temperature as f64
    }
}

/// Fixed-point one: the weight of the most likely token.
pub const WEIGHT_ONE: u64 = 1 << 44;

/// Largest vocabulary sampled: `V · 2^44 < 2^64`, so no sum of weights overflows.
pub const MAX_VOCAB: u32 = (1 << 20) - 1;

/// Below this `d = (l − l_max) / T` the weight is 0 without computing `e^d`
/// (`e^-32 · 2^44 ≈ 0.22 < 1`, so [`exp`] would floor to 0 too).
pub const D_MIN: f64 = -32.0;

/// The order key of an f32 (its bits): larger key = larger value in `f32::total_cmp` order
/// (`−0 < +0`); every NaN maps to 0, below everything; −∞ maps to [`NEG_INF_KEY`].
#[inline(always)]
pub const fn order_key(bits: u32) -> u32 {
    if bits & 0x7fff_ffff > 0x7f80_0000 {
        0
    } else if bits & 0x8000_0000 != 0 {
        !bits
    } else {
        bits | 0x8000_0000
    }
}

/// The f32 of an order key (a NaN for key 0).
#[inline(always)]
pub const fn key_value(key: u32) -> f32 {
    f32::from_bits(if key & 0x8000_0000 != 0 { key & 0x7fff_ffff } else { !key })
}

/// The order key of −∞. A token can be drawn only if its key is above this (not NaN, not −∞).
pub const NEG_INF_KEY: u32 = order_key(f32::NEG_INFINITY.to_bits());

/// The order key of +∞, the largest key.
pub const POS_INF_KEY: u32 = order_key(f32::INFINITY.to_bits());

/// splitmix64's finaliser: a bijection of u64 with full avalanche.
#[inline(always)]
pub const fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The random stream: 53 uniform bits for `(seed, position)`,
/// `mix(mix(seed + γ) ^ mix(position + 2γ)) >> 11` (γ = 2⁶⁴/φ, splitmix64's increment). Nothing
/// is carried between calls; `u = bits · 2^-53` is the uniform in [0, 1).
#[inline(always)]
pub const fn uniform_bits(seed: u64, position: u64) -> u64 {
    const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;
    mix(mix(seed.wrapping_add(GAMMA)) ^ mix(position.wrapping_add(GAMMA.wrapping_mul(2)))) >> 11
}

/// The draw's target in `[0, total)`: `⌊u · total⌋` exactly, `(bits · total) >> 53` in 128 bits.
#[inline(always)]
pub const fn draw_target(bits: u64, total: u64) -> u64 {
    ((bits as u128 * total as u128) >> 53) as u64
}

/// `⌈x⌉` as a u64 for `x ≥ 0` (saturating at `u64::MAX`; NaN gives 0).
#[inline(always)]
pub fn ceil_u64(x: f64) -> u64 {
    let c = x as u64;
    if (c as f64) < x {
        c + 1
    } else {
        c
    }
}

/// 1/n! for n = 0..=13, the Taylor coefficients of `e^r`.
const EXP_COEFFS: [f64; 14] = [
    1.0,
    1.0,
    1.0 / 2.0,
    1.0 / 6.0,
    1.0 / 24.0,
    1.0 / 120.0,
    1.0 / 720.0,
    1.0 / 5040.0,
    1.0 / 40320.0,
    1.0 / 362_880.0,
    1.0 / 3_628_800.0,
    1.0 / 39_916_800.0,
    1.0 / 479_001_600.0,
    1.0 / 6_227_020_800.0,
];

/// `ln 2` split for Cody–Waite reduction (fdlibm's): the high part has 32 trailing zero bits.
const LN2_HI: f64 = f64::from_bits(0x3fe6_2e42_fee0_0000);
const LN2_LO: f64 = f64::from_bits(0x3dea_39ef_3579_3c76);
/// 1.5 · 2^52: adding it rounds a value of magnitude < 2^51 to an integer (ties to even).
const ROUND_SHIFT: f64 = 6_755_399_441_055_744.0;

/// `e^d` for `d` in [−708, 709] to a few ulp: `d = k·ln 2 + r` with
/// `k = round(d · log2 e)` (by adding and subtracting 1.5·2^52), `r = d − k·LN2_HI − k·LN2_LO`
/// (two fmas, `|r| ≤ 0.35`), `e^r` by its Taylor polynomial of degree 13 in Horner form (fmas;
/// truncation < 2^-57 relative), times `2^k` exactly. `e^0 = 1` exactly. Outside the domain
/// the result is meaningless (callers stay in [−32, 0]).
#[inline(always)]
pub fn exp(d: f64, fma: impl Fn(f64, f64, f64) -> f64) -> f64 {
    let kf = (d * core::f64::consts::LOG2_E + ROUND_SHIFT) - ROUND_SHIFT;
    let r = fma(kf, -LN2_HI, d);
    let r = fma(kf, -LN2_LO, r);
    let mut p = EXP_COEFFS[13];
    let mut n = 13;
    while n > 0 {
        n -= 1;
        p = fma(p, r, EXP_COEFFS[n]);
    }
    let scale = f64::from_bits(((kf as i64 + 1023) as u64) << 52);
    p * scale
}

/// The fixed-point weight of a drawable logit `l` (not NaN, not −∞) given the row's largest
/// logit `l_max` and `inv_t = 1 / f64(T)`: with `l_max = +∞`, [`WEIGHT_ONE`] for the +∞ entries
/// and 0 for the rest; otherwise `d = (f64(l) − f64(l_max)) · inv_t`, 0 below [`D_MIN`], else
/// `⌊exp(d) · 2^44⌋`. Monotone in `l` up to the last ulp of [`exp`]; the definition of the
/// filters never relies on it.
#[inline(always)]
pub fn weight(l: f32, l_max: f32, inv_t: f64, fma: impl Fn(f64, f64, f64) -> f64) -> u64 {
    if l_max == f32::INFINITY {
        return if l == f32::INFINITY { WEIGHT_ONE } else { 0 };
    }
    let d = (l as f64 - l_max as f64) * inv_t;
    if d < D_MIN {
        return 0;
    }
    (exp(d, fma) * WEIGHT_ONE as f64) as u64
}

/// The top-p cut's target mass: the shortest prefix (in logit order) of the top-k set whose
/// weight reaches `min(⌈f64(top_p) · f64(s_k)⌉, s_k)`, `s_k` the top-k set's total.
#[inline(always)]
pub fn top_p_need(top_p: f32, s_k: u64) -> u64 {
    let need = ceil_u64(top_p as f64 * s_k as f64);
    if need < s_k {
        need
    } else {
        s_k
    }
}

/// The min-p threshold: tokens with `W ≥ ⌈f64(min_p) · 2^44⌉` pass.
#[inline(always)]
pub fn min_p_threshold(min_p: f32) -> u64 {
    ceil_u64(min_p as f64 * WEIGHT_ONE as f64)
}
