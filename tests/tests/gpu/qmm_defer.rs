//! Deferred K-split reductions (`QWeight::matmul_deferred` + `QmmWorkspace::prepare_norm_deferred`):
//! a Q4_K/Q6_K product whose splits leave their raw sums as planes, added by the next
//! `qmm_prep_norm` as the product's own epilogue would. Against `matmul` into a buffer +
//! `prepare_norm`: the residual `h + a` and the product the prepared activations feed must be
//! **bitwise** equal — on random shapes and token counts, and on the 27B's output and down
//! projection shapes (a cluster plan and a global-reduction plan on nvidia-h200).

use flashtree::gpu::qmatmul::{QWeight, QmmWorkspace};
use flashtree::gpu::{DevSpan, Gpu};
use flashtree_reference::quant::GgmlType;
use flashtree_tests::gpu::gpu_or_skip;
use proptest::prelude::*;

use super::qmm::{activations, case};

/// `(h_out, z)` bits after `producer` over `x` (`n` tokens) as the residual addend of a norm
/// site (weights `w`, residual `h`) whose prepared output feeds `consumer`: through `y` and
/// `prepare_norm`, or deferred.
fn site(
    gpu: &Gpu,
    producer: &QWeight,
    consumer: &QWeight,
    x: &[f32],
    h: &[f32],
    w: &[f32],
    n: usize,
    deferred: bool,
) -> (Vec<u32>, Vec<u32>) {
    let (k_in, d, out2) = (producer.inp(), producer.out(), consumer.out());
    let mut ws = QmmWorkspace::new(gpu, k_in.max(d), d.max(out2)).unwrap();
    let sp = |b| DevSpan::of(gpu, b);
    let (dx, dh, dw) = (gpu.upload(x).unwrap(), gpu.upload(h).unwrap(), gpu.upload(w).unwrap());
    let mut h_out = gpu.zeros::<f32>(n * d).unwrap();
    gpu.fill_bytes(&mut h_out, 0xff).unwrap();
    let mut z = gpu.zeros::<f32>(n * out2).unwrap();
    gpu.fill_bytes(&mut z, 0xff).unwrap();
    ws.prepare(gpu, sp(&dx), n, k_in, false).unwrap();
    if deferred {
        assert!(
            producer.defers(n),
            "{:?} [{d}, {k_in}] plan {:?}: n = {n} does not defer",
            producer.ty(),
            producer.plan()
        );
        let a = producer.matmul_deferred(gpu, n, &mut ws).unwrap();
        ws.prepare_norm_deferred(gpu, sp(&dh), a, sp(&h_out), sp(&dw), n, d, 1e-6, false).unwrap();
    } else {
        let y = gpu.zeros::<f32>(n * d).unwrap();
        let ys = DevSpan::of(gpu, &y);
        producer.matmul(gpu, n, ys, &mut ws).unwrap();
        ws.prepare_norm(gpu, sp(&dh), Some((ys, sp(&h_out))), sp(&dw), n, d, 1e-6, false).unwrap();
    }
    consumer.matmul(gpu, n, sp(&z), &mut ws).unwrap();
    let bits = |v: Vec<f32>| v.into_iter().map(f32::to_bits).collect::<Vec<_>>();
    (bits(gpu.download(&h_out).unwrap()), bits(gpu.download(&z).unwrap()))
}

fn check(gpu: &Gpu, ty: GgmlType, d: usize, k_blocks: usize, n: usize, seed: u64) -> Result<(), TestCaseError> {
    let p = case(ty, d, k_blocks, seed);
    let c = case(GgmlType::Q8_0, 96, d.div_ceil(32), seed ^ 7);
    if c.inp != d {
        return Ok(()); // the consumer needs K = d (a multiple of 32)
    }
    let producer = QWeight::upload(gpu, ty, &p.raw, d, p.inp).unwrap();
    let consumer = QWeight::upload(gpu, c.ty, &c.raw, c.out, c.inp).unwrap();
    let x = activations(seed ^ 1, n, p.inp);
    let h = activations(seed ^ 2, n, d);
    let w: Vec<f32> = activations(seed ^ 3, 1, d).iter().map(|v| 1.0 + v).collect();
    let (h1, z1) = site(gpu, &producer, &consumer, &x, &h, &w, n, false);
    let (h2, z2) = site(gpu, &producer, &consumer, &x, &h, &w, n, true);
    let what = format!("{ty:?} [{d}, {}] plan {:?} n = {n}", p.inp, producer.plan());
    prop_assert!(h1.iter().all(|&b| b != u32::MAX), "{}: h_out not written", what);
    if let Some(i) = (0..h1.len()).find(|&i| h1[i] != h2[i]) {
        prop_assert!(
            false,
            "{}: h_out[{}] {:e} (y) vs {:e} (deferred)",
            what,
            i,
            f32::from_bits(h1[i]),
            f32::from_bits(h2[i])
        );
    }
    if let Some(i) = (0..z1.len()).find(|&i| z1[i] != z2[i]) {
        prop_assert!(
            false,
            "{}: next product [{}] {:e} vs {:e}",
            what,
            i,
            f32::from_bits(z1[i]),
            f32::from_bits(z2[i])
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// Random widths (a partial last row block included), K and n ≤ 32: the plan is the
    /// device's (uniform at these sizes; one split or several).
    #[test]
    fn deferred_reduction_equals_the_products_own_bitwise(
        ty in prop::sample::select(vec![GgmlType::Q4_K, GgmlType::Q6_K]),
        d32 in 1usize..48,
        k_blocks in 1usize..24,
        n in 1usize..=32,
        seed in any::<u64>(),
    ) {
        let Some(gpu) = gpu_or_skip("deferred_reduction_equals_the_products_own_bitwise") else { return Ok(()) };
        check(gpu, ty, 32 * d32, k_blocks, n, seed)?;
    }
}

/// The 27B's deferred shapes: Q4_K 6144 → 5120 and 17408 → 5120 (clusters of 5 on
/// nvidia-h200), Q6_K 17408 → 5120 (6 global splits), at n = 1, 22 and 32.
#[test]
fn deferred_reduction_at_the_27b_shapes() {
    let Some(gpu) = gpu_or_skip("deferred_reduction_at_the_27b_shapes") else { return };
    for (ty, k_blocks) in [(GgmlType::Q4_K, 24), (GgmlType::Q4_K, 68), (GgmlType::Q6_K, 68)] {
        for n in [1, 22, 32] {
            check(gpu, ty, 5120, k_blocks, n, 40 + n as u64).unwrap();
        }
    }
}
