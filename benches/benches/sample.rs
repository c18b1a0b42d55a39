//! `sample::argmax` benches over 248 320-wide rows (the Qwen3.5 vocabulary).
//! Roofline: `rows·cols·4` bytes read. Inputs rotate over > 2× L2 so reads come from DRAM.

use criterion::Throughput;
use flashtree::gpu::sample::{argmax, ArgmaxBuffers};
use flashtree_benches::{ceiling_gbps, criterion, event_duration, gpu_or_skip, l2_bytes, median_secs, report};

const VOCAB: usize = 248_320;

fn main() {
    let Some(gpu) = gpu_or_skip("sample") else { return };
    let ceiling = ceiling_gbps(&gpu);
    let l2 = l2_bytes(&gpu);
    let mut c = criterion();
    for rows in [1usize, 16, 64, 256] {
        let bytes = rows * VOCAB * 4;
        let copies = (2 * l2).div_ceil(bytes).max(1);
        let x: Vec<f32> = (0..rows * VOCAB).map(|i| (((i * 2654435761usize) >> 9) % 100_000) as f32 * 1e-3).collect();
        let bufs: Vec<_> = (0..copies).map(|_| gpu.upload(&x).unwrap()).collect();
        let mut out = ArgmaxBuffers::new(&gpu, rows).unwrap();
        let secs = median_secs(&gpu, 64, |i| argmax(&gpu, &bufs[i % copies], rows, VOCAB, &mut out));
        let note = if rows == 1 { "latency-bound: 1 MB per launch" } else { "" };
        report("sample", &format!("argmax {rows}x{VOCAB}"), bytes as f64, secs, ceiling, note);
        let mut g = c.benchmark_group("sample/argmax");
        g.throughput(Throughput::Bytes(bytes as u64));
        g.bench_function(format!("{rows}x{VOCAB}"), |b| {
            b.iter_custom(|iters| {
                event_duration(&gpu, iters, |i| argmax(&gpu, &bufs[i % copies], rows, VOCAB, &mut out))
            })
        });
        g.finish();
    }
    c.final_summary();
}
