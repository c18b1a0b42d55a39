//! The `qwen35` target: hyperparameters from GGUF metadata (qwen35-architecture.md §13) and the
//! tensor inventory (§12).
//!
//! Layer `i` is Gated DeltaNet ("recurrent") iff `qwen35.attention.recurrent_layers[i]` when that
//! key is present, else iff `(i + 1) % full_attention_interval != 0`. The trunk is the first
//! `block_count − nextn_predict_layers` blocks; MTP blocks after it are optional. Value head dim
//! = `ssm.inner_size / ssm.time_step_rank` (not assumed equal to `ssm.state_size`).

use super::error::ModelError;
use super::inventory::{validate, ExpectedTensor, TensorRole};
use crate::gguf::{Gguf, GgufHeader};

/// Largest layer count and dimension accepted (far above any real model; keeps later size
/// arithmetic from overflowing on a corrupt file).
pub const MAX_LAYERS: u64 = 4096;
pub const MAX_DIM: u64 = 1 << 24;

/// Hyperparameters of a `qwen35` model.
#[derive(Clone, Debug, PartialEq)]
pub struct Qwen35Config {
    /// `qwen35.block_count` (trunk + MTP blocks).
    pub block_count: usize,
    /// `qwen35.nextn_predict_layers` (0 when absent).
    pub nextn_predict_layers: usize,
    pub context_length: usize,
    /// Hidden size `d`.
    pub embedding_length: usize,
    pub feed_forward_length: usize,
    pub head_count: usize,
    pub head_count_kv: usize,
    /// Attention head dim of keys (`key_length`) and values (`value_length`).
    pub key_length: usize,
    pub value_length: usize,
    pub rms_norm_eps: f32,
    pub rope_dimension_count: usize,
    pub rope_freq_base: f32,
    /// `qwen35.rope.dimension_sections` (M-RoPE; irrelevant for text), if present.
    pub rope_dimension_sections: Option<Vec<i64>>,
    pub full_attention_interval: Option<usize>,
    /// Per trunk+MTP layer: true = Gated DeltaNet, false = full attention.
    pub recurrent_layers: Vec<bool>,
    pub ssm_conv_kernel: usize,
    /// Key head dim of the GDN layers.
    pub ssm_state_size: usize,
    /// Key heads of the GDN layers.
    pub ssm_group_count: usize,
    /// Value heads of the GDN layers.
    pub ssm_time_step_rank: usize,
    /// Value heads × value head dim.
    pub ssm_inner_size: usize,
    /// Vocabulary size (rows of `token_embd.weight`).
    pub vocab_size: usize,
    /// Whether `output.weight` is stored (else the LM head is tied to `token_embd`).
    pub has_output: bool,
    /// `general.file_type`, informational.
    pub file_type: Option<u32>,
}

fn dim(h: &GgufHeader, key: &str, max: u64) -> Result<usize, ModelError> {
    let v = h.get_u64(key)?;
    if v == 0 || v > max {
        return Err(ModelError::config(
            &h.file,
            key,
            format!("{v} is outside 1..={max}"),
        ));
    }
    Ok(v as usize)
}

impl Qwen35Config {
    /// Reads and checks the hyperparameters of a (possibly split) qwen35 GGUF.
    pub fn from_gguf(g: &Gguf) -> Result<Qwen35Config, ModelError> {
        let vocab = g
            .tensor("token_embd.weight")
            .and_then(|t| t.dims.get(1).copied());
        let has_output = g.tensor("output.weight").is_some();
        Self::from_header(g, vocab, has_output)
    }

    /// Reads the hyperparameters from metadata; `vocab_rows` (rows of `token_embd.weight`) is
    /// used when `tokenizer.ggml.tokens` is absent.
    pub fn from_header(
        h: &GgufHeader,
        vocab_rows: Option<u64>,
        has_output: bool,
    ) -> Result<Qwen35Config, ModelError> {
        let arch = h.get_str("general.architecture")?;
        if arch != "qwen35" {
            return Err(ModelError::WrongArchitecture {
                file: h.file.clone(),
                found: arch.to_string(),
                expected: "qwen35".into(),
            });
        }
        let k = |s: &str| format!("qwen35.{s}");
        let block_count = dim(h, &k("block_count"), MAX_LAYERS)?;
        let nextn = h.opt_u32(&k("nextn_predict_layers"))?.unwrap_or(0) as usize;
        if nextn >= block_count {
            return Err(ModelError::config(
                &h.file,
                &k("nextn_predict_layers"),
                format!("{nextn} leaves no trunk layers of block_count {block_count}"),
            ));
        }
        let head_count = dim(h, &k("attention.head_count"), MAX_DIM)?;
        let head_count_kv = dim(h, &k("attention.head_count_kv"), MAX_DIM)?;
        if head_count % head_count_kv != 0 {
            return Err(ModelError::config(
                &h.file,
                &k("attention.head_count_kv"),
                format!("{head_count_kv} does not divide head_count {head_count}"),
            ));
        }
        let key_length = dim(h, &k("attention.key_length"), MAX_DIM)?;
        let value_length = dim(h, &k("attention.value_length"), MAX_DIM)?;
        let rope_dimension_count = dim(h, &k("rope.dimension_count"), key_length as u64)?;
        let ssm_group_count = dim(h, &k("ssm.group_count"), MAX_DIM)?;
        let ssm_time_step_rank = dim(h, &k("ssm.time_step_rank"), MAX_DIM)?;
        let ssm_inner_size = dim(h, &k("ssm.inner_size"), MAX_DIM)?;
        if ssm_inner_size % ssm_time_step_rank != 0 {
            return Err(ModelError::config(
                &h.file,
                &k("ssm.inner_size"),
                format!(
                    "{ssm_inner_size} is not a multiple of ssm.time_step_rank {ssm_time_step_rank}"
                ),
            ));
        }
        if ssm_time_step_rank % ssm_group_count != 0 {
            return Err(ModelError::config(
                &h.file,
                &k("ssm.time_step_rank"),
                format!("{ssm_time_step_rank} value heads is not a multiple of ssm.group_count {ssm_group_count}"),
            ));
        }
        let interval = h
            .opt_u32(&k("full_attention_interval"))?
            .map(|v| v as usize);
        let recurrent_layers = match h.get(&k("attention.recurrent_layers")) {
            Some(_) => {
                let key = k("attention.recurrent_layers");
                let arr = h.get_array(&key)?;
                let flags: Option<Vec<bool>> = arr.iter().map(|v| v.as_bool()).collect();
                match flags {
                    Some(f) if f.len() == block_count => f,
                    _ => {
                        return Err(ModelError::config(
                            &h.file,
                            &key,
                            format!(
                                "expected {block_count} bools (one per block), found {} values",
                                arr.len()
                            ),
                        ))
                    }
                }
            }
            None => {
                let n = match interval {
                    Some(0) | None => {
                        return Err(ModelError::config(
                            &h.file,
                            &k("full_attention_interval"),
                            "missing or 0, and qwen35.attention.recurrent_layers is absent: the layer pattern is unknown",
                        ))
                    }
                    Some(n) => n,
                };
                (0..block_count).map(|i| (i + 1) % n != 0).collect()
            }
        };
        let vocab_size = match h.get("tokenizer.ggml.tokens") {
            Some(v) => v.as_array().map(|a| a.len() as u64),
            None => vocab_rows,
        }
        .filter(|&v| v > 0 && v <= MAX_DIM)
        .ok_or_else(|| {
            ModelError::config(
                &h.file,
                "tokenizer.ggml.tokens",
                "missing or empty, and token_embd.weight gives no vocabulary size",
            )
        })? as usize;
        let rope_dimension_sections = match h.get(&k("rope.dimension_sections")) {
            Some(_) => Some(h.get_int_array(&k("rope.dimension_sections"))?),
            None => None,
        };
        let eps_key = k("attention.layer_norm_rms_epsilon");
        let rms_norm_eps = h.get_f32(&eps_key)?;
        if !(rms_norm_eps.is_finite() && rms_norm_eps > 0.0) {
            return Err(ModelError::config(
                &h.file,
                &eps_key,
                format!("{rms_norm_eps} is not a positive finite number"),
            ));
        }
        let theta_key = k("rope.freq_base");
        let rope_freq_base = h.get_f32(&theta_key)?;
        if !(rope_freq_base.is_finite() && rope_freq_base > 0.0) {
            return Err(ModelError::config(
                &h.file,
                &theta_key,
                format!("{rope_freq_base} is not a positive finite number"),
            ));
        }
        Ok(Qwen35Config {
            block_count,
            nextn_predict_layers: nextn,
            context_length: dim(h, &k("context_length"), u32::MAX as u64)?,
            embedding_length: dim(h, &k("embedding_length"), MAX_DIM)?,
            feed_forward_length: dim(h, &k("feed_forward_length"), MAX_DIM)?,
            head_count,
            head_count_kv,
            key_length,
            value_length,
            rms_norm_eps,
            rope_dimension_count,
            rope_freq_base,
            rope_dimension_sections,
            full_attention_interval: interval,
            recurrent_layers,
            ssm_conv_kernel: dim(h, &k("ssm.conv_kernel"), 64)?,
            ssm_state_size: dim(h, &k("ssm.state_size"), MAX_DIM)?,
            ssm_group_count,
            ssm_time_step_rank,
            ssm_inner_size,
            vocab_size,
            has_output,
            file_type: h.opt_u32("general.file_type")?,
        })
    }

    /// Trunk layers (without MTP blocks).
    pub fn n_layer(&self) -> usize {
        self.block_count - self.nextn_predict_layers
    }

    /// Whether trunk layer `i` is a Gated DeltaNet layer.
    pub fn is_recurrent(&self, i: usize) -> bool {
        self.recurrent_layers.get(i).copied().unwrap_or(false)
    }

    /// Full-attention trunk layers.
    pub fn attention_layers(&self) -> Vec<usize> {
        (0..self.n_layer())
            .filter(|&i| !self.is_recurrent(i))
            .collect()
    }

    /// GDN value head dim = `inner_size / time_step_rank`.
    pub fn ssm_value_head_dim(&self) -> usize {
        self.ssm_inner_size / self.ssm_time_step_rank
    }

    /// GDN q/k/v conv channels: `2·group_count·state_size + inner_size`.
    pub fn ssm_conv_channels(&self) -> usize {
        2 * self.ssm_group_count * self.ssm_state_size + self.ssm_inner_size
    }

    /// Every tensor of the trunk with its expected `ne` shape and role (MTP blocks not listed).
    pub fn tensor_inventory(&self) -> Vec<ExpectedTensor> {
        let d = self.embedding_length as u64;
        let v = self.vocab_size as u64;
        let ff = self.feed_forward_length as u64;
        let q = (self.head_count * self.key_length) as u64;
        let kv = (self.head_count_kv * self.key_length) as u64;
        let vv = (self.head_count_kv * self.value_length) as u64;
        let o_in = (self.head_count * self.value_length) as u64;
        let hk = self.key_length as u64;
        let conv = self.ssm_conv_channels() as u64;
        let inner = self.ssm_inner_size as u64;
        let vh = self.ssm_time_step_rank as u64;
        use TensorRole::{Matrix as M, Vector as V};
        let mut t = vec![
            ExpectedTensor::new("token_embd.weight", &[d, v], M, "[embedding_length, vocab]"),
            ExpectedTensor::new("output_norm.weight", &[d], V, "[embedding_length]"),
        ];
        if self.has_output {
            t.push(ExpectedTensor::new(
                "output.weight",
                &[d, v],
                M,
                "[embedding_length, vocab]",
            ));
        }
        for i in 0..self.n_layer() {
            let n = |s: &str| format!("blk.{i}.{s}");
            t.push(ExpectedTensor::new(
                n("attn_norm.weight"),
                &[d],
                V,
                "[embedding_length]",
            ));
            t.push(ExpectedTensor::new(
                n("post_attention_norm.weight"),
                &[d],
                V,
                "[embedding_length]",
            ));
            t.push(ExpectedTensor::new(
                n("ffn_gate.weight"),
                &[d, ff],
                M,
                "[embedding_length, feed_forward_length]",
            ));
            t.push(ExpectedTensor::new(
                n("ffn_up.weight"),
                &[d, ff],
                M,
                "[embedding_length, feed_forward_length]",
            ));
            t.push(ExpectedTensor::new(
                n("ffn_down.weight"),
                &[ff, d],
                M,
                "[feed_forward_length, embedding_length]",
            ));
            if self.is_recurrent(i) {
                t.push(ExpectedTensor::new(
                    n("attn_qkv.weight"),
                    &[d, conv],
                    M,
                    "[embedding_length, 2·ssm.group_count·ssm.state_size + ssm.inner_size]",
                ));
                t.push(ExpectedTensor::new(
                    n("attn_gate.weight"),
                    &[d, inner],
                    M,
                    "[embedding_length, ssm.inner_size]",
                ));
                t.push(ExpectedTensor::new(
                    n("ssm_beta.weight"),
                    &[d, vh],
                    M,
                    "[embedding_length, ssm.time_step_rank]",
                ));
                t.push(ExpectedTensor::new(
                    n("ssm_alpha.weight"),
                    &[d, vh],
                    M,
                    "[embedding_length, ssm.time_step_rank]",
                ));
                t.push(ExpectedTensor::new(
                    n("ssm_conv1d.weight"),
                    &[self.ssm_conv_kernel as u64, conv],
                    V,
                    "[ssm.conv_kernel, conv channels]",
                ));
                t.push(ExpectedTensor::new(
                    n("ssm_dt.bias"),
                    &[vh],
                    V,
                    "[ssm.time_step_rank]",
                ));
                t.push(ExpectedTensor::new(
                    n("ssm_a"),
                    &[vh],
                    V,
                    "[ssm.time_step_rank]",
                ));
                t.push(ExpectedTensor::new(
                    n("ssm_norm.weight"),
                    &[self.ssm_value_head_dim() as u64],
                    V,
                    "[ssm.inner_size / ssm.time_step_rank]",
                ));
                t.push(ExpectedTensor::new(
                    n("ssm_out.weight"),
                    &[inner, d],
                    M,
                    "[ssm.inner_size, embedding_length]",
                ));
            } else {
                t.push(ExpectedTensor::new(
                    n("attn_q.weight"),
                    &[d, 2 * q],
                    M,
                    "[embedding_length, 2·head_count·key_length] (query + output gate)",
                ));
                t.push(ExpectedTensor::new(
                    n("attn_k.weight"),
                    &[d, kv],
                    M,
                    "[embedding_length, head_count_kv·key_length]",
                ));
                t.push(ExpectedTensor::new(
                    n("attn_v.weight"),
                    &[d, vv],
                    M,
                    "[embedding_length, head_count_kv·value_length]",
                ));
                t.push(ExpectedTensor::new(
                    n("attn_output.weight"),
                    &[o_in, d],
                    M,
                    "[head_count·value_length, embedding_length]",
                ));
                t.push(ExpectedTensor::new(
                    n("attn_q_norm.weight"),
                    &[hk],
                    V,
                    "[key_length]",
                ));
                t.push(ExpectedTensor::new(
                    n("attn_k_norm.weight"),
                    &[hk],
                    V,
                    "[key_length]",
                ));
            }
        }
        t
    }

    /// Checks that `g` holds every inventory tensor with the expected shape and an allowed type.
    pub fn validate(&self, g: &Gguf) -> Result<(), ModelError> {
        validate(g.path(), &self.tensor_inventory(), |name| {
            g.tensor(name).map(|t| (t.dims.as_slice(), t.ty))
        })
    }

    /// Opens a (possibly split) qwen35 GGUF, reads its config and validates its tensors.
    pub fn load(path: &std::path::Path) -> Result<(Gguf, Qwen35Config), ModelError> {
        let g = Gguf::open(path)?;
        let c = Qwen35Config::from_gguf(&g)?;
        c.validate(&g)?;
        Ok((g, c))
    }
}
