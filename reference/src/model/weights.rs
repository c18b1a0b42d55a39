//! Hyperparameters and f32 weights of a `qwen35` target, in GGUF conventions (see `model/mod.rs`).

use super::mlp::MlpWeights;
use super::tensor::{expect_len, Matrix};
use super::ModelError;

/// Everything the forward needs to know about the shapes; read from GGUF metadata or `config.json`.
#[derive(Clone, Debug, PartialEq)]
pub struct Qwen35Hparams {
    /// Hidden size `d`.
    pub n_embd: usize,
    /// Vocabulary rows of `token_embd` / `output`.
    pub n_vocab: usize,
    /// MLP inner size.
    pub n_ff: usize,
    /// Full-attention query heads.
    pub n_head: usize,
    /// Full-attention KV heads (GQA: query head `h` reads KV head `h / (n_head / n_head_kv)`).
    pub n_head_kv: usize,
    /// Full-attention head dim (query, key and value).
    pub head_dim: usize,
    /// Rotary dims at the start of each head (`head_dim · partial_rotary_factor`), even.
    pub n_rot: usize,
    /// RoPE base.
    pub rope_theta: f64,
    /// RMSNorm epsilon (every norm).
    pub rms_eps: f32,
    /// `true` = Gated DeltaNet layer, `false` = full attention; one entry per trunk layer.
    pub recurrent: Vec<bool>,
    /// Gated DeltaNet key heads (`ssm.group_count`).
    pub ssm_n_k_heads: usize,
    /// Gated DeltaNet value heads (`ssm.time_step_rank`), a multiple of `ssm_n_k_heads`.
    pub ssm_n_v_heads: usize,
    /// Gated DeltaNet key head dim (`ssm.state_size`).
    pub ssm_k_dim: usize,
    /// Gated DeltaNet value head dim (`ssm.inner_size / ssm.time_step_rank`).
    pub ssm_v_dim: usize,
    /// Causal conv kernel width (`ssm.conv_kernel`), ≥ 1.
    pub conv_kernel: usize,
}

impl Qwen35Hparams {
    /// Trunk layers.
    pub fn n_layer(&self) -> usize {
        self.recurrent.len()
    }
    /// Channels of the DeltaNet conv: q, k and v concatenated.
    pub fn conv_channels(&self) -> usize {
        2 * self.ssm_n_k_heads * self.ssm_k_dim + self.ssm_n_v_heads * self.ssm_v_dim
    }
    /// Layer pattern from `full_attention_interval`: layer `i` is full attention iff `(i+1) % n == 0`.
    pub fn pattern_from_interval(n_layer: usize, interval: usize) -> Vec<bool> {
        (0..n_layer).map(|i| interval == 0 || (i + 1) % interval != 0).collect()
    }

    /// Checks that the numbers are usable (non-zero, divisible, even rotary dims).
    pub fn validate(&self) -> Result<(), ModelError> {
        let nz = |name: &'static str, v: usize| {
            if v == 0 {
                Err(ModelError::Hparam { name, why: "must be > 0".into() })
            } else {
                Ok(())
            }
        };
        nz("n_embd", self.n_embd)?;
        nz("n_vocab", self.n_vocab)?;
        nz("n_ff", self.n_ff)?;
        nz("n_layer", self.n_layer())?;
        if self.recurrent.iter().any(|&r| !r) {
            nz("n_head", self.n_head)?;
            nz("n_head_kv", self.n_head_kv)?;
            nz("head_dim", self.head_dim)?;
            if !self.n_head.is_multiple_of(self.n_head_kv) {
                return Err(ModelError::Hparam {
                    name: "n_head",
                    why: format!("{} is not a multiple of n_head_kv {}", self.n_head, self.n_head_kv),
                });
            }
            if !self.n_rot.is_multiple_of(2) || self.n_rot > self.head_dim {
                return Err(ModelError::Hparam {
                    name: "n_rot",
                    why: format!("{} must be even and ≤ head_dim {}", self.n_rot, self.head_dim),
                });
            }
        }
        if self.recurrent.iter().any(|&r| r) {
            nz("ssm_n_k_heads", self.ssm_n_k_heads)?;
            nz("ssm_n_v_heads", self.ssm_n_v_heads)?;
            nz("ssm_k_dim", self.ssm_k_dim)?;
            nz("ssm_v_dim", self.ssm_v_dim)?;
            nz("conv_kernel", self.conv_kernel)?;
            if !self.ssm_n_v_heads.is_multiple_of(self.ssm_n_k_heads) {
                return Err(ModelError::Hparam {
                    name: "ssm_n_v_heads",
                    why: format!("{} is not a multiple of ssm_n_k_heads {}", self.ssm_n_v_heads, self.ssm_n_k_heads),
                });
            }
        }
        Ok(())
    }
}

/// Gated full-attention mixer weights.
#[derive(Clone, Debug)]
pub struct AttentionWeights {
    /// `[2·n_head·head_dim, n_embd]`, per head `[query head_dim | gate head_dim]`.
    pub q: Matrix,
    /// `[n_head_kv·head_dim, n_embd]`.
    pub k: Matrix,
    /// `[n_head_kv·head_dim, n_embd]`.
    pub v: Matrix,
    /// `[n_embd, n_head·head_dim]`.
    pub o: Matrix,
    /// `[head_dim]`, multiplicative (already `1 + w_hf`).
    pub q_norm: Vec<f32>,
    /// `[head_dim]`, multiplicative (already `1 + w_hf`).
    pub k_norm: Vec<f32>,
}

/// Gated DeltaNet mixer weights, value-head axis in tiled (GGUF) order.
#[derive(Clone, Debug)]
pub struct DeltaNetWeights {
    /// `[2·n_k·d_k + n_v·d_v, n_embd]`: q rows, k rows, v rows.
    pub qkv: Matrix,
    /// `[n_v·d_v, n_embd]`, output gate z.
    pub gate: Matrix,
    /// `[n_v, n_embd]`, β logits.
    pub beta: Matrix,
    /// `[n_v, n_embd]`, decay logits a.
    pub alpha: Matrix,
    /// `[channels, conv_kernel]`: taps of one channel contiguous, last tap = current token.
    pub conv: Matrix,
    /// `[n_v]`, `−exp(A_log)`.
    pub ssm_a: Vec<f32>,
    /// `[n_v]`, `dt_bias`.
    pub dt_bias: Vec<f32>,
    /// `[d_v]`, gated RMSNorm weight (plain multiplicative, no +1).
    pub norm: Vec<f32>,
    /// `[n_embd, n_v·d_v]`.
    pub out: Matrix,
}

/// The token mixer of one layer.
#[derive(Clone, Debug)]
pub enum Mixer {
    Attention(AttentionWeights),
    DeltaNet(DeltaNetWeights),
}

/// One pre-norm residual block.
#[derive(Clone, Debug)]
pub struct LayerWeights {
    /// `[n_embd]`, multiplicative.
    pub attn_norm: Vec<f32>,
    /// `[n_embd]`, multiplicative.
    pub post_attention_norm: Vec<f32>,
    pub mixer: Mixer,
    pub mlp: MlpWeights,
}

/// A whole `qwen35` target in f32.
#[derive(Clone, Debug)]
pub struct Qwen35Weights {
    pub hparams: Qwen35Hparams,
    /// `[n_vocab, n_embd]`.
    pub token_embd: Matrix,
    pub layers: Vec<LayerWeights>,
    /// `[n_embd]`, multiplicative.
    pub output_norm: Vec<f32>,
    /// `[n_vocab, n_embd]`; `None` = tied to `token_embd`.
    pub output: Option<Matrix>,
}

impl Qwen35Weights {
    /// The LM head (`output`, or `token_embd` when tied).
    pub fn lm_head(&self) -> &Matrix {
        self.output.as_ref().unwrap_or(&self.token_embd)
    }

    /// Checks every tensor's shape against the hyperparameters.
    pub fn validate(&self) -> Result<(), ModelError> {
        let hp = &self.hparams;
        hp.validate()?;
        let d = hp.n_embd;
        self.token_embd.expect_shape("token_embd.weight", hp.n_vocab, d)?;
        if let Some(o) = &self.output {
            o.expect_shape("output.weight", hp.n_vocab, d)?;
        }
        expect_len("output_norm.weight", &self.output_norm, d)?;
        if self.layers.len() != hp.n_layer() {
            return Err(ModelError::Hparam {
                name: "n_layer",
                why: format!("{} layer weights for {} layers", self.layers.len(), hp.n_layer()),
            });
        }
        for (i, l) in self.layers.iter().enumerate() {
            let n = |s: &str| format!("blk.{i}.{s}");
            expect_len(&n("attn_norm.weight"), &l.attn_norm, d)?;
            expect_len(&n("post_attention_norm.weight"), &l.post_attention_norm, d)?;
            l.mlp.gate.expect_shape(&n("ffn_gate.weight"), hp.n_ff, d)?;
            l.mlp.up.expect_shape(&n("ffn_up.weight"), hp.n_ff, d)?;
            l.mlp.down.expect_shape(&n("ffn_down.weight"), d, hp.n_ff)?;
            match (&l.mixer, hp.recurrent[i]) {
                (Mixer::Attention(a), false) => {
                    let (hq, hkv) = (hp.n_head * hp.head_dim, hp.n_head_kv * hp.head_dim);
                    a.q.expect_shape(&n("attn_q.weight"), 2 * hq, d)?;
                    a.k.expect_shape(&n("attn_k.weight"), hkv, d)?;
                    a.v.expect_shape(&n("attn_v.weight"), hkv, d)?;
                    a.o.expect_shape(&n("attn_output.weight"), d, hq)?;
                    expect_len(&n("attn_q_norm.weight"), &a.q_norm, hp.head_dim)?;
                    expect_len(&n("attn_k_norm.weight"), &a.k_norm, hp.head_dim)?;
                }
                (Mixer::DeltaNet(g), true) => {
                    let vdim = hp.ssm_n_v_heads * hp.ssm_v_dim;
                    g.qkv.expect_shape(&n("attn_qkv.weight"), hp.conv_channels(), d)?;
                    g.gate.expect_shape(&n("attn_gate.weight"), vdim, d)?;
                    g.beta.expect_shape(&n("ssm_beta.weight"), hp.ssm_n_v_heads, d)?;
                    g.alpha.expect_shape(&n("ssm_alpha.weight"), hp.ssm_n_v_heads, d)?;
                    g.conv.expect_shape(&n("ssm_conv1d.weight"), hp.conv_channels(), hp.conv_kernel)?;
                    expect_len(&n("ssm_a"), &g.ssm_a, hp.ssm_n_v_heads)?;
                    expect_len(&n("ssm_dt.bias"), &g.dt_bias, hp.ssm_n_v_heads)?;
                    expect_len(&n("ssm_norm.weight"), &g.norm, hp.ssm_v_dim)?;
                    g.out.expect_shape(&n("ssm_out.weight"), d, vdim)?;
                }
                (_, rec) => {
                    return Err(ModelError::Hparam {
                        name: "recurrent",
                        why: format!(
                            "layer {i} is {} by the layer pattern but its tensors are of the other kind",
                            if rec { "Gated DeltaNet" } else { "full attention" }
                        ),
                    })
                }
            }
        }
        Ok(())
    }
}
