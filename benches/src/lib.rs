//! Shared helpers of the GPU benches.
//!
//! Every bench reports achieved GB/s and its fraction of the copy-bandwidth ceiling measured in
//! the same run: `.gpu-bundle/run.sh bench` measures it once (`flashtree info --bench`) and
//! passes it in `FLASHTREE_COPY_GBPS`; a bench started by hand measures it itself. Each figure is
//! also appended as a TSV row to `$FLASHTREE_BENCH_SUMMARY` (if set) for the run's table.

use std::io::Write;
use std::time::Duration;

use criterion::Criterion;
use flashtree::gpu::info::DeviceInfo;
use flashtree::gpu::{bandwidth, Gpu, GpuError, GpuTimer};

/// The GPU, or `None` after printing `skipped: no CUDA driver` (benches never fake a result).
pub fn gpu_or_skip(bench: &str) -> Option<Gpu> {
    match Gpu::try_new() {
        Ok(g) => Some(g),
        Err(GpuError::NoDriver) => {
            println!("skipped: no CUDA driver ({bench})");
            None
        }
        Err(e) => panic!("GPU present but unusable: {e}"),
    }
}

/// The bandwidth ceiling in GB/s (read + write of a device-to-device copy).
pub fn ceiling_gbps(gpu: &Gpu) -> f64 {
    if let Some(v) = std::env::var("FLASHTREE_COPY_GBPS").ok().and_then(|s| s.parse::<f64>().ok()) {
        return v;
    }
    let bw = bandwidth::measure_copy(gpu, 4 << 30, 10).expect("measuring copy bandwidth");
    eprintln!("measured copy bandwidth: {:.1} GB/s", bw.ceiling_gbps());
    bw.ceiling_gbps()
}

/// L2 size of the device (benches rotate inputs over more than twice this so that every read
/// comes from device memory).
pub fn l2_bytes(gpu: &Gpu) -> usize {
    DeviceInfo::query(gpu).map(|i| i.l2_bytes.max(0) as usize).unwrap_or(64 << 20)
}

/// Median seconds per call of `work` over 9 event-timed batches of `reps` calls (after warm-up).
pub fn median_secs(gpu: &Gpu, reps: usize, mut work: impl FnMut(usize) -> Result<(), GpuError>) -> f64 {
    let mut i = 0usize;
    for _ in 0..reps {
        work(i).expect("warm-up launch");
        i += 1;
    }
    let mut samples: Vec<f64> = (0..9)
        .map(|_| {
            GpuTimer::time_per_run(gpu, 0, reps, || {
                i += 1;
                work(i)
            })
            .expect("timed launch")
        })
        .collect();
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

/// Prints one result line and appends it to the run's summary.
pub fn report(family: &str, case: &str, bytes: f64, secs: f64, ceiling: f64, note: &str) {
    let gbps = bytes / secs / 1e9;
    let frac = gbps / ceiling;
    println!(
        "BENCH {family:<8} {case:<34} {:>10.2} us {:>9.1} GB/s  {:>5.3} of copy {:.0} GB/s  {note}",
        secs * 1e6,
        gbps,
        frac,
        ceiling
    );
    if let Ok(path) = std::env::var("FLASHTREE_BENCH_SUMMARY") {
        if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
            let _ = writeln!(f, "{family}\t{case}\t{:.3}\t{gbps:.1}\t{frac:.3}\t{ceiling:.1}\t{note}", secs * 1e6);
        }
    }
}

/// Criterion configuration for GPU benches (short: device time is scarce).
pub fn criterion() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20)
        .configure_from_args()
}

/// Criterion timing of `work` with CUDA events: `iters` launches between two events.
pub fn event_duration(gpu: &Gpu, iters: u64, mut work: impl FnMut(usize) -> Result<(), GpuError>) -> Duration {
    let t = GpuTimer::new(gpu).expect("events");
    t.start(gpu).expect("record");
    for i in 0..iters {
        work(i as usize).expect("launch");
    }
    t.stop(gpu).expect("record");
    Duration::from_secs_f64(t.elapsed_ms().expect("elapsed") as f64 * 1e-3)
}
