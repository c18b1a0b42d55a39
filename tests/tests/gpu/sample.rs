//! `sample::argmax` vs `flashtree_reference::sample::argmax`: exact (index and value).

use flashtree::gpu::sample::{argmax, ArgmaxBuffers};
use flashtree::gpu::Gpu;
use flashtree_reference::sample as reference;
use flashtree_tests::gpu::gpu_or_skip;
use proptest::prelude::*;

fn logits(seed: u64, n: usize) -> Vec<f32> {
    let mut s = seed | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 40.0
        })
        .collect()
}

fn run(gpu: &Gpu, rows: usize, cols: usize, x: &[f32]) -> (Vec<u32>, Vec<f32>) {
    let dx = gpu.upload(x).unwrap();
    let mut out = ArgmaxBuffers::new(gpu, rows).unwrap();
    gpu.fill_bytes(&mut out.idx, 0xab).unwrap();
    argmax(gpu, &dx, rows, cols, &mut out).unwrap();
    (gpu.download(&out.idx).unwrap(), gpu.download(&out.val).unwrap())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Exact agreement, including planted ties (lowest index wins) and NaNs (never win).
    #[test]
    fn argmax_matches_reference_with_ties_and_nans(
        rows in 1usize..20,
        cols in prop_oneof![1usize..5000, Just(248_320usize), 248_000usize..248_400],
        ties in 0usize..4,
        nans in 0usize..4,
        seed in any::<u64>(),
    ) {
        let Some(gpu) = gpu_or_skip("argmax_matches_reference_with_ties_and_nans") else { return Ok(()) };
        let mut x = logits(seed, rows * cols);
        for r in 0..rows {
            let row = &mut x[r * cols..(r + 1) * cols];
            let (i, v) = reference::argmax(row);
            for t in 0..ties {
                let j = (seed as usize).wrapping_mul(t + 3) % cols;
                if i != u32::MAX { row[j] = v; }
            }
            for t in 0..nans {
                let j = (seed as usize >> 3).wrapping_mul(t + 7) % cols;
                row[j] = f32::NAN;
            }
        }
        let (idx, val) = run(gpu, rows, cols, &x);
        for r in 0..rows {
            let (wi, wv) = reference::argmax(&x[r * cols..(r + 1) * cols]);
            prop_assert_eq!(idx[r], wi, "row {}", r);
            if wi != u32::MAX {
                prop_assert_eq!(val[r].to_bits(), wv.to_bits(), "row {}", r);
            }
        }
    }
}

#[test]
fn argmax_of_all_nan_row_is_u32_max() {
    let Some(gpu) = gpu_or_skip("argmax_of_all_nan_row_is_u32_max") else { return };
    let (idx, _) = run(gpu, 2, 300, &[f32::NAN; 600]);
    assert_eq!(idx, vec![u32::MAX, u32::MAX]);
}

#[test]
fn argmax_rejects_more_rows_than_buffers() {
    let Some(gpu) = gpu_or_skip("argmax_rejects_more_rows_than_buffers") else { return };
    let x = gpu.zeros::<f32>(100).unwrap();
    let mut out = ArgmaxBuffers::new(gpu, 1).unwrap();
    assert!(argmax(gpu, &x, 2, 50, &mut out).is_err());
    assert!(argmax(gpu, &x, 1, 101, &mut out).is_err());
}
