//! CUDA graph capture/replay and event timing on real launches; chained `qmm` launches under
//! capture and without chaining.

use std::io::Write;

use flashtree::gpu::graph::Graph;
use flashtree::gpu::norm::rms_norm_rows;
use flashtree::gpu::qmatmul::{QWeight, QmmWorkspace};
use flashtree::gpu::{chaining_enabled, CudaSlice, DevSpan, Gpu, GpuError, GpuTimer};
use flashtree_reference::quant::GgmlType;
use flashtree_tests::gpu::gpu_or_skip;

use crate::qmm::{activations as qmm_activations, case as qmm_case, qmm_block};

/// A replayed graph computes the same bits as direct launches, and re-reads its inputs on every
/// replay (so changed inputs give changed outputs).
#[test]
fn graph_replay_equals_direct_launch_and_sees_new_inputs() {
    let Some(gpu) = gpu_or_skip("graph_replay_equals_direct_launch_and_sees_new_inputs") else { return };
    let (rows, cols) = (4usize, 1000usize);
    let x: Vec<f32> = (0..rows * cols).map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0).collect();
    let w: Vec<f32> = (0..cols).map(|i| 1.0 + (i % 13) as f32 / 13.0).collect();
    let mut dx = gpu.upload(&x).unwrap();
    let dw = gpu.upload(&w).unwrap();
    let mut direct = gpu.zeros::<f32>(rows * cols).unwrap();
    rms_norm_rows(gpu, &dx, &dw, &mut direct, rows, 1e-6).unwrap();
    let want = gpu.download(&direct).unwrap();

    let mut dy = gpu.zeros::<f32>(rows * cols).unwrap();
    let graph = Graph::capture(gpu, || rms_norm_rows(gpu, &dx, &dw, &mut dy, rows, 1e-6)).unwrap();
    graph.replay().unwrap();
    assert_eq!(gpu.download(&dy).unwrap(), want);

    let x2: Vec<f32> = x.iter().map(|v| v * -3.0).collect();
    gpu.write(&x2, &mut dx).unwrap();
    graph.replay().unwrap();
    let got2 = gpu.download(&dy).unwrap();
    assert_ne!(got2, want);
    // RMSNorm is scale-invariant up to rounding; the sign flips.
    assert!(got2.iter().zip(&want).all(|(a, b)| (a + b).abs() <= 1e-5 * b.abs().max(1.0)));
}

#[test]
fn timer_measures_positive_device_time() {
    let Some(gpu) = gpu_or_skip("timer_measures_positive_device_time") else { return };
    let x = gpu.zeros::<f32>(1 << 20).unwrap();
    let w = gpu.zeros::<f32>(1024).unwrap();
    let mut y = gpu.zeros::<f32>(1 << 20).unwrap();
    let t = GpuTimer::time_per_run(gpu, 1, 5, || rms_norm_rows(gpu, &x, &w, &mut y, 1024, 1e-6)).unwrap();
    assert!(t > 0.0 && t < 1.0, "{t}");
}

/// A product of the chain: W (packed, with its type and shape), writing buffer `dst`.
struct Product {
    w: QWeight,
    dst: usize,
}

/// One stage: `QmmWorkspace::prepare` of the first `n` rows of buffer `src` (`[CHAIN_ROWS, inp]`), then its products.
struct Stage {
    src: usize,
    n: usize,
    inp: usize,
    pairs: bool,
    products: Vec<Product>,
}

/// Chained `qmm` launches of mixed types and node counts, each stage reading the buffer an
/// earlier product wrote: n = 64, 45, 20, 9, 1 (the first two as two launches of ≤ 32 columns each:
/// tile counts 4 + 4, 4 + 2, then 3, 2, 1), and a last stage with the bf16 pair (F32 weights) that
/// a Q5_K product shares.
struct QmmChain {
    /// `[CHAIN_ROWS, width]` each; buffer 0 is the input.
    bufs: Vec<CudaSlice<f32>>,
    stages: Vec<Stage>,
    ws: QmmWorkspace,
}

const CHAIN_IN: usize = 256;
/// Rows of the chain's buffers (the most columns a product takes).
const CHAIN_ROWS: usize = kernel_abi::MAX_NODES as usize;

fn qmm_chain(gpu: &Gpu) -> QmmChain {
    // (type, out, in, dst): in is a whole number of the type's K blocks.
    let product = |ty: GgmlType, out: usize, inp: usize, dst: usize, seed: u64| {
        let c = qmm_case(ty, out, inp / qmm_block(ty), seed);
        assert_eq!(c.inp, inp);
        Product { w: QWeight::upload(gpu, ty, &c.raw, out, inp).unwrap(), dst }
    };
    let widths = [CHAIN_IN, 512, 256, 96, 288, 256, 200, 130];
    let stages = vec![
        Stage { src: 0, n: 64, inp: 256, pairs: false, products: vec![product(GgmlType::Q4_K, 512, 256, 1, 11)] },
        Stage {
            src: 1,
            n: 45,
            inp: 512,
            pairs: false,
            products: vec![product(GgmlType::Q6_K, 256, 512, 2, 12), product(GgmlType::Q8_0, 96, 512, 3, 13)],
        },
        Stage { src: 2, n: 20, inp: 256, pairs: false, products: vec![product(GgmlType::F16, 288, 256, 4, 14)] },
        Stage { src: 4, n: 9, inp: 288, pairs: false, products: vec![product(GgmlType::BF16, 256, 288, 5, 15)] },
        Stage {
            src: 5,
            n: 1,
            inp: 256,
            pairs: true,
            products: vec![product(GgmlType::F32, 200, 256, 6, 16), product(GgmlType::Q5_K, 130, 256, 7, 17)],
        },
    ];
    QmmChain {
        bufs: widths.iter().map(|&w| gpu.zeros::<f32>(CHAIN_ROWS * w).unwrap()).collect(),
        stages,
        ws: QmmWorkspace::new(gpu, 512, 512).unwrap(),
    }
}

/// Enqueues every launch of the chain (recorded, not run, inside a capture); `serialize`: wait
/// for each launch before the next (no launch can overlap its predecessor).
fn enqueue_chain(gpu: &Gpu, c: &mut QmmChain, serialize: bool) -> Result<(), GpuError> {
    let QmmChain { bufs, stages, ws } = c;
    for s in stages.iter() {
        ws.prepare(gpu, DevSpan::of(gpu, &bufs[s.src]), s.n, s.inp, s.pairs)?;
        if serialize {
            gpu.synchronize()?;
        }
        for p in &s.products {
            p.w.matmul(gpu, s.n, DevSpan::of(gpu, &bufs[p.dst]), ws)?;
            if serialize {
                gpu.synchronize()?;
            }
        }
    }
    Ok(())
}

/// Writes input `round` into buffer 0 and NaN into every output buffer.
fn chain_inputs(gpu: &Gpu, c: &mut QmmChain, round: u64) {
    gpu.write(&qmm_activations(500 + round, CHAIN_ROWS, CHAIN_IN), &mut c.bufs[0]).unwrap();
    for b in c.bufs.iter_mut().skip(1) {
        gpu.fill_bytes(b, 0xff).unwrap();
    }
}

/// The bits of every output buffer; checks that each product wrote finite values in its rows.
fn chain_outputs(gpu: &Gpu, c: &QmmChain) -> Vec<Vec<u32>> {
    let outs: Vec<Vec<u32>> =
        c.bufs.iter().skip(1).map(|b| gpu.download(b).unwrap().iter().map(|v| v.to_bits()).collect()).collect();
    for s in &c.stages {
        for p in &s.products {
            let written = &outs[p.dst - 1][..s.n * p.w.out()];
            assert!(
                written.iter().all(|&b| f32::from_bits(b).is_finite()),
                "{:?} [{}, {}] n={}: some output not written (NaN) or not finite",
                p.w.ty(),
                p.w.out(),
                p.w.inp(),
                s.n
            );
        }
    }
    outs
}

/// Replaying a captured chain of mixed `qmm` launches (which read what the previous launch
/// wrote) gives bitwise the eager launches' results, on every replay, for new inputs written
/// into the same buffers between replays.
#[test]
fn chained_qmm_launches_replay_as_a_graph_bitwise_with_new_inputs() {
    let Some(_) = gpu_or_skip("chained_qmm_launches_replay_as_a_graph_bitwise_with_new_inputs") else { return };
    // A context of our own: a capture must not record other tests' launches.
    let gpu = &Gpu::try_new().expect("gpu");
    let mut c = qmm_chain(gpu);
    let mut graph: Option<Graph> = None;
    let mut previous: Option<Vec<Vec<u32>>> = None;
    for round in 0..5 {
        chain_inputs(gpu, &mut c, round);
        enqueue_chain(gpu, &mut c, false).unwrap();
        let eager = chain_outputs(gpu, &c);
        if let Some(p) = &previous {
            assert!(p.iter().zip(&eager).all(|(a, b)| a != b), "round {round}: new inputs left an output unchanged");
        }
        if graph.is_none() {
            // Captured after an eager run (which loaded every kernel and set its shared memory).
            Graph::begin_capture(gpu).unwrap();
            let recorded = enqueue_chain(gpu, &mut c, false);
            let g = Graph::end_capture(gpu);
            recorded.unwrap();
            graph = Some(g.unwrap());
        }
        let g = graph.as_ref().unwrap();
        for replay in 0..3 {
            chain_inputs(gpu, &mut c, round);
            g.replay().unwrap();
            let got = chain_outputs(gpu, &c);
            for (b, (x, y)) in got.iter().zip(&eager).enumerate() {
                assert!(
                    x == y,
                    "round {round}, replay {replay}: output buffer {} differs from the eager launches",
                    b + 1
                );
            }
        }
        previous = Some(eager);
    }
}

/// Name of the environment variable that makes the unchained-process check's child write its bits.
const CHAIN_CHILD_OUT: &str = "FLASHTREE_TEST_CHAIN_CHILD_OUT";

/// The chain's output bits for three rounds of inputs, launched eagerly.
fn chain_rounds(gpu: &Gpu, c: &mut QmmChain, serialize: bool) -> Vec<u32> {
    let mut bits = Vec::new();
    for round in 0..3 {
        chain_inputs(gpu, c, round);
        enqueue_chain(gpu, c, serialize).unwrap();
        bits.extend(chain_outputs(gpu, c).into_iter().flatten());
    }
    bits
}

/// Chained launches (programmatic dependent launch: a kernel may start while its predecessor
/// runs and waits in `griddepcontrol.wait`) give the same bits as launches that cannot overlap:
/// (1) the same launches each followed by a host sync, in this process; (2) the same launches in
/// a child process with `FLASHTREE_CHAIN=0` (read once per process, so it cannot be toggled
/// per call: the test binary re-runs this test in a child).
#[test]
fn chained_qmm_launches_equal_serialized_and_unchained_launches_bitwise() {
    let test = "chained_qmm_launches_equal_serialized_and_unchained_launches_bitwise";
    let Some(_) = gpu_or_skip(test) else { return };
    let gpu = &Gpu::try_new().expect("gpu");
    let mut c = qmm_chain(gpu);
    let chained = chain_rounds(gpu, &mut c, false);
    if let Some(out) = std::env::var_os(CHAIN_CHILD_OUT) {
        // The child of (2): hand the bits back.
        let bytes: Vec<u8> = chained.iter().flat_map(|b| b.to_le_bytes()).collect();
        std::fs::write(&out, bytes).expect("writing the child's output");
        return;
    }
    let serialized = chain_rounds(gpu, &mut c, true);
    assert!(
        chained == serialized,
        "chained launches differ in some bit from the same launches each followed by a sync"
    );
    if !chaining_enabled() {
        let _ = writeln!(
            std::io::stderr(),
            "{test}: FLASHTREE_CHAIN=0 in this process, so only serialized vs unchained launches were compared"
        );
        return;
    }
    // libtest names a test by its module path inside the test crate.
    let module = module_path!().split_once("::").map_or("", |(_, m)| m);
    let name = format!("{module}::{test}");
    let out = std::env::temp_dir().join(format!("flashtree-chain-child-{}.bin", std::process::id()));
    let _ = std::fs::remove_file(&out);
    let child = std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args([name.as_str(), "--exact", "--test-threads=1", "--nocapture"])
        .env("FLASHTREE_CHAIN", "0")
        .env(CHAIN_CHILD_OUT, &out)
        .output()
        .expect("running the test binary with FLASHTREE_CHAIN=0");
    let log = format!("{}{}", String::from_utf8_lossy(&child.stdout), String::from_utf8_lossy(&child.stderr));
    assert!(child.status.success(), "the FLASHTREE_CHAIN=0 child failed:\n{log}");
    let bytes =
        std::fs::read(&out).unwrap_or_else(|e| panic!("the FLASHTREE_CHAIN=0 child wrote no bits ({e}):\n{log}"));
    let _ = std::fs::remove_file(&out);
    let unchained: Vec<u32> = bytes.chunks_exact(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
    assert!(
        chained == unchained,
        "chained launches differ in some bit from the same launches in a process with FLASHTREE_CHAIN=0"
    );
}
