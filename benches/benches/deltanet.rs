//! `deltanet` benches at Qwen3.5-27B shapes (n_k 16, n_v 48, d_k = d_v 128, conv kernel 4):
//! `gdn_forward` of one layer at n = 1 (AR) and n = 22 (a DDTree-like verify tree), its conv/norm
//! step alone at n = 22 and 23 with one and with two nodes per block, the gated
//! norm + out-projection prep (`gdn_norm_prep`'s one-block and cluster kernels against
//! `gdn_gated_norm` + `qmm_prep_x`) at the
//! same n, and `gdn_commit` of a 4-node path over all 48 layers.
//!
//! Roofline: the forward's DRAM-sized traffic is the layer's state read once (`n_v·d_k·d_v·4` =
//! 3.1 MB); everything else (mixed rows, scratch, outputs: ≤ 4 MB at n = 22, mostly L2) is
//! reported separately in the note. The forward rotates over the 48 layers' states (151 MB, > 2×
//! L2) so every state read comes from DRAM. Commit: state read + written once per layer
//! (`2·48·3.1 MB`). Reported as state bytes per second and their fraction of copy bandwidth.

use flashtree::gpu::deltanet::{
    commit_path_words, gdn_commit, gdn_forward, gdn_gated_norm, gdn_norm_prep_with, gdn_prep, gdn_replay_words,
    gdn_scratch_len, node_batch_words, GdnIo, GdnLayerState, GdnNormPrepKernel, GdnPrepKernel, GdnShape, GdnWeights,
};
use flashtree::gpu::qmatmul::QmmWorkspace;
use flashtree::gpu::{DevSpan, Gpu};
use flashtree_benches::{ceiling_gbps, gpu_or_skip, median_secs, report};
use flashtree_reference::deltanet::{commit_path, node_batch};
use kernel_abi::{CommitPath, GdnReplay, NodeBatch};

const LAYERS: usize = 48;

/// A 22-node tree shaped like a DDTree verify: a 9-deep trunk with branches (Σ depth = 71).
const TREE22: [i32; 22] = [-1, 0, 1, 2, 3, 4, 5, 6, 7, -1, 0, 1, 9, 2, 10, 3, 12, 4, 13, 5, 14, 16];

fn values(n: usize, seed: u32, scale: f32) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let h = (i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed.wrapping_mul(40_503));
            ((h >> 8) as f32 / (1u32 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

fn upload_words(gpu: &Gpu, w: &[u32]) -> (flashtree::gpu::CudaSlice<u32>, u64) {
    let d = gpu.upload(w).unwrap();
    let p = DevSpan::of(gpu, &d).ptr();
    (d, p)
}

/// The device buffers of `nb` and its replay schedule, and their spans (valid while the buffers
/// live).
type NodesOnDevice = ([flashtree::gpu::CudaSlice<u32>; 2], DevSpan<NodeBatch>, DevSpan<GdnReplay>);

fn upload_nodes(gpu: &Gpu, nb: &NodeBatch) -> NodesOnDevice {
    let (nbd, nbp) = upload_words(gpu, &node_batch_words(nb));
    let (rpd, rpp) = upload_words(gpu, &gdn_replay_words(nb).unwrap());
    // Safety: the buffers hold one NodeBatch and one GdnReplay, returned with the spans.
    let spans = unsafe { (DevSpan::from_raw(nbp, 1), DevSpan::from_raw(rpp, 1)) };
    ([nbd, rpd], spans.0, spans.1)
}

fn main() {
    let Some(gpu) = gpu_or_skip("deltanet") else { return };
    let ceiling = ceiling_gbps(&gpu);
    let s = GdnShape { n_k: 16, n_v: 48, d_k: 128, d_v: 128, conv_kernel: 4, eps: 1e-6 };
    let (ch, vd, nv) = (s.conv_ch(), s.value_len(), s.n_v);
    let sl = gdn_scratch_len(&s);
    let conv_w = gpu.upload(&values(ch * s.conv_kernel, 1, 0.5)).unwrap();
    let ssm_a = gpu.upload(&values(nv, 2, 1.0).iter().map(|x| -0.1 - x.abs()).collect::<Vec<_>>()).unwrap();
    let dt_bias = gpu.upload(&values(nv, 3, 1.0)).unwrap();
    let norm_w = gpu.upload(&values(s.d_v, 4, 1.0)).unwrap();
    let z = gpu.upload(&values(32 * vd, 5, 2.0)).unwrap();
    let a = gpu.upload(&values(32 * nv, 6, 2.0)).unwrap();
    let b = gpu.upload(&values(32 * nv, 7, 2.0)).unwrap();
    let out = gpu.zeros::<f32>(32 * vd).unwrap();
    let mixed = gpu.upload(&values(LAYERS * s.mixed_len(), 8, 1.0)).unwrap();
    let conv = gpu.upload(&values(LAYERS * s.conv_state_len(), 9, 1.0)).unwrap();
    let state = gpu.upload(&values(LAYERS * s.state_len(), 10, 0.05)).unwrap();
    let scratch = gpu.zeros::<f32>(LAYERS * sl).unwrap();
    let sp = |x| DevSpan::of(&gpu, x);
    let w = GdnWeights { conv_w: sp(&conv_w), ssm_a: sp(&ssm_a), dt_bias: sp(&dt_bias), norm_w: sp(&norm_w) };
    let io = GdnIo::dense(&s, sp(&mixed), sp(&z), sp(&a), sp(&b), sp(&out));
    let layer = |l: usize| -> (GdnIo, GdnLayerState) {
        let at = |x: DevSpan<f32>, len: usize| x.sub(l * len, len, "layer").unwrap();
        (
            GdnIo { mixed: at(sp(&mixed), s.mixed_len()), ..io },
            GdnLayerState {
                conv_state: at(sp(&conv), s.conv_state_len()),
                state: at(sp(&state), s.state_len()),
                scratch: at(sp(&scratch), sl),
            },
        )
    };
    let state_bytes = (s.state_len() * 4) as f64;

    for parents in [&[-1i32][..], &TREE22[..]] {
        let n = parents.len();
        let nb = node_batch(1000, parents);
        let (_bufs, nbs, rps) = upload_nodes(&gpu, &nb);
        let secs = median_secs(&gpu, 96, |i| {
            let (io, st) = layer(i % LAYERS);
            gdn_forward(&gpu, &s, n, nbs, rps, &w, &io, &st)
        });
        let depth: u32 = nb.depth[..n].iter().map(|d| d + 1).sum();
        let note = format!(
            "state read once; +{:.1} MB L2-side (inputs, scratch, out); Σ(depth+1) = {depth}",
            (n * (ch + 3 * vd + 2 * nv) * 4 + n * (ch + 2 * vd + 2 * nv) * 4) as f64 / 1e6
        );
        report("deltanet", &format!("gdn_forward 27B n={n}"), state_bytes, secs, ceiling, &note);
    }

    // The conv/norm step alone, one node per block (`gdn_prep`) and two (`gdn_prep_pairs`), at
    // 22 nodes and at 23 (the tree plus a leaf: what budget 22 verifies). Bytes: the conv inputs (`K + 1` rows of `conv_ch` per node, mostly L2) read and
    // q, k, v, α, β written; latency-bound — what differs is the waves (80 blocks per node).
    let mut tree23 = TREE22.to_vec();
    tree23.push(21);
    for parents in [&TREE22[..], &tree23[..]] {
        let n = parents.len();
        let nb = node_batch(1000, parents);
        let (_bufs, nbs, _rps) = upload_nodes(&gpu, &nb);
        let bytes = (n * ch * (s.conv_kernel + 2) * 4 + n * 2 * nv * 4) as f64;
        for (name, which) in [("gdn_prep", GdnPrepKernel::OneNode), ("gdn_prep_pairs", GdnPrepKernel::Pairs)] {
            let secs = median_secs(&gpu, 200, |i| {
                let (io, st) = layer(i % LAYERS);
                gdn_prep(&gpu, &s, n, nbs, &w, &io, &st, which)
            });
            report("deltanet", &format!("{name} 27B n={n}"), bytes, secs, ceiling, "latency-bound: 80 blocks per node");
        }
    }

    // The gated norm + the out projection's prep of one layer's forward output: fused
    // (`gdn_norm_prep`, the engine's default) and as the two launches it replaces. Bytes: `o`
    // and `z` read once, the f16 fragment and core-matrix planes and the unit sums written
    // (`n·vd·(8 + 4 + 1/8)`); both lines count the same bytes (the fused kernel's L2 re-reads
    // of its row per chunk and the two-kernel path's f32 `out` round trip are not counted).
    let mut ws = QmmWorkspace::new(&gpu, vd, 8).unwrap();
    for parents in [&[-1i32][..], &TREE22[..]] {
        let n = parents.len();
        let nb = node_batch(1000, parents);
        let (_bufs, nbs, rps) = upload_nodes(&gpu, &nb);
        let (io, st) = layer(0);
        gdn_forward(&gpu, &s, n, nbs, rps, &w, &io, &st).unwrap();
        let bytes = (n * vd) as f64 * (8.0 + 4.0 + 0.125);
        for (which, name, kernel) in [
            (GdnNormPrepKernel::OneBlock, "one block", "gdn_norm_prep_dv128: one block per chunk, each its whole row"),
            (GdnNormPrepKernel::Cluster, "cluster", "gdn_norm_prep_cluster_dv128: a cluster per column"),
        ] {
            let secs = median_secs(&gpu, 200, |_| gdn_norm_prep_with(&gpu, &s, n, &w, &io, &st, &mut ws, false, which));
            let note = format!("{kernel}; o, z read once; x f16 + core-matrix plane + sums written; latency-bound");
            report("deltanet", &format!("gdn_norm_prep ({name}) 27B n={n}"), bytes, secs, ceiling, &note);
        }
        let secs = median_secs(&gpu, 200, |_| {
            gdn_gated_norm(&gpu, &s, n, nbs, &w, &io, &st)?;
            ws.prepare(&gpu, io.out, n, vd, false)
        });
        let note = "the two launches gdn_norm_prep replaces (same bytes counted)";
        report("deltanet", &format!("gdn_gated_norm+qmm_prep_x 27B n={n}"), bytes, secs, ceiling, note);
    }

    // Commit a 4-node path of the 22-node tree in all layers (the forward above left every
    // layer's scratch filled).
    for layer_i in 0..LAYERS {
        let nb = node_batch(1000, &TREE22);
        let (_bufs, nbs, rps) = upload_nodes(&gpu, &nb);
        let (io, st) = layer(layer_i);
        gdn_forward(&gpu, &s, TREE22.len(), nbs, rps, &w, &io, &st).unwrap();
    }
    let (_pd, pp) = upload_words(&gpu, &commit_path_words(&commit_path(1000, &[0, 1, 2, 3])));
    let ps: DevSpan<CommitPath> = unsafe { DevSpan::from_raw(pp, 1) };
    let secs = median_secs(&gpu, 8, |_| {
        gdn_commit(&gpu, &s, LAYERS, ps, 4, sp(&mixed), s.conv_ch(), sp(&scratch), sp(&state), sp(&conv))
    });
    report(
        "deltanet",
        "gdn_commit 27B 48 layers path=4",
        2.0 * LAYERS as f64 * state_bytes,
        secs,
        ceiling,
        "state read + written once per layer",
    );
}
