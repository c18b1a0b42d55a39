//! Reference of `attention`: the batch-level functions the GPU kernels implement, over the same
//! flat arrays and [`NodeBatch`] (f32 in, f16 KV cache as `u16` bits, f64 softmax).

use half::f16;
use kernel_abi::{CommitPath, NodeBatch};

use crate::model::ops::{rms_norm_heads_in_place, sigmoid};
use crate::model::rope::rope_neox_in_place;

/// Head counts and head dimension of one attention layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttnDims {
    pub n_head: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
    /// Sliding window (0 = none): a query at position `p` sees committed rows at positions
    /// `> p − window` (`kernel_abi::attn_window_lo`); tree keys are always visible (the kernels
    /// take windows of at least the batch's node count, larger than any depth).
    pub window: usize,
}

impl AttnDims {
    /// f16 values per KV cache row (`n_head_kv · head_dim`).
    pub fn row(&self) -> usize {
        self.n_head_kv * self.head_dim
    }
}

/// Outputs of [`attn_prep`] for `n` nodes.
#[derive(Clone, Debug, PartialEq)]
pub struct Prepared {
    /// `[n, n_head·hd]`: per-head RMSNorm then RoPE at `n_past + depth[i]`.
    pub q: Vec<f32>,
    /// `[n, n_head·hd]`: the raw gate.
    pub gate: Vec<f32>,
}

/// Cache rows a node sees, in logical order: committed rows `lo..n_past` (`lo = 0` without a
/// window, else the first position `> p − window` for the node at `p = n_past + depth[i]`), then
/// the scratch rows `n_past + j` of its ancestors and itself (`anc` bits `j < n`, ascending).
pub fn visible_rows(b: &NodeBatch, i: usize, window: usize) -> Vec<usize> {
    let n = b.n as usize;
    let mask = if n >= 64 { u64::MAX } else { (1u64 << n) - 1 };
    let anc = b.anc[i] & mask;
    let n_past = b.n_past as usize;
    let p = n_past + b.depth[i] as usize;
    let lo = if window == 0 { 0 } else { (p + 1).saturating_sub(window).min(n_past) };
    (lo..n_past).chain((0..n).filter(|&j| anc >> j & 1 == 1).map(|j| n_past + j)).collect()
}

/// `attn_prep` for nodes `0..b.n`: splits `qg` per head into q and gate, per-head RMSNorm of q and
/// k, partial NeoX RoPE at `n_past + depth[i]` (`model` ops, f64 inside), and writes K and V
/// rounded to f16 at row `n_past + i` of `k_cache` / `v_cache` (`[ctx, n_kv·hd]`).
#[allow(clippy::too_many_arguments)]
pub fn attn_prep(
    d: AttnDims,
    n_rot: usize,
    theta: f64,
    eps: f32,
    b: &NodeBatch,
    qg: &[f32],
    k: &[f32],
    v: &[f32],
    q_norm: &[f32],
    k_norm: &[f32],
    k_cache: &mut [u16],
    v_cache: &mut [u16],
) -> Prepared {
    let (hd, n) = (d.head_dim, b.n as usize);
    let mut out = Prepared { q: Vec::with_capacity(n * d.n_head * hd), gate: Vec::with_capacity(n * d.n_head * hd) };
    for i in 0..n {
        let pos = b.n_past as usize + b.depth[i] as usize;
        let row = &qg[i * 2 * d.n_head * hd..(i + 1) * 2 * d.n_head * hd];
        let mut q = Vec::with_capacity(d.n_head * hd);
        for head in row.chunks_exact(2 * hd) {
            q.extend_from_slice(&head[..hd]);
            out.gate.extend_from_slice(&head[hd..]);
        }
        rms_norm_heads_in_place(&mut q, q_norm, eps);
        rope_neox_in_place(&mut q, hd, n_rot, pos, theta);
        out.q.extend_from_slice(&q);
        let mut kr = k[i * d.row()..(i + 1) * d.row()].to_vec();
        rms_norm_heads_in_place(&mut kr, k_norm, eps);
        rope_neox_in_place(&mut kr, hd, n_rot, pos, theta);
        let c = (b.n_past as usize + i) * d.row();
        for (e, &x) in kr.iter().enumerate() {
            k_cache[c + e] = f16::from_f32(x).to_bits();
        }
        for (e, &x) in v[i * d.row()..(i + 1) * d.row()].iter().enumerate() {
            v_cache[c + e] = f16::from_f32(x).to_bits();
        }
    }
    out
}

/// `attn_tree` for nodes `0..b.n`: `out[i, h·hd + e] = sigmoid(gate[i, h·hd + e]) ·
/// Σ_t softmax_t(q_{i,h}·K_t/√hd)·V_t[e]` over the node's [`visible_rows`] (under `d.window`) of the f16 caches, GQA
/// (head `h` reads KV head `h / (n_head / n_kv)`). Scores, softmax and sums in f64; returns f64.
pub fn attn_tree(d: AttnDims, b: &NodeBatch, q: &[f32], gate: &[f32], k_cache: &[u16], v_cache: &[u16]) -> Vec<f64> {
    let (hd, n) = (d.head_dim, b.n as usize);
    let group = d.n_head / d.n_head_kv;
    let scale = 1.0 / (hd as f64).sqrt();
    let h16 = |x: u16| f16::from_bits(x).to_f64();
    let mut out = Vec::with_capacity(n * d.n_head * hd);
    for i in 0..n {
        let rows = visible_rows(b, i, d.window);
        for h in 0..d.n_head {
            let kvh = h / group;
            let qh = &q[(i * d.n_head + h) * hd..][..hd];
            let scores: Vec<f64> = rows
                .iter()
                .map(|&r| {
                    let kr = &k_cache[r * d.row() + kvh * hd..][..hd];
                    qh.iter().zip(kr).map(|(&a, &kk)| a as f64 * h16(kk)).sum::<f64>() * scale
                })
                .collect();
            let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let p: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
            let z: f64 = p.iter().sum();
            for e in 0..hd {
                let acc: f64 = p.iter().zip(&rows).map(|(pi, &r)| pi * h16(v_cache[r * d.row() + kvh * hd + e])).sum();
                let g = gate[(i * d.n_head + h) * hd + e] as f64;
                out.push(acc / z / (1.0 + (-g).exp()));
            }
        }
    }
    out
}

/// Per (node, head) of [`attn_tree`], the quantities the GPU test's error bound needs, with
/// scores in the base-2 domain `s_t = q·K_t·log2(e)/√hd`: `(max_t Σ_d |q_d·K_td|·log2(e)/√hd,
/// max_t |s_t − max s|, max |V| over the visible rows of the KV head)`.
pub fn attn_tree_error_terms(
    d: AttnDims,
    b: &NodeBatch,
    q: &[f32],
    k_cache: &[u16],
    v_cache: &[u16],
) -> Vec<(f64, f64, f64)> {
    let (hd, row) = (d.head_dim, d.row());
    let group = d.n_head / d.n_head_kv;
    let sigma = std::f64::consts::LOG2_E / (hd as f64).sqrt();
    let h16 = |x: u16| f16::from_bits(x).to_f64();
    let mut out = Vec::new();
    for i in 0..b.n as usize {
        let rows = visible_rows(b, i, d.window);
        for h in 0..d.n_head {
            let kvh = h / group;
            let qh = &q[(i * d.n_head + h) * hd..][..hd];
            let (mut a_max, mut vmax, mut scores) = (0f64, 0f64, Vec::with_capacity(rows.len()));
            for &r in &rows {
                let kr = &k_cache[r * row + kvh * hd..][..hd];
                let (mut a, mut s) = (0f64, 0f64);
                for (&x, &k) in qh.iter().zip(kr) {
                    let t = x as f64 * h16(k);
                    a += t.abs();
                    s += t;
                }
                a_max = a_max.max(a * sigma);
                scores.push(s * sigma);
                vmax = v_cache[r * row + kvh * hd..][..hd].iter().fold(vmax, |m, &v| m.max(h16(v).abs()));
            }
            let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let spread = scores.iter().fold(0f64, |a, s| a.max((s - m).abs()));
            out.push((a_max, spread, vmax));
        }
    }
    out
}

/// `kv_commit`: for `p < path.len`, row `n_past + nodes[p]` → row `n_past + p` of each of
/// `planes` planes (plane `k` at `k·plane_stride`, rows of `row_elems`), in order of `p`.
pub fn kv_commit(path: &CommitPath, cache: &mut [u16], planes: usize, plane_stride: usize, row_elems: usize) {
    for k in 0..planes {
        let plane = &mut cache[k * plane_stride..];
        for p in 0..path.len as usize {
            let (src, dst) = (path.n_past as usize + path.nodes[p] as usize, path.n_past as usize + p);
            plane.copy_within(src * row_elems..(src + 1) * row_elems, dst * row_elems);
        }
    }
}

/// The RoPE table of `attn_prep`: `[max_pos, n_rot/2]` pairs `(cos θ, sin θ)`,
/// `θ = pos · theta^(−2j/n_rot)` in f64 (as `model::rope`), rounded to f32.
pub fn rope_table(n_rot: usize, theta: f64, max_pos: usize) -> Vec<f32> {
    let half = n_rot / 2;
    let mut t = Vec::with_capacity(max_pos * half * 2);
    for pos in 0..max_pos {
        for j in 0..half {
            let inv_freq = theta.powf(-2.0 * j as f64 / n_rot as f64);
            let (s, c) = (pos as f64 * inv_freq).sin_cos();
            t.push(c as f32);
            t.push(s as f32);
        }
    }
    t
}

/// A batch from parent links (`-1` = child of the committed tokens): depths and ancestor masks.
pub fn node_batch(n_past: u32, parents: &[i32]) -> NodeBatch {
    let mut b = NodeBatch::empty(n_past);
    b.n = parents.len() as u32;
    for (i, &p) in parents.iter().enumerate() {
        assert!(p < i as i32, "parent of node {i} must be an earlier node");
        b.tokens[i] = i as u32;
        b.parent[i] = p;
        let (depth, anc) = if p < 0 { (0, 0) } else { (b.depth[p as usize] + 1, b.anc[p as usize]) };
        b.depth[i] = depth;
        b.anc[i] = anc | 1 << i;
    }
    b
}

/// `sigmoid` as `model::ops` computes it (re-exported for tests that gate a reference output).
pub fn gate_sigmoid(g: f32) -> f32 {
    sigmoid(g)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::attention::attend;

    fn values(seed: u64, n: usize, scale: f32) -> Vec<f32> {
        let mut s = seed | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
            })
            .collect()
    }

    const D: AttnDims = AttnDims { n_head: 4, n_head_kv: 2, head_dim: 32, window: 0 };

    fn f16_rows(x: &[f32]) -> Vec<u16> {
        x.iter().map(|&v| f16::from_f32(v).to_bits()).collect()
    }

    #[test]
    fn one_node_batch_equals_model_attend_on_the_same_rows() {
        let n_past = 37;
        let kc = f16_rows(&values(1, (n_past + 1) * D.row(), 2.0));
        let vc = f16_rows(&values(2, (n_past + 1) * D.row(), 2.0));
        let q = values(3, D.n_head * D.head_dim, 1.5);
        let gate = values(4, D.n_head * D.head_dim, 3.0);
        let b = node_batch(n_past as u32, &[-1]);
        let got = attn_tree(D, &b, &q, &gate, &kc, &vc);
        let kf: Vec<Vec<f32>> =
            kc.chunks(D.row()).map(|r| r.iter().map(|&x| f16::from_bits(x).to_f32()).collect()).collect();
        let vf: Vec<Vec<f32>> =
            vc.chunks(D.row()).map(|r| r.iter().map(|&x| f16::from_bits(x).to_f32()).collect()).collect();
        let keys: Vec<&[f32]> = kf.iter().map(|r| r.as_slice()).collect();
        let vals: Vec<&[f32]> = vf.iter().map(|r| r.as_slice()).collect();
        let o = attend(&q, &keys, &vals, D.n_head, D.n_head_kv, D.head_dim);
        for (e, (&g, &a)) in got.iter().zip(&o).enumerate() {
            let want = a as f64 * gate_sigmoid(gate[e]) as f64;
            assert!((g - want).abs() <= 1e-6 * (1.0 + want.abs()), "{e}: {g} vs {want}");
        }
    }

    #[test]
    fn tree_node_equals_the_same_node_computed_as_a_chain() {
        // Tree: 0 ← 1 ← 3, 0 ← 2 ← 4; node 4 sees 0, 2, 4. As a chain [0, 2, 4] it is node 2.
        let n_past = 5;
        let tree = node_batch(n_past, &[-1, 0, 0, 1, 2]);
        let chain = node_batch(n_past, &[-1, 0, 1]);
        let rows = n_past as usize + 5;
        let kc = f16_rows(&values(5, rows * D.row(), 2.0));
        let vc = f16_rows(&values(6, rows * D.row(), 2.0));
        let q = values(7, 5 * D.n_head * D.head_dim, 1.0);
        let gate = values(8, 5 * D.n_head * D.head_dim, 1.0);
        let t = attn_tree(D, &tree, &q, &gate, &kc, &vc);
        // Chain cache: committed rows, then tree nodes 0, 2, 4 at scratch rows 0, 1, 2.
        let mut kc2 = kc[..n_past as usize * D.row()].to_vec();
        let mut vc2 = vc[..n_past as usize * D.row()].to_vec();
        for j in [0usize, 2, 4] {
            let r = (n_past as usize + j) * D.row();
            kc2.extend_from_slice(&kc[r..r + D.row()]);
            vc2.extend_from_slice(&vc[r..r + D.row()]);
        }
        let hsz = D.n_head * D.head_dim;
        let mut q2 = Vec::new();
        let mut g2 = Vec::new();
        for j in [0usize, 2, 4] {
            q2.extend_from_slice(&q[j * hsz..(j + 1) * hsz]);
            g2.extend_from_slice(&gate[j * hsz..(j + 1) * hsz]);
        }
        let c = attn_tree(D, &chain, &q2, &g2, &kc2, &vc2);
        assert_eq!(t[4 * hsz..5 * hsz], c[2 * hsz..3 * hsz]);
        assert_eq!(t[2 * hsz..3 * hsz], c[hsz..2 * hsz]);
        assert_eq!(t[..hsz], c[..hsz]);
        assert_eq!(visible_rows(&tree, 3, 0), (0..5).chain([5, 6, 8]).collect::<Vec<_>>());
        // Node 3 (depth 2) sits at p = 7: a window of 4 leaves the committed positions > 3 (row
        // 4), and the tree keys stay; the same rule as the DFlash draft's `kp + w > p`.
        assert_eq!(tree.depth[3], 2);
        assert_eq!(visible_rows(&tree, 3, 4), vec![4, 5, 6, 8]);
        assert_eq!(visible_rows(&tree, 3, 8), (0..5).chain([5, 6, 8]).collect::<Vec<_>>());
        let p = 7;
        let committed: Vec<usize> = (0..5).filter(|&kp| kp + 4 > p).collect();
        assert_eq!(committed, vec![4]);
    }

    #[test]
    fn prep_matches_model_project_math_and_writes_f16_rows() {
        let (n_rot, theta, eps) = (8, 1e4, 1e-6);
        let b = node_batch(3, &[-1, 0]);
        let qg = values(9, 2 * 2 * D.n_head * D.head_dim, 2.0);
        let k = values(10, 2 * D.row(), 2.0);
        let v = values(11, 2 * D.row(), 2.0);
        let qn = values(12, D.head_dim, 1.0);
        let kn = values(13, D.head_dim, 1.0);
        let mut kc = vec![0u16; 6 * D.row()];
        let mut vc = vec![0u16; 6 * D.row()];
        let p = attn_prep(D, n_rot, theta, eps, &b, &qg, &k, &v, &qn, &kn, &mut kc, &mut vc);
        // Node 1 at position 4: its q head 1 by hand.
        let hd = D.head_dim;
        let mut q1 = qg[2 * D.n_head * hd + 2 * hd..][..hd].to_vec();
        rms_norm_heads_in_place(&mut q1, &qn, eps);
        rope_neox_in_place(&mut q1, hd, n_rot, 4, theta);
        assert_eq!(p.q[(D.n_head + 1) * hd..][..hd], q1[..]);
        assert_eq!(p.gate[hd..2 * hd], qg[3 * hd..4 * hd]);
        assert_eq!(vc[4 * D.row()..5 * D.row()], f16_rows(&v[D.row()..])[..]);
        assert!(kc[..3 * D.row()].iter().all(|&x| x == 0) && kc[5 * D.row()..].iter().all(|&x| x == 0));
    }

    #[test]
    fn visible_rows_follow_64_bit_masks() {
        // A 64-node chain: the last node sees every committed row and all 64 scratch rows; a node
        // under the committed tokens sees itself only; the window trims committed rows only.
        let n = kernel_abi::MAX_NODES as usize;
        let mut parents: Vec<i32> = (0..n as i32).map(|i| i - 1).collect();
        let b = node_batch(10, &parents);
        assert_eq!(visible_rows(&b, n - 1, 0), (0..10 + n).collect::<Vec<_>>());
        assert_eq!(visible_rows(&b, n - 1, n + 3), (7..10 + n).collect::<Vec<_>>());
        parents[n - 1] = -1;
        let b = node_batch(10, &parents);
        assert_eq!(visible_rows(&b, n - 1, 0), (0..10).chain([10 + n - 1]).collect::<Vec<_>>());
    }

    #[test]
    fn rope_table_matches_model_rope() {
        let t = rope_table(8, 1e4, 10);
        let mut x = vec![0f32; 8];
        x[1] = 1.0; // rotate (e_1, e_5) at position 7: x[1] = cos, x[5] = sin
        rope_neox_in_place(&mut x, 8, 8, 7, 1e4);
        assert_eq!((t[(7 * 4 + 1) * 2], t[(7 * 4 + 1) * 2 + 1]), (x[1], x[5]));
    }

    #[test]
    fn kv_commit_moves_path_rows_in_order() {
        // Rows: 2 committed, 4 scratch; path nodes [1, 3] → scratch rows 3 and 5 go to rows 2, 3.
        let row = 2;
        let mut path = CommitPath { n_past: 2, len: 2, nodes: [0; kernel_abi::MAX_NODES as usize] };
        path.nodes[..2].copy_from_slice(&[1, 3]);
        let mut cache: Vec<u16> = (0..2 * 6 * row as u16).collect();
        kv_commit(&path, &mut cache, 2, 6 * row, row);
        for k in 0..2 {
            let p = &cache[k * 12..(k + 1) * 12];
            let base = (k * 12) as u16;
            assert_eq!(p[4..8], [base + 6, base + 7, base + 10, base + 11]);
            assert_eq!(p[..4], [base, base + 1, base + 2, base + 3]);
        }
    }
}
