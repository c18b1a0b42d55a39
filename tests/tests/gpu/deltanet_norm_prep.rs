//! `gdn_norm_prep` (the DeltaNet gated RMSNorm fused with the out projection's input
//! preparation, one launch) against the two launches it replaces, `gdn_gated_norm` then
//! `QmmWorkspace::prepare`: the product that follows must be **bitwise** equal, with the
//! engine's K-quant prep (no bf16 pair) and with the pair F32 weights need, for n = 1..=64 nodes
//! (two activation planes past 32), head dims 16…384 (every `gdn_norm_prep_dv*` kernel, its
//! register path and its long-row path), `n_v·d_v` not a multiple of the 1024-value prep chunk,
//! and `z` rows at a stride wider than `n_v·d_v`. The fused result is also checked against the
//! reference `flashtree_reference::deltanet::gdn_norm_prep` within the derived bound below.

use flashtree::gpu::deltanet::{
    gdn_gated_norm, gdn_norm_prep, gdn_norm_prep_with, gdn_scratch_len, node_batch_words, norm_prep_cluster_size,
    GdnIo, GdnLayerState, GdnNormPrepKernel, GdnShape, GdnWeights,
};
use flashtree::gpu::qmatmul::{QWeight, QmmWorkspace};
use flashtree::gpu::{DevSpan, Gpu};
use flashtree_reference::deltanet::{self as reference, node_batch, GdnLayer};
use flashtree_reference::model::deltanet::GdnDims;
use flashtree_reference::quant::GgmlType;
use flashtree_tests::gpu::gpu_or_skip;
use kernel_abi::{gdn_scratch, NodeBatch};
use proptest::prelude::*;

use super::deltanet::Rng;
use super::qmm::{case, expected, qmm_block, Case};

/// Inputs of one case: the layer shape, `o [n][vd]`, `z` rows at `z_stride`, `norm_w [d_v]`.
struct Inputs {
    shape: GdnShape,
    n: usize,
    o: Vec<f32>,
    z: Vec<f32>,
    z_stride: usize,
    norm_w: Vec<f32>,
}

/// A random shape: `d_v` from 16 to 384, `n_v` up to 64 (even where `d_v = 16`, so that
/// `n_v·d_v` is a multiple of 32 as the prep needs).
fn inputs(seed: u64, n: usize) -> Inputs {
    let mut rng = Rng(seed | 1);
    let d_v = [16, 32, 64, 128, 128, 256, 384][rng.below(7)];
    let mut n_v = 1 + rng.below(64);
    if d_v == 16 && n_v % 2 == 1 {
        n_v += 1;
    }
    let shape = GdnShape { n_k: 1, n_v, d_k: 16, d_v, conv_kernel: 4, eps: 1e-6 };
    let vd = shape.value_len();
    let z_stride = vd + [0, 8, 33][rng.below(3)];
    // Rows of different magnitudes (the norm removes o's scale; z sets the row's).
    let mut o = Vec::with_capacity(n * vd);
    for _ in 0..n {
        let s = [1e-3f32, 1.0, 50.0][rng.below(3)];
        o.extend(rng.vec(vd, s));
    }
    let z_scale = 2.0 * [1.0f32, 1e-2, 30.0][rng.below(3)];
    let z = rng.vec(n * z_stride, z_scale);
    let norm_w = rng.vec(d_v, 1.5);
    Inputs { shape, n, o, z, z_stride, norm_w }
}

impl Inputs {
    /// `z` as dense rows `[n][vd]` (the reference's layout).
    fn z_dense(&self) -> Vec<f32> {
        let vd = self.shape.value_len();
        (0..self.n).flat_map(|i| self.z[i * self.z_stride..i * self.z_stride + vd].iter().copied()).collect()
    }
    fn layer(&self) -> GdnLayer<'_> {
        let s = &self.shape;
        GdnLayer {
            dims: GdnDims { n_k: s.n_k, n_v: s.n_v, d_k: s.d_k, d_v: s.d_v },
            conv_kernel: s.conv_kernel,
            eps: s.eps,
            conv_w: &[],
            ssm_a: &[],
            dt_bias: &[],
            norm_w: &self.norm_w,
        }
    }
}

/// Device buffers of a case: the scratch (NaN but for the `o` rows), `z`, `norm_w`, `out`
/// (NaN), the node batch.
struct Dev {
    scratch: flashtree::gpu::CudaSlice<f32>,
    z: flashtree::gpu::CudaSlice<f32>,
    norm_w: flashtree::gpu::CudaSlice<f32>,
    out: flashtree::gpu::CudaSlice<f32>,
    _nodes: flashtree::gpu::CudaSlice<u32>,
    nodes: DevSpan<NodeBatch>,
}

impl Dev {
    fn new(gpu: &Gpu, c: &Inputs) -> Self {
        let s = &c.shape;
        let mut scratch = vec![f32::NAN; gdn_scratch_len(s)];
        let o0 = gdn_scratch(s.n_k, s.n_v, s.d_k, s.d_v).o;
        scratch[o0..o0 + c.o.len()].copy_from_slice(&c.o);
        let mut out = gpu.zeros::<f32>(c.n * s.value_len()).unwrap();
        gpu.fill_bytes(&mut out, 0xff).unwrap();
        let nodes_buf = gpu.upload(&node_batch_words(&node_batch(0, &vec![-1; c.n]))).unwrap();
        // Safety: the buffer holds one NodeBatch and lives as long as `Dev`.
        let nodes = unsafe { DevSpan::from_raw(DevSpan::of(gpu, &nodes_buf).ptr(), 1) };
        Dev {
            scratch: gpu.upload(&scratch).unwrap(),
            z: gpu.upload(&c.z).unwrap(),
            norm_w: gpu.upload(&c.norm_w).unwrap(),
            out,
            _nodes: nodes_buf,
            nodes,
        }
    }
    fn args(&self, gpu: &Gpu, c: &Inputs) -> (GdnWeights, GdnIo, GdnLayerState) {
        let sp = |b| DevSpan::of(gpu, b);
        // Only `norm_w`, `z`, `out` and the scratch are read by the gated norm (the rest: empty).
        let none = sp(&self.norm_w).sub(0, 0, "none").unwrap();
        let w = GdnWeights { conv_w: none, ssm_a: none, dt_bias: none, norm_w: sp(&self.norm_w) };
        let io = GdnIo {
            mixed: none,
            z: sp(&self.z),
            a: none,
            b: none,
            out: sp(&self.out),
            mixed_stride: c.shape.conv_ch(),
            z_stride: c.z_stride,
            a_stride: c.shape.n_v,
            b_stride: c.shape.n_v,
        };
        let st = GdnLayerState { conv_state: none, state: none, scratch: sp(&self.scratch) };
        (w, io, st)
    }
}

/// The product `y = W·x` of `w` after the two-kernel path and after the fused one (`pairs` as
/// the weights need), `[n][out]` each.
fn both_products(gpu: &Gpu, c: &Inputs, dev: &Dev, w: &QWeight) -> (Vec<f32>, Vec<f32>) {
    both_products_with(gpu, c, dev, w, GdnNormPrepKernel::Auto)
}

/// [`both_products`] with the fused path's kernel chosen by `which`.
fn both_products_with(gpu: &Gpu, c: &Inputs, dev: &Dev, w: &QWeight, which: GdnNormPrepKernel) -> (Vec<f32>, Vec<f32>) {
    let (n, vd) = (c.n, c.shape.value_len());
    let (gw, io, st) = dev.args(gpu, c);
    let pairs = w.needs_pairs();
    let mut ws = QmmWorkspace::new(gpu, vd, w.out()).unwrap();
    let mut y_sep = gpu.zeros::<f32>(n * w.out()).unwrap();
    let mut y_fused = gpu.zeros::<f32>(n * w.out()).unwrap();
    gpu.fill_bytes(&mut y_sep, 0xff).unwrap();
    gpu.fill_bytes(&mut y_fused, 0xff).unwrap();
    gdn_gated_norm(gpu, &c.shape, n, dev.nodes, &gw, &io, &st).unwrap();
    ws.prepare(gpu, io.out, n, vd, pairs).unwrap();
    w.matmul(gpu, n, DevSpan::of(gpu, &y_sep), &mut ws).unwrap();
    gdn_norm_prep_with(gpu, &c.shape, n, &gw, &io, &st, &mut ws, pairs, which).unwrap();
    w.matmul(gpu, n, DevSpan::of(gpu, &y_fused), &mut ws).unwrap();
    (gpu.download(&y_sep).unwrap(), gpu.download(&y_fused).unwrap())
}

/// The fused product against `W · gdn_norm_prep_ref` (f64). The reference's rounded input
/// `x_r` and the device's `x̂` both come from a gated norm (the device's within
/// `|y|(|z|·2⁻²³ + 2⁻¹⁸)` of the reference's: SFU `silu`, the f32 `1/rms` and products;
/// `deltanet.rs`'s bound with `Δo = 0`, rounded up)
/// rounded at a power-of-two scale (`≤ 2⁻¹¹|y| + 2⁻²⁴ max|y|` each), so per input
/// `|x̂ − x_r| ≤ 2·(2⁻¹¹|x| + 2⁻²⁴ max) + |x|(|z|·2⁻²³ + 2⁻¹⁸)`: `expected`'s bound for `x_r`
/// (which counts one rounding) plus `Σ_i |w_i|·(2⁻¹¹|x_i| + 2⁻²⁴ max + |x_i|(|z_i|·2⁻²³ +
/// 2⁻¹⁸))·1.01`. Checked on the first 4 nodes (the f64 products are slow in a debug build).
fn check_reference(c: &Inputs, wc: &Case, y: &[f32]) -> Result<(), TestCaseError> {
    let vd = c.shape.value_len();
    let z = c.z_dense();
    let x = reference::gdn_norm_prep(&c.layer(), &c.o, &z);
    let nodes = c.n.min(4);
    let want = expected(wc, &x, nodes);
    for col in 0..nodes {
        let (xc, zc) = (&x[col * vd..(col + 1) * vd], &z[col * vd..(col + 1) * vd]);
        let max = xc.iter().fold(0f64, |m, &v| m.max((v as f64).abs()));
        for o in 0..wc.out {
            let wr = &wc.w[o * vd..(o + 1) * vd];
            let extra: f64 = (0..vd)
                .map(|i| {
                    let (xi, zi) = ((xc[i] as f64).abs(), (zc[i] as f64).abs());
                    (wr[i] as f64).abs()
                        * (2f64.powi(-11) * xi + 2f64.powi(-24) * max + xi * (zi * 2f64.powi(-23) + 2f64.powi(-18)))
                })
                .sum();
            let (ref_y, bound) = want[col * wc.out + o];
            let got = y[col * wc.out + o] as f64;
            let tol = bound + 1.01 * extra;
            prop_assert!(
                (got - ref_y).abs() <= tol,
                "{:?} node {} y[{}]: {} vs reference {} (tol {:e})",
                wc.ty,
                col,
                o,
                got,
                ref_y,
                tol
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn gdn_norm_prep_equals_gated_norm_then_prep_bitwise(
        n in 1usize..65,
        out in 1usize..200,
        kq in prop::sample::select(vec![GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q8_0]),
        seed in any::<u64>(),
    ) {
        let Some(gpu) = gpu_or_skip("gdn_norm_prep_equals_gated_norm_then_prep_bitwise") else { return Ok(()) };
        let c = inputs(seed, n);
        let vd = c.shape.value_len();
        let dev = Dev::new(gpu, &c);
        // The engine's K-quant prep (no pair; Q8_0 where n_v·d_v is not whole super-blocks),
        // then the pair with F32 weights.
        let kq = if vd.is_multiple_of(qmm_block(kq)) { kq } else { GgmlType::Q8_0 };
        for ty in [kq, GgmlType::F32] {
            let wc = case(ty, out, vd / qmm_block(ty), seed ^ 0x77);
            prop_assert_eq!(wc.inp, vd);
            let w = QWeight::upload(gpu, ty, &wc.raw, out, vd).unwrap();
            let (ys, yf) = both_products(gpu, &c, &dev, &w);
            for (i, (s, f)) in ys.iter().zip(&yf).enumerate() {
                prop_assert!(
                    s.to_bits() == f.to_bits(),
                    "{:?} n={} n_v={} d_v={} z_stride={} out={}: y[{}] {} (gated norm + prep) vs {} (fused)",
                    ty, n, c.shape.n_v, c.shape.d_v, c.z_stride, out, i, s, f
                );
            }
            check_reference(&c, &wc, &yf)?;
        }
    }
}

/// The 27B's shape (48 heads of 128: the register path's largest row, 6 heads × 4 values per
/// thread) at AR and at a 22-node tree, once each, bitwise.
#[test]
fn gdn_norm_prep_equals_gated_norm_then_prep_at_27b_shape() {
    let Some(gpu) = gpu_or_skip("gdn_norm_prep_equals_gated_norm_then_prep_at_27b_shape") else { return };
    for n in [1usize, 22] {
        let mut c = inputs(0x27b + n as u64, n);
        c.shape = GdnShape { n_k: 16, n_v: 48, d_k: 128, d_v: 128, conv_kernel: 4, eps: 1e-6 };
        let vd = c.shape.value_len();
        c.z_stride = vd;
        let mut rng = Rng(n as u64 + 5);
        (c.o, c.z, c.norm_w) = (rng.vec(n * vd, 1.0), rng.vec(n * vd, 2.0), rng.vec(128, 1.5));
        let dev = Dev::new(gpu, &c);
        let wc = case(GgmlType::Q4_K, 64, vd / 256, 9);
        let w = QWeight::upload(gpu, GgmlType::Q4_K, &wc.raw, 64, vd).unwrap();
        let (ys, yf) = both_products(gpu, &c, &dev, &w);
        assert!(ys.iter().zip(&yf).all(|(s, f)| s.to_bits() == f.to_bits()), "n = {n}: fused differs");
    }
}

/// The cluster kernel (`gdn_norm_prep_cluster_dv128`: the column's chunks as one cluster, each
/// block its own 8 heads, the column's max exchanged through distributed shared memory) and the
/// one-block kernel, each forced, for `d_v = 128` rows of 2 to 8 whole prep chunks: bitwise the
/// two launches they replace, for every cluster size, AR, 8 and 22 nodes, two activation planes
/// (33, 64), `z` rows at a wider stride, rows longer than one block stages (64 heads: 8,192
/// values). The cluster kernel refuses shapes it does not cover.
#[test]
fn gdn_norm_prep_cluster_equals_gated_norm_then_prep_bitwise() {
    let Some(gpu) = gpu_or_skip("gdn_norm_prep_cluster_equals_gated_norm_then_prep_bitwise") else { return };
    for n_v in [16usize, 24, 32, 48, 64] {
        let shape = GdnShape { n_k: 16, n_v, d_k: 128, d_v: 128, conv_kernel: 4, eps: 1e-6 };
        let vd = shape.value_len();
        assert_eq!(norm_prep_cluster_size(&shape), (vd / 1024) as u32, "n_v = {n_v}");
        for n in [1usize, 8, 22, 33, 64] {
            let mut c = inputs(0xc1 + (n_v * 100 + n) as u64, n);
            c.shape = shape;
            c.z_stride = vd + 32 * (n % 3);
            let mut rng = Rng((n_v * 1000 + n) as u64);
            (c.o, c.z, c.norm_w) = (rng.vec(n * vd, 1.0), rng.vec(n * c.z_stride, 2.0), rng.vec(128, 1.5));
            let dev = Dev::new(gpu, &c);
            let wc = case(GgmlType::Q4_K, 48, vd / 256, 11);
            let w = QWeight::upload(gpu, GgmlType::Q4_K, &wc.raw, 48, vd).unwrap();
            for which in [GdnNormPrepKernel::Cluster, GdnNormPrepKernel::OneBlock] {
                let (ys, yf) = both_products_with(gpu, &c, &dev, &w, which);
                if let Some(i) = (0..ys.len()).find(|&i| ys[i].to_bits() != yf[i].to_bits()) {
                    panic!("n_v = {n_v}, n = {n}, {which:?}: y[{i}] {} (gated norm + prep) vs {}", ys[i], yf[i]);
                }
            }
        }
    }
    // Shapes outside the cluster kernel: refused when forced.
    let c = inputs(5, 2);
    let shape = GdnShape { n_k: 2, n_v: 4, d_k: 64, d_v: 64, conv_kernel: 4, eps: 1e-6 };
    assert_eq!(norm_prep_cluster_size(&shape), 0);
    let dev = Dev::new(gpu, &c);
    let (w, io, st) = dev.args(gpu, &c);
    let mut ws = QmmWorkspace::new(gpu, c.shape.value_len(), 8).unwrap();
    if norm_prep_cluster_size(&c.shape) == 0 {
        let err = gdn_norm_prep_with(gpu, &c.shape, 2, &w, &io, &st, &mut ws, false, GdnNormPrepKernel::Cluster);
        assert!(err.unwrap_err().to_string().contains("cluster kernel"));
    }
}

#[test]
fn gdn_norm_prep_rejects_bad_shapes() {
    let Some(gpu) = gpu_or_skip("gdn_norm_prep_rejects_bad_shapes") else { return };
    let c = inputs(3, 2);
    let dev = Dev::new(gpu, &c);
    let (w, io, st) = dev.args(gpu, &c);
    let vd = c.shape.value_len();
    let mut ws = QmmWorkspace::new(gpu, vd, 8).unwrap();
    let err = gdn_norm_prep(gpu, &c.shape, 2, &w, &GdnIo { z_stride: vd - 1, ..io }, &st, &mut ws, false);
    assert!(err.unwrap_err().to_string().contains("z row stride"));
    let short = io.z.sub(0, vd, "test").unwrap();
    let err = gdn_norm_prep(gpu, &c.shape, 2, &w, &GdnIo { z: short, ..io }, &st, &mut ws, false);
    assert!(err.unwrap_err().to_string().contains("z needs"));
    let err = gdn_norm_prep(gpu, &c.shape, 65, &w, &io, &st, &mut ws, false);
    assert!(err.unwrap_err().to_string().contains("65 nodes"));
    let mut small = QmmWorkspace::new(gpu, 16, 8).unwrap();
    let err = gdn_norm_prep(gpu, &c.shape, 2, &w, &io, &st, &mut small, false);
    assert!(err.unwrap_err().to_string().contains("within the workspace"));
}
