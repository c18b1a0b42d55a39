//! `norm` kernels vs `flashtree_reference::norm`.
//!
//! Tolerance: the sum of squares has at most `k` roundings on any path (`k = ceil(cols/256) + 13`
//! for `rms_norm_rows`: per-thread fma chain, 5 butterfly adds, 8 warp adds;
//! `k = ceil(cols/32) + 5` for `rms_norm_heads`); all terms are ≥ 0 so its relative error is
//! ≤ γ_k. `sqrt` halves it; the divisions, the `+ eps`, `sqrt` and the two output multiplies add
//! ≤ 6 more roundings. So `|y − y_ref| ≤ (γ_k / 2 + 6u)·|y_ref|`; we check `(γ_k + 8u)·|y_ref|`.
//!
//! `add_rms_norm_rows`: `h + a` is one f32 addition on both sides (so the updated `h` must be
//! bitwise the reference's), and `y` is the RMSNorm of those sums with `rms_norm_rows`'s
//! reduction: the same bound, and with `a = 0` the same bits as `rms_norm_rows`.

use flashtree::gpu::norm::{add_rms_norm, rms_norm_heads, rms_norm_heads_span, rms_norm_rows, rms_norm_rows_span};
use flashtree::gpu::{DevSpan, Gpu};
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

/// Runs `add_rms_norm` on `h`, `a` (rows × cols) and returns `(h after, y)`, `y` NaN-poisoned.
fn run_add(gpu: &Gpu, h: &[f32], a: &[f32], w: &[f32], rows: usize, cols: usize) -> (Vec<f32>, Vec<f32>) {
    let dh = gpu.upload(h).unwrap();
    let da = gpu.upload(a).unwrap();
    let dw = gpu.upload(w).unwrap();
    let mut dy = gpu.zeros::<f32>(rows * cols).unwrap();
    gpu.fill_bytes(&mut dy, 0xff).unwrap();
    let s = |b| DevSpan::of(gpu, b);
    add_rms_norm(gpu, s(&dh), s(&da), s(&dw), s(&dy), rows, cols, 1e-6).unwrap();
    (gpu.download(&dh).unwrap(), gpu.download(&dy).unwrap())
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|f| f.to_bits()).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// `h` is updated to exactly `h + a`, and `y` is within the `rms_norm_rows` bound.
    #[test]
    fn add_rms_norm_matches_reference(rows in 1usize..9, cols in 1usize..9000, scale in 1e-3f32..1e3, seed in any::<u64>()) {
        let Some(gpu) = gpu_or_skip("add_rms_norm_matches_reference") else { return Ok(()) };
        let h = values(seed, rows * cols, scale);
        let a = values(seed ^ 0x77, rows * cols, scale);
        let w = values(seed ^ 0xabcd, cols, 2.0);
        let (h_gpu, y) = run_add(gpu, &h, &a, &w, rows, cols);
        let mut h_ref = h.clone();
        let want = reference::add_rms_norm_rows(&mut h_ref, &a, &w, 1e-6);
        prop_assert_eq!(bits(&h_gpu), bits(&h_ref));
        check_close(&y, &want, cols.div_ceil(256) + 13)?;
    }

    /// With `a = 0` the result is `rms_norm_rows`'s, bit for bit (same reduction order), and `h`
    /// is unchanged (`values` never yields `−0`, which `+ 0` would turn into `+0`).
    #[test]
    fn add_rms_norm_with_zero_a_equals_rms_norm_rows_bitwise(rows in 1usize..9, cols in 1usize..9000, seed in any::<u64>()) {
        let Some(gpu) = gpu_or_skip("add_rms_norm_with_zero_a_equals_rms_norm_rows_bitwise") else { return Ok(()) };
        let h = values(seed, rows * cols, 5.0);
        let w = values(seed ^ 3, cols, 2.0);
        let (h_gpu, y) = run_add(gpu, &h, &vec![0.0; rows * cols], &w, rows, cols);
        let dx = gpu.upload(&h).unwrap();
        let dw = gpu.upload(&w).unwrap();
        let mut dy = gpu.zeros::<f32>(rows * cols).unwrap();
        rms_norm_rows(gpu, &dx, &dw, &mut dy, rows, 1e-6).unwrap();
        prop_assert_eq!(bits(&h_gpu), bits(&h));
        prop_assert_eq!(bits(&y), bits(&gpu.download(&dy).unwrap()));
    }

    /// Batch invariance: a row's `h` and `y` are bitwise the same alone or among other rows.
    #[test]
    fn add_rms_norm_row_result_is_independent_of_the_other_rows(rows in 2usize..33, cols in 1usize..6000, pick in any::<prop::sample::Index>(), seed in any::<u64>()) {
        let Some(gpu) = gpu_or_skip("add_rms_norm_row_result_is_independent_of_the_other_rows") else { return Ok(()) };
        let h = values(seed, rows * cols, 10.0);
        let a = values(seed ^ 9, rows * cols, 10.0);
        let w = values(seed ^ 7, cols, 1.0);
        let r = pick.index(rows);
        let (h_all, y_all) = run_add(gpu, &h, &a, &w, rows, cols);
        let row = r * cols..(r + 1) * cols;
        let (h_one, y_one) = run_add(gpu, &h[row.clone()], &a[row.clone()], &w, 1, cols);
        prop_assert_eq!(bits(&h_all[row.clone()]), bits(&h_one));
        prop_assert_eq!(bits(&y_all[row]), bits(&y_one));
    }
}

/// The span launchers on sub-views (rows `2..2+rows` of larger buffers) give the bits of the
/// slice launchers on exactly those rows, and leave everything outside the view alone.
#[test]
fn span_launchers_on_sub_views_match_the_slice_launchers() {
    let Some(gpu) = gpu_or_skip("span_launchers_on_sub_views_match_the_slice_launchers") else { return };
    let (rows, cols) = (3usize, 256usize);
    let x = values(5, (rows + 4) * cols, 4.0);
    let w = values(6, cols, 1.5);
    let dx = gpu.upload(&x).unwrap();
    let dw = gpu.upload(&w).unwrap();
    let dy = gpu.zeros::<f32>((rows + 4) * cols).unwrap();
    let (xs, ws, ys) = (DevSpan::of(gpu, &dx), DevSpan::of(gpu, &dw), DevSpan::of(gpu, &dy));
    let view = |s: DevSpan<f32>| s.sub(2 * cols, rows * cols, "view").unwrap();
    let inner = x[2 * cols..(2 + rows) * cols].to_vec();
    let dinner = gpu.upload(&inner).unwrap();
    for heads in [false, true] {
        let mut want = gpu.zeros::<f32>(rows * cols).unwrap();
        if heads {
            rms_norm_heads_span(gpu, view(xs), ws, view(ys), rows * cols / 64, 64, 1e-6).unwrap();
            let dw64 = gpu.upload(&w[..64]).unwrap();
            rms_norm_heads(gpu, &dinner, &dw64, &mut want, rows * cols / 64, 1e-6).unwrap();
        } else {
            rms_norm_rows_span(gpu, view(xs), ws, view(ys), rows, cols, 1e-6).unwrap();
            rms_norm_rows(gpu, &dinner, &dw, &mut want, rows, 1e-6).unwrap();
        }
        let got = gpu.download(&dy).unwrap();
        assert_eq!(bits(&got[2 * cols..(2 + rows) * cols]), bits(&gpu.download(&want).unwrap()), "heads = {heads}");
        assert!(got[..2 * cols].iter().chain(&got[(2 + rows) * cols..]).all(|&v| v == 0.0), "wrote outside the view");
    }
}

#[test]
fn add_rms_norm_rejects_overlap_and_short_buffers() {
    let Some(gpu) = gpu_or_skip("add_rms_norm_rejects_overlap_and_short_buffers") else { return };
    let h = gpu.zeros::<f32>(64).unwrap();
    let a = gpu.zeros::<f32>(64).unwrap();
    let w = gpu.zeros::<f32>(32).unwrap();
    let (hs, as_, ws) = (DevSpan::of(gpu, &h), DevSpan::of(gpu, &a), DevSpan::of(gpu, &w));
    let err = |r: Result<(), flashtree::gpu::GpuError>| r.unwrap_err().to_string();
    assert!(err(add_rms_norm(gpu, hs, as_, ws, hs, 2, 32, 1e-6)).contains("overlap"));
    assert!(err(add_rms_norm(gpu, hs, hs.sub(16, 32, "a").unwrap(), ws, as_, 1, 32, 1e-6)).contains("overlap"));
    assert!(
        err(add_rms_norm(gpu, hs, as_.sub(0, 40, "a").unwrap(), ws, as_, 2, 32, 1e-6)).contains("add_rms_norm_rows")
    );
    assert!(err(add_rms_norm(gpu, hs, as_, ws, as_, 3, 32, 1e-6)).contains("h (3 rows × 32 cols) needs 96"));
}
