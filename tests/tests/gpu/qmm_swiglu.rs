//! Fused gate/up SwiGLU `qmm_*_swiglu` (`y[c, f] = silu(gate_f · x_c) · (up_f · x_c)`) vs the f64
//! reference, and batch invariance, for every weight type.
//!
//! Error bound per output, from the bounds `δg`, `δu` of the two products (`qmm::expected`, the
//! same arithmetic as the plain kernels) and the f32 epilogue (`device::math::silu`, relative
//! error ≤ `|g|·2^-23 + 2^-21`, then one product, 2^-24):
//!
//! `|y − silu(g)·u| ≤ S·δg·(|u| + δu) + |silu(g)|·δu + ((|g| + δg)·2^-23 + 2^-20)·(|silu(g)| + S·δg)·(|u| + δu)`
//!
//! with `g`, `u` the reference products and `S` = [`SILU_SLOPE_MAX`] (how far an error in g
//! moves silu).

use flashtree::gpu::qmatmul::{qmm_swiglu_rows, QWeight, QmmWorkspace};
use flashtree::gpu::{DevSpan, Gpu};
use flashtree_reference::qmatmul::{swiglu, SILU_SLOPE_MAX};
use flashtree_reference::quant::GgmlType;
use flashtree_tests::gpu::gpu_or_skip;
use proptest::prelude::*;

use super::qmm::{activations, case, expected, qmm_block, Case, TYPES};

/// Gate and up `[ff, in]` of type `ty` (independent random weights).
pub(crate) fn gate_up(ty: GgmlType, ff: usize, blocks: usize, seed: u64) -> (Case, Case) {
    (case(ty, ff, blocks, seed), case(ty, ff, blocks, seed ^ 0x5151))
}

fn run(gpu: &Gpu, gate: &Case, up: &Case, x: &[f32], n: usize) -> Vec<f32> {
    let (ff, inp) = (gate.out, gate.inp);
    let w = QWeight::upload_gate_up(gpu, gate.ty, &gate.raw, &up.raw, ff, inp).unwrap();
    let dx = gpu.upload(x).unwrap();
    let mut dy = gpu.zeros::<f32>(n * ff).unwrap();
    gpu.fill_bytes(&mut dy, 0xff).unwrap();
    let mut ws = QmmWorkspace::new(gpu, inp, qmm_swiglu_rows(ff)).unwrap();
    w.prepare_x(gpu, DevSpan::of(gpu, &dx), n, &mut ws).unwrap();
    w.swiglu(gpu, n, DevSpan::of(gpu, &dy), &mut ws).unwrap();
    gpu.download(&dy).unwrap()
}

fn check(gate: &Case, up: &Case, x: &[f32], n: usize, y: &[f32]) -> Result<(), TestCaseError> {
    check_widened(gate, up, x, n, y, &|_| 0.0, &|_| true)
}

/// [`check`] of the features `f` with `pick(f)`, each product's bound `δg`, `δu` of column `c`
/// widened by `widen(c)` (e.g. the fixed-point quantum of an accumulated product).
pub(crate) fn check_widened(
    gate: &Case,
    up: &Case,
    x: &[f32],
    n: usize,
    y: &[f32],
    widen: &dyn Fn(usize) -> f64,
    pick: &dyn Fn(usize) -> bool,
) -> Result<(), TestCaseError> {
    let (eg, eu) = (expected(gate, x, n), expected(up, x, n));
    for (i, (&(g, dg), &(u, du))) in eg.iter().zip(&eu).enumerate() {
        if !pick(i % gate.out) {
            continue;
        }
        let (dg, du) = (dg + widen(i / gate.out), du + widen(i / gate.out));
        let silu_g = swiglu(g, 1.0);
        let (want, silu) = (silu_g * u, silu_g.abs());
        let (s, ua) = (SILU_SLOPE_MAX, u.abs() + du);
        let eval = ((g.abs() + dg) * 2f64.powi(-23) + 2f64.powi(-20)) * (silu + s * dg) * ua;
        let tol = s * dg * ua + silu * du + eval + 1e-30;
        let got = y[i] as f64;
        prop_assert!(
            (got - want).abs() <= tol,
            "{:?} ff={} in={} n={} y[{}, {}] = {} vs {} (g {g:e} ± {dg:e}, u {u:e} ± {du:e}; err {:e} > {:e})",
            gate.ty,
            gate.out,
            gate.inp,
            n,
            i / gate.out,
            i % gate.out,
            got,
            want,
            (got - want).abs(),
            tol
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Ragged `ff` (padding features inside the last 8-row group and the last 128-row block),
    /// split and unsplit K (`qmm_ksplit` splits when K has ≥ 4 blocks), every n.
    #[test]
    fn qmm_swiglu_matches_reference_for_every_type(
        ty in prop::sample::select(TYPES.to_vec()),
        ff in 1usize..200,
        blocks in 1usize..16,
        n in 1usize..=64,
        seed in any::<u64>(),
    ) {
        let Some(gpu) = gpu_or_skip("qmm_swiglu_matches_reference_for_every_type") else { return Ok(()) };
        let blocks = if qmm_block(ty) == 32 { blocks * 4 } else { blocks };
        let (gate, up) = gate_up(ty, ff, blocks, seed);
        let x = activations(seed, n, gate.inp);
        let y = run(gpu, &gate, &up, &x, n);
        check(&gate, &up, &x, n, &y)?;
    }

    /// Batch invariance of the fused kernels: a column's bits equal those of the column alone
    /// and those of a launch with other columns and another n.
    #[test]
    fn qmm_swiglu_column_bits_do_not_depend_on_other_columns_or_n(
        ty in prop::sample::select(TYPES.to_vec()),
        ff in 1usize..200,
        blocks in 1usize..12,
        n in 2usize..=64,
        pick in any::<prop::sample::Index>(),
        seed in any::<u64>(),
    ) {
        let Some(gpu) = gpu_or_skip("qmm_swiglu_column_bits_do_not_depend_on_other_columns_or_n") else { return Ok(()) };
        let blocks = if qmm_block(ty) == 32 { blocks * 4 } else { blocks };
        let (gate, up) = gate_up(ty, ff, blocks, seed);
        let x = activations(seed, n, gate.inp);
        let all = run(gpu, &gate, &up, &x, n);
        let j = pick.index(n);
        let col = |v: &[f32], j: usize| v[j * ff..(j + 1) * ff].iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        let alone = run(gpu, &gate, &up, &x[j * gate.inp..(j + 1) * gate.inp], 1);
        prop_assert_eq!(col(&all, j), col(&alone, 0));
        let mut x2 = activations(seed ^ 77, j + 1, gate.inp);
        x2[j * gate.inp..(j + 1) * gate.inp].copy_from_slice(&x[j * gate.inp..(j + 1) * gate.inp]);
        let other = run(gpu, &gate, &up, &x2, j + 1);
        prop_assert_eq!(col(&all, j), col(&other, j));
    }
}

/// A 27B-like K (in = 5120, split K) with 1000 features at n = 22, every type.
#[test]
fn qmm_swiglu_matches_reference_at_a_27b_k() {
    let Some(gpu) = gpu_or_skip("qmm_swiglu_matches_reference_at_a_27b_k") else { return };
    for ty in TYPES {
        let (gate, up) = gate_up(ty, 1000, 5120 / qmm_block(ty), 3);
        let x = activations(9, 22, gate.inp);
        let y = run(gpu, &gate, &up, &x, 22);
        check(&gate, &up, &x, 22, &y).unwrap();
    }
}

/// Gate/up upload refuses a bad feature count or byte count (naming it); the fused product
/// checks the workspace's rows (the interleaved `16·⌈ff/8⌉`) and the output's length `n · ff`.
#[test]
fn qmm_swiglu_rejects_bad_shapes_naming_them() {
    let Some(gpu) = gpu_or_skip("qmm_swiglu_rejects_bad_shapes_naming_them") else { return };
    let e = |r: Result<(), flashtree::gpu::GpuError>| r.unwrap_err().to_string();
    let x = gpu.zeros::<f32>(512).unwrap();
    let y = gpu.zeros::<f32>(64).unwrap();
    let (xs, ys) = (DevSpan::of(gpu, &x), DevSpan::of(gpu, &y));
    // 20 features of Q4_K [20, 512]: 288 bytes per row; 48 interleaved rows.
    let raw = vec![0u8; 20 * 288];
    let up = |ff: usize, gate: &[u8]| QWeight::upload_gate_up(gpu, GgmlType::Q4_K, gate, &raw, ff, 512).map(|_| ());
    assert!(e(up(0, &[])).contains("ff = 0"));
    let got = e(up(20, &raw[1..]));
    assert!(got.contains("qmm_swiglu") && got.contains("gate Q4_K [20, 512]") && got.contains("not 5760"), "{got}");
    let w = QWeight::upload_gate_up(gpu, GgmlType::Q4_K, &raw, &raw, 20, 512).unwrap();
    assert_eq!((w.out(), w.ff()), (48, Some(20)));
    let mut small = QmmWorkspace::new(gpu, 512, 40).unwrap();
    w.prepare_x(gpu, xs, 1, &mut small).unwrap();
    let got = e(w.swiglu(gpu, 1, ys, &mut small));
    assert!(got.contains("qmm_swiglu") && got.contains("[48, 512]") && got.contains("workspace"), "{got}");
    let mut ws = QmmWorkspace::new(gpu, 512, 48).unwrap();
    w.prepare_x(gpu, xs, 1, &mut ws).unwrap();
    let y_short = gpu.zeros::<f32>(19).unwrap();
    let got = e(w.swiglu(gpu, 1, DevSpan::of(gpu, &y_short), &mut ws));
    assert!(got.contains("y 20 values (has 19)"), "{got}");
    w.swiglu(gpu, 1, ys, &mut ws).unwrap();
}
