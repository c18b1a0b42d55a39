//! Stream-K partitions of the `qmm_*` products (`QmmParams::stream`, `kernel_abi::qmm_stream`):
//! blocks whose weight-block range crosses a row-block boundary run two items, and a row block
//! covered by several pieces is added by the last piece to arrive, in piece order. Checked
//! against the f64 reference (the bounds of `qmm::expected`, the same arithmetic per piece as
//! per K split) on random shapes and grids, plain and fused SwiGLU, and for batch invariance:
//! the partition depends on the shape and the grid only, so a column's bits are those of the
//! column alone at every n.

use flashtree::gpu::qmatmul::{qmm_swiglu_rows, QWeight, QmmWorkspace};
use flashtree::gpu::{DevSpan, Gpu};
use flashtree_reference::quant::GgmlType;
use flashtree_tests::gpu::gpu_or_skip;
use kernel_abi::qmm_stream::{qmm_stream_fits_u32, qmm_stream_max_pieces};
use proptest::prelude::*;

use super::qmm::{activations, case, check, Case};
use super::qmm_swiglu::{check as check_swiglu, gate_up};

/// The formats whose kernels run stream-K partitions (`kernel_abi::qmm_stream::qmm_stream_format`).
const STREAM_TYPES: [GgmlType; 2] = [GgmlType::Q4_K, GgmlType::Q6_K];

/// A valid stream grid for `rows` rows of `bpr` weight blocks near `want` (searching down, then
/// up), if any: at most two items per block, at most 16 pieces per row block.
fn grid_near(rows: usize, bpr: usize, want: u32) -> Option<u32> {
    let (rb, bpr) = (rows.div_ceil(128) as u32, bpr as u32);
    let ok = |g: u32| g > 0 && qmm_stream_fits_u32(rb, bpr, g) && qmm_stream_max_pieces(rb, bpr, g) <= 16;
    (1..=want).rev().chain(want + 1..=rb * bpr).find(|&g| ok(g))
}

/// `y` of one product of `w` over `n` tokens `x` (`swiglu`: the fused gate/up), into a
/// NaN-poisoned output.
fn product(gpu: &Gpu, w: &QWeight, x: &[f32], n: usize) -> Vec<f32> {
    let swiglu = w.ff().is_some();
    let rows = if swiglu { qmm_swiglu_rows(w.ff().unwrap()) } else { w.out() };
    let dx = gpu.upload(x).unwrap();
    let mut dy = gpu.zeros::<f32>(n * w.ff().unwrap_or(w.out())).unwrap();
    gpu.fill_bytes(&mut dy, 0xff).unwrap();
    let mut ws = QmmWorkspace::new(gpu, w.inp(), rows).unwrap();
    w.prepare_x(gpu, DevSpan::of(gpu, &dx), n, &mut ws).unwrap();
    if swiglu {
        w.swiglu(gpu, n, DevSpan::of(gpu, &dy), &mut ws).unwrap();
    } else {
        w.matmul(gpu, n, DevSpan::of(gpu, &dy), &mut ws).unwrap();
    }
    gpu.download(&dy).unwrap()
}

fn plain(gpu: &Gpu, c: &Case, grid: u32) -> QWeight {
    let mut w = QWeight::upload(gpu, c.ty, &c.raw, c.out, c.inp).unwrap();
    w.set_stream_grid(grid).unwrap();
    w
}

fn fused(gpu: &Gpu, gate: &Case, up: &Case, grid: u32) -> QWeight {
    let mut w = QWeight::upload_gate_up(gpu, gate.ty, &gate.raw, &up.raw, gate.out, gate.inp).unwrap();
    w.set_stream_grid(grid).unwrap();
    w
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]

    /// Random shapes (a partial last row block included), grids and n (two launches past 32).
    #[test]
    fn qmm_stream_matches_reference(
        ty in prop::sample::select(STREAM_TYPES.to_vec()),
        out in 1usize..1600,
        blocks in 2usize..24,
        want in 1u32..300,
        n in 1usize..=40,
        seed in any::<u64>(),
    ) {
        let Some(gpu) = gpu_or_skip("qmm_stream_matches_reference") else { return Ok(()) };
        let Some(grid) = grid_near(out, blocks, want) else { return Ok(()) };
        let c = case(ty, out, blocks, seed);
        let x = activations(seed, n, c.inp);
        let y = product(gpu, &plain(gpu, &c, grid), &x, n);
        check(&c, &x, n, &y)?;
    }

    /// The fused SwiGLU epilogue on stream-K partitions (its row blocks hold gate and up rows).
    #[test]
    fn qmm_stream_swiglu_matches_reference(
        ty in prop::sample::select(STREAM_TYPES.to_vec()),
        ff in 1usize..800,
        blocks in 2usize..20,
        want in 1u32..300,
        n in 1usize..=40,
        seed in any::<u64>(),
    ) {
        let Some(gpu) = gpu_or_skip("qmm_stream_swiglu_matches_reference") else { return Ok(()) };
        let Some(grid) = grid_near(qmm_swiglu_rows(ff), blocks, want) else { return Ok(()) };
        let (gate, up) = gate_up(ty, ff, blocks, seed);
        let x = activations(seed, n, gate.inp);
        let y = product(gpu, &fused(gpu, &gate, &up, grid), &x, n);
        check_swiglu(&gate, &up, &x, n, &y)?;
    }
}

/// The 27B's stream-K shapes on the device's own grid (its one-tile slots: what
/// `FLASHTREE_QMM_STREAM=1` runs): a column's bits at n = 22 and 40 (warpgroup and two-launch
/// kernels) are those of the column alone (one-tile kernel). On nvidia-h200's 264 slots the upload
/// chooses this grid for all three under `FLASHTREE_QMM_STREAM=1`, and none without it.
#[test]
fn qmm_stream_column_bits_do_not_depend_on_n() {
    let Some(gpu) = gpu_or_skip("qmm_stream_column_bits_do_not_depend_on_n") else { return };
    let on = std::env::var("FLASHTREE_QMM_STREAM").is_ok_and(|v| v == "1");
    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
    // (type, rows or features, K in super-blocks, fused)
    let shapes =
        [(GgmlType::Q4_K, 5120, 24, false), (GgmlType::Q6_K, 5120, 68, false), (GgmlType::Q4_K, 17_408, 20, true)];
    for (i, (ty, out, blocks, swiglu)) in shapes.into_iter().enumerate() {
        let seed = 90 + i as u64;
        let (mut w, inp) = if swiglu {
            let (g, u) = gate_up(ty, out, blocks, seed);
            (QWeight::upload_gate_up(gpu, ty, &g.raw, &u.raw, out, g.inp).unwrap(), g.inp)
        } else {
            let c = case(ty, out, blocks, seed);
            (QWeight::upload(gpu, ty, &c.raw, out, c.inp).unwrap(), c.inp)
        };
        let slots = gpu.resident_blocks(if ty == GgmlType::Q4_K { "qmm_q4k_nt1" } else { "qmm_q6k_nt1" }, 256).unwrap();
        if slots == 264 {
            let what = format!("{ty:?} [{out}, {inp}] swiglu {swiglu}: plan {:?}, stream {}", w.plan(), w.stream());
            assert_eq!(w.stream_chosen(), on, "{what}");
        }
        let rows = if swiglu { qmm_swiglu_rows(out) } else { out };
        let Some(grid) = grid_near(rows, blocks, slots) else {
            eprintln!("{ty:?} [{out}, {inp}]: no stream-K partition near {slots} blocks; not checked");
            continue;
        };
        w.set_stream_grid(grid).unwrap();
        for n in [22usize, 40] {
            let x = activations(seed + n as u64, n, inp);
            let y = product(gpu, &w, &x, n);
            assert!(y.iter().all(|v| v.is_finite()), "{ty:?} [{out}, {inp}] n = {n}: an output not written");
            for j in [0usize, 9, n - 1] {
                let alone = product(gpu, &w, &x[j * inp..(j + 1) * inp], 1);
                assert_eq!(bits(&y[j * out..(j + 1) * out]), bits(&alone), "{ty:?} [{out}, {inp}] n = {n}, column {j}");
            }
        }
    }
}

/// `set_stream_grid` refuses what the kernels cannot run, naming the matrix.
#[test]
fn qmm_stream_grid_is_checked() {
    let Some(gpu) = gpu_or_skip("qmm_stream_grid_is_checked") else { return };
    let c = case(GgmlType::Q4_K, 256, 4, 3);
    let mut w = QWeight::upload(gpu, c.ty, &c.raw, c.out, c.inp).unwrap();
    // 2 row blocks × 4 blocks: 9 blocks exceed the 8 units; 1 block would take 8 units (> 4 + 1).
    for grid in [9, 1] {
        let e = w.set_stream_grid(grid).unwrap_err().to_string();
        assert!(e.contains("[256, 1024]") && e.contains(&format!("over {grid} blocks")), "{e}");
    }
    w.set_stream_grid(4).unwrap();
    let q8 = case(GgmlType::Q8_0, 256, 32, 3);
    let mut w8 = QWeight::upload(gpu, q8.ty, &q8.raw, q8.out, q8.inp).unwrap();
    assert!(w8.set_stream_grid(8).unwrap_err().to_string().contains("Q8_0"));
}
