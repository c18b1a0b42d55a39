//! `attention` benches: `attn_tree` (split + combine) at 27B shapes (24 query heads, 4 KV heads,
//! head_dim 256) for one node (AR decode) and a 22-node tree, at n_past 512, 8192 and 32768.
//! Roofline: the layer must read the K and V rows once, `(n_past + n) · 4 · 256 · 2 planes · 2 B`
//! (8192: 32 MiB); the figure is those bytes per second (re-reads from L2 are not counted: the
//! tensor-core kernel reads a committed tile once per block of nodes — 3 blocks for 22 nodes —,
//! the f32 kernels once per node). The caches are not rotated: at n_past 512 (2 MiB) they stay in
//! L2.
//!
//! The split pass is the one `attn_tree_min_split` picks for these dims: the tensor-core kernel
//! (`attn_tree_mma_hd256`), or with `FLASHTREE_ATTN_MMA=0` the f32 kernels, which then run with
//! every head-group count `r` (the 6 query heads of a KV head over `r` blocks): the line without
//! `r=` is `r = 1`, the one marked "rule" is what `attn_head_groups` picks for the engine.

use flashtree::gpu::attention::{
    attn_head_groups, attn_tree_min_split, attn_tree_scratch_len, mma_kernel, write_step_param, AttnDims,
};
use flashtree::gpu::DevSpan;
use flashtree_benches::{ceiling_gbps, gpu_or_skip, median_secs, report};
use flashtree_reference::attention::node_batch;
use kernel_abi::{NodeBatch, ATTN_MIN_SPLIT_KEYS};

fn main() {
    let Some(gpu) = gpu_or_skip("attention") else { return };
    let ceiling = ceiling_gbps(&gpu);
    let d = AttnDims { n_head: 24, n_head_kv: 4, head_dim: 256, gated: true, window: 0 };
    let hsz = d.n_head * d.head_dim;
    // A 22-node tree: a chain of 8 with branches (DDTree-like: wide near the root).
    let tree: Vec<i32> = vec![-1, 0, 0, 1, 1, 2, 3, 3, 4, 6, 6, 7, 9, 9, 10, 12, 12, 15, 15, 17, 18, 19];
    for n_past in [512usize, 8192, 32768] {
        for parents in [vec![-1], tree.clone()] {
            let n = parents.len();
            let ctx = n_past + 32;
            let b = node_batch(n_past as u32, &parents);
            let mut bbuf = gpu.zeros::<u32>(std::mem::size_of::<NodeBatch>() / 4).unwrap();
            let bs = write_step_param(&gpu, &b, &mut bbuf).unwrap();
            let kc: Vec<u16> = (0..ctx * d.row()).map(|i| 0x3000 + (i % 1021) as u16).collect();
            let vc: Vec<u16> = (0..ctx * d.row()).map(|i| 0x3400 - (i % 977) as u16).collect();
            let q: Vec<f32> = (0..n * hsz).map(|i| ((i % 97) as f32 - 48.0) / 30.0).collect();
            let (dk, dv) = (gpu.upload(&kc).unwrap(), gpu.upload(&vc).unwrap());
            let (dq, dg) = (gpu.upload(&q).unwrap(), gpu.upload(&q).unwrap());
            let scratch = gpu.zeros::<f32>(attn_tree_scratch_len(d, n, ctx)).unwrap();
            let out = gpu.zeros::<f32>(n * hsz).unwrap();
            let s = |x| DevSpan::of(&gpu, x);
            let (sk, sv) = (DevSpan::of(&gpu, &dk), DevSpan::of(&gpu, &dv));
            let m = ATTN_MIN_SPLIT_KEYS;
            let rule = attn_head_groups(&gpu, d, n, n_past, m).unwrap();
            let group = d.n_head / d.n_head_kv;
            // The tensor-core kernel has no head groups: one line per case.
            let rs = if mma_kernel(d).is_some() { 1 } else { group };
            for r in (1..=rs).filter(|r| group.is_multiple_of(*r)) {
                let secs = median_secs(&gpu, 20, |_| {
                    attn_tree_min_split(&gpu, d, bs, n, s(&dq), s(&dg), sk, sv, ctx, s(&scratch), s(&out), m, r)
                });
                let bytes = ((n_past + n) * d.row() * 2 * 2) as f64;
                let note = match (n_past, n) {
                    (512, _) => "K/V in L2 at this size",
                    (_, 1) => "",
                    _ if mma_kernel(d).is_some() => "tree: committed tiles read once per block of nodes",
                    _ => "tree: shared prefix re-read per node",
                };
                let note = if r == rule { format!("{note} (rule)") } else { note.to_string() };
                let case = if r == 1 {
                    format!("attn_tree n={n} n_past={n_past}")
                } else {
                    format!("attn_tree n={n} n_past={n_past} r={r}")
                };
                report("attn", &case, bytes, secs, ceiling, note.trim_start());
            }
        }
    }
}
