//! `sample` benches over 248 320-wide rows (the Qwen3.5 vocabulary): argmax, and top-k
//! log-probs (`topk_logprobs_rows`: the draft's 15 positions, and 1 and 32; k = 8 and 64).
//! Roofline: `rows·cols·4` bytes read (top-k's scratch traffic, `rows·61·(8k + 8)` bytes, is
//! ≤ 3 % of it). Inputs rotate over > 2× L2 so reads come from DRAM.
//!
//! Seeded sampling (`sample_rows`: 1, 15 and 32 rows; three rules): GB/s of *one* read of the
//! logits against the copy ceiling — the kernel reads each row up to 12 times (module doc of
//! `gpu-kernels` `sample::draw`), so this is the fraction of a single-pass kernel it achieves.

use criterion::Throughput;
use flashtree::gpu::sample::{argmax, sample_rows, topk_logprobs_rows, topk_scratch_len, ArgmaxBuffers};
use flashtree::gpu::DevSpan;
use flashtree_benches::{ceiling_gbps, criterion, event_duration, gpu_or_skip, l2_bytes, median_secs, report};
use kernel_abi::sampling::SampleRule;

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
    for rows in [1usize, 15, 32] {
        let bytes = rows * VOCAB * 4;
        let copies = (2 * l2).div_ceil(bytes).max(1);
        let x: Vec<f32> = (0..rows * VOCAB).map(|i| (((i * 2654435761usize) >> 9) % 100_000) as f32 * 2e-4).collect();
        let bufs: Vec<_> = (0..copies).map(|_| gpu.upload(&x).unwrap()).collect();
        for k in [8usize, 64] {
            let scratch = gpu.zeros::<u32>(topk_scratch_len(rows, VOCAB, k)).unwrap();
            let tok = gpu.zeros::<u32>(rows * k).unwrap();
            let lp = gpu.zeros::<f32>(rows * k).unwrap();
            let (ss, ts, ls) = (DevSpan::of(&gpu, &scratch), DevSpan::of(&gpu, &tok), DevSpan::of(&gpu, &lp));
            let secs = median_secs(&gpu, 64, |i| {
                topk_logprobs_rows(&gpu, DevSpan::of(&gpu, &bufs[i % copies]), rows, VOCAB, k, ss, ts, ls)
            });
            let note = if rows == 1 { "latency-bound: 1 MB per launch" } else { "" };
            report("sample", &format!("topk k={k} {rows}x{VOCAB}"), bytes as f64, secs, ceiling, note);
        }
    }
    let rules = [
        ("T=0.7 k=20 p=0.95", SampleRule { temperature: 0.7, top_k: 20, top_p: 0.95, min_p: 0.0, seed: 1 }),
        ("T=1 unfiltered", SampleRule { temperature: 1.0, top_k: 0, top_p: 1.0, min_p: 0.0, seed: 2 }),
        ("T=0.7 p=0.8 min_p=0.05", SampleRule { temperature: 0.7, top_k: 0, top_p: 0.8, min_p: 0.05, seed: 3 }),
    ];
    for rows in [1usize, 15, 32] {
        let bytes = rows * VOCAB * 4;
        let copies = (2 * l2).div_ceil(bytes).max(1);
        // Logits spread over 0..25 (a peaked head over a long tail, like a language model's).
        let x: Vec<f32> = (0..rows * VOCAB)
            .map(|i| {
                let u = (((i * 2654435761usize) >> 9) % 100_000) as f32 * 1e-5;
                25.0 * u * u * u
            })
            .collect();
        let bufs: Vec<_> = (0..copies).map(|_| gpu.upload(&x).unwrap()).collect();
        let tok = gpu.zeros::<u32>(rows).unwrap();
        let positions: Vec<u64> = (0..rows as u64).collect();
        for (name, rule) in &rules {
            let secs = median_secs(&gpu, 32, |i| {
                sample_rows(
                    &gpu,
                    DevSpan::of(&gpu, &bufs[i % copies]),
                    VOCAB,
                    rule,
                    &positions,
                    DevSpan::of(&gpu, &tok),
                )
            });
            report(
                "sample",
                &format!("sample_rows {name} {rows}x{VOCAB}"),
                bytes as f64,
                secs,
                ceiling,
                "one block per row",
            );
        }
    }
    c.final_summary();
}
