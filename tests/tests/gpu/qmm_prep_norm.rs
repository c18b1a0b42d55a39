//! `qmm_prep_norm` (residual add + RMSNorm + matmul prep in one launch) against the two launches
//! it replaces, `add_rms_norm` (or `rms_norm_rows_span`) then `QmmWorkspace::prepare`: the stored
//! residual `h + a` and the product that follows must be **bitwise** equal (the fused kernel
//! computes the same values in the same order), for every weight type, with and without the
//! add, and for n = 1..=64 columns (two activation planes past 32).

use flashtree::gpu::norm::{add_rms_norm, rms_norm_rows_span};
use flashtree::gpu::qmatmul::{QWeight, QmmWorkspace};
use flashtree::gpu::DevSpan;
use flashtree_tests::gpu::gpu_or_skip;
use proptest::prelude::*;

use super::qmm::{activations, case, TYPES};

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn fused_norm_prep_equals_norm_then_prep_bitwise(
        ty in prop::sample::select(TYPES.to_vec()),
        n in 1usize..65,
        blocks in 1usize..24,
        out in 1usize..300,
        add in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let Some(gpu) = gpu_or_skip("fused_norm_prep_equals_norm_then_prep_bitwise") else { return Ok(()) };
        let c = case(ty, out, blocks, seed);
        let inp = c.inp;
        let dw = QWeight::upload(gpu, ty, &c.raw, out, inp).unwrap();
        let h = activations(seed ^ 1, n, inp);
        let a = activations(seed ^ 2, n, inp);
        let w: Vec<f32> = activations(seed ^ 3, 1, inp).iter().map(|v| 1.0 + v).collect();
        let pairs = dw.needs_pairs();
        let mut ws = QmmWorkspace::new(gpu, inp, out).unwrap();
        let (dh, da, dwn) = (gpu.upload(&h).unwrap(), gpu.upload(&a).unwrap(), gpu.upload(&w).unwrap());
        let sp = |b| DevSpan::of(gpu, b);
        // Separate: norm into x, prep x, product.
        let dh_sep = gpu.upload(&h).unwrap();
        let dx = gpu.zeros::<f32>(n * inp).unwrap();
        let mut y_sep = gpu.zeros::<f32>(n * out).unwrap();
        if add {
            add_rms_norm(gpu, sp(&dh_sep), sp(&da), sp(&dwn), sp(&dx), n, inp, 1e-6).unwrap();
        } else {
            rms_norm_rows_span(gpu, sp(&dh_sep), sp(&dwn), sp(&dx), n, inp, 1e-6).unwrap();
        }
        ws.prepare(gpu, sp(&dx), n, inp, pairs).unwrap();
        dw.matmul(gpu, n, sp(&y_sep), &mut ws).unwrap();
        // Fused.
        let mut dh_out = gpu.zeros::<f32>(n * inp).unwrap();
        gpu.fill_bytes(&mut dh_out, 0xff).unwrap();
        let mut y_fused = gpu.zeros::<f32>(n * out).unwrap();
        gpu.fill_bytes(&mut y_fused, 0xff).unwrap();
        let addp = if add { Some((sp(&da), sp(&dh_out))) } else { None };
        ws.prepare_norm(gpu, sp(&dh), addp, sp(&dwn), n, inp, 1e-6, pairs).unwrap();
        dw.matmul(gpu, n, sp(&y_fused), &mut ws).unwrap();
        let (ys, yf) = (gpu.download(&y_sep).unwrap(), gpu.download(&y_fused).unwrap());
        let _ = &mut y_sep;
        for (i, (s, f)) in ys.iter().zip(&yf).enumerate() {
            prop_assert!(s.to_bits() == f.to_bits(), "{:?} n={} in={} out={} add={}: y[{}] {} (separate) vs {} (fused)", ty, n, inp, out, add, i, s, f);
        }
        if add {
            let (hs, hf) = (gpu.download(&dh_sep).unwrap(), gpu.download(&dh_out).unwrap());
            prop_assert!(hs.iter().zip(&hf).all(|(s, f)| s.to_bits() == f.to_bits()), "h + a differs");
        }
    }
}
