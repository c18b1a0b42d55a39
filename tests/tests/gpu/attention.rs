//! `attention` kernels vs `flashtree_reference::attention`, and the batch invariance of `attn_tree`.
//!
//! Tolerances (u = 2⁻²⁴):
//! * `attn_prep` q: the norm's sum of squares has ≤ `k = hd/32 + 5` roundings (γ_k), the scale
//!   and products ≤ 5u more; RoPE uses rounded (cos, sin) (u each) and one fma + one product
//!   (2u) on `|y_j| + |y_p| ≤ 1.5·(|out_j| + |out_p|)` (rotation keeps the pair's norm); the
//!   reference rounds to f32 three times. So `|Δ| ≤ 1.5·(γ_k + 12u)·(|ref_j| + |ref_p|)`. K gets the
//!   same bound plus one f16 rounding step (`2⁻¹⁰·|k| + 2⁻²⁴`) since the two sides may round a
//!   slightly different f32 to neighbouring f16 values; V and the gate are exact copies.
//! * `attn_tree` (same f16 cache and f32 q on both sides, reference in f64): a score
//!   `s_t = σ·q·k_t` (`σ = log2 e/√hd`) has ≤ `hd/8 + 12` roundings, so `|δ_t| ≤ γ·A_t` with
//!   `A_t = σ·Σ|q_d·k_td|`; `s_t − m` adds `u·R` (`R = max|s_t − m|`), each `ex2.approx` 2⁻²².
//!   Softmax weights then have relative error `ε ≤ 2 ln2·(2·max δ + 3uR) + 8·2⁻²²`, moving the
//!   weighted mean by ≤ `2ε·max|v|`. The numerator and denominator sums have ≤ `K = L + 140`
//!   roundings per term (`L` keys per split: one fma per key, one rescale per tile, ≤ 64 key
//!   groups, ≤ 64 splits), adding `2γ_K·max|v|`. The gate's `1/(1 + e^−g)` has relative error
//!   ≤ `2⁻²¹ + 2|g|u + 4u`. Check: `|Δ| ≤ sig·(2ε + 4γ_K)·max|v| + |ref|·(2⁻²¹ + 2|g|u + 4u)`.
//! * The tensor-core split kernel (`attn_tree_mma_hd*`, head dims 64/128/256 without a window)
//!   multiplies `f16(q)` and f16 softmax weights: the reference is given the rounded queries
//!   (so `A_t` and `δ_t` are those of `f16(q)`), and `ε` gains the weights' rounding — relative
//!   2⁻¹¹ on each weight and on their sum (`1.01·2⁻¹⁰`), plus 2⁻²⁵ absolute per key for weights
//!   below f16's normal range. Products and sums in the tensor core are covered by the same `δ`
//!   and `γ_K` (f32 accumulation, ≤ one rounding per 16-element step).
//! * Plain attention (`AttnDims::gated = false`, the draft's): the same kernels without the gate;
//!   checked against the reference with `gate = +∞` (`sigmoid = 1` exactly), without the gate term.

use flashtree::gpu::attention::{
    attn_prep, attn_tree, attn_tree_min_split, attn_tree_scratch_len_min, kv_commit, mma_kernel, rope_table,
    write_step_param, AttnDims, AttnPrepIn,
};
use flashtree::gpu::{CudaSlice, DevSpan, Gpu};
use flashtree_reference::attention as reference;
use flashtree_tests::gpu::gpu_or_skip;
use flashtree_tests::tolerance::{gamma, U32};
use half::f16;
use kernel_abi::{CommitPath, NodeBatch};
use proptest::prelude::*;

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

/// The rows of `x` (`[n][w]`) at stride `w + pad`, the gaps NaN (a kernel that read them would
/// produce NaN).
fn padded(x: &[f32], w: usize, pad: usize) -> Vec<f32> {
    x.chunks(w).flat_map(|r| r.iter().copied().chain(std::iter::repeat_n(f32::NAN, pad))).collect()
}

fn f16_bits(x: &[f32]) -> Vec<u16> {
    x.iter().map(|&v| f16::from_f32(v).to_bits()).collect()
}

/// Random parents (−1 or an earlier node) for `n` nodes.
fn random_parents(seed: u64, n: usize) -> Vec<i32> {
    let r = values(seed, n, 1.0);
    (0..n).map(|i| (((r[i] + 1.0) * 0.5 * (i + 1) as f32) as i32 - 1).clamp(-1, i as i32 - 1)).collect()
}

fn dims_strategy() -> impl Strategy<Value = (AttnDims, usize)> {
    (
        1usize..=4,
        1usize..=8,
        prop::sample::select(vec![32usize, 64, 128, 256]),
        any::<prop::sample::Index>(),
        prop::bool::weighted(0.75),
    )
        .prop_map(|(kv, g, hd, rot, gated)| {
            (AttnDims { n_head: kv * g, n_head_kv: kv, head_dim: hd, gated, window: 0 }, 2 * rot.index(hd / 2 + 1))
        })
}

fn ref_dims(d: AttnDims) -> reference::AttnDims {
    reference::AttnDims { n_head: d.n_head, n_head_kv: d.n_head_kv, head_dim: d.head_dim, window: d.window }
}

fn batch_span(gpu: &Gpu, b: &NodeBatch) -> (CudaSlice<u32>, DevSpan<NodeBatch>) {
    let mut buf = gpu.zeros::<u32>(std::mem::size_of::<NodeBatch>() / 4).unwrap();
    let span = write_step_param(gpu, b, &mut buf).unwrap();
    (buf, span)
}

fn poisoned_f32(gpu: &Gpu, n: usize) -> CudaSlice<f32> {
    let mut s = gpu.zeros::<f32>(n).unwrap();
    gpu.fill_bytes(&mut s, 0xff).unwrap();
    s
}

/// Runs `attn_tree` on the GPU for `b` over host caches; returns the output.
#[allow(clippy::too_many_arguments)]
fn run_tree(
    gpu: &Gpu,
    d: AttnDims,
    b: &NodeBatch,
    q: &[f32],
    gate: &[f32],
    kc: &[u16],
    vc: &[u16],
    ctx: usize,
) -> Vec<f32> {
    run_tree_min_split(gpu, d, b, q, gate, kc, vc, ctx, kernel_abi::ATTN_MIN_SPLIT_KEYS, 1)
}

/// [`run_tree`] with another split rule and `head_groups` blocks per KV head
/// (`attn_tree_min_split`).
#[allow(clippy::too_many_arguments)]
fn run_tree_min_split(
    gpu: &Gpu,
    d: AttnDims,
    b: &NodeBatch,
    q: &[f32],
    gate: &[f32],
    kc: &[u16],
    vc: &[u16],
    ctx: usize,
    min_split: u32,
    head_groups: usize,
) -> Vec<f32> {
    let n = b.n as usize;
    let (_bb, bs) = batch_span(gpu, b);
    let (dq, dg) = (gpu.upload(q).unwrap(), gpu.upload(gate).unwrap());
    let (dk, dv) = (gpu.upload(kc).unwrap(), gpu.upload(vc).unwrap());
    let scratch = poisoned_f32(gpu, attn_tree_scratch_len_min(d, n, ctx, min_split));
    let out = poisoned_f32(gpu, n * d.n_head * d.head_dim);
    let s = |x: &CudaSlice<f32>| DevSpan::of(gpu, x);
    let (kcs, vcs) = (DevSpan::of(gpu, &dk), DevSpan::of(gpu, &dv));
    attn_tree_min_split(gpu, d, bs, n, s(&dq), s(&dg), kcs, vcs, ctx, s(&scratch), s(&out), min_split, head_groups)
        .unwrap();
    gpu.download(&out).unwrap()
}

/// The gate the reference takes for `d`: `gate` itself, or `+∞` everywhere for plain attention
/// (`sigmoid(+∞) = 1` exactly in the f64 reference).
fn ref_gate(d: AttnDims, gate: &[f32]) -> Vec<f32> {
    if d.gated {
        gate.to_vec()
    } else {
        vec![f32::INFINITY; gate.len()]
    }
}

/// Checks `got` against the f64 reference with the bound in the module doc (plain attention:
/// no gate factor and no gate error term), for the target's split rule.
#[allow(clippy::too_many_arguments)]
fn check_tree(
    d: AttnDims,
    b: &NodeBatch,
    q: &[f32],
    gate: &[f32],
    kc: &[u16],
    vc: &[u16],
    got: &[f32],
) -> Result<(), TestCaseError> {
    check_tree_min_split(d, b, q, gate, kc, vc, got, kernel_abi::ATTN_MIN_SPLIT_KEYS)
}

/// [`check_tree`] for the split rule with `min_split` keys per split (the bound's `L`).
#[allow(clippy::too_many_arguments)]
fn check_tree_min_split(
    d: AttnDims,
    b: &NodeBatch,
    q: &[f32],
    gate: &[f32],
    kc: &[u16],
    vc: &[u16],
    got: &[f32],
    min_split: u32,
) -> Result<(), TestCaseError> {
    let gate = &ref_gate(d, gate)[..];
    // The tensor-core kernel multiplies f16(q): the reference gets the same rounded queries.
    let mma = mma_kernel(d).is_some();
    let q = &(if mma { q.iter().map(|&x| f16::from_f32(x).to_f32()).collect() } else { q.to_vec() })[..];
    let want = reference::attn_tree(ref_dims(d), b, q, gate, kc, vc);
    let terms = reference::attn_tree_error_terms(ref_dims(d), b, q, kc, vc);
    let hd = d.head_dim;
    for i in 0..b.n as usize {
        let keys = reference::visible_rows(b, i, d.window).len();
        let big_k = kernel_abi::attn_split_len_min(keys as u32, min_split) as usize + 140;
        for h in 0..d.n_head {
            let (a_max, spread, vmax) = terms[i * d.n_head + h];
            let delta = gamma(hd / 8 + 12) * a_max;
            // f16 softmax weights (tensor-core kernel): relative 2⁻¹¹ on each weight and on their
            // sum, and 2⁻²⁵ absolute per key for subnormal ones.
            let p16 = if mma { 1.01 * 2f64.powi(-10) + keys as f64 * 2f64.powi(-25) } else { 0.0 };
            let eps = 2.0 * std::f64::consts::LN_2 * (2.0 * delta + 3.0 * U32 * spread) + 8.0 * 2f64.powi(-22) + p16;
            for e in 0..hd {
                let o = (i * d.n_head + h) * hd + e;
                let (sig, gate_err) = if d.gated {
                    let g = gate[o] as f64;
                    (1.0 / (1.0 + (-g).exp()), 2f64.powi(-21) + 2.0 * g.abs() * U32 + 4.0 * U32)
                } else {
                    (1.0, 0.0)
                };
                let tol = sig * (2.0 * eps + 4.0 * gamma(big_k)) * vmax + want[o].abs() * gate_err + 1e-30;
                let err = (got[o] as f64 - want[o]).abs();
                prop_assert!(
                    got[o].is_finite() && err <= tol,
                    "node {} head {} dim {}: {} vs {} (err {:e} > {:e}), {} keys",
                    i,
                    h,
                    e,
                    got[o],
                    want[o],
                    err,
                    tol,
                    keys
                );
            }
        }
    }
    Ok(())
}

fn n_past_strategy() -> impl Strategy<Value = usize> {
    prop_oneof![6 => 0usize..2000, 1 => 2000usize..34000]
}

/// Committed rows a few keys either side of a split boundary: a multiple of 128 (the target's
/// fewest keys per split: the split count changes there) up to 3,200, or around 4,096 / 8,192
/// (the split count reaches 32, then the split length doubles).
fn split_boundary_strategy() -> impl Strategy<Value = usize> {
    prop_oneof![
        4 => (0usize..=25, 0usize..24).prop_map(|(k, o)| (128 * k + o).saturating_sub(12)),
        1 => (prop::sample::select(vec![4096usize, 8192]), 0usize..48).prop_map(|(b, o)| b + o - 24),
    ]
}

/// GQA shapes whose group has divisors other than 1 and itself more often (6: the 27B).
fn grouped_dims_strategy() -> impl Strategy<Value = AttnDims> {
    (
        1usize..=4,
        prop::sample::select(vec![2usize, 3, 4, 6, 6, 8]),
        prop::sample::select(vec![32usize, 64, 128, 256]),
        prop::bool::weighted(0.75),
    )
        .prop_map(|(kv, g, hd, gated)| AttnDims { n_head: kv * g, n_head_kv: kv, head_dim: hd, gated, window: 0 })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// Inputs as dense rows (`layout` 0), as one merged product's `[q | k | v]` rows (1: the
    /// engine's `AttnPrepIn::merged`), or as three strided views with NaN gaps (2).
    #[test]
    fn attn_prep_matches_reference(
        (d, n_rot) in dims_strategy(), n in 1usize..=64, n_past in 0usize..3000, seed in any::<u64>(),
        layout in 0usize..3
    ) {
        let Some(gpu) = gpu_or_skip("attn_prep_matches_reference") else { return Ok(()) };
        let (hd, row) = (d.head_dim, d.row());
        let b = reference::node_batch(n_past as u32, &random_parents(seed, n));
        let ctx = n_past + n + 3;
        let max_pos = ctx + 1;
        let theta = 1e7;
        // The reference takes `[q | gate]` per head; plain attention's input is the q halves alone.
        let qg = values(seed ^ 1, n * 2 * d.n_head * hd, 4.0);
        let q_in: Vec<f32> = if d.gated { qg.clone() } else { qg.chunks(2 * hd).flat_map(|c| c[..hd].iter().copied()).collect() };
        let k = values(seed ^ 2, n * row, 4.0);
        let v = values(seed ^ 3, n * row, 4.0);
        let qn = values(seed ^ 4, hd, 2.0);
        let kn = values(seed ^ 5, hd, 2.0);
        let mut rope = rope_table(n_rot, theta, max_pos);
        rope.push(0.0); // never empty (n_rot = 0 reads none of it)
        let (_bb, bs) = batch_span(gpu, &b);
        let up = |x: &[f32]| gpu.upload(x).unwrap();
        let q_w = q_in.len() / n;
        let merged: Vec<f32> = (0..n)
            .flat_map(|i| [&q_in[i * q_w..(i + 1) * q_w], &k[i * row..(i + 1) * row], &v[i * row..(i + 1) * row]].concat())
            .collect();
        let pad = 1 + seed as usize % 5;
        let (qs, ks, vs) = if layout == 2 { (q_w + pad, row + 2 * pad, row + 3) } else { (q_w, row, row) };
        let (dqg, dk, dv) = (up(&padded(&q_in, q_w, qs - q_w)), up(&padded(&k, row, ks - row)), up(&padded(&v, row, vs - row)));
        let (dqkv, dqn, dkn, drope) = (up(&merged), up(&qn), up(&kn), up(&rope));
        let dq = poisoned_f32(gpu, n * d.n_head * hd);
        let dgate = poisoned_f32(gpu, n * d.n_head * hd);
        let mut dkc = gpu.zeros::<u16>(ctx * row).unwrap();
        let mut dvc = gpu.zeros::<u16>(ctx * row).unwrap();
        gpu.fill_bytes(&mut dkc, 0xff).unwrap();
        gpu.fill_bytes(&mut dvc, 0xff).unwrap();
        let s = |x: &CudaSlice<f32>| DevSpan::of(gpu, x);
        let input = match layout {
            1 => AttnPrepIn::merged(d, s(&dqkv)).unwrap(),
            _ => AttnPrepIn { qg_stride: qs, k_stride: ks, v_stride: vs, ..AttnPrepIn::dense(d, s(&dqg), s(&dk), s(&dv)) },
        };
        attn_prep(gpu, d, n_rot, 1e-6, bs, n, input, s(&dqn), s(&dkn), s(&drope), s(&dq), s(&dgate),
            DevSpan::of(gpu, &dkc), DevSpan::of(gpu, &dvc), ctx).unwrap();
        let (q, gate) = (gpu.download(&dq).unwrap(), gpu.download(&dgate).unwrap());
        let (kc, vc) = (gpu.download(&dkc).unwrap(), gpu.download(&dvc).unwrap());
        let mut rkc = vec![0xffffu16; ctx * row];
        let mut rvc = vec![0xffffu16; ctx * row];
        let want = reference::attn_prep(ref_dims(d), n_rot, theta, 1e-6, &b, &qg, &k, &v, &qn, &kn, &mut rkc, &mut rvc);
        let kk = hd / 32 + 5;
        let bound = |x: &[f32], j: usize| {
            let c = j % hd;
            let half = n_rot / 2;
            let partner = if c < half { j + half } else if c < n_rot { j - half } else { j };
            1.5 * (gamma(kk) + 12.0 * U32) * (x[j].abs() as f64 + x[partner].abs() as f64) + 1e-37
        };
        for (j, (&g, &w)) in q.iter().zip(&want.q).enumerate() {
            let err = (g as f64 - w as f64).abs();
            prop_assert!(g.is_finite() && err <= bound(&want.q, j), "q[{}] = {} vs {} (err {:e})", j, g, w, err);
        }
        if d.gated {
            prop_assert_eq!(gate.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), want.gate.iter().map(|x| x.to_bits()).collect::<Vec<_>>());
        } else {
            prop_assert!(gate.iter().all(|x| x.to_bits() == u32::MAX), "plain attention wrote the gate buffer");
        }
        prop_assert_eq!(&vc, &rvc);
        // K: the written rows within one f16 step of the reference; every other row untouched.
        let kref: Vec<f32> = (0..n * row).map(|e| f16::from_bits(rkc[n_past * row + e]).to_f32()).collect();
        for (e, (&g, &w)) in kc.iter().zip(&rkc).enumerate() {
            let r = e / row;
            if r < n_past || r >= n_past + n {
                prop_assert_eq!(g, 0xffff, "row {} written", r);
                continue;
            }
            let (gf, wf) = (f16::from_bits(g).to_f32() as f64, f16::from_bits(w).to_f32() as f64);
            let tol = bound(&kref, e - n_past * row) + 2f64.powi(-10) * wf.abs() + 2f64.powi(-24);
            prop_assert!((gf - wf).abs() <= tol, "k row {} elem {}: {} vs {}", r, e % row, gf, wf);
        }
    }

    #[test]
    fn attn_tree_matches_reference(
        (d, _rot) in dims_strategy(), n in 1usize..=64, n_past in n_past_strategy(), seed in any::<u64>()
    ) {
        let Some(gpu) = gpu_or_skip("attn_tree_matches_reference") else { return Ok(()) };
        // Long contexts with few heads and nodes (the f64 reference is slow).
        let (d, n) = if n_past > 2000 { (AttnDims { n_head: d.n_head_kv * (d.n_head / d.n_head_kv).min(2), ..d }, n.min(6)) } else { (d, n) };
        let b = reference::node_batch(n_past as u32, &random_parents(seed, n));
        let ctx = n_past + n + 5;
        let hsz = d.n_head * d.head_dim;
        let kc = f16_bits(&values(seed ^ 11, ctx * d.row(), 3.0));
        let vc = f16_bits(&values(seed ^ 12, ctx * d.row(), 3.0));
        let q = values(seed ^ 13, n * hsz, 3.0);
        let gate = values(seed ^ 14, n * hsz, 4.0);
        let got = run_tree(gpu, d, &b, &q, &gate, &kc, &vc, ctx);
        check_tree(d, &b, &q, &gate, &kc, &vc, &got)?;
    }

    /// The same against the reference with the draft's longer splits (`attn_tree_min_split`)
    /// and its sliding windows (none, or 32 … 2048 keys: the window trims committed rows only).
    #[test]
    fn attn_tree_with_longer_splits_matches_reference(
        (d, _rot) in dims_strategy(), n in 1usize..=16, n_past in 0usize..5000,
        min_split in prop::sample::select(vec![256u32, 1024, 4096]),
        window in prop::sample::select(vec![0usize, 0, 32, 47, 64, 500, 2048]), seed in any::<u64>()
    ) {
        let Some(gpu) = gpu_or_skip("attn_tree_with_longer_splits_matches_reference") else { return Ok(()) };
        let d = AttnDims { window, ..d };
        let (d, n) = if n_past > 2000 { (AttnDims { n_head: d.n_head_kv * (d.n_head / d.n_head_kv).min(2), ..d }, n.min(6)) } else { (d, n) };
        let b = reference::node_batch(n_past as u32, &random_parents(seed, n));
        let ctx = n_past + n + 5;
        let hsz = d.n_head * d.head_dim;
        let kc = f16_bits(&values(seed ^ 31, ctx * d.row(), 3.0));
        let vc = f16_bits(&values(seed ^ 32, ctx * d.row(), 3.0));
        let q = values(seed ^ 33, n * hsz, 3.0);
        let gate = values(seed ^ 34, n * hsz, 4.0);
        let got = run_tree_min_split(gpu, d, &b, &q, &gate, &kc, &vc, ctx, min_split, 1);
        check_tree_min_split(d, &b, &q, &gate, &kc, &vc, &got, min_split)?;
    }

    /// Batch invariance: every node of a random tree gives bitwise the same output as the single
    /// node of an AR batch whose committed rows hold its visible keys (same values, other rows),
    /// with or without a sliding window (a windowed node sees at most `window` keys, so alone at
    /// depth 0 it sees them all).
    #[test]
    fn attn_tree_node_is_bitwise_the_same_alone_as_in_a_tree(
        (d, _rot) in dims_strategy(), n in 1usize..=64, n_past in n_past_strategy(),
        window in prop::sample::select(vec![0usize, 0, 32, 100]), seed in any::<u64>()
    ) {
        let Some(gpu) = gpu_or_skip("attn_tree_node_is_bitwise_the_same_alone_as_in_a_tree") else { return Ok(()) };
        let d = AttnDims { window, ..d };
        let n = if n_past > 2000 { n.min(8) } else { n };
        // The launcher takes windows that hold every depth of the launch (≥ its node count).
        let n = if window > 0 { n.min(window) } else { n };
        let b = reference::node_batch(n_past as u32, &random_parents(seed, n));
        let ctx = n_past + n + 40;
        let (row, hsz) = (d.row(), d.n_head * d.head_dim);
        let kc = f16_bits(&values(seed ^ 21, ctx * row, 3.0));
        let vc = f16_bits(&values(seed ^ 22, ctx * row, 3.0));
        let q = values(seed ^ 23, n * hsz, 3.0);
        let gate = values(seed ^ 24, n * hsz, 4.0);
        let all = run_tree(gpu, d, &b, &q, &gate, &kc, &vc, ctx);
        for i in 0..n {
            let rows = reference::visible_rows(&b, i, d.window);
            let n_past1 = rows.len() - 1;
            let mut kc1 = vec![0u16; ctx * row];
            let mut vc1 = vec![0u16; ctx * row];
            for (t, &r) in rows.iter().enumerate() {
                kc1[t * row..(t + 1) * row].copy_from_slice(&kc[r * row..(r + 1) * row]);
                vc1[t * row..(t + 1) * row].copy_from_slice(&vc[r * row..(r + 1) * row]);
            }
            let b1 = reference::node_batch(n_past1 as u32, &[-1]);
            let one = run_tree(gpu, d, &b1, &q[i * hsz..(i + 1) * hsz], &gate[i * hsz..(i + 1) * hsz], &kc1, &vc1, ctx);
            let a: Vec<u32> = all[i * hsz..(i + 1) * hsz].iter().map(|x| x.to_bits()).collect();
            let o: Vec<u32> = one.iter().map(|x| x.to_bits()).collect();
            prop_assert!(a == o, "node {} of {} (depth {}, n_past {}) differs alone", i, n, b.depth[i], n_past);
        }
    }

    /// Head-group invariance: spreading each KV head's query heads over `r` blocks gives, for
    /// every divisor `r` of the group, bitwise the output of `r = 1` — random trees of 1..=64
    /// nodes, contexts either side of split boundaries, with and without the gate and a sliding
    /// window, under the target's and the draft's split rules. The `r = 1` output must be finite
    /// (the buffers start poisoned, so a block that writes nothing cannot pass).
    #[test]
    fn attn_tree_output_is_bitwise_the_same_for_every_head_group_count(
        d in grouped_dims_strategy(), n in 1usize..=64, n_past in split_boundary_strategy(),
        window in prop::sample::select(vec![0usize, 0, 64, 100]),
        min_split in prop::sample::select(vec![128u32, 128, 1024]), seed in any::<u64>()
    ) {
        let Some(gpu) = gpu_or_skip("attn_tree_output_is_bitwise_the_same_for_every_head_group_count") else {
            return Ok(());
        };
        let d = AttnDims { window, ..d };
        let n = if n_past > 4000 { n.min(16) } else { n };
        let n = if window > 0 { n.min(window) } else { n };
        let b = reference::node_batch(n_past as u32, &random_parents(seed, n));
        let ctx = n_past + n + 7;
        let hsz = d.n_head * d.head_dim;
        let kc = f16_bits(&values(seed ^ 41, ctx * d.row(), 3.0));
        let vc = f16_bits(&values(seed ^ 42, ctx * d.row(), 3.0));
        let q = values(seed ^ 43, n * hsz, 3.0);
        let gate = values(seed ^ 44, n * hsz, 4.0);
        let group = d.n_head / d.n_head_kv;
        let one = run_tree_min_split(gpu, d, &b, &q, &gate, &kc, &vc, ctx, min_split, 1);
        prop_assert!(one.iter().all(|x| x.is_finite()), "r = 1 left outputs unwritten or not finite");
        let one: Vec<u32> = one.iter().map(|x| x.to_bits()).collect();
        for r in (2..=group).filter(|r| group.is_multiple_of(*r)) {
            let got: Vec<u32> =
                run_tree_min_split(gpu, d, &b, &q, &gate, &kc, &vc, ctx, min_split, r).iter().map(|x| x.to_bits()).collect();
            if let Some(e) = (0..got.len()).find(|&e| got[e] != one[e]) {
                let (i, h) = (e / hsz, e % hsz / d.head_dim);
                prop_assert!(
                    false,
                    "r = {} of G = {}: node {} head {} dim {} is {:#010x}, r = 1 gives {:#010x} (n {}, n_past {})",
                    r, group, i, h, e % d.head_dim, got[e], one[e], n, n_past
                );
            }
        }
    }

    #[test]
    fn kv_commit_matches_reference(
        planes in 1usize..7, row_half in 1usize..300, pad in 0usize..3, n in 1usize..=64,
        n_past in 0usize..500, pick in any::<prop::sample::Index>(), seed in any::<u64>()
    ) {
        let Some(gpu) = gpu_or_skip("kv_commit_matches_reference") else { return Ok(()) };
        let row = 2 * row_half;
        let ctx = n_past + n + 2;
        let stride = ctx * row + 2 * pad;
        let b = reference::node_batch(n_past as u32, &random_parents(seed, n));
        // The accepted path: a random node's ancestors, root first.
        let leaf = pick.index(n);
        let nodes: Vec<u32> = (0..n as u32).filter(|&j| b.anc[leaf] >> j & 1 == 1).collect();
        let mut path = CommitPath { n_past: n_past as u32, len: nodes.len() as u32, nodes: [0; kernel_abi::MAX_NODES as usize] };
        path.nodes[..nodes.len()].copy_from_slice(&nodes);
        let cache: Vec<u16> = (0..planes * stride).map(|e| (e as u64).wrapping_mul(0x9e37_79b9).wrapping_add(seed) as u16).collect();
        let dcache = gpu.upload(&cache).unwrap();
        let mut pbuf = gpu.zeros::<u32>(std::mem::size_of::<CommitPath>() / 4).unwrap();
        let ps = write_step_param(gpu, &path, &mut pbuf).unwrap();
        kv_commit(gpu, ps, DevSpan::of(gpu, &dcache), planes, stride, row, ctx).unwrap();
        let got = gpu.download(&dcache).unwrap();
        let mut want = cache.clone();
        reference::kv_commit(&path, &mut want, planes, stride, row);
        prop_assert!(got == want, "kv_commit differs from the reference (path {:?})", nodes);
    }
}

#[test]
fn attention_launchers_reject_bad_shapes() {
    let Some(gpu) = gpu_or_skip("attention_launchers_reject_bad_shapes") else { return };
    let d = AttnDims { n_head: 4, n_head_kv: 2, head_dim: 48, gated: true, window: 0 };
    let b = reference::node_batch(0, &[-1]);
    let (_bb, bs) = batch_span(gpu, &b);
    let f = gpu.zeros::<f32>(4096).unwrap();
    let h = gpu.zeros::<u16>(4096).unwrap();
    let (fs, hs) = (DevSpan::of(gpu, &f), DevSpan::of(gpu, &h));
    let err = attn_tree(gpu, d, bs, 1, fs, fs, hs, hs, 8, fs, fs).unwrap_err().to_string();
    assert!(err.contains("attn_tree") && err.contains("head_dim"), "{err}");
    let d = AttnDims { n_head: 4, n_head_kv: 2, head_dim: 32, gated: true, window: 0 };
    let err = attn_tree(gpu, d, bs, 1, fs, fs, hs, hs, 1000, fs, fs).unwrap_err().to_string();
    assert!(err.contains("k_cache"), "{err}");
    let err = attn_tree(gpu, d, bs, 65, fs, fs, hs, hs, 8, fs, fs).unwrap_err().to_string();
    assert!(err.contains("nodes"), "{err}");
    // A window must exceed every depth: at least the launch's node count.
    let w = AttnDims { window: 31, ..d };
    let err = attn_tree(gpu, w, bs, 32, fs, fs, hs, hs, 8, fs, fs).unwrap_err().to_string();
    assert!(err.contains("window 31"), "{err}");
    // Head groups must divide the GQA group (2 query heads per KV head here).
    let m = kernel_abi::ATTN_MIN_SPLIT_KEYS;
    for r in [0usize, 3] {
        let err = attn_tree_min_split(gpu, d, bs, 1, fs, fs, hs, hs, 8, fs, fs, m, r).unwrap_err().to_string();
        assert!(err.contains(&format!("head_groups {r}")) && err.contains("2 query heads"), "{err}");
    }
}
