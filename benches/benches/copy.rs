//! `copy` bench: the `copy_v4` kernel against the ceiling (which includes it).

use flashtree::gpu::copy::{copy_path_rows, copy_v4};
use flashtree::gpu::deltanet::commit_path_words;
use flashtree::gpu::DevSpan;
use flashtree_benches::{ceiling_gbps, gpu_or_skip, median_secs, report};
use kernel_abi::{CommitPath, MAX_NODES};

fn main() {
    let Some(gpu) = gpu_or_skip("copy") else { return };
    let ceiling = ceiling_gbps(&gpu);
    let bytes = 1usize << 30;
    let mut src = gpu.zeros::<u8>(bytes).unwrap();
    gpu.fill_bytes(&mut src, 0x5a).unwrap();
    let mut dst = gpu.zeros::<u8>(bytes).unwrap();
    let secs = median_secs(&gpu, 5, |_| copy_v4(&gpu, &src, &mut dst, bytes));
    report("copy", "copy_v4 1 GiB", 2.0 * bytes as f64, secs, ceiling, "");
    // A commit's feature rows at the 27B pair's shape: 5 captured layers of 5120 f32, an 8-node
    // path out of 23 (every second node) — latency-bound: the figure is a launch's time.
    let (layers, nodes, d, len, n_past) = (5usize, 23usize, 5120usize, 8usize, 700usize);
    let mut cp = CommitPath { n_past: n_past as u32, len: len as u32, nodes: [0; MAX_NODES as usize] };
    for p in 0..len {
        cp.nodes[p] = 2 * p as u32;
    }
    let d_path = gpu.upload(&commit_path_words(&cp)).unwrap();
    let rows_src = gpu.zeros::<f32>(layers * nodes * d).unwrap();
    let store = gpu.zeros::<f32>((n_past + len) * layers * d).unwrap();
    // Safety: `d_path` holds one `CommitPath`.
    let on_device = unsafe { DevSpan::from_raw(DevSpan::of(&gpu, &d_path).ptr(), 1) };
    let (s, t) = (DevSpan::of(&gpu, &rows_src), DevSpan::of(&gpu, &store));
    let secs = median_secs(&gpu, 20, |_| copy_path_rows(&gpu, on_device, len, n_past, s, t, layers, nodes, d));
    let moved = 2.0 * (len * layers * d * 4) as f64;
    report("copy", "copy_path_rows 8 rows x 5 layers x 5120", moved, secs, ceiling, "");
}
