//! Gated full attention of the `qwen35` target (and the plain attention core the draft reuses).

use super::ops::{rms_norm_heads_in_place, sigmoid};
use super::rope::rope_neox_in_place;
use super::tensor::dot;
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
    let hd = hp.head_dim;
    let qg = w.q.matvec(x);
    let mut q = Vec::with_capacity(hp.n_head * hd);
    let mut gate = Vec::with_capacity(hp.n_head * hd);
    for head in qg.chunks_exact(2 * hd) {
        q.extend_from_slice(&head[..hd]);
        gate.extend_from_slice(&head[hd..]);
    }
    let mut k = w.k.matvec(x);
    let v = w.v.matvec(x);
    rms_norm_heads_in_place(&mut q, &w.q_norm, hp.rms_eps);
    rms_norm_heads_in_place(&mut k, &w.k_norm, hp.rms_eps);
    rope_neox_in_place(&mut q, hd, hp.n_rot, pos, hp.rope_theta);
    rope_neox_in_place(&mut k, hd, hp.n_rot, pos, hp.rope_theta);
    QkvGate { q, gate, k, v }
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
        let scores: Vec<f64> = keys.iter().map(|k| dot(qh, &k[kvh * head_dim..(kvh + 1) * head_dim]) * scale).collect();
        let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let p: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
        let z: f64 = p.iter().sum();
        for e in 0..head_dim {
            let acc: f64 = p.iter().zip(values).map(|(pi, v)| pi * v[kvh * head_dim + e] as f64).sum();
            out[h * head_dim + e] = (acc / z) as f32;
        }
    }
    out
}

/// Output gate and projection: `o_proj · (attn ⊙ sigmoid(gate))`.
pub fn finish(w: &AttentionWeights, attn: &[f32], gate: &[f32]) -> Vec<f32> {
    let gated: Vec<f32> = attn.iter().zip(gate).map(|(&a, &g)| a * sigmoid(g)).collect();
    w.o.matvec(&gated)
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
