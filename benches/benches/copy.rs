//! `copy` bench: the `copy_v4` kernel against the ceiling (which includes it).

use flashtree::gpu::copy::copy_v4;
use flashtree_benches::{ceiling_gbps, gpu_or_skip, median_secs, report};

fn main() {
    let Some(gpu) = gpu_or_skip("copy") else { return };
    let ceiling = ceiling_gbps(&gpu);
    let bytes = 1usize << 30;
    let mut src = gpu.zeros::<u8>(bytes).unwrap();
    gpu.fill_bytes(&mut src, 0x5a).unwrap();
    let mut dst = gpu.zeros::<u8>(bytes).unwrap();
    let secs = median_secs(&gpu, 5, |_| copy_v4(&gpu, &src, &mut dst, bytes));
    report("copy", "copy_v4 1 GiB", 2.0 * bytes as f64, secs, ceiling, "");
}
