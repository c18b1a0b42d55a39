//! Round-trip error bounds of every quantizer (proptest over random blocks and magnitudes).
//! Each bound is the one stated in the format's module doc in `quants/src/`.

use flashtree_quants::{dequantize, quantize, GgmlType};
use proptest::prelude::*;

/// Blocks of `n` values `scale · u`, `u ∈ [−1, 1]`, with `scale = 10^e`, `e ∈ exps`, and every
/// 32nd value forced to `±scale` so each sub-block's `max|x|` is the scale. The relative bounds
/// below hold while the stored f16 scales are normal numbers (`e ≥ 0` covers every format);
/// [`tiny_blocks_stay_within_the_f16_subnormal_granularity`] covers smaller magnitudes.
fn blocks_in(exps: std::ops::RangeInclusive<i32>, n: usize) -> impl Strategy<Value = Vec<f32>> {
    (exps, prop::collection::vec(-1.0f32..=1.0, n), any::<bool>()).prop_map(|(e, u, neg)| {
        let scale = 10f32.powi(e);
        u.into_iter()
            .enumerate()
            .map(|(i, v)| {
                if i % 32 == 0 {
                    if neg {
                        -scale
                    } else {
                        scale
                    }
                } else {
                    v * scale
                }
            })
            .collect()
    })
}

fn block(n: usize) -> impl Strategy<Value = Vec<f32>> {
    blocks_in(0..=3, n)
}

fn amax(x: &[f32]) -> f32 {
    x.iter().fold(0.0f32, |m, v| m.max(v.abs()))
}

fn roundtrip(ty: GgmlType, x: &[f32]) -> Vec<f32> {
    let q = quantize(ty, x).expect("whole blocks");
    assert_eq!(q.len(), x.len() / ty.block_size() * ty.type_size());
    dequantize(ty, &q).expect("whole blocks")
}

/// Largest |x − x̂| over blocks of `block` elements, divided by that block's `max|x|`.
fn worst_relative_to_block_amax(x: &[f32], y: &[f32], block: usize) -> f32 {
    x.chunks(block)
        .zip(y.chunks(block))
        .map(|(a, b)| {
            let m = amax(a);
            let e = a.iter().zip(b).fold(0.0f32, |e, (p, q)| e.max((p - q).abs()));
            if m == 0.0 {
                e
            } else {
                e / m
            }
        })
        .fold(0.0, f32::max)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// F32 is lossless.
    #[test]
    fn f32_roundtrip_is_exact(x in block(64)) {
        prop_assert_eq!(roundtrip(GgmlType::F32, &x), x);
    }

    /// F16: relative error ≤ 2⁻¹¹ for normal values, absolute ≤ 2⁻²⁵ for subnormal ones.
    #[test]
    fn f16_roundtrip_within_half_an_ulp(x in block(64)) {
        let y = roundtrip(GgmlType::F16, &x);
        for (a, b) in x.iter().zip(&y) {
            prop_assert!((a - b).abs() <= a.abs() * 2f32.powi(-11) + 2f32.powi(-25), "{a} -> {b}");
        }
    }

    /// BF16: relative error ≤ 2⁻⁸ (round to nearest even on 8 mantissa bits).
    #[test]
    fn bf16_roundtrip_within_half_an_ulp(x in block(64)) {
        let y = roundtrip(GgmlType::BF16, &x);
        for (a, b) in x.iter().zip(&y) {
            prop_assert!((a - b).abs() <= a.abs() * 2f32.powi(-8), "{a} -> {b}");
        }
    }

    /// Q8_0 and Q8_1: |x − x̂| ≤ 0.57·d with d = max|x|/127 (half a step plus the f16 rounding
    /// of d times at most 127 steps).
    #[test]
    fn q8_roundtrip_within_0_57_steps(x in block(64)) {
        for ty in [GgmlType::Q8_0, GgmlType::Q8_1] {
            let y = roundtrip(ty, &x);
            let worst = worst_relative_to_block_amax(&x, &y, 32);
            prop_assert!(worst <= 0.57 / 127.0, "{ty}: {worst}");
        }
    }

    /// Q4_0: |x − x̂| ≤ |d| = max|x|/8 at the clamped end, ≤ |d|/2 elsewhere (+ f16 rounding).
    #[test]
    fn q4_0_roundtrip_within_one_step(x in block(64)) {
        let y = roundtrip(GgmlType::Q4_0, &x);
        let worst = worst_relative_to_block_amax(&x, &y, 32);
        prop_assert!(worst <= 1.01 / 8.0, "{worst}");
    }

    /// Q4_K / Q5_K: step ≤ (2·max|x| + dmin)/levels + d, error ≤ step/2 ⇒ with dmin, d ≤
    /// max|x|/63·(1 + 2⁻¹⁰): error ≤ max|x|·(2 + 1/63)/levels/2 + max|x|/126, times 1.01 for
    /// f32 rounding.
    #[test]
    fn k_quants_roundtrip_within_half_a_step(x in block(512)) {
        for (ty, levels) in [(GgmlType::Q4_K, 15.0f32), (GgmlType::Q5_K, 31.0)] {
            let y = roundtrip(ty, &x);
            let worst = worst_relative_to_block_amax(&x, &y, 256);
            let bound = ((2.0 + 1.0 / 63.0) / levels / 2.0 + 1.0 / 126.0) * 1.01;
            prop_assert!(worst <= bound, "{ty}: {worst} > {bound}");
        }
    }

    /// Q6_K: error ≤ (amax_g/31 + d)/2 with d ≤ max|x|/31/127·(1 + 2⁻¹⁰) ⇒ ≤ max|x|·(1/62 +
    /// 1/7874), times 1.01.
    #[test]
    fn q6_k_roundtrip_within_half_a_step(x in block(512)) {
        let y = roundtrip(GgmlType::Q6_K, &x);
        let worst = worst_relative_to_block_amax(&x, &y, 256);
        prop_assert!(worst <= (1.0 / 62.0 + 1.0 / 7874.0) * 1.01, "{worst}");
    }

    /// Per-sub-block bound for K-quants: no element is clamped, so every element is within half
    /// of its own sub-block's step `d·sc` (read back from the quantized block).
    #[test]
    fn q4_k_error_within_half_of_its_own_sub_block_step(x in block(256)) {
        let q = quantize(GgmlType::Q4_K, &x).expect("one block");
        let y = dequantize(GgmlType::Q4_K, &q).expect("one block");
        let d = half::f16::from_bits(u16::from_le_bytes([q[0], q[1]])).to_f32();
        for s in 0..8 {
            let sc = if s < 4 { q[4 + s] & 63 } else { (q[4 + s + 4] & 0x0f) | ((q[4 + s - 4] >> 6) << 4) };
            let half_step = d * sc as f32 / 2.0;
            for e in 32 * s..32 * s + 32 {
                let err = (x[e] - y[e]).abs();
                prop_assert!(err <= half_step * 1.0001 + amax(&x) * 1e-6, "e {e}: {err} > {half_step}");
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// With scales below f16's normal range (`max|x|` 1e-8 … 1e-1) the stored scale is a
    /// subnormal f16 (spacing 2⁻²⁴) and relative bounds no longer hold; the absolute error stays
    /// below the relative bound plus `31·63·2⁻²⁴ < 2⁻¹³` (largest quant times largest 6-bit
    /// sub-scale times one subnormal step of `d`).
    #[test]
    fn tiny_blocks_stay_within_the_f16_subnormal_granularity(x in blocks_in(-8..=-1, 256)) {
        for (ty, rel) in [
            (GgmlType::Q8_0, 0.57 / 127.0),
            (GgmlType::Q8_1, 0.57 / 127.0),
            (GgmlType::Q4_0, 1.01 / 8.0),
            (GgmlType::Q4_K, 0.08),
            (GgmlType::Q5_K, 0.05),
            (GgmlType::Q6_K, 0.017),
        ] {
            let y = roundtrip(ty, &x);
            let m = amax(&x);
            for (a, b) in x.iter().zip(&y) {
                prop_assert!((a - b).abs() <= rel * m + 2f32.powi(-13), "{ty}: {a} -> {b}");
            }
        }
    }
}

/// All-zero input quantizes to blocks that dequantize to exact zeros.
#[test]
fn zeros_roundtrip_to_zeros_in_every_format() {
    for ty in GgmlType::SUPPORTED {
        let x = vec![0.0f32; 512];
        assert!(roundtrip(ty, &x).iter().all(|&v| v == 0.0), "{ty}");
    }
}

/// Lengths that are not whole blocks are refused, not truncated.
#[test]
fn partial_blocks_are_refused() {
    assert!(quantize(GgmlType::Q4_K, &[0.0; 255]).is_err());
    assert!(dequantize(GgmlType::Q6_K, &[0u8; 209]).is_err());
    assert!(dequantize(GgmlType::Q4_1, &[0u8; 20]).is_err());
}
