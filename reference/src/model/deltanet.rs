//! Gated DeltaNet (Qwen3.5 "linear attention"): the causal conv window, the per-token delta-rule
//! recurrence (decode, tree nodes) and the chunked WY/UT form (prefill). Both forms compute
//!
//! ```text
//! S_t = α_t (I − β_t k_t k_tᵀ) S_{t−1} + β_t k_t v_tᵀ,   o_t = S_tᵀ q_t,   α_t = exp(g_t)
//! ```
//!
//! per value head `j`, with `S ∈ ℝ^{d_k×d_v}` stored row-major `[key index][value index]` in f32,
//! and value head `j` reading key head `j mod n_k` (tiled order).

use super::ops::{l2_normalize_in_place, rms_norm, sigmoid, silu, softplus};
use super::tensor::dot;
use super::weights::{DeltaNetWeights, Qwen35Hparams};

/// Head counts and dims of one Gated DeltaNet layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GdnDims {
    pub n_k: usize,
    pub n_v: usize,
    pub d_k: usize,
    pub d_v: usize,
}

impl GdnDims {
    pub fn of(hp: &Qwen35Hparams) -> Self {
        Self { n_k: hp.ssm_n_k_heads, n_v: hp.ssm_n_v_heads, d_k: hp.ssm_k_dim, d_v: hp.ssm_v_dim }
    }
    /// Floats in one layer's recurrent state: `n_v · d_k · d_v`.
    pub fn state_len(&self) -> usize {
        self.n_v * self.d_k * self.d_v
    }
    /// Key head read by value head `j` (tiled order).
    pub fn key_head(&self, j: usize) -> usize {
        j % self.n_k
    }
}

/// The per-token inputs of the delta rule, after conv, SiLU, L2 norm and the q scale.
#[derive(Clone, Debug, PartialEq)]
pub struct DeltaInputs {
    /// `[n_k · d_k]`, L2-normalised per head and scaled by `1/√d_k`.
    pub q: Vec<f32>,
    /// `[n_k · d_k]`, L2-normalised per head.
    pub k: Vec<f32>,
    /// `[n_v · d_v]`.
    pub v: Vec<f32>,
    /// `[n_v]` log-decay `g = ssm_a · softplus(a + dt_bias)` (≤ 0).
    pub g: Vec<f32>,
    /// `[n_v]` `β = sigmoid(b)`.
    pub beta: Vec<f32>,
}

/// Projections of one token that do not depend on the conv window: the raw conv input `mixed`
/// (q|k|v channels), the gate `z`, and `g`, `β`.
#[derive(Clone, Debug, PartialEq)]
pub struct Projected {
    pub mixed: Vec<f32>,
    pub z: Vec<f32>,
    pub g: Vec<f32>,
    pub beta: Vec<f32>,
}

/// Step 1 of the layer: the four projections and the per-head β and decay.
pub fn project(w: &DeltaNetWeights, x: &[f32]) -> Projected {
    project_rows(w, &[x]).pop().expect("one row")
}

/// [`project`] of every row of `xs` (the same bits; one pass over each matrix).
pub fn project_rows<X: AsRef<[f32]>>(w: &DeltaNetWeights, xs: &[X]) -> Vec<Projected> {
    let (mixed, z, b, a) = (w.qkv.matmul(xs), w.gate.matmul(xs), w.beta.matmul(xs), w.alpha.matmul(xs));
    mixed
        .into_iter()
        .zip(z)
        .zip(b.iter().zip(&a))
        .map(|((mixed, z), (b, a))| {
            let g = a.iter().enumerate().map(|(j, &aj)| w.ssm_a[j] * softplus(aj + w.dt_bias[j])).collect();
            let beta = b.iter().map(|&v| sigmoid(v)).collect();
            Projected { mixed, z, g, beta }
        })
        .collect()
}

/// Causal depthwise conv + SiLU for one token. `window` holds the previous `kernel − 1` raw inputs,
/// oldest first, `[kernel−1][channels]`; `mixed` is the current raw input.
/// `y[c] = silu(Σ_i w[c][i] · m_{t−(K−1)+i}[c])`.
pub fn conv_step(conv_w: &[f32], kernel: usize, window: &[f32], mixed: &[f32]) -> Vec<f32> {
    let ch = mixed.len();
    debug_assert_eq!(window.len(), (kernel - 1) * ch);
    (0..ch)
        .map(|c| {
            let taps = &conv_w[c * kernel..(c + 1) * kernel];
            let mut acc = taps[kernel - 1] as f64 * mixed[c] as f64;
            for i in 0..kernel - 1 {
                acc += taps[i] as f64 * window[i * ch + c] as f64;
            }
            silu(acc as f32)
        })
        .collect()
}

/// Shifts the conv window by one token: drop the oldest row, append `mixed`.
pub fn conv_window_push(window: &mut Vec<f32>, mixed: &[f32]) {
    if window.is_empty() {
        return; // kernel 1: no history
    }
    window.drain(..mixed.len());
    window.extend_from_slice(mixed);
}

/// Splits the conv output into q, k, v and applies the L2 norms (HF eps 1e-6) and the q scale.
pub fn delta_inputs(dims: GdnDims, conv_out: &[f32], p: &Projected) -> DeltaInputs {
    let kd = dims.n_k * dims.d_k;
    let mut q = conv_out[..kd].to_vec();
    let mut k = conv_out[kd..2 * kd].to_vec();
    let v = conv_out[2 * kd..].to_vec();
    let scale = 1.0 / (dims.d_k as f64).sqrt();
    for h in q.chunks_exact_mut(dims.d_k) {
        l2_normalize_in_place(h, 1e-6);
        h.iter_mut().for_each(|x| *x = (*x as f64 * scale) as f32);
    }
    for h in k.chunks_exact_mut(dims.d_k) {
        l2_normalize_in_place(h, 1e-6);
    }
    DeltaInputs { q, k, v, g: p.g.clone(), beta: p.beta.clone() }
}

/// One token of the recurrence over all value heads; updates `state` (`[n_v][d_k][d_v]`) and
/// returns `o` (`[n_v · d_v]`, before the gated norm).
pub fn recurrent_step(dims: GdnDims, state: &mut [f32], x: &DeltaInputs) -> Vec<f32> {
    let (dk, dv) = (dims.d_k, dims.d_v);
    let mut out = vec![0f32; dims.n_v * dv];
    for j in 0..dims.n_v {
        let kh = dims.key_head(j);
        let k = &x.k[kh * dk..(kh + 1) * dk];
        let q = &x.q[kh * dk..(kh + 1) * dk];
        let v = &x.v[j * dv..(j + 1) * dv];
        let s = &mut state[j * dk * dv..(j + 1) * dk * dv];
        let alpha = (x.g[j] as f64).exp();
        s.iter_mut().for_each(|e| *e = (*e as f64 * alpha) as f32);
        // u = S̃ᵀ k ; δ = β (v − u)
        let u = column_sums(s, dv, k);
        let delta: Vec<f64> = (0..dv).map(|c| x.beta[j] as f64 * (v[c] as f64 - u[c])).collect();
        for r in 0..dk {
            for c in 0..dv {
                s[r * dv + c] = (s[r * dv + c] as f64 + k[r] as f64 * delta[c]) as f32;
            }
        }
        for (o, y) in out[j * dv..(j + 1) * dv].iter_mut().zip(column_sums(s, dv, q)) {
            *o = y as f32;
        }
    }
    out
}

/// `Σ_r S[r][c] · w[r]` for every column `c` of the row-major `[w.len(), cols]` matrix `S` (f32
/// or f64), in f64: each column's sum runs over `r` ascending from `−0.0` (`Iterator::sum`), all
/// columns side by side (contiguous rows, independent add chains).
fn column_sums<S: Copy + Into<f64>, W: Copy + Into<f64>>(s: &[S], cols: usize, w: &[W]) -> Vec<f64> {
    let mut acc = vec![-0.0f64; cols];
    for (row, &wr) in s.chunks_exact(cols).zip(w) {
        let wr: f64 = wr.into();
        for (a, &e) in acc.iter_mut().zip(row) {
            *a += e.into() * wr;
        }
    }
    acc
}

/// The chunked (WY/UT) form over `xs.len()` tokens in chunks of `chunk` tokens (last one short),
/// starting from and updating `state`. Returns `o` per token. Per value head and chunk, with `Γ` the
/// cumulative log-decay inside the chunk:
///
/// ```text
/// A_ij = β_i (k_i·k_j) e^{Γ_i−Γ_j} (i > j)     (I + A) U = diag(β) V     (I + A) W = diag(β e^Γ) K
/// V' = U − W S₀      O_i = e^{Γ_i} q_iᵀ S₀ + Σ_{j≤i} (q_i·k_j) e^{Γ_i−Γ_j} V'_j
/// S_C = e^{Γ_C} S₀ + Σ_j e^{Γ_C−Γ_j} k_j V'_jᵀ
/// ```
///
/// Chunk-internal math and the carried state are f64; the state is rounded to f32 on return.
pub fn chunked(dims: GdnDims, state: &mut [f32], xs: &[DeltaInputs], chunk: usize) -> Vec<Vec<f32>> {
    assert!(chunk > 0, "chunk size must be > 0");
    let (dk, dv) = (dims.d_k, dims.d_v);
    let mut out = vec![vec![0f32; dims.n_v * dv]; xs.len()];
    for j in 0..dims.n_v {
        let kh = dims.key_head(j);
        let mut s: Vec<f64> = state[j * dk * dv..(j + 1) * dk * dv].iter().map(|&e| e as f64).collect();
        for start in (0..xs.len()).step_by(chunk) {
            let toks = &xs[start..(start + chunk).min(xs.len())];
            let c = toks.len();
            fn kv(t: &DeltaInputs, kh: usize, dk: usize) -> &[f32] {
                &t.k[kh * dk..(kh + 1) * dk]
            }
            fn qv(t: &DeltaInputs, kh: usize, dk: usize) -> &[f32] {
                &t.q[kh * dk..(kh + 1) * dk]
            }
            let mut gamma = vec![0f64; c];
            let mut acc = 0f64;
            for (i, t) in toks.iter().enumerate() {
                acc += t.g[j] as f64;
                gamma[i] = acc;
            }
            let beta: Vec<f64> = toks.iter().map(|t| t.beta[j] as f64).collect();
            // Forward substitution for U and W: row i = rhs_i − Σ_{m<i} A_im row_m.
            let mut u = vec![vec![0f64; dv]; c];
            let mut w = vec![vec![0f64; dk]; c];
            for i in 0..c {
                for (ue, &ve) in u[i].iter_mut().zip(&toks[i].v[j * dv..(j + 1) * dv]) {
                    *ue = beta[i] * ve as f64;
                }
                let bg = beta[i] * gamma[i].exp();
                for (e, &ke) in kv(&toks[i], kh, dk).iter().enumerate() {
                    w[i][e] = bg * ke as f64;
                }
                let (u_done, u_rest) = u.split_at_mut(i);
                let (w_done, w_rest) = w.split_at_mut(i);
                for m in 0..i {
                    let a = beta[i] * dot(kv(&toks[i], kh, dk), kv(&toks[m], kh, dk)) * (gamma[i] - gamma[m]).exp();
                    u_rest[0].iter_mut().zip(&u_done[m]).for_each(|(x, y)| *x -= a * y);
                    w_rest[0].iter_mut().zip(&w_done[m]).for_each(|(x, y)| *x -= a * y);
                }
            }
            // V' = U − W S₀ (each column's Σ_r over r ascending from −0.0, as `sum()`).
            let vp: Vec<Vec<f64>> = (0..c)
                .map(|i| {
                    let ws = column_sums(&s, dv, &w[i]);
                    u[i].iter().zip(&ws).map(|(ue, we)| ue - we).collect()
                })
                .collect();
            for i in 0..c {
                let q = qv(&toks[i], kh, dk);
                let eg = gamma[i].exp();
                // O_i[e] = e^{Γ_i} Σ_r q_r S[r][e] + Σ_{m ≤ i} ((q·k_m) e^{Γ_i − Γ_m}) V'_m[e], the terms
                // added in m order per e; the coefficient of m is the same for every e.
                let coef: Vec<f64> =
                    (0..=i).map(|m| dot(q, kv(&toks[m], kh, dk)) * (gamma[i] - gamma[m]).exp()).collect();
                let mut v: Vec<f64> = column_sums(&s, dv, q).iter().map(|x| eg * x).collect();
                for (cm, vpm) in coef.iter().zip(&vp) {
                    v.iter_mut().zip(vpm).for_each(|(ve, pe)| *ve += cm * pe);
                }
                for (oe, ve) in out[start + i][j * dv..(j + 1) * dv].iter_mut().zip(&v) {
                    *oe = *ve as f32;
                }
            }
            let gc = gamma[c - 1];
            s.iter_mut().for_each(|e| *e *= gc.exp());
            for m in 0..c {
                let f = (gc - gamma[m]).exp();
                let k = kv(&toks[m], kh, dk);
                for r in 0..dk {
                    for e in 0..dv {
                        s[r * dv + e] += f * k[r] as f64 * vp[m][e];
                    }
                }
            }
        }
        for (dst, &src) in state[j * dk * dv..(j + 1) * dk * dv].iter_mut().zip(&s) {
            *dst = src as f32;
        }
    }
    out
}

/// Last steps of the layer: per value head gated RMSNorm `rmsnorm(o_j) ⊙ norm ⊙ silu(z_j)`, then
/// the out projection.
pub fn finish(w: &DeltaNetWeights, dims: GdnDims, eps: f32, o: &[f32], z: &[f32]) -> Vec<f32> {
    finish_rows(w, dims, eps, &[(o, z)]).pop().expect("one row")
}

/// [`finish`] of every `(o, z)` row (the same bits; one pass over the out projection).
pub fn finish_rows(w: &DeltaNetWeights, dims: GdnDims, eps: f32, rows: &[(&[f32], &[f32])]) -> Vec<Vec<f32>> {
    let ys: Vec<Vec<f32>> = rows
        .iter()
        .map(|(o, z)| {
            let mut y = Vec::with_capacity(o.len());
            for (oh, zh) in o.chunks_exact(dims.d_v).zip(z.chunks_exact(dims.d_v)) {
                let n = rms_norm(oh, &w.norm, eps);
                y.extend(n.iter().zip(zh).map(|(&a, &b)| a * silu(b)));
            }
            y
        })
        .collect();
    w.out.matmul(&ys)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn column_sums_are_each_columns_sum_bit_for_bit() {
        let mut seed = 7u64;
        for (rows, cols) in [(1, 1), (3, 5), (64, 64), (17, 33)] {
            let mut s = rand_vec(&mut seed, rows * cols);
            let w = rand_vec(&mut seed, rows);
            s[..cols].iter_mut().for_each(|v| *v = -0.0); // a column of −0.0 products is −0.0
            let mut w0 = w.clone();
            w0[1..].iter_mut().for_each(|v| *v = 0.0);
            w0[0] = 1.0;
            for w in [&w, &w0] {
                let got = column_sums(&s, cols, w);
                for (c, g) in got.iter().enumerate() {
                    let want: f64 = (0..rows).map(|r| s[r * cols + c] as f64 * w[r] as f64).sum();
                    assert_eq!(g.to_bits(), want.to_bits(), "rows {rows} cols {cols} column {c}");
                }
            }
        }
    }

    /// Deterministic pseudo-random numbers in [-1, 1) (xorshift), so the test needs no crate.
    pub(crate) fn rand_vec(seed: &mut u64, n: usize) -> Vec<f32> {
        (0..n)
            .map(|_| {
                *seed ^= *seed << 13;
                *seed ^= *seed >> 7;
                *seed ^= *seed << 17;
                ((*seed >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) as f32
            })
            .collect()
    }

    fn random_inputs(dims: GdnDims, n: usize, seed: &mut u64) -> Vec<DeltaInputs> {
        (0..n)
            .map(|_| {
                let mut q = rand_vec(seed, dims.n_k * dims.d_k);
                let mut k = rand_vec(seed, dims.n_k * dims.d_k);
                for h in q.chunks_exact_mut(dims.d_k) {
                    l2_normalize_in_place(h, 1e-6);
                    h.iter_mut().for_each(|x| *x /= (dims.d_k as f32).sqrt());
                }
                for h in k.chunks_exact_mut(dims.d_k) {
                    l2_normalize_in_place(h, 1e-6);
                }
                let v = rand_vec(seed, dims.n_v * dims.d_v);
                // decay logs in [-0.5, 0]: strong enough to matter, weak enough to keep history
                let g = rand_vec(seed, dims.n_v).iter().map(|x| -0.25 * (x + 1.0)).collect();
                let beta = rand_vec(seed, dims.n_v).iter().map(|x| 0.5 * (x + 1.0)).collect();
                DeltaInputs { q, k, v, g, beta }
            })
            .collect()
    }

    fn rel(a: &[f32], b: &[f32]) -> f64 {
        let num: f64 = a.iter().zip(b).map(|(x, y)| (*x as f64 - *y as f64).powi(2)).sum();
        let den: f64 = b.iter().map(|y| (*y as f64).powi(2)).sum();
        (num / den.max(1e-30)).sqrt()
    }

    #[test]
    fn chunked_equals_recurrent_over_230_tokens_and_three_chunks() {
        // Irregular dims: d_k ≠ d_v, 3 value heads per key head, chunk 64 → 3 full chunks + 38.
        let dims = GdnDims { n_k: 2, n_v: 6, d_k: 16, d_v: 12 };
        let mut seed = 0x1234_5678_9abc_def1u64;
        let xs = random_inputs(dims, 230, &mut seed);
        let init = rand_vec(&mut seed, dims.state_len());
        let mut s_rec = init.clone();
        let o_rec: Vec<Vec<f32>> = xs.iter().map(|x| recurrent_step(dims, &mut s_rec, x)).collect();
        let mut s_chk = init.clone();
        let o_chk = chunked(dims, &mut s_chk, &xs, 64);
        // Both are exact algebra of the same recurrence; they differ only by f32 rounding of the
        // carried state in the recurrent form (~1e-7 per step), far below 1e-5.
        for (t, (a, b)) in o_chk.iter().zip(&o_rec).enumerate() {
            let e = rel(a, b);
            assert!(e < 1e-5, "token {t}: relative difference {e}");
        }
        let e = rel(&s_chk, &s_rec);
        assert!(e < 1e-5, "final state: relative difference {e}");
    }

    #[test]
    fn chunk_size_does_not_change_the_result() {
        let dims = GdnDims { n_k: 1, n_v: 2, d_k: 8, d_v: 8 };
        let mut seed = 99u64;
        let xs = random_inputs(dims, 50, &mut seed);
        let (mut a, mut b) = (vec![0f32; dims.state_len()], vec![0f32; dims.state_len()]);
        let oa = chunked(dims, &mut a, &xs, 7);
        let ob = chunked(dims, &mut b, &xs, 50);
        for (x, y) in oa.iter().zip(&ob) {
            assert!(rel(x, y) < 1e-9);
        }
    }

    #[test]
    fn conv_uses_window_oldest_first_and_current_last() {
        // one channel, kernel 3, taps [1, 10, 100]: pre-activation = 1·m_{t−2} + 10·m_{t−1} + 100·m_t
        let y = conv_step(&[1.0, 10.0, 100.0], 3, &[0.02, 0.003], &[0.0004]);
        let pre = 0.02 + 0.03 + 0.04;
        assert!((y[0] - silu(pre)).abs() < 1e-7);
    }
}
