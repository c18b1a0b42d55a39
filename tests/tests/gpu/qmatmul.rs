//! `qmatmul` GEMV kernels vs `flashtree_reference::qmatmul`.
//!
//! Tolerance: each output is a sum of `in` products; a lane accumulates at most `ceil(in/32)`
//! products with `fma` (one rounding each), then 5 butterfly adds, then (when `split > 1`
//! warps share a row) at most 7 adds of the warp partials: at most `ceil(in/32) + 12`
//! roundings on any path, so `|y − y_ref| ≤ γ_{ceil(in/32)+12} · Σ|W x|` (bf16 weights are
//! exact in f32, so dequantization adds no error).

use flashtree::gpu::qmatmul::{gemv_bf16, gemv_f32};
use flashtree_reference::qmatmul as reference;
use flashtree_tests::gpu::gpu_or_skip;
use flashtree_tests::tolerance::gamma;
use half::bf16;
use proptest::prelude::*;

fn values(seed: u64, n: usize) -> Vec<f32> {
    let mut s = seed | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
        })
        .collect()
}

fn check(y: &[f32], want: &[f64], scale: &[f64], k: usize) -> Result<(), TestCaseError> {
    let tol = gamma(k.div_ceil(32) + 12);
    for (o, ((&g, &w), &s)) in y.iter().zip(want).zip(scale).enumerate() {
        prop_assert!(g.is_finite(), "y[{}] not written", o);
        let err = (g as f64 - w).abs();
        prop_assert!(err <= tol * s, "y[{}] = {} vs {} (err {:e} > bound {:e})", o, g, w, err, tol * s);
    }
    Ok(())
}

fn shapes() -> impl Strategy<Value = (usize, usize)> {
    // out ragged (not a multiple of the rows per block), in both vector-aligned and not; the
    // second arm (few long rows) makes the host pick split = 2, 4 or 8 warps per row.
    prop_oneof![
        (1usize..700, prop_oneof![(1usize..300).prop_map(|c| c * 8), 1usize..3000]),
        (1usize..40, prop_oneof![(512usize..2600).prop_map(|c| c * 8), 4096usize..20000]),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn gemv_bf16_matches_reference((out, inp) in shapes(), seed in any::<u64>()) {
        let Some(gpu) = gpu_or_skip("gemv_bf16_matches_reference") else { return Ok(()) };
        let w: Vec<u16> = values(seed, out * inp).iter().map(|&v| bf16::from_f32(v * 0.5).to_bits()).collect();
        let x = values(seed ^ 99, inp);
        let dw = gpu.upload(&w).unwrap();
        let dx = gpu.upload(&x).unwrap();
        let mut dy = gpu.zeros::<f32>(out).unwrap();
        gpu.fill_bytes(&mut dy, 0xff).unwrap();
        gemv_bf16(gpu, &dw, &dx, &mut dy, out, inp).unwrap();
        let y = gpu.download(&dy).unwrap();
        let wf = reference::bf16_to_f32(&w);
        check(&y, &reference::gemv_bf16(&w, &x), &reference::gemv_abs_f32(&wf, &x), inp)?;
    }

    #[test]
    fn gemv_f32_matches_reference((out, inp) in shapes(), seed in any::<u64>()) {
        let Some(gpu) = gpu_or_skip("gemv_f32_matches_reference") else { return Ok(()) };
        let w = values(seed, out * inp);
        let x = values(seed ^ 5, inp);
        let dw = gpu.upload(&w).unwrap();
        let dx = gpu.upload(&x).unwrap();
        let mut dy = gpu.zeros::<f32>(out).unwrap();
        gpu.fill_bytes(&mut dy, 0xff).unwrap();
        gemv_f32(gpu, &dw, &dx, &mut dy, out, inp).unwrap();
        let y = gpu.download(&dy).unwrap();
        check(&y, &reference::gemv_f32(&w, &x), &reference::gemv_abs_f32(&w, &x), inp)?;
    }
}

/// The 27B shapes used by the benches compute the right thing too (one case each).
#[test]
fn gemv_bf16_matches_reference_at_bench_shapes() {
    let Some(gpu) = gpu_or_skip("gemv_bf16_matches_reference_at_bench_shapes") else { return };
    for (out, inp) in [(28672usize, 4096usize), (17408, 5120), (5120, 17408)] {
        let w: Vec<u16> = values(out as u64, out * inp).iter().map(|&v| bf16::from_f32(v).to_bits()).collect();
        let x = values(inp as u64, inp);
        let dw = gpu.upload(&w).unwrap();
        let dx = gpu.upload(&x).unwrap();
        let mut dy = gpu.zeros::<f32>(out).unwrap();
        gemv_bf16(gpu, &dw, &dx, &mut dy, out, inp).unwrap();
        let y = gpu.download(&dy).unwrap();
        let wf = reference::bf16_to_f32(&w);
        check(&y, &reference::gemv_bf16(&w, &x), &reference::gemv_abs_f32(&wf, &x), inp).unwrap();
    }
}

#[test]
fn gemv_rejects_short_buffers() {
    let Some(gpu) = gpu_or_skip("gemv_rejects_short_buffers") else { return };
    let w = gpu.zeros::<u16>(100).unwrap();
    let x = gpu.zeros::<f32>(10).unwrap();
    let mut y = gpu.zeros::<f32>(11).unwrap();
    let err = gemv_bf16(gpu, &w, &x, &mut y, 11, 10).unwrap_err().to_string();
    assert!(err.contains("gemv_bf16") && err.contains("110"), "{err}");
}
