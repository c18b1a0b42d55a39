//! `cpu_matmul` bench: the CPU reference's `Matrix::matmul` (the `--backend cpu` linear layers)
//! on the demo pair's shapes, weights read from DRAM as in a forward, at 1, 8 and 23 inputs (AR, a draft block's half, a 22-budget
//! verify), against two ceilings measured in the same run: the host's read bandwidth (every
//! thread folding its share of 512 MiB — what bounds one input) and the same call's rate on a
//! matrix that stays in the cores' L2 (what bounds many inputs). Also prints the speed-up over
//! `Matrix::matvec` per input, the definition it equals bit for bit. CPU only: runs anywhere.

use std::time::Instant;

use flashtree_reference::model::tensor::Matrix;

/// Median seconds per call of `f` over 7 timed batches (after one warm-up batch), each batch long
/// enough to take ≳ 50 ms.
fn median_secs(mut f: impl FnMut()) -> f64 {
    let t = Instant::now();
    f();
    let once = t.elapsed().as_secs_f64().max(1e-6);
    let reps = ((0.05 / once).ceil() as usize).clamp(1, 10_000);
    for _ in 0..reps {
        f();
    }
    let mut samples: Vec<f64> = (0..7)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..reps {
                f();
            }
            t.elapsed().as_secs_f64() / reps as f64
        })
        .collect();
    samples.sort_by(f64::total_cmp);
    samples[3]
}

fn values(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| ((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) >> 8) as f32 / (1 << 24) as f32 - 0.5)
        .collect()
}

fn main() {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    // Read bandwidth: 512 MiB XOR-folded by every thread (an integer fold vectorises: no add chain).
    let big: Vec<u32> = values(128 << 20, 1).iter().map(|v| v.to_bits()).collect();
    let read = median_secs(|| {
        let x: u32 = std::thread::scope(|sc| {
            let hs: Vec<_> = big
                .chunks(big.len().div_ceil(threads))
                .map(|c| sc.spawn(move || c.iter().fold(0u32, |a, &v| a ^ v)))
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).fold(0, |a, v| a ^ v)
        });
        std::hint::black_box(x);
    });
    let read_gbps = (big.len() * 4) as f64 / read / 1e9;
    drop(big);
    // The same call with its weights in cache: a 256 × 512 matrix (512 KiB, half in each core's
    // L2) by 24 inputs, on the pool as the large shapes run.
    let small = Matrix::new("small", 256, 512, values(256 * 512, 2)).unwrap();
    let xs24: Vec<Vec<f32>> = (0..24).map(|j| values(512, 10 + j)).collect();
    let cache = median_secs(|| {
        std::hint::black_box(small.matmul(&xs24));
    });
    let cache_gmacs = (256 * 512 * 24) as f64 / cache / 1e9;
    println!(
        "CEILING cpu_matmul read {read_gbps:.1} GB/s; in-cache matmul {cache_gmacs:.2} GMAC/s (256x512, 24 inputs); {threads} threads"
    );
    for (name, rows, cols) in
        [("gate/up 512->1024", 1024, 512), ("down 1024->512", 512, 1024), ("head 512->8192", 8192, 512)]
    {
        // As in a forward, the weights come from DRAM: calls cycle through copies of ≥ 256 MiB.
        let copies = (256usize << 20).div_ceil(rows * cols * 4);
        let ws: Vec<Matrix> =
            (0..copies).map(|c| Matrix::new(name, rows, cols, values(rows * cols, 3 + c as u32)).unwrap()).collect();
        for n in [1usize, 8, 23] {
            let xs: Vec<Vec<f32>> = (0..n).map(|j| values(cols, 100 + j as u32)).collect();
            let mut next = 0;
            let fast = median_secs(|| {
                next = (next + 1) % copies;
                std::hint::black_box(ws[next].matmul(&xs));
            });
            let def = median_secs(|| {
                next = (next + 1) % copies;
                std::hint::black_box(xs.iter().map(|x| ws[next].matvec(x)).collect::<Vec<_>>());
            });
            let gbps = (rows * cols * 4) as f64 / fast / 1e9;
            let gmacs = (rows * cols * n) as f64 / fast / 1e9;
            println!(
                "BENCH cpu_matmul {name:<18} n={n:<2} {:>9.1} us {gbps:>6.1} GB/s {:>5.3} of read  {gmacs:>6.2} GMAC/s {:>5.3} of in-cache  {:>5.1}x matvec",
                fast * 1e6,
                gbps / read_gbps,
                gmacs / cache_gmacs,
                def / fast
            );
        }
    }
}
