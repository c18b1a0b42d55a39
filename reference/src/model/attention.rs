//! Gated full attention of the `qwen35` target (and the plain attention core the draft reuses).

use super::ops::{rms_norm_heads_in_place, sigmoid};
use super::rope::rope_neox_in_place;
use super::tensor::dots;
use super::weights::{AttentionWeights, Qwen35Hparams};

/// One token's attention inputs: query (normed, roped), gate (raw), key (normed, roped), value.
#[derive(Clone, Debug, PartialEq)]
pub struct QkvGate {
    /// `[n_head · head_dim]`.
    pub q: Vec<f32>,
    /// `[n_head · head_dim]`, the sigmoid output gate's logits.
    pub gate: Vec<f32>,
    /// `[n_head_kv · head_dim]`, what goes into the KV cache.
    pub k: Vec<f32>,
    /// `[n_head_kv · head_dim]`, what goes into the KV cache.
    pub v: Vec<f32>,
}

/// Projections, per-head q/k RMSNorm and partial NeoX RoPE at position `pos` for one token.
/// `attn_q` rows are per head `[query head_dim | gate head_dim]`.
pub fn project(w: &AttentionWeights, hp: &Qwen35Hparams, x: &[f32], pos: usize) -> QkvGate {
    project_rows(w, hp, &[x], &[pos]).pop().expect("one row")
}

/// [`project`] of every row `xs[i]` at position `pos[i]` (the same bits; the projections in
/// one pass over each matrix, [`super::tensor::Matrix::matmul`]).
pub fn project_rows<X: AsRef<[f32]>>(
    w: &AttentionWeights,
    hp: &Qwen35Hparams,
    xs: &[X],
    pos: &[usize],
) -> Vec<QkvGate> {
    assert_eq!(xs.len(), pos.len(), "one position per row");
    let hd = hp.head_dim;
    let (qgs, ks, vs) = (w.q.matmul(xs), w.k.matmul(xs), w.v.matmul(xs));
    qgs.into_iter()
        .zip(ks)
        .zip(vs)
        .zip(pos)
        .map(|(((qg, mut k), v), &pos)| {
            let mut q = Vec::with_capacity(hp.n_head * hd);
            let mut gate = Vec::with_capacity(hp.n_head * hd);
            for head in qg.chunks_exact(2 * hd) {
                q.extend_from_slice(&head[..hd]);
                gate.extend_from_slice(&head[hd..]);
            }
            rms_norm_heads_in_place(&mut q, &w.q_norm, hp.rms_eps);
            rms_norm_heads_in_place(&mut k, &w.k_norm, hp.rms_eps);
            rope_neox_in_place(&mut q, hd, hp.n_rot, pos, hp.rope_theta);
            rope_neox_in_place(&mut k, hd, hp.n_rot, pos, hp.rope_theta);
            QkvGate { q, gate, k, v }
        })
        .collect()
}

/// Softmax attention of one token's query heads over the visible keys/values (`keys[i]`,
/// `values[i]`: `[n_head_kv · head_dim]` each), GQA: query head `h` reads KV head
/// `h / (n_head / n_head_kv)`. Scale `1/√head_dim`; softmax in f64. Returns `[n_head · head_dim]`.
pub fn attend(
    q: &[f32],
    keys: &[&[f32]],
    values: &[&[f32]],
    n_head: usize,
    n_head_kv: usize,
    head_dim: usize,
) -> Vec<f32> {
    assert_eq!(keys.len(), values.len());
    let group = n_head / n_head_kv;
    let scale = 1.0 / (head_dim as f64).sqrt();
    let mut out = vec![0f32; n_head * head_dim];
    for h in 0..n_head {
        let kvh = h / group;
        let qh = &q[h * head_dim..(h + 1) * head_dim];
        let kh: Vec<&[f32]> = keys.iter().map(|k| &k[kvh * head_dim..(kvh + 1) * head_dim]).collect();
        let scores: Vec<f64> = dots(&kh, qh).into_iter().map(|d| d * scale).collect();
        let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let p: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
        let z: f64 = p.iter().sum();
        // Σ_i p_i v_i[e] for every e: over the keys in order from −0.0 (`Iterator::sum`), the
        // head's dims side by side.
        let mut acc = vec![-0.0f64; head_dim];
        for (pi, v) in p.iter().zip(values) {
            for (a, &ve) in acc.iter_mut().zip(&v[kvh * head_dim..(kvh + 1) * head_dim]) {
                *a += pi * ve as f64;
            }
        }
        for (o, a) in out[h * head_dim..(h + 1) * head_dim].iter_mut().zip(&acc) {
            *o = (a / z) as f32;
        }
    }
    out
}

/// Output gate and projection: `o_proj · (attn ⊙ sigmoid(gate))`.
pub fn finish(w: &AttentionWeights, attn: &[f32], gate: &[f32]) -> Vec<f32> {
    finish_rows(w, &[(attn, gate)]).pop().expect("one row")
}

/// [`finish`] of every `(attn, gate)` row (the same bits; one pass over `o_proj`).
pub fn finish_rows(w: &AttentionWeights, rows: &[(&[f32], &[f32])]) -> Vec<Vec<f32>> {
    let gated: Vec<Vec<f32>> =
        rows.iter().map(|(attn, gate)| attn.iter().zip(*gate).map(|(&a, &g)| a * sigmoid(g)).collect()).collect();
    w.o.matmul(&gated)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_visible_key_returns_its_value_per_kv_group() {
        // 4 query heads share 2 KV heads; with one visible key softmax is 1 and o_h = v_{h/2}.
        let hd = 2;
        let q = vec![1.0; 4 * hd];
        let k = vec![0.5; 2 * hd];
        let v = vec![1.0, 2.0, 3.0, 4.0];
        let o = attend(&q, &[&k], &[&v], 4, 2, hd);
        assert_eq!(o, vec![1.0, 2.0, 1.0, 2.0, 3.0, 4.0, 3.0, 4.0]);
    }
}
