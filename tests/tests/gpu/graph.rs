//! CUDA graph capture/replay and event timing on real launches.

use flashtree::gpu::graph::Graph;
use flashtree::gpu::norm::rms_norm_rows;
use flashtree::gpu::GpuTimer;
use flashtree_tests::gpu::gpu_or_skip;

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
