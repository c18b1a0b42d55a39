//! `deltanet` kernels vs `flashtree_reference::deltanet`, and their bit-level invariants.
//!
//! **Tolerance** (first-order error analysis, `u = 2⁻²⁴`, then ×2 for second-order terms and the
//! approximate special functions' constants). All magnitudes come from the reference run.
//!
//! * Prep, per conv channel `c` with pre-activation `p = Σ_t w_t x_t` and `A = Σ_t |w_t x_t|`:
//!   the fma chain errs by `≤ γ_K·A`, `|silu'| ≤ 1.1`, the SFU `silu` by
//!   `|y|(|p|·2⁻²³ + 2⁻²¹)`, the reference's f32 rounding by `u|y|`:
//!   `Δy ≤ 1.1·γ_K·A + |y|(|p|·2⁻²³ + 2⁻²¹ + 2u)`. `v = y`. L2 normalisation of a head `y_h`:
//!   `‖Δk‖ ≤ 2‖Δy_h‖/‖y_h‖ + γ₁₆` (sum of squares ≤ 10 roundings, sqrt, divide, scale), same
//!   relative for `q`. `β`: `Δβ ≤ β(|b|·2⁻²³ + 2⁻²⁰)` (ex2/rcp approx); `α = e^g`:
//!   `Δα ≤ α(|g|·2⁻²¹ + 2⁻²¹ + |ssm_a|·2⁻²⁰(1 + softplus))` (lg2/ex2 approx).
//! * Recurrence, per value column `c` (`s` = the column of the state before the step, `M =
//!   ‖s‖ + |v_c|`): the map `s ↦ α(I − βkkᵀ)s` has norm ≤ 1 (`‖k‖ = 1`, `β ∈ (0,1)`, `α ≤ 1`), so
//!   errors carried from earlier steps do not grow, and each step adds its own: the f32
//!   arithmetic (decay, the `d_k`-term dot, `v − u`, `β·`, the fma update) and the reference's two
//!   f32 roundings, `≤ (γ_{d_k} + 8u)·M`, plus the input errors
//!   `Δα‖s‖ + Δβ·M + (2‖s‖ + |v|)‖Δk‖ + Δv_c`. So the column error after a node at depth `D` is
//!   the sum of `D + 1` such terms along its path (the bound grows with depth).
//!   The kernel reads a node's output from its parent's column `s`: `o_c = fma(δ, kᵀq, α·sᵀq)`
//!   with `δ = β(v − α·sᵀk)`. With `E_c` the node's state error (it bounds `Δδ` too: every term of
//!   `Δδ ≤ Δβ·M + Δv + E_parent + ‖s‖‖Δk‖ + (γ_{d_k} + u)‖s‖ + Δα‖s‖` is one of `E_c`'s), `|δ| ≤ M`,
//!   `|sᵀq| ≤ ‖s‖‖q‖`, `‖k‖ = 1` and `Δ(kᵀq) ≤ ‖Δk‖‖q‖ + ‖Δq‖ + γ_{d_k}‖q‖`:
//!   `Δo_c ≤ 2E_c‖q‖ + (‖s‖ + M)(‖Δq‖ + (γ_{d_k} + u)‖q‖) + M‖Δk‖‖q‖ + Δα‖s‖‖q‖ + 2u|o_c|`.
//! * Gated norm: `Δms ≤ Σ(2|o|Δo + Δo²)/d_v + γ₁₀·ms`, `Δr/r ≤ ½Δms/(ms + eps) + 4u`,
//!   `Δout_c ≤ |w_c silu(z_c)|·r·(Δo_c + |o_c|Δr/r) + |out_c|(|z_c|·2⁻²³ + 2⁻²¹ + 6u)`.
//!
//! **Bit-level checks**: every node of a random tree is bitwise equal (`o` and `out`) to the same
//! node run alone after `gdn_commit` committed its ancestors (batch invariance and commit
//! equivalence at once: the committed state must be bitwise the one the tree's replay computed);
//! the committed conv window equals the reference's exactly (it is a copy), the committed state
//! is within the recurrence bound of the reference commit, in a two-layer arena; the two
//! conv/norm kernels (`gdn_prep`, one node per block; `gdn_prep_pairs`, two) write the same bits.

use flashtree::gpu::deltanet::{
    commit_path_words, gdn_commit, gdn_forward, gdn_prep, gdn_replay_words, gdn_scratch_len, node_batch_words, GdnIo,
    GdnLayerState, GdnPrepKernel, GdnShape, GdnWeights,
};
use flashtree::gpu::{CudaSlice, DevSpan, Gpu};
use flashtree_reference::deltanet::{self as reference, commit_path, node_batch, path_to, GdnLayer, NodeResult};
use flashtree_reference::model::deltanet::{DeltaInputs, GdnDims};
use flashtree_tests::gpu::gpu_or_skip;
use flashtree_tests::tolerance::{gamma, U32};
use kernel_abi::{gdn_scratch, CommitPath, GdnReplay, NodeBatch, MAX_NODES};
use proptest::prelude::*;

/// A xorshift generator for the DeltaNet tests (also `deltanet_norm_prep`).
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    pub(crate) fn vec(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| ((self.next() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) as f32 * scale).collect()
    }
}

/// Random parents: mostly chains (parent = previous node), some branches and new roots.
fn random_tree(rng: &mut Rng, n: usize) -> Vec<i32> {
    (0..n)
        .map(|i| match (i, rng.below(8)) {
            (0, _) | (_, 0) => -1,
            (_, 1..=4) => i as i32 - 1,
            _ => rng.below(i) as i32,
        })
        .collect()
}

/// One layer's host data.
struct Layer {
    conv_w: Vec<f32>,
    ssm_a: Vec<f32>,
    dt_bias: Vec<f32>,
    norm_w: Vec<f32>,
    /// `[32][conv_ch]` (rows past `n` random too: never read).
    mixed: Vec<f32>,
    z: Vec<f32>,
    a: Vec<f32>,
    b: Vec<f32>,
    conv: Vec<f32>,
    state: Vec<f32>,
}

impl Layer {
    fn new(rng: &mut Rng, s: &GdnShape) -> Self {
        let (ch, nv, m) = (s.conv_ch(), s.n_v, MAX_NODES as usize);
        Layer {
            conv_w: rng.vec(ch * s.conv_kernel, 0.6),
            ssm_a: rng.vec(nv, 1.0).iter().map(|x| -0.1 - x.abs()).collect(),
            dt_bias: rng.vec(nv, 1.0),
            norm_w: rng.vec(s.d_v, 1.5),
            mixed: rng.vec(m * ch, 1.0),
            z: rng.vec(m * s.value_len(), 2.0),
            a: rng.vec(m * nv, 2.0),
            b: rng.vec(m * nv, 2.0),
            conv: rng.vec(s.conv_state_len(), 1.0),
            state: rng.vec(s.state_len(), 0.5),
        }
    }
    fn reference<'a>(&'a self, s: &GdnShape) -> GdnLayer<'a> {
        GdnLayer {
            dims: GdnDims { n_k: s.n_k, n_v: s.n_v, d_k: s.d_k, d_v: s.d_v },
            conv_kernel: s.conv_kernel,
            eps: s.eps,
            conv_w: &self.conv_w,
            ssm_a: &self.ssm_a,
            dt_bias: &self.dt_bias,
            norm_w: &self.norm_w,
        }
    }
    /// The reference forward of `nb` from the given committed state and window.
    fn run_reference(&self, s: &GdnShape, nb: &NodeBatch, conv: &[f32], state: &[f32]) -> Vec<NodeResult> {
        reference::gdn_forward(&self.reference(s), nb, &self.mixed, &self.z, &self.a, &self.b, conv, state)
    }
}

/// Device buffers of one layer's weights and activations.
struct DevLayer {
    conv_w: CudaSlice<f32>,
    ssm_a: CudaSlice<f32>,
    dt_bias: CudaSlice<f32>,
    norm_w: CudaSlice<f32>,
    z: CudaSlice<f32>,
    a: CudaSlice<f32>,
    b: CudaSlice<f32>,
    out: CudaSlice<f32>,
}

impl DevLayer {
    fn new(gpu: &Gpu, l: &Layer) -> Self {
        let mut out = gpu.zeros::<f32>(l.z.len()).unwrap();
        gpu.fill_bytes(&mut out, 0xff).unwrap(); // NaN poison
        DevLayer {
            conv_w: gpu.upload(&l.conv_w).unwrap(),
            ssm_a: gpu.upload(&l.ssm_a).unwrap(),
            dt_bias: gpu.upload(&l.dt_bias).unwrap(),
            norm_w: gpu.upload(&l.norm_w).unwrap(),
            z: gpu.upload(&l.z).unwrap(),
            a: gpu.upload(&l.a).unwrap(),
            b: gpu.upload(&l.b).unwrap(),
            out,
        }
    }
    fn weights(&self, gpu: &Gpu) -> GdnWeights {
        GdnWeights {
            conv_w: DevSpan::of(gpu, &self.conv_w),
            ssm_a: DevSpan::of(gpu, &self.ssm_a),
            dt_bias: DevSpan::of(gpu, &self.dt_bias),
            norm_w: DevSpan::of(gpu, &self.norm_w),
        }
    }
}

/// One buffer holding `nb` then its replay schedule, and the spans of both.
fn upload_batch(gpu: &Gpu, nb: &NodeBatch) -> (CudaSlice<u32>, DevSpan<NodeBatch>, DevSpan<GdnReplay>) {
    let mut words = node_batch_words(nb);
    let at = words.len() as u64 * 4;
    words.extend(gdn_replay_words(nb).unwrap());
    let d = gpu.upload(&words).unwrap();
    // Safety: the buffer holds one NodeBatch then one GdnReplay and lives as long as the spans
    // are used.
    let (s, r) = unsafe {
        (DevSpan::from_raw(DevSpan::of(gpu, &d).ptr(), 1), DevSpan::from_raw(DevSpan::of(gpu, &d).ptr() + at, 1))
    };
    (d, s, r)
}

fn upload_path(gpu: &Gpu, p: &CommitPath) -> (CudaSlice<u32>, DevSpan<CommitPath>) {
    let d = gpu.upload(&commit_path_words(p)).unwrap();
    let s = unsafe { DevSpan::from_raw(DevSpan::of(gpu, &d).ptr(), 1) };
    (d, s)
}

/// Runs the forward of `nb` over device `mixed` (one layer's `[32][conv_ch]`), `conv`, `state`
/// into `scratch` and `dl.out` (poisoned first); returns `out [n][vd]`.
#[allow(clippy::too_many_arguments)]
fn forward(
    gpu: &Gpu,
    s: &GdnShape,
    nb: &NodeBatch,
    dl: &mut DevLayer,
    mixed: DevSpan<f32>,
    conv: DevSpan<f32>,
    state: DevSpan<f32>,
    scratch: DevSpan<f32>,
) -> Vec<f32> {
    let n = nb.n as usize;
    let (_nbd, nbs, rps) = upload_batch(gpu, nb);
    gpu.fill_bytes(&mut dl.out, 0xff).unwrap();
    let io = GdnIo::dense(
        s,
        mixed,
        DevSpan::of(gpu, &dl.z),
        DevSpan::of(gpu, &dl.a),
        DevSpan::of(gpu, &dl.b),
        DevSpan::of(gpu, &dl.out),
    );
    let st = GdnLayerState { conv_state: conv, state, scratch };
    gdn_forward(gpu, s, n, nbs, rps, &dl.weights(gpu), &io, &st).unwrap();
    gpu.synchronize().unwrap();
    gpu.download(&dl.out).unwrap()[..n * s.value_len()].to_vec()
}

/// One layer's inputs as column ranges of one `[32][w]` buffer laid out like the engine's merged
/// product, `[mixed | gap | z | gap | b | gap | a | gap]` (gaps of `gaps[0..4]` values), every
/// value outside the four ranges NaN (rows past `n` hold the test's rows: never read either way).
struct Interleaved {
    buf: Vec<f32>,
    w: usize,
    z: usize,
    b: usize,
    a: usize,
}

fn interleaved(s: &GdnShape, l: &Layer, gaps: [usize; 4]) -> Interleaved {
    let (ch, vd, nv, m) = (s.conv_ch(), s.value_len(), s.n_v, MAX_NODES as usize);
    let z = ch + gaps[0];
    let b = z + vd + gaps[1];
    let a = b + nv + gaps[2];
    let w = a + nv + gaps[3];
    let mut buf = vec![f32::NAN; m * w];
    for i in 0..m {
        let row = &mut buf[i * w..(i + 1) * w];
        row[..ch].copy_from_slice(&l.mixed[i * ch..(i + 1) * ch]);
        row[z..z + vd].copy_from_slice(&l.z[i * vd..(i + 1) * vd]);
        row[b..b + nv].copy_from_slice(&l.b[i * nv..(i + 1) * nv]);
        row[a..a + nv].copy_from_slice(&l.a[i * nv..(i + 1) * nv]);
    }
    Interleaved { buf, w, z, b, a }
}

/// The recurrence outputs `o [n][vd]` a forward left in a one-layer `scratch`.
fn scratch_o(gpu: &Gpu, s: &GdnShape, scratch: &CudaSlice<f32>, n: usize) -> Vec<f32> {
    let o0 = gdn_scratch(s.n_k, s.n_v, s.d_k, s.d_v).o;
    gpu.download(scratch).unwrap()[o0..o0 + n * s.value_len()].to_vec()
}

fn norm(x: impl Iterator<Item = f64>) -> f64 {
    x.map(|v| v * v).sum::<f64>().sqrt()
}

/// Per-node input error bounds: `(‖Δq_h‖, ‖Δk_h‖ per key head, Δv per v channel, Δα, Δβ per
/// value head)`, from the reference window and the test's inputs (see the module doc).
struct InputErr {
    dq: Vec<f64>,
    dk: Vec<f64>,
    dv: Vec<f64>,
    da: Vec<f64>,
    db: Vec<f64>,
}

fn input_err(s: &GdnShape, l: &Layer, i: usize, r: &NodeResult) -> InputErr {
    let (ch, kk, nv) = (s.conv_ch(), s.conv_kernel, s.n_v);
    let (mut dy, mut y) = (vec![0f64; ch], vec![0f64; ch]);
    for c in 0..ch {
        let taps = &l.conv_w[c * kk..(c + 1) * kk];
        let mut xs: Vec<f64> = (0..kk - 1).map(|t| r.window[t * ch + c] as f64).collect();
        xs.push(l.mixed[i * ch + c] as f64);
        let p: f64 = taps.iter().zip(&xs).map(|(&w, &x)| w as f64 * x).sum();
        let a: f64 = taps.iter().zip(&xs).map(|(&w, &x)| (w as f64 * x).abs()).sum();
        let yc = p / (1.0 + (-p).exp());
        y[c] = yc;
        dy[c] = 1.1 * gamma(kk) * a + yc.abs() * (p.abs() * 2f64.powi(-23) + 2f64.powi(-21) + 2.0 * U32);
    }
    let head = |base: usize, d: usize| {
        let ny = norm(y[base..base + d].iter().copied());
        2.0 * norm(dy[base..base + d].iter().copied()) / ny.max(1e-30) + gamma(16)
    };
    let kd = s.n_k * s.d_k;
    let dq = (0..s.n_k).map(|h| head(h * s.d_k, s.d_k) / (s.d_k as f64).sqrt()).collect();
    let dk = (0..s.n_k).map(|h| head(kd + h * s.d_k, s.d_k)).collect();
    let dv = dy[2 * kd..].to_vec();
    let mut da = vec![0f64; nv];
    let mut db = vec![0f64; nv];
    for j in 0..nv {
        let x = (l.a[i * nv + j] + l.dt_bias[j]) as f64;
        let sp = if x > 20.0 { x } else { x.exp().ln_1p() };
        let g = l.ssm_a[j] as f64 * sp;
        da[j] = g.exp()
            * (g.abs() * 2f64.powi(-21) + 2f64.powi(-21) + (l.ssm_a[j] as f64).abs() * 2f64.powi(-20) * (1.0 + sp));
        let b = l.b[i * nv + j] as f64;
        db[j] = (1.0 / (1.0 + (-b).exp())) * (b.abs() * 2f64.powi(-23) + 2f64.powi(-20));
    }
    InputErr { dq, dk, dv, da, db }
}

/// `‖S[j][:, c]‖` for every value column `(j, c)` of a state.
fn column_norms(s: &GdnShape, state: &[f32]) -> Vec<f64> {
    let (dk, dv) = (s.d_k, s.d_v);
    let mut out = vec![0f64; s.n_v * dv];
    for j in 0..s.n_v {
        for r in 0..dk {
            for c in 0..dv {
                let x = state[j * dk * dv + r * dv + c] as f64;
                out[j * dv + c] += x * x;
            }
        }
    }
    out.iter_mut().for_each(|x| *x = x.sqrt());
    out
}

/// Per-node, per-column error bounds `E_c` of the state after each node (the recurrence part of
/// the module doc), given the root state's column norms.
fn state_err(
    s: &GdnShape,
    nb: &NodeBatch,
    root_norms: &[f64],
    res: &[NodeResult],
    ie: &[InputErr],
    inputs: &[&DeltaInputs],
) -> Vec<Vec<f64>> {
    let (n, dv, vd) = (nb.n as usize, s.d_v, s.value_len());
    let local = gamma(s.d_k) + 8.0 * U32;
    let norms: Vec<Vec<f64>> = res.iter().map(|r| column_norms(s, &r.state)).collect();
    let mut e: Vec<Vec<f64>> = Vec::with_capacity(n);
    for i in 0..n {
        let p = nb.parent[i];
        let (prev_e, prev_n) =
            if p < 0 { (vec![0f64; vd], root_norms) } else { (e[p as usize].clone(), &norms[p as usize][..]) };
        let (x, er) = (inputs[i], &ie[i]);
        let ei = (0..vd)
            .map(|jc| {
                let (j, ns) = (jc / dv, prev_n[jc]);
                let v = (x.v[jc] as f64).abs();
                let m = ns + v;
                prev_e[jc] + local * m + er.da[j] * ns + er.db[j] * m + (2.0 * ns + v) * er.dk[j % s.n_k] + er.dv[jc]
            })
            .collect();
        e.push(ei);
    }
    e
}

#[allow(clippy::needless_range_loop)]
fn check_forward(s: &GdnShape, l: &Layer, nb: &NodeBatch, o: &[f32], out: &[f32]) -> Result<(), TestCaseError> {
    let res = l.run_reference(s, nb, &l.conv, &l.state);
    let (n, dv, vd) = (nb.n as usize, s.d_v, s.value_len());
    let ie: Vec<InputErr> = (0..n).map(|i| input_err(s, l, i, &res[i])).collect();
    let inputs: Vec<&DeltaInputs> = res.iter().map(|r| &r.inputs).collect();
    let root_norms = column_norms(s, &l.state);
    let e = state_err(s, nb, &root_norms, &res, &ie, &inputs);
    for i in 0..n {
        let r = &res[i];
        // The parent's column norms: the output is read from the parent's state (module doc).
        let p = nb.parent[i];
        let sn = if p < 0 { root_norms.clone() } else { column_norms(s, &res[p as usize].state) };
        let mut d_o = vec![0f64; vd];
        for jc in 0..vd {
            let (j, kh) = (jc / dv, (jc / dv) % s.n_k);
            let q = norm(r.inputs.q[kh * s.d_k..(kh + 1) * s.d_k].iter().map(|&x| x as f64));
            let want = r.o[jc] as f64;
            let m = sn[jc] + (r.inputs.v[jc] as f64).abs();
            d_o[jc] = 2.0
                * (2.0 * e[i][jc] * q
                    + (sn[jc] + m) * (ie[i].dq[kh] + (gamma(s.d_k) + U32) * q)
                    + m * ie[i].dk[kh] * q
                    + ie[i].da[j] * sn[jc] * q
                    + 2.0 * U32 * want.abs())
                + 1e-30;
            let got = o[i * vd + jc];
            prop_assert!(got.is_finite(), "o[{}][{}] = {} (not written?)", i, jc, got);
            let err = (got as f64 - want).abs();
            prop_assert!(
                err <= d_o[jc],
                "node {} (depth {}) o[{}]: {} vs {} (err {:e} > {:e})",
                i,
                nb.depth[i],
                jc,
                got,
                want,
                err,
                d_o[jc]
            );
        }
        for j in 0..s.n_v {
            let oh = &r.o[j * dv..(j + 1) * dv];
            let ms = oh.iter().map(|&x| (x as f64).powi(2)).sum::<f64>() / dv as f64;
            let dms = oh.iter().zip(&d_o[j * dv..]).map(|(&x, &d)| 2.0 * (x as f64).abs() * d + d * d).sum::<f64>()
                / dv as f64
                + gamma(10) * ms;
            let rr = 1.0 / (ms + s.eps as f64).sqrt();
            let drel = 0.5 * dms / (ms + s.eps as f64) + 4.0 * U32;
            for c in 0..dv {
                let jc = j * dv + c;
                let zc = l.z[i * vd + jc] as f64;
                let gate = (l.norm_w[c] as f64 * zc / (1.0 + (-zc).exp())).abs();
                let want = r.out[jc] as f64;
                let tol = 2.0
                    * (gate * rr * (d_o[jc] + (oh[c] as f64).abs() * drel)
                        + want.abs() * (zc.abs() * 2f64.powi(-23) + 2f64.powi(-21) + 6.0 * U32))
                    + 1e-30;
                let got = out[i * vd + jc];
                prop_assert!(got.is_finite(), "out[{}][{}] = {} (not written?)", i, jc, got);
                let err = (got as f64 - want).abs();
                prop_assert!(err <= tol, "node {} out[{}]: {} vs {} (err {:e} > {:e})", i, jc, got, want, err, tol);
            }
        }
    }
    Ok(())
}

fn random_shape(rng: &mut Rng) -> GdnShape {
    let n_k = [1, 2, 4][rng.below(3)];
    GdnShape {
        n_k,
        n_v: n_k * (1 + rng.below(3)),
        d_k: [16, 32, 64, 128][rng.below(4)],
        d_v: [16, 32, 64, 128][rng.below(4)],
        conv_kernel: 2 + rng.below(3),
        eps: 1e-6,
    }
}

fn span(gpu: &Gpu, s: &CudaSlice<f32>) -> DevSpan<f32> {
    DevSpan::of(gpu, s)
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// The conv/norm step alone with `which` kernel into a NaN-poisoned scratch; returns the whole
/// scratch (q, k, v, α, β rows of `nb`'s nodes written, the rest still poison).
fn prep_scratch(gpu: &Gpu, s: &GdnShape, l: &Layer, nb: &NodeBatch, which: GdnPrepKernel) -> Vec<f32> {
    let dl = DevLayer::new(gpu, l);
    let (mixed, conv, state) =
        (gpu.upload(&l.mixed).unwrap(), gpu.upload(&l.conv).unwrap(), gpu.upload(&l.state).unwrap());
    let mut scratch = gpu.zeros::<f32>(gdn_scratch_len(s)).unwrap();
    gpu.fill_bytes(&mut scratch, 0xff).unwrap();
    let (_nbd, nbs, _rps) = upload_batch(gpu, nb);
    let io = GdnIo::dense(
        s,
        span(gpu, &mixed),
        DevSpan::of(gpu, &dl.z),
        DevSpan::of(gpu, &dl.a),
        DevSpan::of(gpu, &dl.b),
        DevSpan::of(gpu, &dl.out),
    );
    let st = GdnLayerState { conv_state: span(gpu, &conv), state: span(gpu, &state), scratch: span(gpu, &scratch) };
    gdn_prep(gpu, s, nb.n as usize, nbs, &dl.weights(gpu), &io, &st, which).unwrap();
    gpu.synchronize().unwrap();
    gpu.download(&scratch).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// `gdn_prep_pairs` (two nodes per block, what a 22-node forward of the 27B runs) writes
    /// bitwise what `gdn_prep` (one node per block, what the AR step runs) writes — every q, k, v,
    /// α and β of a random tree, and nothing else — on shapes that take both of the kernels' paths
    /// (conv kernels past the 4 preloaded taps, heads past 128 channels) and odd node counts (a
    /// last block with one node).
    #[test]
    fn gdn_prep_pairs_is_bitwise_gdn_prep(seed in any::<u64>(), n in 1usize..=64) {
        let Some(gpu) = gpu_or_skip("gdn_prep_pairs_is_bitwise_gdn_prep") else { return Ok(()) };
        let mut rng = Rng(seed | 1);
        let n_k = [1, 2, 4][rng.below(3)];
        let s = GdnShape {
            n_k,
            n_v: n_k * (1 + rng.below(3)),
            d_k: [16, 32, 64, 128][rng.below(4)],
            d_v: [16, 32, 64, 128, 256][rng.below(5)],
            conv_kernel: 2 + rng.below(5),
            eps: 1e-6,
        };
        let l = Layer::new(&mut rng, &s);
        let nb = node_batch(100, &random_tree(&mut rng, n));
        let one = prep_scratch(gpu, &s, &l, &nb, GdnPrepKernel::OneNode);
        let pairs = prep_scratch(gpu, &s, &l, &nb, GdnPrepKernel::Pairs);
        prop_assert!(one.iter().any(|x| !x.is_nan()), "gdn_prep wrote nothing");
        prop_assert_eq!(bits(&one), bits(&pairs));
    }

    /// Every node's `o` and gated-norm output are within the derived bound of the reference.
    #[test]
    fn gdn_forward_matches_reference(seed in any::<u64>(), n in 1usize..=64) {
        let Some(gpu) = gpu_or_skip("gdn_forward_matches_reference") else { return Ok(()) };
        let mut rng = Rng(seed | 1);
        let s = random_shape(&mut rng);
        let l = Layer::new(&mut rng, &s);
        let nb = node_batch(100, &random_tree(&mut rng, n));
        let mut dl = DevLayer::new(gpu, &l);
        let (mixed, conv, state) = (gpu.upload(&l.mixed).unwrap(), gpu.upload(&l.conv).unwrap(), gpu.upload(&l.state).unwrap());
        let mut scratch = gpu.zeros::<f32>(gdn_scratch_len(&s)).unwrap();
        gpu.fill_bytes(&mut scratch, 0xff).unwrap();
        let out = forward(gpu, &s, &nb, &mut dl, span(gpu, &mixed), span(gpu, &conv), span(gpu, &state), span(gpu, &scratch));
        let o = scratch_o(gpu, &s, &scratch, n);
        check_forward(&s, &l, &nb, &o, &out)?;
        // The forward does not modify the committed state or window.
        prop_assert_eq!(gpu.download(&state).unwrap(), l.state.clone());
        prop_assert_eq!(gpu.download(&conv).unwrap(), l.conv.clone());
    }

    /// Batch invariance and commit equivalence: each node of a random tree, run alone after
    /// `gdn_commit` committed its ancestors (from the tree forward's scratch), has bitwise the
    /// `o` and output it had inside the tree.
    #[test]
    fn gdn_node_alone_after_commit_is_bitwise_the_tree_node(seed in any::<u64>(), n in 2usize..=64) {
        let Some(gpu) = gpu_or_skip("gdn_node_alone_after_commit_is_bitwise_the_tree_node") else { return Ok(()) };
        let mut rng = Rng(seed | 1);
        let s = random_shape(&mut rng);
        let l = Layer::new(&mut rng, &s);
        let parents = random_tree(&mut rng, n);
        let nb = node_batch(7, &parents);
        let (ch, vd, nv) = (s.conv_ch(), s.value_len(), s.n_v);
        let mut dl = DevLayer::new(gpu, &l);
        let mixed = gpu.upload(&l.mixed).unwrap();
        let (conv, state) = (gpu.upload(&l.conv).unwrap(), gpu.upload(&l.state).unwrap());
        let tree_scratch = gpu.zeros::<f32>(gdn_scratch_len(&s)).unwrap();
        let out = forward(gpu, &s, &nb, &mut dl, span(gpu, &mixed), span(gpu, &conv), span(gpu, &state), span(gpu, &tree_scratch));
        let o = scratch_o(gpu, &s, &tree_scratch, n);
        for (i, &p) in parents.iter().enumerate() {
            // Commit the ancestors of i (a copy of the committed state per node).
            let c_state = gpu.upload(&l.state).unwrap();
            let c_conv = gpu.upload(&l.conv).unwrap();
            if p >= 0 {
                let cp = commit_path(7, &path_to(&nb, p as usize));
                let (_pd, ps) = upload_path(gpu, &cp);
                gdn_commit(gpu, &s, 1, ps, cp.len as usize, span(gpu, &mixed), s.conv_ch(), span(gpu, &tree_scratch), DevSpan::of(gpu, &c_state), DevSpan::of(gpu, &c_conv)).unwrap();
            }
            // Node i alone: its rows moved to row 0.
            let mut one = Layer::new(&mut Rng(1), &s);
            one.mixed[..ch].copy_from_slice(&l.mixed[i * ch..(i + 1) * ch]);
            one.z[..vd].copy_from_slice(&l.z[i * vd..(i + 1) * vd]);
            one.a[..nv].copy_from_slice(&l.a[i * nv..(i + 1) * nv]);
            one.b[..nv].copy_from_slice(&l.b[i * nv..(i + 1) * nv]);
            let mut dz = DevLayer::new(gpu, &l);
            gpu.write(&one.z, &mut dz.z).unwrap();
            gpu.write(&one.a, &mut dz.a).unwrap();
            gpu.write(&one.b, &mut dz.b).unwrap();
            let m1 = gpu.upload(&one.mixed).unwrap();
            let mut sc1 = gpu.zeros::<f32>(gdn_scratch_len(&s)).unwrap();
            gpu.fill_bytes(&mut sc1, 0xff).unwrap();
            let nb1 = node_batch(8 + nb.depth[i], &[-1]);
            let out1 = forward(gpu, &s, &nb1, &mut dz, span(gpu, &m1), DevSpan::of(gpu, &c_conv), DevSpan::of(gpu, &c_state), span(gpu, &sc1));
            let o1 = scratch_o(gpu, &s, &sc1, 1);
            prop_assert_eq!(bits(&o1), bits(&o[i * vd..(i + 1) * vd]), "node {} (parent {}) o", i, p);
            prop_assert_eq!(bits(&out1), bits(&out[i * vd..(i + 1) * vd]), "node {} (parent {}) out", i, p);
        }
    }

    /// Row strides: `mixed`, `z`, `b`, `a` read as column ranges of one `[32][w]` buffer (the
    /// engine's merged `[mixed | z | beta | alpha]` product, with NaN gaps between and after the
    /// ranges; each forward view exactly `(n − 1)·w + width` long) give bitwise the dense
    /// forward's `o` and `out`, and `gdn_commit` of a random path from that arena (row stride
    /// `w`) bitwise the dense commit's state and window: the strides are honoured and no gap
    /// value leaks (a NaN read would reach `o` through the conv or α/β, `out` through
    /// `silu(z)`, the committed window directly).
    #[test]
    fn gdn_with_row_strides_is_bitwise_the_dense_forward_and_commit(seed in any::<u64>(), n in 1usize..=64, pick in any::<prop::sample::Index>()) {
        let Some(gpu) = gpu_or_skip("gdn_with_row_strides_is_bitwise_the_dense_forward_and_commit") else { return Ok(()) };
        let mut rng = Rng(seed | 1);
        let s = random_shape(&mut rng);
        let l = Layer::new(&mut rng, &s);
        let nb = node_batch(40, &random_tree(&mut rng, n));
        let (ch, vd, nv) = (s.conv_ch(), s.value_len(), s.n_v);
        let mut dl = DevLayer::new(gpu, &l);
        let (mixed, conv, state) = (gpu.upload(&l.mixed).unwrap(), gpu.upload(&l.conv).unwrap(), gpu.upload(&l.state).unwrap());
        let mut scratch = gpu.zeros::<f32>(gdn_scratch_len(&s)).unwrap();
        gpu.fill_bytes(&mut scratch, 0xff).unwrap();
        let out = forward(gpu, &s, &nb, &mut dl, span(gpu, &mixed), span(gpu, &conv), span(gpu, &state), span(gpu, &scratch));
        let o = scratch_o(gpu, &s, &scratch, n);
        prop_assert!(out.iter().chain(&o).all(|x| x.is_finite()));

        let gaps = [rng.below(5), rng.below(5), rng.below(5), 1 + rng.below(4)];
        let il = interleaved(&s, &l, gaps);
        let w = il.w;
        let arena = gpu.upload(&il.buf).unwrap();
        let view = |off: usize, width: usize| span(gpu, &arena).sub(off, (n - 1) * w + width, "arena").unwrap();
        let mut out2 = gpu.zeros::<f32>(MAX_NODES as usize * vd).unwrap();
        gpu.fill_bytes(&mut out2, 0xff).unwrap();
        let mut scratch2 = gpu.zeros::<f32>(gdn_scratch_len(&s)).unwrap();
        gpu.fill_bytes(&mut scratch2, 0xff).unwrap();
        let io = GdnIo {
            mixed: view(0, ch),
            z: view(il.z, vd),
            a: view(il.a, nv),
            b: view(il.b, nv),
            out: span(gpu, &out2),
            mixed_stride: w,
            z_stride: w,
            a_stride: w,
            b_stride: w,
        };
        let st = GdnLayerState { conv_state: span(gpu, &conv), state: span(gpu, &state), scratch: span(gpu, &scratch2) };
        let (_nbd, nbs, rps) = upload_batch(gpu, &nb);
        gdn_forward(gpu, &s, n, nbs, rps, &dl.weights(gpu), &io, &st).unwrap();
        gpu.synchronize().unwrap();
        let out2 = gpu.download(&out2).unwrap();
        prop_assert_eq!(bits(&scratch_o(gpu, &s, &scratch2, n)), bits(&o), "o (gaps {:?})", gaps);
        prop_assert_eq!(bits(&out2[..n * vd]), bits(&out), "out (gaps {:?})", gaps);
        // Rows past n of the output are not written.
        prop_assert!(out2[n * vd..].iter().all(|x| x.is_nan()));

        // Commit a random path: dense arena + dense forward's scratch vs strided arena + the
        // strided forward's scratch.
        let cp = commit_path(40, &path_to(&nb, pick.index(n)));
        let (_pd, ps) = upload_path(gpu, &cp);
        let commit = |m: &CudaSlice<f32>, stride: usize, sc: &CudaSlice<f32>| {
            let (cs, ss) = (gpu.upload(&l.conv).unwrap(), gpu.upload(&l.state).unwrap());
            gdn_commit(gpu, &s, 1, ps, cp.len as usize, span(gpu, m), stride, span(gpu, sc), span(gpu, &ss), span(gpu, &cs)).unwrap();
            (gpu.download(&ss).unwrap(), gpu.download(&cs).unwrap())
        };
        let (dense_s, dense_c) = commit(&mixed, ch, &scratch);
        let (strided_s, strided_c) = commit(&arena, w, &scratch2);
        prop_assert!(strided_c.iter().chain(&strided_s).all(|x| x.is_finite()));
        prop_assert_eq!(bits(&strided_s), bits(&dense_s), "committed state (gaps {:?})", gaps);
        prop_assert_eq!(bits(&strided_c), bits(&dense_c), "committed window (gaps {:?})", gaps);
    }

    /// `gdn_commit` over a two-layer arena: each layer's conv window equals the reference commit
    /// exactly, its state is within the recurrence bound of the reference commit, and bitwise
    /// equal to the state a chain forward of the path leaves for its last node (via the next
    /// node's output, checked in the test above).
    #[test]
    fn gdn_commit_matches_reference_in_every_layer(seed in any::<u64>(), n in 1usize..=64, pick in any::<prop::sample::Index>()) {
        let Some(gpu) = gpu_or_skip("gdn_commit_matches_reference_in_every_layer") else { return Ok(()) };
        let mut rng = Rng(seed | 1);
        let s = random_shape(&mut rng);
        let layers = [Layer::new(&mut rng, &s), Layer::new(&mut rng, &s)];
        let nb = node_batch(0, &random_tree(&mut rng, n));
        let last = pick.index(n);
        let nodes = path_to(&nb, last);
        let cat = |f: &dyn Fn(&Layer) -> &Vec<f32>| layers.iter().flat_map(|l| f(l).iter().copied()).collect::<Vec<f32>>();
        let mixed = gpu.upload(&cat(&|l| &l.mixed)).unwrap();
        let state = gpu.upload(&cat(&|l| &l.state)).unwrap();
        let conv = gpu.upload(&cat(&|l| &l.conv)).unwrap();
        let sl = gdn_scratch_len(&s);
        let scratch = gpu.zeros::<f32>(2 * sl).unwrap();
        let (ms, ss, cs, scs) = (span(gpu, &mixed), span(gpu, &state), span(gpu, &conv), span(gpu, &scratch));
        for (li, l) in layers.iter().enumerate() {
            let mut dl = DevLayer::new(gpu, l);
            let at = |sp: DevSpan<f32>, len: usize| sp.sub(li * len, len, "layer").unwrap();
            forward(gpu, &s, &nb, &mut dl, at(ms, s.mixed_len()), at(cs, s.conv_state_len()), at(ss, s.state_len()), at(scs, sl));
        }
        let (_pd, ps) = upload_path(gpu, &commit_path(0, &nodes));
        gdn_commit(gpu, &s, 2, ps, nodes.len(), ms, s.conv_ch(), scs, ss, cs).unwrap();
        let got_state = gpu.download(&state).unwrap();
        let got_conv = gpu.download(&conv).unwrap();
        for (li, l) in layers.iter().enumerate() {
            let res = l.run_reference(&s, &nb, &l.conv, &l.state);
            let inputs: Vec<DeltaInputs> = res.iter().map(|r| r.inputs.clone()).collect();
            let (mut rs, mut rc) = (l.state.clone(), l.conv.clone());
            reference::gdn_commit(&l.reference(&s), &commit_path(0, &nodes), &l.mixed, &inputs, &mut rs, &mut rc);
            let cl = s.conv_state_len();
            prop_assert_eq!(&got_conv[li * cl..(li + 1) * cl], &rc[..], "layer {} conv window", li);
            let ie: Vec<InputErr> = (0..n).map(|i| input_err(&s, l, i, &res[i])).collect();
            let refs: Vec<&DeltaInputs> = inputs.iter().collect();
            let e = state_err(&s, &nb, &column_norms(&s, &l.state), &res, &ie, &refs);
            let (dk, dv) = (s.d_k, s.d_v);
            for j in 0..s.n_v {
                for r in 0..dk {
                    for c in 0..dv {
                        let idx = j * dk * dv + r * dv + c;
                        let got = got_state[li * s.state_len() + idx];
                        let want = rs[idx] as f64;
                        // Entry error ≤ column error (‖·‖∞ ≤ ‖·‖₂); ×2 as in the module doc.
                        let tol = 2.0 * e[last][j * dv + c] + 1e-30;
                        prop_assert!((got as f64 - want).abs() <= tol, "layer {} state[{}][{}][{}]: {} vs {} (tol {:e})", li, j, r, c, got, want, tol);
                    }
                }
            }
        }
    }
}

#[test]
fn gdn_launchers_reject_bad_shapes() {
    let Some(gpu) = gpu_or_skip("gdn_launchers_reject_bad_shapes") else { return };
    let s = GdnShape { n_k: 1, n_v: 2, d_k: 48, d_v: 16, conv_kernel: 4, eps: 1e-6 };
    let buf = gpu.zeros::<f32>(1 << 16).unwrap();
    let sp = DevSpan::of(gpu, &buf);
    let (_pd, ps) = upload_path(gpu, &commit_path(0, &[0]));
    let err = gdn_commit(gpu, &s, 1, ps, 1, sp, 128, sp, sp, sp).unwrap_err().to_string();
    assert!(err.contains("d_k = 48"), "{err}");
    let s = GdnShape { d_k: 16, ..s };
    let small = sp.sub(0, 10, "test").unwrap();
    let err = gdn_commit(gpu, &s, 1, ps, 1, small, s.conv_ch(), sp, sp, sp).unwrap_err().to_string();
    assert!(err.contains("mixed"), "{err}");
    let err = gdn_commit(gpu, &s, 1, ps, 1, sp, s.conv_ch() - 1, sp, sp, sp).unwrap_err().to_string();
    assert!(err.contains("mixed row stride"), "{err}");
    let err = gdn_commit(gpu, &s, 1, ps, 65, sp, s.conv_ch(), sp, sp, sp).unwrap_err().to_string();
    assert!(err.contains("a path of 65 nodes"), "{err}");
    // Row strides below the widths, and views too short for their strides.
    let (_nbd, nbs, rps) = upload_batch(gpu, &node_batch(0, &[-1, 0]));
    let w = GdnWeights { conv_w: sp, ssm_a: sp, dt_bias: sp, norm_w: sp };
    let st = GdnLayerState { conv_state: sp, state: sp, scratch: sp };
    let io = GdnIo::dense(&s, sp, sp, sp, sp, sp);
    let vd = s.value_len();
    let err = gdn_forward(gpu, &s, 2, nbs, rps, &w, &GdnIo { z_stride: vd - 1, ..io }, &st).unwrap_err().to_string();
    assert!(err.contains("z row stride"), "{err}");
    let err = gdn_forward(gpu, &s, 2, nbs, rps, &w, &GdnIo { a_stride: 1, ..io }, &st).unwrap_err().to_string();
    assert!(err.contains("a row stride"), "{err}");
    let err = gdn_forward(gpu, &s, 2, nbs, rps, &w, &GdnIo { mixed_stride: 8, ..io }, &st).unwrap_err().to_string();
    assert!(err.contains("mixed row stride"), "{err}");
    let short = sp.sub(0, 40, "test").unwrap();
    let err =
        gdn_forward(gpu, &s, 2, nbs, rps, &w, &GdnIo { b: short, b_stride: 40, ..io }, &st).unwrap_err().to_string();
    assert!(err.contains("b needs 42"), "{err}");
}
