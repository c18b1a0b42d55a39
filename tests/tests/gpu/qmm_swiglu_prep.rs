//! The down projection's prep from the fused SwiGLU epilogue's row maxima
//! (`QmmWorkspace::prepare_swiglu`, `qmm_prep_x` with `max_parts > 0`) against the scanning prep
//! (`QmmWorkspace::prepare`) of the same `y`: the product that follows must be **bitwise** equal
//! (so the column scales, the f16 and core-matrix planes and the unit sums are), for every weight
//! type of the gate/up product, n = 1..=64 (two launches on column chunks past 32), K split 1 and
//! above 1 (both branches of the epilogue: the shapes are picked so the split rule gives each),
//! `ff = 1056` (not a multiple of 64, 128 or 1024: the last row group is half padding), and columns
//! whose `y` holds NaN or inf. The prep's math is unchanged, so its reference is too.

use flashtree::gpu::qmatmul::{qmm_swiglu_rows, QWeight, QmmWorkspace};
use flashtree::gpu::{DevSpan, Gpu};
use flashtree_reference::quant::GgmlType;
use flashtree_tests::gpu::gpu_or_skip;

use super::qmm::{activations, case, qmm_block, TYPES};

/// Features of the MLP: `1056 = 33 · 32`, so `16.5` row groups of 64 features.
const FF: usize = 1056;
/// Rows of the down projection (Q8_0, whose 32-element blocks take any `ff` multiple of 32).
const D_OUT: usize = 96;

/// `down(prep(swiglu(x)))` with the down prep from the epilogue's maxima or a scan.
fn down_of_swiglu(gpu: &Gpu, gate_up: &QWeight, down: &QWeight, x: &[f32], n: usize, from_maxima: bool) -> Vec<u32> {
    let inp = gate_up.inp();
    let dx = gpu.upload(x).unwrap();
    let mut dy = gpu.zeros::<f32>(n * FF).unwrap();
    gpu.fill_bytes(&mut dy, 0xff).unwrap();
    let mut dout = gpu.zeros::<f32>(n * D_OUT).unwrap();
    gpu.fill_bytes(&mut dout, 0xff).unwrap();
    let mut ws = QmmWorkspace::new(gpu, inp.max(FF), qmm_swiglu_rows(FF)).unwrap();
    let y = DevSpan::of(gpu, &dy);
    gate_up.prepare_x(gpu, DevSpan::of(gpu, &dx), n, &mut ws).unwrap();
    gate_up.swiglu(gpu, n, y, &mut ws).unwrap();
    if from_maxima {
        ws.prepare_swiglu(gpu, y, n, FF, down.needs_pairs()).unwrap();
    } else {
        down.prepare_x(gpu, y, n, &mut ws).unwrap();
    }
    down.matmul(gpu, n, DevSpan::of(gpu, &dout), &mut ws).unwrap();
    gpu.download(&dout).unwrap().iter().map(|v| v.to_bits()).collect()
}

/// Activations of `n` columns; past two columns, column 1 holds a NaN and column 2 a value large
/// enough that its gate and up products overflow (inf, and NaN where `silu(−inf)·(−inf)`).
fn inputs(seed: u64, n: usize, inp: usize) -> Vec<f32> {
    let mut x = activations(seed, n, inp);
    if n > 2 {
        x[inp + 3] = f32::NAN;
        x[2 * inp] = 3.0e38;
        x[2 * inp + 1] = -3.0e38;
    }
    x
}

#[test]
fn prep_from_swiglu_maxima_equals_the_scanning_prep_bitwise() {
    let Some(gpu) = gpu_or_skip("prep_from_swiglu_maxima_equals_the_scanning_prep_bitwise") else { return };
    let down_case = case(GgmlType::Q8_0, D_OUT, FF / 32, 5);
    let down = QWeight::upload(gpu, GgmlType::Q8_0, &down_case.raw, D_OUT, FF).unwrap();
    for ty in TYPES {
        // One K block: the split rule can only give 1. 16 K-quant blocks (128 float blocks) over
        // 17 row groups: the wave model (and the float types' power-of-two rule) split K.
        for (blocks, split) in [(1, false), (16 * 256 / qmm_block(ty), true)] {
            let g = case(ty, FF, blocks, 17);
            let u = case(ty, FF, blocks, 18);
            let gate_up = QWeight::upload_gate_up(gpu, ty, &g.raw, &u.raw, FF, g.inp).unwrap();
            assert_eq!(gate_up.ksplit() > 1, split, "{ty:?} in = {}: K split {}", g.inp, gate_up.ksplit());
            for n in 1..=64 {
                let x = inputs(n as u64, n, g.inp);
                let scan = down_of_swiglu(gpu, &gate_up, &down, &x, n, false);
                let maxima = down_of_swiglu(gpu, &gate_up, &down, &x, n, true);
                if let Some(i) = (0..scan.len()).find(|&i| scan[i] != maxima[i]) {
                    panic!(
                        "{ty:?} in = {} (K split {}), n = {n}: out[{}, {}] = {:e} from the maxima vs {:e} scanning",
                        g.inp,
                        gate_up.ksplit(),
                        i / D_OUT,
                        i % D_OUT,
                        f32::from_bits(maxima[i]),
                        f32::from_bits(scan[i])
                    );
                }
                if n > 2 {
                    // The non-finite columns really are: their scale is NaN, so every output is.
                    assert!(f32::from_bits(scan[D_OUT]).is_nan(), "{ty:?} n = {n}: column 1 is not NaN");
                }
            }
        }
    }
}

/// The maxima belong to one SwiGLU output: a prep of another `y`, another `n`, or after a later
/// product is refused, naming what the workspace holds.
#[test]
fn prep_from_swiglu_maxima_refuses_a_y_it_has_no_maxima_for() {
    let Some(gpu) = gpu_or_skip("prep_from_swiglu_maxima_refuses_a_y_it_has_no_maxima_for") else { return };
    let g = case(GgmlType::Q4_K, FF, 1, 1);
    let gate_up = QWeight::upload_gate_up(gpu, GgmlType::Q4_K, &g.raw, &g.raw, FF, 256).unwrap();
    let x = gpu.upload(&activations(1, 4, 256)).unwrap();
    let (y, other) = (gpu.zeros::<f32>(4 * FF).unwrap(), gpu.zeros::<f32>(4 * FF).unwrap());
    let (xs, ys, os) = (DevSpan::of(gpu, &x), DevSpan::of(gpu, &y), DevSpan::of(gpu, &other));
    let mut ws = QmmWorkspace::new(gpu, FF, qmm_swiglu_rows(FF)).unwrap();
    let e = |r: Result<(), flashtree::gpu::GpuError>| r.unwrap_err().to_string();
    assert!(e(ws.prepare_swiglu(gpu, ys, 4, FF, false)).contains("no row maxima"));
    gate_up.prepare_x(gpu, xs, 4, &mut ws).unwrap();
    gate_up.swiglu(gpu, 4, ys, &mut ws).unwrap();
    assert!(e(ws.prepare_swiglu(gpu, os, 4, FF, false)).contains("no row maxima"));
    assert!(e(ws.prepare_swiglu(gpu, ys, 3, FF, false)).contains("n = 3"));
    ws.prepare_swiglu(gpu, ys, 4, FF, false).unwrap();
    // A plain product after it (it may write that y): the maxima are gone.
    gate_up.prepare_x(gpu, xs, 4, &mut ws).unwrap();
    let rows = gpu.zeros::<f32>(4 * qmm_swiglu_rows(FF)).unwrap();
    gate_up.matmul(gpu, 4, DevSpan::of(gpu, &rows), &mut ws).unwrap();
    let got = e(ws.prepare_swiglu(gpu, ys, 4, FF, false));
    assert!(got.contains("no row maxima") && got.contains("None"), "{got}");
}
