//! `qmatmul` GEMV benches: BF16 and F32 weights at 27B-class shapes, one token.
//! Roofline: weight bytes (`out·in·sizeof(W)`) over the copy ceiling; x and y are negligible.

use criterion::Throughput;
use flashtree::gpu::qmatmul::{gemv_bf16, gemv_f32};
use flashtree_benches::{ceiling_gbps, criterion, event_duration, gpu_or_skip, median_secs, report};

const SHAPES: [(usize, usize); 3] = [(28672, 4096), (17408, 5120), (5120, 17408)];

fn main() {
    let Some(gpu) = gpu_or_skip("qmatmul") else { return };
    let ceiling = ceiling_gbps(&gpu);
    let mut c = criterion();
    for (out, inp) in SHAPES {
        let w: Vec<u16> = (0..out * inp).map(|i| (0x3c00 + ((i * 2654435761usize) >> 20) % 0x0400) as u16).collect();
        let x: Vec<f32> = (0..inp).map(|i| ((i % 17) as f32 - 8.0) / 8.0).collect();
        let dw = gpu.upload(&w).unwrap();
        let dx = gpu.upload(&x).unwrap();
        let mut dy = gpu.zeros::<f32>(out).unwrap();
        let bytes = (out * inp * 2) as f64;
        let secs = median_secs(&gpu, 50, |_| gemv_bf16(&gpu, &dw, &dx, &mut dy, out, inp));
        report("qmatmul", &format!("gemv_bf16 {out}x{inp} n=1"), bytes, secs, ceiling, "");
        let mut g = c.benchmark_group("qmatmul/gemv_bf16");
        g.throughput(Throughput::Bytes(bytes as u64));
        g.bench_function(format!("{out}x{inp}"), |b| {
            b.iter_custom(|iters| event_duration(&gpu, iters, |_| gemv_bf16(&gpu, &dw, &dx, &mut dy, out, inp)))
        });
        g.finish();
    }
    for (out, inp) in SHAPES.iter().copied().take(2) {
        let w: Vec<f32> = (0..out * inp).map(|i| ((i % 31) as f32 - 15.0) / 15.0).collect();
        let x: Vec<f32> = (0..inp).map(|i| ((i % 17) as f32 - 8.0) / 8.0).collect();
        let dw = gpu.upload(&w).unwrap();
        let dx = gpu.upload(&x).unwrap();
        let mut dy = gpu.zeros::<f32>(out).unwrap();
        let bytes = (out * inp * 4) as f64;
        let secs = median_secs(&gpu, 30, |_| gemv_f32(&gpu, &dw, &dx, &mut dy, out, inp));
        report("qmatmul", &format!("gemv_f32 {out}x{inp} n=1"), bytes, secs, ceiling, "");
    }
    c.final_summary();
}
