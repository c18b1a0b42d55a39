//! `norm` kernels vs `flashtree_reference::norm`.
//!
//! Tolerance: the sum of squares has at most `k` roundings on any path (`k = ceil(cols/256) + 13`
//! for `rms_norm_rows`: per-thread fma chain, 5 butterfly adds, 8 warp adds;
//! `k = ceil(cols/32) + 5` for `rms_norm_heads`); all terms are ≥ 0 so its relative error is
//! ≤ γ_k. `sqrt` halves it; the divisions, the `+ eps`, `sqrt` and the two output multiplies add
//! ≤ 6 more roundings. So `|y − y_ref| ≤ (γ_k / 2 + 6u)·|y_ref|`; we check `(γ_k + 8u)·|y_ref|`.

use flashtree::gpu::norm::{rms_norm_heads, rms_norm_rows};
use flashtree_reference::norm as reference;
use flashtree_tests::gpu::gpu_or_skip;
use flashtree_tests::tolerance::{gamma, U32};
use proptest::prelude::*;

fn values(seed: u64, n: usize, scale: f32) -> Vec<f32> {
    let mut s = seed | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

fn check_close(got: &[f32], want: &[f64], k: usize) -> Result<(), TestCaseError> {
    let tol = gamma(k) + 8.0 * U32;
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        prop_assert!(g.is_finite(), "y[{}] = {} not written or not finite", i, g);
        let err = (g as f64 - w).abs();
        prop_assert!(err <= tol * w.abs() + 1e-37, "y[{}] = {} vs {} (err {:e} > {:e})", i, g, w, err, tol * w.abs());
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn rms_norm_rows_matches_reference(rows in 1usize..9, cols in 1usize..9000, scale in 1e-3f32..1e3, seed in any::<u64>()) {
        let Some(gpu) = gpu_or_skip("rms_norm_rows_matches_reference") else { return Ok(()) };
        let x = values(seed, rows * cols, scale);
        let w = values(seed ^ 0xabcd, cols, 2.0);
        let dx = gpu.upload(&x).unwrap();
        let dw = gpu.upload(&w).unwrap();
        let mut dy = gpu.zeros::<f32>(rows * cols).unwrap();
        gpu.fill_bytes(&mut dy, 0xff).unwrap(); // NaN poison
        rms_norm_rows(gpu, &dx, &dw, &mut dy, rows, 1e-6).unwrap();
        let y = gpu.download(&dy).unwrap();
        check_close(&y, &reference::rms_norm_rows(&x, &w, 1e-6), cols.div_ceil(256) + 13)?;
    }

    #[test]
    fn rms_norm_heads_matches_reference(vectors in 1usize..200, head_dim in prop::sample::select(vec![16usize, 64, 100, 128, 256, 257]), seed in any::<u64>()) {
        let Some(gpu) = gpu_or_skip("rms_norm_heads_matches_reference") else { return Ok(()) };
        let x = values(seed, vectors * head_dim, 3.0);
        let w = values(seed ^ 0x1234, head_dim, 1.5);
        let dx = gpu.upload(&x).unwrap();
        let dw = gpu.upload(&w).unwrap();
        let mut dy = gpu.zeros::<f32>(vectors * head_dim).unwrap();
        gpu.fill_bytes(&mut dy, 0xff).unwrap();
        rms_norm_heads(gpu, &dx, &dw, &mut dy, vectors, 1e-6).unwrap();
        let y = gpu.download(&dy).unwrap();
        check_close(&y, &reference::rms_norm_heads(&x, &w, 1e-6), head_dim.div_ceil(32) + 5)?;
    }

    /// Batch invariance: a row's output is bitwise the same alone or among other rows.
    #[test]
    fn rms_norm_row_result_is_independent_of_the_other_rows(rows in 2usize..33, cols in 1usize..6000, pick in any::<prop::sample::Index>(), seed in any::<u64>()) {
        let Some(gpu) = gpu_or_skip("rms_norm_row_result_is_independent_of_the_other_rows") else { return Ok(()) };
        let x = values(seed, rows * cols, 10.0);
        let w = values(seed ^ 7, cols, 1.0);
        let r = pick.index(rows);
        let dw = gpu.upload(&w).unwrap();
        let dx = gpu.upload(&x).unwrap();
        let mut dy = gpu.zeros::<f32>(rows * cols).unwrap();
        rms_norm_rows(gpu, &dx, &dw, &mut dy, rows, 1e-6).unwrap();
        let all = gpu.download(&dy).unwrap();
        let one_x = gpu.upload(&x[r * cols..(r + 1) * cols]).unwrap();
        let mut one_y = gpu.zeros::<f32>(cols).unwrap();
        rms_norm_rows(gpu, &one_x, &dw, &mut one_y, 1, 1e-6).unwrap();
        let one = gpu.download(&one_y).unwrap();
        let a: Vec<u32> = all[r * cols..(r + 1) * cols].iter().map(|v| v.to_bits()).collect();
        let b: Vec<u32> = one.iter().map(|v| v.to_bits()).collect();
        prop_assert_eq!(a, b);
    }
}

#[test]
fn rms_norm_rejects_mismatched_shapes() {
    let Some(gpu) = gpu_or_skip("rms_norm_rejects_mismatched_shapes") else { return };
    let x = gpu.zeros::<f32>(10).unwrap();
    let w = gpu.zeros::<f32>(4).unwrap();
    let mut y = gpu.zeros::<f32>(10).unwrap();
    let err = rms_norm_rows(gpu, &x, &w, &mut y, 3, 1e-6).unwrap_err().to_string();
    assert!(err.contains("rms_norm_rows") && err.contains("12"), "{err}");
}
