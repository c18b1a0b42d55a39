//! Accumulated products (`QmmWorkspace::matmul_accum` + `prepare_norm_accum`): a product whose
//! blocks add their raw split sums to i64 fixed-point accumulators, converted by the next norm
//! site's kernel. Checked: the sum against the f64 reference within the matmul's bound plus the
//! fixed point's (≤ 16 splits × 2^-25 in x̂ units: `16 · 2^-39 · max|x|`); the norm + prep part
//! bitwise equal to `qmm_prep_norm` on the same residual; a column's bits independent of `n`;
//! the accumulator pairs clean after an odd number of products and after an abandoned one; and
//! on the 27B's output/down shapes, the sums against the plain product within the two paths'
//! split-sum rounding.

use flashtree::gpu::qmatmul::{qmm_swiglu_rows, swiglu_tail_rows, AccumPlan, QWeight, QmmWorkspace};
use flashtree::gpu::{DevSpan, Gpu};
use flashtree_reference::quant::GgmlType;
use flashtree_tests::gpu::gpu_or_skip;
use proptest::prelude::*;

use super::qmm::{activations, case, expected, qmm_block, Case};
use super::qmm_swiglu::{check_widened, gate_up};

/// The formats with accumulating kernels (`kernel_abi::qmm_accum`).
const ACCUM_TYPES: [GgmlType; 3] = [GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q8_0];

/// The fixed point's part of the error bound for a column whose largest |x| is `xmax`.
fn fixed_point_bound(xmax: f64) -> f64 {
    16.0 * 2f64.powi(-39) * xmax
}

fn bits(v: Vec<f32>) -> Vec<u32> {
    v.into_iter().map(f32::to_bits).collect()
}

/// One norm site fed by an accumulated product of `p` over `x` (`n` tokens): returns
/// `h_out = h + W·x` and the product `z` of `consumer` over the prepared activations.
#[allow(clippy::too_many_arguments)]
fn accumulated_site(
    gpu: &Gpu,
    ws: &mut QmmWorkspace,
    p: &QWeight,
    consumer: &QWeight,
    x: &[f32],
    h: &[f32],
    w: &[f32],
    n: usize,
) -> (Vec<f32>, Vec<u32>) {
    let d = p.out();
    let sp = |b| DevSpan::of(gpu, b);
    let (dx, dh, dw) = (gpu.upload(x).unwrap(), gpu.upload(h).unwrap(), gpu.upload(w).unwrap());
    let mut h_out = gpu.zeros::<f32>(n * d).unwrap();
    gpu.fill_bytes(&mut h_out, 0xff).unwrap();
    let mut z = gpu.zeros::<f32>(n * consumer.out()).unwrap();
    gpu.fill_bytes(&mut z, 0xff).unwrap();
    ws.prepare(gpu, sp(&dx), n, p.inp(), false).unwrap();
    assert!(ws.accumulates(p), "{:?} [{d}, {}] does not accumulate", p.ty(), p.inp());
    let a = ws.matmul_accum(gpu, p, n).unwrap();
    ws.prepare_norm_accum(gpu, sp(&dh), a, sp(&h_out), sp(&dw), n, d, 1e-6, false).unwrap();
    consumer.matmul(gpu, n, sp(&z), ws).unwrap();
    (gpu.download(&h_out).unwrap(), bits(gpu.download(&z).unwrap()))
}

/// The plain path's site on a given residual `h` and addend `a`: `(h + a, z)`.
#[allow(clippy::too_many_arguments)]
fn plain_site(
    gpu: &Gpu,
    ws: &mut QmmWorkspace,
    consumer: &QWeight,
    h: &[f32],
    a: &[f32],
    w: &[f32],
    n: usize,
    d: usize,
) -> (Vec<f32>, Vec<u32>) {
    let sp = |b| DevSpan::of(gpu, b);
    let (dh, da, dw) = (gpu.upload(h).unwrap(), gpu.upload(a).unwrap(), gpu.upload(w).unwrap());
    let h_out = gpu.zeros::<f32>(n * d).unwrap();
    let mut z = gpu.zeros::<f32>(n * consumer.out()).unwrap();
    gpu.fill_bytes(&mut z, 0xff).unwrap();
    ws.prepare_norm(gpu, sp(&dh), Some((sp(&da), sp(&h_out))), sp(&dw), n, d, 1e-6, false).unwrap();
    consumer.matmul(gpu, n, sp(&z), ws).unwrap();
    (gpu.download(&h_out).unwrap(), bits(gpu.download(&z).unwrap()))
}

struct Setup {
    producer: QWeight,
    consumer: QWeight,
    c: Case,
    ws: QmmWorkspace,
    w: Vec<f32>,
}

fn setup(gpu: &Gpu, ty: GgmlType, d: usize, k_blocks: usize, seed: u64) -> Setup {
    let c = case(ty, d, k_blocks, seed);
    let cc = case(GgmlType::Q8_0, 96, d / 32, seed ^ 7);
    let producer = QWeight::upload(gpu, ty, &c.raw, d, c.inp).unwrap();
    let consumer = QWeight::upload(gpu, cc.ty, &cc.raw, cc.out, cc.inp).unwrap();
    let mut ws = QmmWorkspace::new(gpu, c.inp.max(d), d.max(96)).unwrap();
    ws.enable_accumulation(gpu, d).unwrap();
    let w: Vec<f32> = activations(seed ^ 3, 1, d).iter().map(|v| 1.0 + v).collect();
    Setup { producer, consumer, c, ws, w }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// With `h = 0` the stored residual is the converted sum itself: within the reference bound;
    /// and the prepared activations are bitwise `qmm_prep_norm`'s on that residual.
    #[test]
    fn accumulated_product_matches_reference_and_feeds_the_norm_bitwise(
        ty in prop::sample::select(ACCUM_TYPES.to_vec()),
        d32 in 1usize..48,
        k_blocks in 1usize..24,
        n in 1usize..=64,
        one_wave in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let Some(gpu) = gpu_or_skip("accumulated_product_matches_reference_and_feeds_the_norm_bitwise") else { return Ok(()) };
        let d = 32 * d32;
        let mut s = setup(gpu, ty, d, k_blocks, seed);
        s.ws.set_accum_plan(if one_wave { AccumPlan::OneWave } else { AccumPlan::Matrix });
        let x = activations(seed ^ 1, n, s.c.inp);
        let zero = vec![0.0f32; n * d];
        s.ws.begin_accumulation(gpu).unwrap();
        let (a, z_acc) = accumulated_site(gpu, &mut s.ws, &s.producer, &s.consumer, &x, &zero, &s.w, n);
        s.ws.end_accumulation(gpu).unwrap();
        let what = format!("{ty:?} [{d}, {}] plan {:?} n = {n}", s.c.inp, s.ws.accum_split(gpu, &s.producer).unwrap());
        for (i, &(want, tol)) in expected(&s.c, &x, n).iter().enumerate() {
            let col = i / d;
            let xmax = x[col * s.c.inp..(col + 1) * s.c.inp].iter().fold(0f64, |m, &v| m.max((v as f64).abs()));
            let tol = tol + fixed_point_bound(xmax);
            let got = a[i] as f64;
            prop_assert!((got - want).abs() <= tol, "{}: y[{}, {}] = {} vs {} (err {:e} > {:e})", what, col, i % d, got, want, (got - want).abs(), tol);
        }
        let (h2, z_plain) = plain_site(gpu, &mut s.ws, &s.consumer, &zero, &a, &s.w, n, d);
        prop_assert!(bits(h2) == bits(a), "{}: 0 + a differs", what);
        if let Some(i) = (0..z_acc.len()).find(|&i| z_acc[i] != z_plain[i]) {
            prop_assert!(false, "{}: next product [{}] {:e} (accumulated) vs {:e} (plain norm)", what, i, f32::from_bits(z_acc[i]), f32::from_bits(z_plain[i]));
        }
    }
}

/// Batch invariance: with a random residual, every column of a 40-token product (two planes)
/// has the bits of the same column computed alone.
#[test]
fn accumulated_columns_do_not_depend_on_n() {
    let Some(gpu) = gpu_or_skip("accumulated_columns_do_not_depend_on_n") else { return };
    for (i, ty) in ACCUM_TYPES.into_iter().enumerate() {
        let (d, n) = (640, 40);
        let mut s = setup(gpu, ty, d, 12, 90 + i as u64);
        let x = activations(91, n, s.c.inp);
        let h = activations(92, n, d);
        s.ws.begin_accumulation(gpu).unwrap();
        let (all, z_all) = accumulated_site(gpu, &mut s.ws, &s.producer, &s.consumer, &x, &h, &s.w, n);
        s.ws.end_accumulation(gpu).unwrap();
        let out2 = s.consumer.out();
        for col in [0, 7, 21, 31, 32, 39] {
            let xc = &x[col * s.c.inp..(col + 1) * s.c.inp];
            let hc = &h[col * d..(col + 1) * d];
            s.ws.begin_accumulation(gpu).unwrap();
            let (one, z_one) = accumulated_site(gpu, &mut s.ws, &s.producer, &s.consumer, xc, hc, &s.w, 1);
            s.ws.end_accumulation(gpu).unwrap();
            assert_eq!(bits(one), bits(all[col * d..(col + 1) * d].to_vec()), "{ty:?}: column {col} of {n}");
            assert_eq!(z_one, z_all[col * out2..(col + 1) * out2].to_vec(), "{ty:?}: next product, column {col}");
        }
    }
}

/// The accumulator pairs' invariant: after three products (an odd count, `end_accumulation`
/// zeroes pair 0) and after a product nobody consumed (`begin_accumulation` zeroes it), the next
/// product's result is the one a fresh workspace gives.
#[test]
fn accumulators_are_clean_after_odd_and_abandoned_forwards() {
    let Some(gpu) = gpu_or_skip("accumulators_are_clean_after_odd_and_abandoned_forwards") else { return };
    let (d, n) = (512, 22);
    let mut fresh = setup(gpu, GgmlType::Q4_K, d, 16, 5);
    let x = activations(6, n, fresh.c.inp);
    let h = activations(7, n, d);
    fresh.ws.begin_accumulation(gpu).unwrap();
    let want = accumulated_site(gpu, &mut fresh.ws, &fresh.producer, &fresh.consumer, &x, &h, &fresh.w, n);
    fresh.ws.end_accumulation(gpu).unwrap();
    let mut s = setup(gpu, GgmlType::Q4_K, d, 16, 5);
    for round in 0..3 {
        s.ws.begin_accumulation(gpu).unwrap();
        for k in 0..3 {
            let got = accumulated_site(gpu, &mut s.ws, &s.producer, &s.consumer, &x, &h, &s.w, n);
            assert_eq!(bits(got.0), bits(want.0.clone()), "round {round}, product {k}: h_out");
            assert_eq!(got.1, want.1, "round {round}, product {k}: next product");
        }
        s.ws.end_accumulation(gpu).unwrap();
    }
    // Abandoned: a product never consumed, then a new forward.
    s.ws.begin_accumulation(gpu).unwrap();
    let dx = gpu.upload(&x).unwrap();
    s.ws.prepare(gpu, DevSpan::of(gpu, &dx), n, s.c.inp, false).unwrap();
    let abandoned = s.ws.matmul_accum(gpu, &s.producer, n).unwrap();
    assert!(s.ws.matmul_accum(gpu, &s.producer, n).is_err(), "a second product before the first was consumed");
    drop(abandoned);
    s.ws.begin_accumulation(gpu).unwrap();
    let got = accumulated_site(gpu, &mut s.ws, &s.producer, &s.consumer, &x, &h, &s.w, n);
    assert_eq!(bits(got.0), bits(want.0), "after an abandoned product: h_out");
    assert_eq!(got.1, want.1, "after an abandoned product: next product");
}

/// The 27B's accumulated shapes (Q4_K 6144 → 5120 and 17408 → 5120, Q6_K 17408 → 5120) at
/// n = 1 and 22: the sums against the plain product (f32 partials added in split order), within
/// both paths' split-sum rounding — `2 · ksplit · 2^-24 · Σ|w·x|` plus the fixed point's bound.
#[test]
fn accumulated_products_at_the_27b_shapes() {
    let Some(gpu) = gpu_or_skip("accumulated_products_at_the_27b_shapes") else { return };
    let d = 5120;
    for (ty, k_blocks) in [(GgmlType::Q4_K, 24), (GgmlType::Q4_K, 68), (GgmlType::Q6_K, 68)] {
        let mut s = setup(gpu, ty, d, k_blocks, 40 + k_blocks as u64);
        let inp = s.c.inp;
        // Both paths' splits: the plain product's plan and the accumulated one's.
        let accum = s.ws.accum_split(gpu, &s.producer).unwrap().expect("accumulates");
        let ksplit = s.producer.plan().ksplit.max(accum.ksplit) as f64;
        for n in [1usize, 22] {
            let x = activations(41, n, inp);
            let zero = vec![0.0f32; n * d];
            s.ws.begin_accumulation(gpu).unwrap();
            let (a, _) = accumulated_site(gpu, &mut s.ws, &s.producer, &s.consumer, &x, &zero, &s.w, n);
            s.ws.end_accumulation(gpu).unwrap();
            let y = gpu.zeros::<f32>(n * d).unwrap();
            let dx = gpu.upload(&x).unwrap();
            s.ws.prepare(gpu, DevSpan::of(gpu, &dx), n, inp, false).unwrap();
            s.producer.matmul(gpu, n, DevSpan::of(gpu, &y), &mut s.ws).unwrap();
            let y = gpu.download(&y).unwrap();
            for col in 0..n {
                let xc = &x[col * inp..(col + 1) * inp];
                let xmax = xc.iter().fold(0f64, |m, &v| m.max((v as f64).abs()));
                for o in 0..d {
                    let wr = &s.c.w[o * inp..(o + 1) * inp];
                    let abs: f64 = wr.iter().zip(xc).map(|(&w, &x)| (w as f64 * x as f64).abs()).sum();
                    let tol = 2.0 * ksplit * 2f64.powi(-24) * abs + fixed_point_bound(xmax);
                    let (got, plain) = (a[col * d + o] as f64, y[col * d + o] as f64);
                    assert!(
                        (got - plain).abs() <= tol,
                        "{ty:?} [{d}, {inp}] plans {:?} / {accum:?} n = {n}: y[{col}, {o}] {got} (accumulated) vs {plain} (plain), tol {tol:e}",
                        s.producer.plan()
                    );
                }
            }
        }
    }
}

/// Rows `first ..` of `c` as a case of their own (for a reference over part of a matrix).
fn rows_from(c: &Case, first: usize) -> Case {
    let row_bytes = c.raw.len() / c.out;
    Case {
        ty: c.ty,
        out: c.out - first,
        inp: c.inp,
        raw: c.raw[first * row_bytes..].to_vec(),
        w: c.w[first * c.inp..].to_vec(),
    }
}

/// One SwiGLU site: `x` prepared, the fused gate/up `w` into `y` (its split tail accumulated when
/// `accum`, else reduced), the down projection's prep of `y`, and `consumer` over it. Returns the
/// final `y` and the consumer's output bits.
fn swiglu_site(
    gpu: &Gpu,
    ws: &mut QmmWorkspace,
    w: &QWeight,
    consumer: &QWeight,
    x: &[f32],
    n: usize,
    accum: bool,
) -> (Vec<f32>, Vec<u32>) {
    let ff = w.ff().unwrap();
    let sp = |b| DevSpan::of(gpu, b);
    let dx = gpu.upload(x).unwrap();
    let mut y = gpu.zeros::<f32>(n * ff).unwrap();
    gpu.fill_bytes(&mut y, 0xff).unwrap();
    let mut z = gpu.zeros::<f32>(n * consumer.out()).unwrap();
    gpu.fill_bytes(&mut z, 0xff).unwrap();
    ws.prepare(gpu, sp(&dx), n, w.inp(), false).unwrap();
    if accum {
        assert!(ws.swiglu_accumulates(w), "{:?} ff {ff} plan {:?} does not accumulate", w.ty(), w.plan());
        let t = ws.swiglu_accum(gpu, w, n, sp(&y)).unwrap();
        ws.prepare_swiglu_accum(gpu, sp(&y), t, n, ff, false).unwrap();
    } else {
        w.swiglu(gpu, n, sp(&y), ws).unwrap();
        ws.prepare_swiglu(gpu, sp(&y), n, ff, false).unwrap();
    }
    consumer.matmul(gpu, n, sp(&z), ws).unwrap();
    (gpu.download(&y).unwrap(), bits(gpu.download(&z).unwrap()))
}

/// The scanning prep (`qmm_prep_x`) of a given `y`, and `consumer` over it.
fn scanned_product(gpu: &Gpu, ws: &mut QmmWorkspace, consumer: &QWeight, y: &[f32], n: usize) -> Vec<u32> {
    let dy = gpu.upload(y).unwrap();
    let mut z = gpu.zeros::<f32>(n * consumer.out()).unwrap();
    gpu.fill_bytes(&mut z, 0xff).unwrap();
    ws.prepare(gpu, DevSpan::of(gpu, &dy), n, consumer.inp(), false).unwrap();
    consumer.matmul(gpu, n, DevSpan::of(gpu, &z), ws).unwrap();
    bits(gpu.download(&z).unwrap())
}

struct SwigluSetup {
    gate: Case,
    up: Case,
    w: QWeight,
    consumer: QWeight,
    ws: QmmWorkspace,
}

fn swiglu_setup(gpu: &Gpu, ty: GgmlType, ff: usize, blocks: usize, seed: u64) -> SwigluSetup {
    let (gate, up) = gate_up(ty, ff, blocks, seed);
    let w = QWeight::upload_gate_up(gpu, ty, &gate.raw, &up.raw, ff, gate.inp).unwrap();
    let cc = case(GgmlType::Q8_0, 96, ff / 32, seed ^ 9);
    let consumer = QWeight::upload(gpu, cc.ty, &cc.raw, cc.out, cc.inp).unwrap();
    let mut ws = QmmWorkspace::new(gpu, gate.inp.max(ff), qmm_swiglu_rows(ff).max(96)).unwrap();
    let tail = swiglu_tail_rows(&w);
    if tail > 0 && tail <= kernel_abi::qmm_accum::MAX_SWIGLU_TAIL_ROWS as usize {
        ws.enable_swiglu_accumulation(gpu, tail).unwrap();
    }
    SwigluSetup { gate, up, w, consumer, ws }
}

/// The largest |x| of each column of `x [n, inp]`.
fn column_max(x: &[f32], inp: usize) -> Vec<f64> {
    x.chunks(inp).map(|c| c.iter().fold(0f64, |m, &v| m.max((v as f64).abs()))).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// A fused SwiGLU product whose split tail accumulates (small shapes: every row block split,
    /// so all of it is tail): `y` within the SwiGLU reference bound widened by the fixed point's,
    /// and the prepared activations bitwise those of the scanning prep of that `y`.
    #[test]
    fn swiglu_tail_matches_reference_and_the_scanning_prep(
        ty in prop::sample::select(ACCUM_TYPES.to_vec()),
        ff32 in 1usize..=32,
        blocks in 2usize..12,
        n in 1usize..=64,
        seed in any::<u64>(),
    ) {
        let Some(gpu) = gpu_or_skip("swiglu_tail_matches_reference_and_the_scanning_prep") else { return Ok(()) };
        let blocks = if qmm_block(ty) == 32 { blocks * 4 } else { blocks };
        let mut s = swiglu_setup(gpu, ty, 32 * ff32, blocks, seed);
        if !s.ws.swiglu_accumulates(&s.w) {
            return Ok(()); // a plan without split row blocks: nothing accumulates
        }
        let x = activations(seed ^ 1, n, s.gate.inp);
        s.ws.begin_accumulation(gpu).unwrap();
        let (y, z) = swiglu_site(gpu, &mut s.ws, &s.w, &s.consumer, &x, n, true);
        s.ws.end_accumulation(gpu).unwrap();
        let xmax = column_max(&x, s.gate.inp);
        check_widened(&s.gate, &s.up, &x, n, &y, &|c| fixed_point_bound(xmax[c]), &|_| true)?;
        let z_scan = scanned_product(gpu, &mut s.ws, &s.consumer, &y, n);
        prop_assert!(z == z_scan, "{:?} ff {} plan {:?} n = {}: the prep differs from the scanning prep", ty, 32 * ff32, s.w.plan(), n);
    }
}

/// The 27B's gate/up plan (264 unsplit row blocks and 8 split ones on nvidia-h200; any plan with
/// both here; the tail in one split per weight block, as its one-wave rule gives): the unsplit features bitwise those of the reducing product, the tail within the
/// reference bound, the prep bitwise the scanning prep's, three products in a row the same, and
/// every column's bits at n = 40 those of the column alone.
#[test]
fn swiglu_tail_at_the_27b_plan() {
    let Some(gpu) = gpu_or_skip("swiglu_tail_at_the_27b_plan") else { return };
    for ty in ACCUM_TYPES {
        let nt1 = match ty {
            GgmlType::Q4_K => "qmm_q4k_nt1",
            GgmlType::Q6_K => "qmm_q6k_nt1",
            _ => "qmm_q8_0_nt1",
        };
        let slots = gpu.resident_blocks(nt1, kernel_abi::QMM_WARPS * 32).unwrap() as usize;
        // (slots + 8) row blocks of 128 interleaved rows: 64 features each; K of 8 weight blocks.
        let ff = (slots + 8) * 64;
        let blocks = if qmm_block(ty) == 32 { 64 } else { 8 };
        let mut s = swiglu_setup(gpu, ty, ff, blocks, 21);
        let plan = s.w.plan();
        assert!(plan.full > 0 && plan.ksplit > 1, "{ty:?} ff {ff}: plan {plan:?} has no unsplit waves");
        assert!(s.ws.swiglu_accumulates(&s.w), "{ty:?} ff {ff}: plan {plan:?} does not accumulate");
        // The accumulated tail (8 row blocks) in as many splits as one wave holds (`slots / 8`),
        // at most one per weight block (the K-quants here: one weight block per split).
        let tail = s.ws.swiglu_accum_split(gpu, &s.w).unwrap().unwrap();
        let want = (slots as u32 / 8).clamp(plan.ksplit, (blocks as u32).max(plan.ksplit));
        assert_eq!(tail, kernel_abi::QmmSplitPlan { full: plan.full, ksplit: want }, "{ty:?} ff {ff}: tail split");
        let full_feats = plan.full as usize * 64;
        for n in [1usize, 22] {
            let x = activations(22 + n as u64, n, s.gate.inp);
            s.ws.begin_accumulation(gpu).unwrap();
            let (y, z) = swiglu_site(gpu, &mut s.ws, &s.w, &s.consumer, &x, n, true);
            for k in 0..2 {
                let again = swiglu_site(gpu, &mut s.ws, &s.w, &s.consumer, &x, n, true);
                assert!(bits(again.0) == bits(y.clone()) && again.1 == z, "{ty:?} n = {n}: product {} differs", k + 2);
            }
            s.ws.end_accumulation(gpu).unwrap();
            let (y_plain, _) = swiglu_site(gpu, &mut s.ws, &s.w, &s.consumer, &x, n, false);
            for c in 0..n {
                let (a, b) = (&y[c * ff..c * ff + full_feats], &y_plain[c * ff..c * ff + full_feats]);
                assert_eq!(bits(a.to_vec()), bits(b.to_vec()), "{ty:?} n = {n}, column {c}: unsplit features");
            }
            let (gt, ut) = (rows_from(&s.gate, full_feats), rows_from(&s.up, full_feats));
            let y_tail: Vec<f32> = y.chunks(ff).flat_map(|c| c[full_feats..].to_vec()).collect();
            let xmax = column_max(&x, s.gate.inp);
            check_widened(&gt, &ut, &x, n, &y_tail, &|c| fixed_point_bound(xmax[c]), &|_| true).unwrap();
            assert!(z == scanned_product(gpu, &mut s.ws, &s.consumer, &y, n), "{ty:?} n = {n}: prep vs scan");
        }
        let n = 40;
        let x = activations(61, n, s.gate.inp);
        s.ws.begin_accumulation(gpu).unwrap();
        let (y, z) = swiglu_site(gpu, &mut s.ws, &s.w, &s.consumer, &x, n, true);
        let out2 = s.consumer.out();
        for col in [0, 21, 39] {
            let (y1, z1) =
                swiglu_site(gpu, &mut s.ws, &s.w, &s.consumer, &x[col * s.gate.inp..(col + 1) * s.gate.inp], 1, true);
            assert_eq!(bits(y1), bits(y[col * ff..(col + 1) * ff].to_vec()), "{ty:?}: y column {col} of {n}");
            assert_eq!(z1, z[col * out2..(col + 1) * out2].to_vec(), "{ty:?}: next product, column {col} of {n}");
        }
        s.ws.end_accumulation(gpu).unwrap();
    }
}
