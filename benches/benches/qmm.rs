//! Tensor-core `qmm` at the Qwen3.5-27B shapes, every weight type, n = 1, 8, 16, 22, 32, 33, 64
//! (plus matrices larger than L2), and the fused gate/up SwiGLU kernels at the MLP shape, with
//! the down projection's prep of their output (`qmm-prep`: scanning vs the epilogue's maxima).
//! Roofline: weight bytes once per call over the copy ceiling (x, y, partials are ≤ 2 % of it);
//! past 32 columns a product is two launches that each read W, so its fraction counts W once.
//! Prints time, GB/s, fraction of the copy ceiling and t(n)/t(1). Weight sets smaller than
//! 2× L2 are rotated over several copies so every call streams from device memory.

use criterion::Throughput;
use flashtree::gpu::qmatmul::{qmm_swiglu_rows, swiglu_tail_rows, AccumPlan, PackedWeight, QWeight, QmmWorkspace};
use flashtree::gpu::{DevSpan, Gpu, GpuError};
use flashtree_benches::{ceiling_gbps, criterion, event_duration, gpu_or_skip, l2_bytes, median_secs, report};
use flashtree_reference::quant::GgmlType;

/// (in, out) as in the "in→out".
const SHAPES: [(usize, usize); 6] =
    [(5120, 10240), (5120, 6144), (5120, 17408), (17408, 5120), (6144, 5120), (5120, 12288)];
const NS: [usize; 7] = [1, 8, 16, 22, 32, 33, 64];
/// Columns of the activation and output buffers (the most of `NS`).
const MAX_N: usize = 64;

fn weights(ty: GgmlType, out: usize, inp: usize, seed: u64) -> Vec<u8> {
    let bytes = out * inp / ty.block_size() * ty.type_size();
    let mut s = seed | 1;
    let mut v: Vec<u8> = Vec::with_capacity(bytes + 8);
    while v.len() < bytes {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        v.extend_from_slice(&s.to_le_bytes());
    }
    v.truncate(bytes);
    // Finite, realistic scales: patch the f16 scale fields of each block.
    let d = half::f16::from_f32(0.002).to_bits().to_le_bytes();
    let ts = ty.type_size();
    match ty {
        GgmlType::Q4_K | GgmlType::Q5_K => v.chunks_exact_mut(ts).for_each(|b| {
            b[0..2].copy_from_slice(&d);
            b[2..4].copy_from_slice(&d)
        }),
        GgmlType::Q6_K => v.chunks_exact_mut(ts).for_each(|b| b[208..210].copy_from_slice(&d)),
        GgmlType::Q8_0 => v.chunks_exact_mut(ts).for_each(|b| b[0..2].copy_from_slice(&d)),
        // Half types: keep every value finite and modest (exponent field forced small).
        GgmlType::F16 => v.chunks_exact_mut(2).for_each(|h| h[1] = (h[1] & 0x83) | 0x20),
        GgmlType::BF16 => v.chunks_exact_mut(2).for_each(|h| h[1] = (h[1] & 0x80) | 0x3c),
        GgmlType::F32 => v.chunks_exact_mut(4).for_each(|f| f[3] = (f[3] & 0x80) | 0x3c),
        _ => {}
    }
    v
}

/// The whole call: activation prep of `x [n, in]`, then the product into `y [n, out]`.
/// The benches' activations: `MAX_N` columns of `inp` values in [-2, 2).
fn activations(inp: usize) -> Vec<f32> {
    (0..MAX_N * inp).map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0).collect()
}

/// Uploads of `packed` (`bytes` of weights each) enough that cycling through them reads DRAM, not
/// L2 (`⌈2·l2 / bytes⌉`), and at least `min`.
fn l2_busting_copies(gpu: &Gpu, packed: PackedWeight, bytes: usize, l2: usize, min: usize) -> Vec<QWeight> {
    let copies = (2 * l2).div_ceil(bytes).max(min);
    (0..copies).map(|_| packed.upload(gpu).unwrap()).collect()
}

/// A fused gate/up of `ff` features over `inp` of type `ty` (weight seeds 11 and 12), packed, and
/// its weight bytes.
fn gate_up(ty: GgmlType, ff: usize, inp: usize) -> (PackedWeight, usize) {
    let (gate, up) = (weights(ty, ff, inp, 11), weights(ty, ff, inp, 12));
    (PackedWeight::pack_gate_up(ty, &gate, &up, ff, inp).unwrap(), gate.len() + up.len())
}

fn qmm(
    gpu: &Gpu,
    w: &QWeight,
    x: DevSpan<f32>,
    n: usize,
    y: DevSpan<f32>,
    ws: &mut QmmWorkspace,
) -> Result<(), GpuError> {
    w.prepare_x(gpu, x, n, ws)?;
    w.matmul(gpu, n, y, ws)
}

fn main() {
    let Some(gpu) = gpu_or_skip("qmm") else { return };
    let ceiling = ceiling_gbps(&gpu);
    let l2 = l2_bytes(&gpu);
    let mut c = criterion();
    let mut cases: Vec<(GgmlType, usize, usize)> = Vec::new();
    for ty in
        [GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q8_0, GgmlType::BF16, GgmlType::F16, GgmlType::F32]
    {
        for (inp, out) in SHAPES {
            cases.push((ty, inp, out));
        }
    }
    // Every 27B Q4_K/Q5_K matrix fits the H200's 60 MiB L2 (Q5_K 5120→17408: 58 MiB), and the
    // other types' 27B matrices (60–180 MB) are short launches whose time is set by how the
    // blocks fill the SMs (docs/perf/qmatmul.md, session 6). So each type is also measured on
    // gate and up fused (5120→34816) and the block types on the vocabulary projection shape (the
    // model's output head: Q6_K in Q4_K_M files, Q8_0/Q4_K/Q5_K in others), where a launch is long
    // enough to show the kernel's steady state.
    for ty in [GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q8_0, GgmlType::BF16, GgmlType::F16] {
        cases.push((ty, 5120, 34_816));
    }
    for ty in [GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q8_0] {
        cases.push((ty, 5120, 248_320));
    }
    // FLASHTREE_BENCH_FILTER=<substring of "Q4_K 5120->17408"> runs matching cases only.
    let filter = std::env::var("FLASHTREE_BENCH_FILTER").unwrap_or_default();
    cases.retain(|(ty, inp, out)| format!("{ty:?} {inp}->{out}").contains(&filter));
    let mut ws = QmmWorkspace::new(&gpu, 17408, 248_320).unwrap();
    for (ty, inp, out) in cases {
        let host = weights(ty, out, inp, (inp * 31 + out) as u64);
        let bytes = host.len();
        let ws_bufs = l2_busting_copies(&gpu, PackedWeight::pack(ty, &host, out, inp).unwrap(), bytes, l2, 1);
        let copies = ws_bufs.len();
        drop(host);
        let x = activations(inp);
        let dx = gpu.upload(&x).unwrap();
        let dy = gpu.zeros::<f32>(MAX_N * out).unwrap();
        let (xs, ys) = (DevSpan::of(&gpu, &dx), DevSpan::of(&gpu, &dy));
        let note_l2 = if bytes < 2 * l2 { format!("{copies} copies rotated") } else { String::new() };
        for n in [1usize, 22] {
            if let Some((resident, row_blocks)) = ws_bufs[0].cluster_residency(&gpu, n, false).unwrap() {
                println!(
                    "INFO qmm-cluster {ty:?} {inp}->{out} n={n}: split {} — {resident} clusters resident for {row_blocks} row blocks: {}",
                    ws_bufs[0].ksplit(),
                    if resident >= row_blocks { "clusters" } else { "global-memory reduction" }
                );
            }
        }
        let (mut t1, mut m1) = (0.0, 0.0);
        for n in NS {
            // Whole call: activation prep + matmul.
            let secs = median_secs(&gpu, 20, |i| qmm(&gpu, &ws_bufs[i % copies], xs, n, ys, &mut ws));
            // Matmul alone on prepared activations (the prep is shared by every matmul that reads
            // the same input: q/k/v, gate/up).
            ws_bufs[0].prepare_x(&gpu, xs, n, &mut ws).unwrap();
            let mm = median_secs(&gpu, 20, |i| ws_bufs[i % copies].matmul(&gpu, n, ys, &mut ws));
            if n == 1 {
                t1 = secs;
                m1 = mm;
            }
            let note = format!("t(n)/t(1) = {:.2} {note_l2}", secs / t1);
            report("qmm", &format!("{ty:?} {inp}->{out} n={n}"), bytes as f64, secs, ceiling, &note);
            let note = format!("matmul only; t(n)/t(1) = {:.2} {note_l2}", mm / m1);
            report("qmm-mm", &format!("{ty:?} {inp}->{out} n={n}"), bytes as f64, mm, ceiling, &note);
            if ty == GgmlType::Q4_K && inp == 5120 && out == 17408 && (n == 1 || n == 22) {
                let mut g = c.benchmark_group("qmm/q4_k");
                g.throughput(Throughput::Bytes(bytes as u64));
                g.bench_function(format!("{inp}->{out} n={n}"), |b| {
                    b.iter_custom(|iters| {
                        event_duration(&gpu, iters, |i| qmm(&gpu, &ws_bufs[i % copies], xs, n, ys, &mut ws))
                    })
                });
                g.finish();
            }
        }
    }
    swiglu_cases(&gpu, &mut c, ceiling, l2, &filter, &mut ws);
    accum_cases(&gpu, ceiling, l2, &filter);
    c.final_summary();
}

/// Median seconds of one call of two sites, `site(ws, 2i)` and `site(ws, 2i + 1)` (the caller
/// rotates its weight copies by that index); with `accum` between `begin_accumulation` and
/// `end_accumulation` — two products use pairs 0 and 1, so no memset runs inside the call.
fn two_sites(
    gpu: &Gpu,
    ws: &mut QmmWorkspace,
    accum: bool,
    mut site: impl FnMut(&mut QmmWorkspace, usize) -> Result<(), GpuError>,
) -> f64 {
    median_secs(gpu, 20, |i| {
        if accum {
            ws.begin_accumulation(gpu)?;
        }
        site(ws, 2 * i)?;
        site(ws, 2 * i + 1)?;
        if accum {
            ws.end_accumulation(gpu)?;
        }
        Ok(())
    })
}

/// The 27B's accumulated products (output and down projections into the 5120-wide residual) as
/// the engine runs them, each followed by its norm site: `qmm-site` = `matmul` (the split plan's
/// own reduction) + `prepare_norm`, `qmm-site-accum` = `matmul_accum` + `prepare_norm_accum`
/// (`gpu::qmatmul` accum.rs), measured back to back. One call is two sites (pairs 0 and 1, so
/// the accumulators stay clean without a memset), the roofline counts W twice.
fn accum_cases(gpu: &Gpu, ceiling: f64, l2: usize, filter: &str) {
    swiglu_accum_cases(gpu, ceiling, l2, filter);
    let d = 5120usize;
    for (ty, inp) in [(GgmlType::Q4_K, 6144usize), (GgmlType::Q4_K, 17408), (GgmlType::Q6_K, 17408)] {
        let name = format!("{ty:?} {inp}->{d}");
        if !format!("accum {name}").contains(filter) {
            continue;
        }
        let host = weights(ty, d, inp, (inp * 31 + d) as u64);
        let bytes = host.len();
        let bufs = l2_busting_copies(gpu, PackedWeight::pack(ty, &host, d, inp).unwrap(), bytes, l2, 2);
        let copies = bufs.len();
        drop(host);
        let mut ws = QmmWorkspace::new(gpu, inp, d).unwrap();
        ws.enable_accumulation(gpu, d).unwrap();
        let x = activations(inp);
        let hv: Vec<f32> = (0..MAX_N * d).map(|i| ((i * 13 % 97) as f32 - 48.0) / 24.0).collect();
        let nw: Vec<f32> = (0..d).map(|i| 1.0 + (i % 7) as f32 / 16.0).collect();
        let (dx, dh, dw) = (gpu.upload(&x).unwrap(), gpu.upload(&hv).unwrap(), gpu.upload(&nw).unwrap());
        let (dh2, dy) = (gpu.zeros::<f32>(MAX_N * d).unwrap(), gpu.zeros::<f32>(MAX_N * d).unwrap());
        let sp = |b| DevSpan::of(gpu, b);
        for n in [1usize, 16, 22, 32] {
            // Two sites per call: x prepared, product, norm site (which prepares the next input).
            let plain = two_sites(gpu, &mut ws, false, |ws, s| {
                let w = &bufs[s % copies];
                w.prepare_x(gpu, sp(&dx), n, ws)?;
                w.matmul(gpu, n, sp(&dy), ws)?;
                ws.prepare_norm(gpu, sp(&dh), Some((sp(&dy), sp(&dh2))), sp(&dw), n, d, 1e-6, false)
            });
            let label = format!("{name} n={n}");
            let note = format!("prep_x + matmul + prepare_norm, twice; plan {:?}", bufs[0].plan());
            report("qmm-site", &label, 2.0 * bytes as f64, plain, ceiling, &note);
            for (rule, row) in
                [(AccumPlan::Matrix, "qmm-site-accum-matrix"), (AccumPlan::OneWave, "qmm-site-accum-wave")]
            {
                ws.set_accum_plan(rule);
                let accum = two_sites(gpu, &mut ws, true, |ws, s| {
                    let w = &bufs[s % copies];
                    w.prepare_x(gpu, sp(&dx), n, ws)?;
                    let a = ws.matmul_accum(gpu, w, n)?;
                    ws.prepare_norm_accum(gpu, sp(&dh), a, sp(&dh2), sp(&dw), n, d, 1e-6, false)
                });
                let plan = ws.accum_split(gpu, &bufs[0]).unwrap();
                let note = format!(
                    "prep_x + matmul_accum + prepare_norm_accum, twice; plan {plan:?}; accum/plain = {:.3}",
                    accum / plain
                );
                report(row, &label, 2.0 * bytes as f64, accum, ceiling, &note);
            }
        }
    }
}

/// The fused gate/up SwiGLU kernels at the 27B MLP shape (5120 → 2 × 17408), every type:
/// `qmm-swiglu` (matmul on prepared x, output `silu(g)·u` `[n, 17408]`) against the plain kernel
/// on the same packed bytes as one `[34816, 5120]` matrix (`qmm-gateup`, output `[n, 34816]`),
/// measured back to back. The fused kernel saves the second pass the plain one needs (reading
/// both products and writing `silu(g)·u`) and a launch; the ratio shows what the epilogue costs.
fn swiglu_cases(gpu: &Gpu, c: &mut criterion::Criterion, ceiling: f64, l2: usize, filter: &str, ws: &mut QmmWorkspace) {
    let (inp, ff) = (5120usize, 17408usize);
    let rows = qmm_swiglu_rows(ff);
    let dy = gpu.zeros::<f32>(MAX_N * rows).unwrap();
    let x = activations(inp);
    let dx = gpu.upload(&x).unwrap();
    let (xs, ys) = (DevSpan::of(gpu, &dx), DevSpan::of(gpu, &dy));
    for ty in
        [GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q8_0, GgmlType::BF16, GgmlType::F16, GgmlType::F32]
    {
        let name = format!("{ty:?} {inp}->2x{ff}");
        if !format!("swiglu {name}").contains(filter) {
            continue;
        }
        let (packed, bytes) = gate_up(ty, ff, inp);
        let bufs = l2_busting_copies(gpu, packed, bytes, l2, 1);
        let copies = bufs.len();
        let (mut f1, mut p1) = (0.0, 0.0);
        for n in NS {
            bufs[0].prepare_x(gpu, xs, n, ws).unwrap();
            let fused = median_secs(gpu, 20, |i| bufs[i % copies].swiglu(gpu, n, ys, ws));
            // The plain kernel over the same interleaved rows (`out() = rows`).
            let plain = median_secs(gpu, 20, |i| bufs[i % copies].matmul(gpu, n, ys, ws));
            if n == 1 {
                (f1, p1) = (fused, plain);
            }
            let note = format!("matmul only; t(n)/t(1) = {:.2}; fused/plain = {:.3}", fused / f1, fused / plain);
            report("qmm-swiglu", &format!("{name} n={n}"), bytes as f64, fused, ceiling, &note);
            let note = format!("matmul only, no epilogue; t(n)/t(1) = {:.2}", plain / p1);
            report("qmm-gateup", &format!("{name} n={n}"), bytes as f64, plain, ceiling, &note);
            if ty == GgmlType::Q4_K && (n == 1 || n == 22) {
                let mut g = c.benchmark_group("qmm_swiglu/q4_k");
                g.throughput(Throughput::Bytes(bytes as u64));
                g.bench_function(format!("{inp}->2x{ff} n={n}"), |b| {
                    b.iter_custom(|iters| event_duration(gpu, iters, |i| bufs[i % copies].swiglu(gpu, n, ys, ws)))
                });
                g.finish();
                prep_cases(gpu, &bufs[0], n, ys, ff, ceiling, ws);
            }
        }
    }
}

/// `qmm_prep_x` of a fused SwiGLU output `y [n, ff]` (the down projection's prep), scanning each
/// column for its max (`QmmWorkspace::prepare`) and from the epilogue's row-group maxima
/// (`prepare_swiglu`). Bytes: `y` read once (4 per value; the scan's re-reads are L2 hits and
/// not counted), `xh` and the core-matrix plane written (2 + 2), unit and group sums (1/4).
#[allow(clippy::too_many_arguments)]
fn prep_cases(gpu: &Gpu, w: &QWeight, n: usize, ys: DevSpan<f32>, ff: usize, ceiling: f64, ws: &mut QmmWorkspace) {
    w.swiglu(gpu, n, ys, ws).unwrap();
    let bytes = (n * ff) as f64 * 8.25;
    let scan = median_secs(gpu, 200, |_| ws.prepare(gpu, ys, n, ff, false));
    let maxes = median_secs(gpu, 200, |_| ws.prepare_swiglu(gpu, ys, n, ff, false));
    let note = format!("scanning every block's column; maxima/scan = {:.3}", maxes / scan);
    report("qmm-prep", &format!("scan ff={ff} n={n}"), bytes, scan, ceiling, &note);
    report("qmm-prep", &format!("swiglu maxima ff={ff} n={n}"), bytes, maxes, ceiling, "column max from the epilogue");
}

/// The 27B's fused gate/up with the down projection's prep, as the engine runs it:
/// `qmm-swiglu-site` = `swiglu` (the split tail reduced in the kernel) + `prepare_swiglu`,
/// `qmm-swiglu-site-accum` = `swiglu_accum` (the split tail accumulated) + `prepare_swiglu_accum`.
/// Two sites per call (the tail pairs stay clean without a memset); the roofline counts W twice.
fn swiglu_accum_cases(gpu: &Gpu, ceiling: f64, l2: usize, filter: &str) {
    let (inp, ff) = (5120usize, 17408usize);
    for ty in [GgmlType::Q4_K] {
        let name = format!("{ty:?} {inp}->2x{ff}");
        if !format!("accum swiglu {name}").contains(filter) {
            continue;
        }
        let (packed, bytes) = gate_up(ty, ff, inp);
        let bufs = l2_busting_copies(gpu, packed, bytes, l2, 2);
        let copies = bufs.len();
        let mut ws = QmmWorkspace::new(gpu, ff, qmm_swiglu_rows(ff)).unwrap();
        let tail = swiglu_tail_rows(&bufs[0]);
        if tail == 0 || ws.enable_swiglu_accumulation(gpu, tail).is_err() {
            println!("INFO qmm-swiglu-site {name}: plan {:?} has no tail that accumulates", bufs[0].plan());
            continue;
        }
        let x = activations(inp);
        let dx = gpu.upload(&x).unwrap();
        let dy = gpu.zeros::<f32>(MAX_N * ff).unwrap();
        let sp = |b| DevSpan::of(gpu, b);
        for n in [1usize, 16, 22, 32] {
            let plain = two_sites(gpu, &mut ws, false, |ws, s| {
                let w = &bufs[s % copies];
                w.prepare_x(gpu, sp(&dx), n, ws)?;
                w.swiglu(gpu, n, sp(&dy), ws)?;
                ws.prepare_swiglu(gpu, sp(&dy), n, ff, false)
            });
            let accum = two_sites(gpu, &mut ws, true, |ws, s| {
                let w = &bufs[s % copies];
                w.prepare_x(gpu, sp(&dx), n, ws)?;
                let t = ws.swiglu_accum(gpu, w, n, sp(&dy))?;
                ws.prepare_swiglu_accum(gpu, sp(&dy), t, n, ff, false)
            });
            let label = format!("{name} n={n}");
            let note = format!("prep_x + swiglu + prepare_swiglu, twice; plan {:?}", bufs[0].plan());
            report("qmm-swiglu-site", &label, 2.0 * bytes as f64, plain, ceiling, &note);
            let note = format!(
                "prep_x + swiglu_accum + prepare_swiglu_accum, twice; tail {tail} rows; accum/plain = {:.3}",
                accum / plain
            );
            report("qmm-swiglu-site-accum", &label, 2.0 * bytes as f64, accum, ceiling, &note);
        }
    }
}
