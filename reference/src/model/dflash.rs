//! The DFlash block-diffusion draft (z-lab `DFlashDraftModel`, see `docs/dflash-draft.md`).
//!
//! ```text
//! c_j    = RMSNorm_hidden( fc · concat_l h_target[l](j) )                 context rows, no residual
//! e      = target_embd[[b, MASK, …, MASK]]                                 block of B slots
//! layer  : a = RMSNorm_in(e); Q, K_b, V_b from a; K_c, V_c from c (same k/v proj and k_norm);
//!          q/k RMSNorm per head, NeoX RoPE over the full head (context j at its position, slot k at
//!          block_start + k); e += o_proj(attn(Q, [K_c; K_b], [V_c; V_b])); e += MLP(RMSNorm_post(e))
//! logits = target_lm_head( RMSNorm_final(e[1..B]) )                      slot k predicts position s+k
//! ```
//!
//! Norms are plain multiplicative Qwen3 RMSNorms (no `1 + w`). Full-attention layers see every
//! context row and every block slot (bidirectional); sliding-window layers are causal inside the
//! block and see keys at positions `> p − window` (query at `p`). `causal` overrides both.

use super::attention::attend;
use super::mlp::{swiglu_rows, MlpWeights};
use super::ops::{rms_norm, rms_norm_heads_in_place, top_k_log_probs};
use super::rope::rope_neox_in_place;
use super::tensor::{expect_len, Matrix};
use super::ModelError;

/// Shapes and settings of a DFlash draft (from its `config.json` or a `dflash` GGUF).
#[derive(Clone, Debug, PartialEq)]
pub struct DFlashHparams {
    /// Hidden size `H` (= the target's).
    pub n_embd: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
    pub n_ff: usize,
    /// Read from the draft config, never defaulted.
    pub rope_theta: f64,
    pub rms_eps: f32,
    /// 0-based target layers whose outputs are concatenated into a context feature, in order.
    pub target_layer_ids: Vec<usize>,
    pub mask_token_id: u32,
    pub block_size: usize,
    /// Per draft layer: `true` = sliding-window attention layer.
    pub sliding: Vec<bool>,
    /// Window of the sliding layers.
    pub sliding_window: Option<usize>,
    /// Explicit `is_causal` / `dflash_config.causal`: overrides the per-layer default.
    pub causal: Option<bool>,
}

/// One draft decoder layer (Qwen3 block).
#[derive(Clone, Debug)]
pub struct DFlashLayer {
    pub attn_norm: Vec<f32>,
    pub post_attention_norm: Vec<f32>,
    /// `[n_head·head_dim, H]`.
    pub q: Matrix,
    /// `[n_head_kv·head_dim, H]`.
    pub k: Matrix,
    /// `[n_head_kv·head_dim, H]`.
    pub v: Matrix,
    /// `[H, n_head·head_dim]`.
    pub o: Matrix,
    pub q_norm: Vec<f32>,
    pub k_norm: Vec<f32>,
    pub mlp: MlpWeights,
}

/// A whole draft; the embedding and LM head are the target's and are passed to [`DFlashWeights::forward`].
#[derive(Clone, Debug)]
pub struct DFlashWeights {
    pub hparams: DFlashHparams,
    /// `[H, k·H]`.
    pub fc: Matrix,
    pub hidden_norm: Vec<f32>,
    pub layers: Vec<DFlashLayer>,
    pub output_norm: Vec<f32>,
}

/// Logits of the block slots `1..B` (slot `k` predicts the token at `block_start + k`).
/// One context row's K and V per draft layer ([`DFlashWeights::context_kv`]).
pub type ContextKv = Vec<(Vec<f32>, Vec<f32>)>;

#[derive(Clone, Debug, PartialEq)]
pub struct DraftOutput {
    /// `[B − 1][n_vocab]`.
    pub logits: Vec<Vec<f32>>,
}

impl DraftOutput {
    /// Per position, the `k` most likely tokens with their log-probabilities, best first.
    pub fn top_k(&self, k: usize) -> Vec<Vec<(u32, f32)>> {
        self.logits.iter().map(|row| top_k_log_probs(row, k)).collect()
    }
}

impl DFlashWeights {
    /// Checks every tensor's shape against the hyperparameters.
    pub fn validate(&self) -> Result<(), ModelError> {
        let hp = &self.hparams;
        let h = hp.n_embd;
        if h == 0 || hp.n_head == 0 || hp.n_head_kv == 0 || hp.head_dim == 0 || !hp.n_head.is_multiple_of(hp.n_head_kv)
        {
            return Err(ModelError::Hparam {
                name: "dflash heads",
                why: format!("n_embd {h}, n_head {}, n_head_kv {}, head_dim {}", hp.n_head, hp.n_head_kv, hp.head_dim),
            });
        }
        if !hp.head_dim.is_multiple_of(2) {
            return Err(ModelError::Hparam { name: "head_dim", why: "must be even for RoPE".into() });
        }
        if hp.target_layer_ids.is_empty() {
            return Err(ModelError::Hparam { name: "target_layer_ids", why: "empty".into() });
        }
        if hp.sliding.len() != self.layers.len() {
            return Err(ModelError::Hparam {
                name: "layer_types",
                why: format!("{} entries for {} layers", hp.sliding.len(), self.layers.len()),
            });
        }
        if hp.sliding.iter().any(|&s| s) && hp.sliding_window.is_none_or(|w| w == 0) {
            return Err(ModelError::Hparam { name: "sliding_window", why: "sliding layers need a window > 0".into() });
        }
        self.fc.expect_shape("fc.weight", h, hp.target_layer_ids.len() * h)?;
        expect_len("hidden_norm.weight", &self.hidden_norm, h)?;
        expect_len("norm.weight", &self.output_norm, h)?;
        let (qd, kvd) = (hp.n_head * hp.head_dim, hp.n_head_kv * hp.head_dim);
        for (i, l) in self.layers.iter().enumerate() {
            let n = |s: &str| format!("layers.{i}.{s}");
            expect_len(&n("input_layernorm.weight"), &l.attn_norm, h)?;
            expect_len(&n("post_attention_layernorm.weight"), &l.post_attention_norm, h)?;
            l.q.expect_shape(&n("self_attn.q_proj.weight"), qd, h)?;
            l.k.expect_shape(&n("self_attn.k_proj.weight"), kvd, h)?;
            l.v.expect_shape(&n("self_attn.v_proj.weight"), kvd, h)?;
            l.o.expect_shape(&n("self_attn.o_proj.weight"), h, qd)?;
            expect_len(&n("self_attn.q_norm.weight"), &l.q_norm, hp.head_dim)?;
            expect_len(&n("self_attn.k_norm.weight"), &l.k_norm, hp.head_dim)?;
            l.mlp.gate.expect_shape(&n("mlp.gate_proj.weight"), hp.n_ff, h)?;
            l.mlp.up.expect_shape(&n("mlp.up_proj.weight"), hp.n_ff, h)?;
            l.mlp.down.expect_shape(&n("mlp.down_proj.weight"), h, hp.n_ff)?;
        }
        Ok(())
    }

    /// Fuses one token's raw target features (`concat` of the target layers, `[k·H]`) into a
    /// context row: `RMSNorm_hidden(fc · f)`.
    pub fn fuse_context(&self, features: &[f32]) -> Result<Vec<f32>, ModelError> {
        expect_len("context feature", features, self.fc.cols)?;
        Ok(self.fuse_context_rows(&[features])?.pop().expect("one row"))
    }

    /// [`DFlashWeights::fuse_context`] of every row (the same bits; one pass over `fc`).
    pub fn fuse_context_rows<X: AsRef<[f32]>>(&self, features: &[X]) -> Result<Vec<Vec<f32>>, ModelError> {
        for f in features {
            expect_len("context feature", f.as_ref(), self.fc.cols)?;
        }
        Ok(self.fc.matmul(features).iter().map(|c| rms_norm(c, &self.hidden_norm, self.hparams.rms_eps)).collect())
    }

    /// One draft pass. `ctx_features[j]` (raw, `[k·H]`) is the committed token at position
    /// `ctx_start + j`; `block_tokens` (normally `[bonus, MASK×(B−1)]`) sit at `block_start ..`.
    /// `target_embd` / `lm_head` are the target's `[n_vocab, H]` matrices.
    pub fn forward(
        &self,
        target_embd: &Matrix,
        lm_head: &Matrix,
        ctx_features: &[Vec<f32>],
        ctx_start: usize,
        block_tokens: &[u32],
        block_start: usize,
    ) -> Result<DraftOutput, ModelError> {
        self.check_block(target_embd, lm_head, block_tokens)?;
        let ctx_kv = self.context_kv_rows(ctx_features, ctx_start)?;
        self.forward_cached(target_embd, lm_head, &ctx_kv, ctx_start, block_tokens, block_start)
    }

    /// Every layer's K (after `k_norm` and RoPE at `pos`) and V of one context row, from its
    /// target feature row `concat_l h_l`: exactly what [`DFlashWeights::forward`] computes for
    /// that row, so a caller can compute it once per committed token.
    pub fn context_kv(&self, feature: &[f32], pos: usize) -> Result<ContextKv, ModelError> {
        Ok(self.context_kv_rows(&[feature], pos)?.pop().expect("one row"))
    }

    /// [`DFlashWeights::context_kv`] of the rows `features[j]` at positions `start + j` (the
    /// same bits; one pass over each matrix).
    pub fn context_kv_rows<X: AsRef<[f32]>>(&self, features: &[X], start: usize) -> Result<Vec<ContextKv>, ModelError> {
        let c = self.fuse_context_rows(features)?;
        let pos: Vec<usize> = (0..c.len()).map(|j| start + j).collect();
        let mut rows: Vec<ContextKv> = vec![Vec::with_capacity(self.layers.len()); c.len()];
        for l in &self.layers {
            for (row, kv) in rows.iter_mut().zip(self.layer_kv_rows(l, &c, &pos)) {
                row.push(kv);
            }
        }
        Ok(rows)
    }

    /// One layer's K (`k_norm`, then RoPE at `pos[i]`) and V of each input `xs[i]` (fused context
    /// rows or a block's normed inputs: the layer's K/V projections serve both).
    fn layer_kv_rows(&self, l: &DFlashLayer, xs: &[Vec<f32>], pos: &[usize]) -> Vec<(Vec<f32>, Vec<f32>)> {
        let hp = &self.hparams;
        let (ks, vs) = (l.k.matmul(xs), l.v.matmul(xs));
        ks.into_iter()
            .zip(vs)
            .zip(pos)
            .map(|((mut k, v), &p)| {
                rms_norm_heads_in_place(&mut k, &l.k_norm, hp.rms_eps);
                rope_neox_in_place(&mut k, hp.head_dim, hp.head_dim, p, hp.rope_theta);
                (k, v)
            })
            .collect()
    }

    /// The shapes of the target matrices and the block's tokens, checked before any work.
    fn check_block(&self, target_embd: &Matrix, lm_head: &Matrix, block_tokens: &[u32]) -> Result<(), ModelError> {
        let h = self.hparams.n_embd;
        target_embd.expect_shape("token_embd.weight", target_embd.rows, h)?;
        lm_head.expect_shape("output.weight", lm_head.rows, h)?;
        if block_tokens.is_empty() {
            return Err(ModelError::Batch("empty draft block".into()));
        }
        for (index, &token) in block_tokens.iter().enumerate() {
            if token as usize >= target_embd.rows {
                return Err(ModelError::Token { index, token, n_vocab: target_embd.rows });
            }
        }
        Ok(())
    }

    /// [`DFlashWeights::forward`] over context rows whose K/V ([`DFlashWeights::context_kv`]) are
    /// already computed: `ctx_kv[j]` is the row at position `ctx_start + j`.
    pub fn forward_cached(
        &self,
        target_embd: &Matrix,
        lm_head: &Matrix,
        ctx_kv: &[ContextKv],
        ctx_start: usize,
        block_tokens: &[u32],
        block_start: usize,
    ) -> Result<DraftOutput, ModelError> {
        self.check_block(target_embd, lm_head, block_tokens)?;
        let hp = &self.hparams;
        if let Some(j) = ctx_kv.iter().position(|r| r.len() != self.layers.len()) {
            return Err(ModelError::Batch(format!("context row {j}: K/V of {} layers", ctx_kv[j].len())));
        }
        let ctx_pos: Vec<usize> = (0..ctx_kv.len()).map(|j| ctx_start + j).collect();
        let blk_pos: Vec<usize> = (0..block_tokens.len()).map(|k| block_start + k).collect();
        let mut e: Vec<Vec<f32>> = block_tokens.iter().map(|&t| target_embd.row(t as usize).to_vec()).collect();
        for (li, l) in self.layers.iter().enumerate() {
            let sliding = hp.sliding[li];
            let causal = hp.causal.unwrap_or(sliding);
            let window = if sliding { hp.sliding_window } else { None };
            let ckv: Vec<(&[f32], &[f32])> = ctx_kv.iter().map(|r| (&r[li].0[..], &r[li].1[..])).collect();
            let a: Vec<Vec<f32>> = e.iter().map(|x| rms_norm(x, &l.attn_norm, hp.rms_eps)).collect();
            let bkv = self.layer_kv_rows(l, &a, &blk_pos);
            let mut os = Vec::with_capacity(e.len());
            for (s, mut q) in l.q.matmul(&a).into_iter().enumerate() {
                let p = blk_pos[s];
                rms_norm_heads_in_place(&mut q, &l.q_norm, hp.rms_eps);
                rope_neox_in_place(&mut q, hp.head_dim, hp.head_dim, p, hp.rope_theta);
                let visible = |kp: usize| window.is_none_or(|w| kp + w > p);
                let mut keys: Vec<&[f32]> = Vec::new();
                let mut vals: Vec<&[f32]> = Vec::new();
                for (j, &(k, v)) in ckv.iter().enumerate() {
                    if visible(ctx_pos[j]) {
                        keys.push(k);
                        vals.push(v);
                    }
                }
                for (j, (k, v)) in bkv.iter().enumerate() {
                    if (!causal || j <= s) && visible(blk_pos[j]) {
                        keys.push(k);
                        vals.push(v);
                    }
                }
                os.push(attend(&q, &keys, &vals, hp.n_head, hp.n_head_kv, hp.head_dim));
            }
            for (es, y) in e.iter_mut().zip(l.o.matmul(&os)) {
                es.iter_mut().zip(&y).for_each(|(x, y)| *x += y);
            }
            let normed: Vec<Vec<f32>> = e.iter().map(|es| rms_norm(es, &l.post_attention_norm, hp.rms_eps)).collect();
            for (es, m) in e.iter_mut().zip(swiglu_rows(&l.mlp, &normed)) {
                es.iter_mut().zip(&m).for_each(|(x, y)| *x += y);
            }
        }
        let normed: Vec<Vec<f32>> = e[1..].iter().map(|x| rms_norm(x, &self.output_norm, hp.rms_eps)).collect();
        let logits = lm_head.matmul(&normed);
        Ok(DraftOutput { logits })
    }
}
