//! `norm` benches: RMSNorm rows (hidden 5120), the fused residual add + RMSNorm, per-head norm
//! (head_dim 256), and the engine's norm site `qmm_prep_norm` (residual add + RMSNorm + matmul
//! prep in one launch). Roofline: x read once + y written once (`2·rows·cols·4` bytes; w is
//! shared and cached); `add_rms_norm` reads h and a and writes h and y (`4·rows·cols·4`);
//! `qmm_prep_norm` reads h and a and writes `h + a` and the f16 planes `xh` and `xcm`
//! (`(4 + 4 + 4 + 2 + 2)·rows·cols` bytes; its ⌈cols/1024⌉ blocks per column each read the whole
//! column, so L2 serves that many times the h and a bytes — not counted).

use flashtree::gpu::norm::{add_rms_norm, rms_norm_heads, rms_norm_rows};
use flashtree::gpu::qmatmul::QmmWorkspace;
use flashtree::gpu::{CudaSlice, DevSpan, Gpu};
use flashtree_benches::{ceiling_gbps, gpu_or_skip, median_secs, report};

fn main() {
    let Some(gpu) = gpu_or_skip("norm") else { return };
    let ceiling = ceiling_gbps(&gpu);
    for (rows, cols) in [(1usize, 5120usize), (32, 5120), (16384, 5120)] {
        let x: Vec<f32> = (0..rows * cols).map(|i| ((i % 97) as f32 - 48.0) / 10.0).collect();
        let w: Vec<f32> = (0..cols).map(|i| 1.0 + (i % 7) as f32 / 7.0).collect();
        let dx = gpu.upload(&x).unwrap();
        let dw = gpu.upload(&w).unwrap();
        let mut dy = gpu.zeros::<f32>(rows * cols).unwrap();
        let secs = median_secs(&gpu, 50, |_| rms_norm_rows(&gpu, &dx, &dw, &mut dy, rows, 1e-6));
        let note = if rows < 1024 { "launch-bound at this size" } else { "" };
        report("norm", &format!("rms_norm_rows {rows}x{cols}"), (2 * rows * cols * 4) as f64, secs, ceiling, note);
    }
    for (rows, cols) in [(1usize, 5120usize), (32, 5120), (16384, 5120)] {
        let (dh, da, dw) = residual_inputs(&gpu, rows, cols);
        let dy = gpu.zeros::<f32>(rows * cols).unwrap();
        let s = |b| DevSpan::of(&gpu, b);
        let (hs, as_, ws, ys) = (s(&dh), s(&da), s(&dw), s(&dy));
        let secs = median_secs(&gpu, 50, |_| add_rms_norm(&gpu, hs, as_, ws, ys, rows, cols, 1e-6));
        let note = if rows < 1024 { "launch-bound at this size" } else { "" };
        report("norm", &format!("add_rms_norm {rows}x{cols}"), (4 * rows * cols * 4) as f64, secs, ceiling, note);
    }
    for (vectors, hd) in [(24usize, 256usize), (65536, 256)] {
        let x: Vec<f32> = (0..vectors * hd).map(|i| ((i % 97) as f32 - 48.0) / 10.0).collect();
        let w: Vec<f32> = (0..hd).map(|i| 1.0 + (i % 7) as f32 / 7.0).collect();
        let dx = gpu.upload(&x).unwrap();
        let dw = gpu.upload(&w).unwrap();
        let mut dy = gpu.zeros::<f32>(vectors * hd).unwrap();
        let secs = median_secs(&gpu, 50, |_| rms_norm_heads(&gpu, &dx, &dw, &mut dy, vectors, 1e-6));
        let note = if vectors < 1024 { "launch-bound at this size" } else { "" };
        report("norm", &format!("rms_norm_heads {vectors}x{hd}"), (2 * vectors * hd * 4) as f64, secs, ceiling, note);
    }
    // The engine's norm site at the 27B's hidden size: the AR step (1), a 22/23-node verify, 32.
    for (rows, cols) in [(1usize, 5120usize), (22, 5120), (32, 5120)] {
        let (dh, da, dw) = residual_inputs(&gpu, rows, cols);
        let dout = gpu.zeros::<f32>(rows * cols).unwrap();
        let s = |b| DevSpan::of(&gpu, b);
        let (hs, as_, ws, os) = (s(&dh), s(&da), s(&dw), s(&dout));
        let mut qws = QmmWorkspace::new(&gpu, cols, cols).unwrap();
        let secs = median_secs(&gpu, 50, |_| qws.prepare_norm(&gpu, hs, Some((as_, os)), ws, rows, cols, 1e-6, false));
        let bytes = (16 * rows * cols) as f64;
        report("norm", &format!("qmm_prep_norm {rows}x{cols}"), bytes, secs, ceiling, "launch-bound at this size");
    }
}

/// The residual stream `h`, the mixer output `a` (`rows × cols`) and the norm weights `w`
/// (`cols`) of the residual-add benches, on the device.
fn residual_inputs(gpu: &Gpu, rows: usize, cols: usize) -> (CudaSlice<f32>, CudaSlice<f32>, CudaSlice<f32>) {
    let h: Vec<f32> = (0..rows * cols).map(|i| ((i % 97) as f32 - 48.0) / 10.0).collect();
    let a: Vec<f32> = (0..rows * cols).map(|i| ((i % 89) as f32 - 44.0) * 1e-6).collect();
    let w: Vec<f32> = (0..cols).map(|i| 1.0 + (i % 7) as f32 / 7.0).collect();
    (gpu.upload(&h).unwrap(), gpu.upload(&a).unwrap(), gpu.upload(&w).unwrap())
}
