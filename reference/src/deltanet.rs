//! Reference of `deltanet`: the Gated DeltaNet layer core over a tree of nodes and the commit of
//! an accepted path, on the same flat arrays, [`NodeBatch`] and [`CommitPath`] the GPU kernels
//! take, built on the proven per-token math of [`crate::model::deltanet`] (`conv_step`,
//! `conv_window_push`, `delta_inputs`, `recurrent_step`) and [`crate::model::ops`].
//!
//! Node `i`'s conv window is its parent's window pushed with the parent's raw input (a root-level
//! node's is the committed window), and its state is its parent's state advanced by its own
//! update (a root-level node's parent state is the committed state) — exactly how the target's
//! tree forward runs (`model::qwen35`, `Mixer::DeltaNet`).

use kernel_abi::{CommitPath, NodeBatch, MAX_NODES};

use crate::model::deltanet::{self, DeltaInputs, GdnDims, Projected};
use crate::model::ops::{rms_norm, sigmoid, silu, softplus};
use crate::model::tensor::round_f16_scaled;

/// One Gated DeltaNet layer's shapes and (f32) weights as the kernels take them.
#[derive(Clone, Copy, Debug)]
pub struct GdnLayer<'a> {
    pub dims: GdnDims,
    /// Causal conv kernel `K`.
    pub conv_kernel: usize,
    /// Gated RMSNorm epsilon.
    pub eps: f32,
    /// `[conv_ch · K]`, `conv_w[c·K + t]`, tap `K − 1` = current token.
    pub conv_w: &'a [f32],
    pub ssm_a: &'a [f32],
    pub dt_bias: &'a [f32],
    /// `[d_v]`, shared by all value heads.
    pub norm_w: &'a [f32],
}

impl GdnLayer<'_> {
    /// `2·n_k·d_k + n_v·d_v`.
    pub fn conv_ch(&self) -> usize {
        2 * self.dims.n_k * self.dims.d_k + self.dims.n_v * self.dims.d_v
    }
}

/// Everything the reference knows about one node after the forward.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeResult {
    /// The conv window before the node (`[K−1][conv_ch]`, oldest first).
    pub window: Vec<f32>,
    /// The node's q, k, v, g, β (after conv, SiLU, norms, q scale).
    pub inputs: DeltaInputs,
    /// The recurrent state after the node, `[n_v][d_k][d_v]`.
    pub state: Vec<f32>,
    /// The delta-rule output before the gated norm, `[n_v·d_v]`.
    pub o: Vec<f32>,
    /// The gated-RMSNorm output, `[n_v·d_v]`.
    pub out: Vec<f32>,
}

/// A [`NodeBatch`] at `n_past` for nodes with parents `parents` (−1 = root-level, else an
/// earlier node), with depths and ancestor masks filled in. Panics on a parent that is not an
/// earlier node or on more than `MAX_NODES` nodes (test input).
pub fn node_batch(n_past: u32, parents: &[i32]) -> NodeBatch {
    assert!(!parents.is_empty() && parents.len() <= MAX_NODES as usize, "1..={MAX_NODES} nodes");
    let mut nb = NodeBatch::empty(n_past);
    nb.n = parents.len() as u32;
    for (i, &p) in parents.iter().enumerate() {
        assert!(p < i as i32 && p >= -1, "node {i}: parent {p} is not an earlier node");
        nb.parent[i] = p;
        nb.tokens[i] = i as u32;
        if p >= 0 {
            nb.depth[i] = nb.depth[p as usize] + 1;
            nb.anc[i] = nb.anc[p as usize] | 1 << i;
        } else {
            nb.anc[i] = 1 << i;
        }
    }
    nb
}

/// The nodes from the root-level ancestor of `i` down to `i` (root first).
pub fn path_to(nb: &NodeBatch, i: usize) -> Vec<usize> {
    (0..=i).filter(|&j| nb.anc[i] >> j & 1 == 1).collect()
}

/// The forward over the `nb.n` nodes of `nb`: `mixed [n][conv_ch]`, `z [n][n_v·d_v]`,
/// `a`, `b [n][n_v]`, the committed `conv_state [(K−1)·conv_ch]` and `state [n_v·d_k·d_v]`
/// (not modified).
#[allow(clippy::too_many_arguments)]
pub fn gdn_forward(
    layer: &GdnLayer,
    nb: &NodeBatch,
    mixed: &[f32],
    z: &[f32],
    a: &[f32],
    b: &[f32],
    conv_state: &[f32],
    state: &[f32],
) -> Vec<NodeResult> {
    let (dims, ch, n) = (layer.dims, layer.conv_ch(), nb.n as usize);
    let (nv, vd) = (dims.n_v, dims.n_v * dims.d_v);
    let mut res: Vec<NodeResult> = Vec::with_capacity(n);
    for i in 0..n {
        let p = nb.parent[i];
        let (window, s0) = if p < 0 {
            (conv_state.to_vec(), state.to_vec())
        } else {
            let pr = &res[p as usize];
            let mut w = pr.window.clone();
            deltanet::conv_window_push(&mut w, &mixed[p as usize * ch..(p as usize + 1) * ch]);
            (w, pr.state.clone())
        };
        let m = &mixed[i * ch..(i + 1) * ch];
        let y = deltanet::conv_step(layer.conv_w, layer.conv_kernel, &window, m);
        let proj = Projected {
            mixed: m.to_vec(),
            z: z[i * vd..(i + 1) * vd].to_vec(),
            g: (0..nv).map(|j| layer.ssm_a[j] * softplus(a[i * nv + j] + layer.dt_bias[j])).collect(),
            beta: (0..nv).map(|j| sigmoid(b[i * nv + j])).collect(),
        };
        let inputs = deltanet::delta_inputs(dims, &y, &proj);
        let mut s = s0;
        let o = deltanet::recurrent_step(dims, &mut s, &inputs);
        let out = gated_norm(layer, &o, &proj.z);
        res.push(NodeResult { window, inputs, state: s, o, out });
    }
    res
}

/// `rmsnorm(o_j) · norm_w ⊙ silu(z_j)` per value head (the gated norm of
/// `model::deltanet::finish`, without the out projection).
pub fn gated_norm(layer: &GdnLayer, o: &[f32], z: &[f32]) -> Vec<f32> {
    let dv = layer.dims.d_v;
    let mut y = Vec::with_capacity(o.len());
    for (oh, zh) in o.chunks_exact(dv).zip(z.chunks_exact(dv)) {
        let nrm = rms_norm(oh, layer.norm_w, layer.eps);
        y.extend(nrm.iter().zip(zh).map(|(&a, &b)| a * silu(b)));
    }
    y
}

/// Reference of `gdn_norm_prep` (the gated norm fused with the out projection's input
/// preparation): the composition of its two parts, per node row — [`gated_norm`] of `o_i`, `z_i`,
/// then the prep's rounding ([`crate::model::tensor::round_f16_scaled`]: the row scaled by the
/// power of two that puts its largest `|y|` in `[2^14, 2^15)`, rounded to nearest f16, scaled
/// back). So row `i` is the `[n_v·d_v]` input the out projection's tensor-core kernels multiply,
/// as f32. `o`, `z`: `[n][n_v·d_v]`; the result likewise. Each row is scaled on its own.
pub fn gdn_norm_prep(layer: &GdnLayer, o: &[f32], z: &[f32]) -> Vec<f32> {
    let vd = layer.dims.n_v * layer.dims.d_v;
    o.chunks_exact(vd)
        .zip(z.chunks_exact(vd))
        .flat_map(|(oi, zi)| round_f16_scaled(&gated_norm(layer, oi, zi)))
        .collect()
}

/// The commit of `path` (nodes of the forward that produced `inputs`, root first): advances
/// `state` through the path's updates in order and shifts the path's raw inputs (`mixed` rows)
/// into `conv_state`.
pub fn gdn_commit(
    layer: &GdnLayer,
    path: &CommitPath,
    mixed: &[f32],
    inputs: &[DeltaInputs],
    state: &mut [f32],
    conv_state: &mut Vec<f32>,
) {
    let ch = layer.conv_ch();
    for &node in &path.nodes[..path.len as usize] {
        let i = node as usize;
        deltanet::recurrent_step(layer.dims, state, &inputs[i]);
        deltanet::conv_window_push(conv_state, &mixed[i * ch..(i + 1) * ch]);
    }
}

/// The [`CommitPath`] of the nodes `nodes` (root first).
pub fn commit_path(n_past: u32, nodes: &[usize]) -> CommitPath {
    let mut p = CommitPath { n_past, len: nodes.len() as u32, nodes: [0; MAX_NODES as usize] };
    for (d, &s) in p.nodes.iter_mut().zip(nodes) {
        *d = s as u32;
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rand_vec(seed: &mut u64, n: usize, scale: f32) -> Vec<f32> {
        (0..n)
            .map(|_| {
                *seed ^= *seed << 13;
                *seed ^= *seed >> 7;
                *seed ^= *seed << 17;
                ((*seed >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) as f32 * scale
            })
            .collect()
    }

    struct Case {
        dims: GdnDims,
        kernel: usize,
        w: Vec<Vec<f32>>, // conv_w, ssm_a, dt_bias, norm_w
        mixed: Vec<f32>,
        z: Vec<f32>,
        a: Vec<f32>,
        b: Vec<f32>,
        conv: Vec<f32>,
        state: Vec<f32>,
    }

    impl Case {
        fn new(dims: GdnDims, kernel: usize, n: usize, seed: u64) -> Self {
            let mut s = seed | 1;
            let ch = 2 * dims.n_k * dims.d_k + dims.n_v * dims.d_v;
            let ssm_a = rand_vec(&mut s, dims.n_v, 1.0).iter().map(|x| -0.5 - x.abs()).collect();
            Case {
                dims,
                kernel,
                w: vec![
                    rand_vec(&mut s, ch * kernel, 0.6),
                    ssm_a,
                    rand_vec(&mut s, dims.n_v, 1.0),
                    rand_vec(&mut s, dims.d_v, 1.5),
                ],
                mixed: rand_vec(&mut s, n * ch, 1.0),
                z: rand_vec(&mut s, n * dims.n_v * dims.d_v, 2.0),
                a: rand_vec(&mut s, n * dims.n_v, 2.0),
                b: rand_vec(&mut s, n * dims.n_v, 2.0),
                conv: rand_vec(&mut s, (kernel - 1) * ch, 1.0),
                state: rand_vec(&mut s, dims.state_len(), 0.5),
            }
        }
        fn layer(&self) -> GdnLayer<'_> {
            GdnLayer {
                dims: self.dims,
                conv_kernel: self.kernel,
                eps: 1e-6,
                conv_w: &self.w[0],
                ssm_a: &self.w[1],
                dt_bias: &self.w[2],
                norm_w: &self.w[3],
            }
        }
    }

    /// The node's tokens run one by one as a chain with the model's per-token functions:
    /// returns (o, out, final state, final window) of the last one.
    fn chain(c: &Case, nb: &NodeBatch, nodes: &[usize]) -> (Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>) {
        let l = c.layer();
        let (ch, nv, vd) = (l.conv_ch(), c.dims.n_v, c.dims.n_v * c.dims.d_v);
        let (mut s, mut w) = (c.state.clone(), c.conv.clone());
        let (mut o, mut out) = (Vec::new(), Vec::new());
        for &i in nodes {
            assert!(nb.anc[*nodes.last().unwrap()] >> i & 1 == 1);
            let m = &c.mixed[i * ch..(i + 1) * ch];
            let y = deltanet::conv_step(l.conv_w, l.conv_kernel, &w, m);
            let proj = Projected {
                mixed: m.to_vec(),
                z: c.z[i * vd..(i + 1) * vd].to_vec(),
                g: (0..nv).map(|j| l.ssm_a[j] * softplus(c.a[i * nv + j] + l.dt_bias[j])).collect(),
                beta: (0..nv).map(|j| sigmoid(c.b[i * nv + j])).collect(),
            };
            o = deltanet::recurrent_step(c.dims, &mut s, &deltanet::delta_inputs(c.dims, &y, &proj));
            out = gated_norm(&l, &o, &proj.z);
            deltanet::conv_window_push(&mut w, m);
        }
        (o, out, s, w)
    }

    const PARENTS: [i32; 9] = [-1, 0, 0, -1, 1, 2, 4, 6, 3];

    #[test]
    fn a_tree_node_equals_its_path_run_as_a_chain() {
        for (dims, kernel) in [
            (GdnDims { n_k: 2, n_v: 4, d_k: 16, d_v: 8 }, 4),
            (GdnDims { n_k: 1, n_v: 3, d_k: 8, d_v: 12 }, 2),
            (GdnDims { n_k: 1, n_v: 1, d_k: 4, d_v: 4 }, 1),
        ] {
            let nb = node_batch(10, &PARENTS);
            let c = Case::new(dims, kernel, PARENTS.len(), 0x5eed + kernel as u64);
            let l = c.layer();
            let r = gdn_forward(&l, &nb, &c.mixed, &c.z, &c.a, &c.b, &c.conv, &c.state);
            for (i, ri) in r.iter().enumerate() {
                let (o, out, s, _) = chain(&c, &nb, &path_to(&nb, i));
                assert_eq!(ri.o, o, "node {i} o");
                assert_eq!(ri.out, out, "node {i} out");
                assert_eq!(ri.state, s, "node {i} state");
            }
        }
    }

    #[test]
    fn commit_of_a_path_equals_the_chain_final_state_and_window() {
        let dims = GdnDims { n_k: 2, n_v: 4, d_k: 16, d_v: 8 };
        let nb = node_batch(3, &PARENTS);
        for kernel in [1, 2, 4, 5] {
            let c = Case::new(dims, kernel, PARENTS.len(), 77 + kernel as u64);
            let l = c.layer();
            let r = gdn_forward(&l, &nb, &c.mixed, &c.z, &c.a, &c.b, &c.conv, &c.state);
            let inputs: Vec<DeltaInputs> = r.iter().map(|x| x.inputs.clone()).collect();
            for last in [0usize, 4, 7, 8] {
                let nodes = path_to(&nb, last);
                let (mut s, mut w) = (c.state.clone(), c.conv.clone());
                gdn_commit(&l, &commit_path(3, &nodes), &c.mixed, &inputs, &mut s, &mut w);
                let (_, _, cs, cw) = chain(&c, &nb, &nodes);
                assert_eq!(s, cs, "path to {last}: state");
                assert_eq!(w, cw, "path to {last}: window");
                assert_eq!(s, r[last].state, "path to {last}: the forward's state of the last node");
            }
        }
    }

    /// Each node row of `gdn_norm_prep` is its own gated norm rounded to f16 at its own scale:
    /// within `2^-11` of the gated norm (relative, or `2^-25` of the row's largest value), a
    /// row's result does not depend on the other rows (a row 2^20 times larger beside it), and
    /// every value is an f16 times the row's power-of-two scale.
    #[test]
    fn gdn_norm_prep_rounds_each_node_row_at_its_own_scale() {
        let dims = GdnDims { n_k: 1, n_v: 3, d_k: 4, d_v: 32 };
        let mut c = Case::new(dims, 2, 2, 99);
        let vd = dims.n_v * dims.d_v;
        let mut seed = 7u64;
        let mut o = rand_vec(&mut seed, 2 * vd, 1e-3);
        for v in &mut o[vd..] {
            *v *= 1.0e6; // the norm removes this; z makes row 1 larger
        }
        for v in &mut c.z[vd..] {
            *v *= 1.0e6;
        }
        let l = c.layer();
        let both = gdn_norm_prep(&l, &o, &c.z);
        for i in 0..2 {
            let (oi, zi) = (&o[i * vd..(i + 1) * vd], &c.z[i * vd..(i + 1) * vd]);
            let alone = gdn_norm_prep(&l, oi, zi);
            assert_eq!(&both[i * vd..(i + 1) * vd], &alone[..], "row {i}");
            let exact = gated_norm(&l, oi, zi);
            let max = exact.iter().fold(0f32, |m, v| m.max(v.abs()));
            let scale = 2f32.powi(14 - max.log2().floor() as i32);
            for (k, (&r, &e)) in alone.iter().zip(&exact).enumerate() {
                let err = (r - e).abs();
                assert!(err <= e.abs() * 2f32.powi(-11) + max * 2f32.powi(-25), "row {i}[{k}]: {r} vs {e}");
                let h = half::f16::from_f32(r * scale);
                assert_eq!(h.to_f32(), r * scale, "row {i}[{k}]: {r} is not an f16 at the row's scale");
            }
        }
        assert!(both[vd..].iter().any(|v| v.abs() > 1e4) && both[..vd].iter().all(|v| v.abs() < 1e3));
    }

    #[test]
    fn empty_commit_changes_nothing() {
        let dims = GdnDims { n_k: 1, n_v: 2, d_k: 4, d_v: 4 };
        let c = Case::new(dims, 3, 2, 5);
        let l = c.layer();
        let nb = node_batch(0, &[-1, 0]);
        let r = gdn_forward(&l, &nb, &c.mixed, &c.z, &c.a, &c.b, &c.conv, &c.state);
        let inputs: Vec<DeltaInputs> = r.iter().map(|x| x.inputs.clone()).collect();
        let (mut s, mut w) = (c.state.clone(), c.conv.clone());
        gdn_commit(&l, &commit_path(0, &[]), &c.mixed, &inputs, &mut s, &mut w);
        assert_eq!((s, w), (c.state.clone(), c.conv.clone()));
    }

    #[test]
    fn node_batch_fills_depth_and_ancestors() {
        let nb = node_batch(0, &PARENTS);
        assert_eq!(nb.depth[7], 4);
        assert_eq!(nb.anc[7], 1 << 0 | 1 << 1 | 1 << 4 | 1 << 6 | 1 << 7);
        assert_eq!(path_to(&nb, 7), vec![0, 1, 4, 6, 7]);
        assert_eq!(path_to(&nb, 8), vec![3, 8]);
        // 64 nodes: a chain fills every bit of the last mask.
        let n = MAX_NODES as usize;
        let chain: Vec<i32> = (0..n as i32).map(|i| i - 1).collect();
        let nb = node_batch(0, &chain);
        assert_eq!((nb.depth[n - 1], nb.anc[n - 1]), (n as u32 - 1, u64::MAX));
        assert_eq!(path_to(&nb, n - 1), (0..n).collect::<Vec<_>>());
    }
}
