//! The `qwen35` target: hyperparameters from GGUF metadata (qwen35-architecture.md §13) and the
//! tensor inventory (§12).
//!
//! Layer `i` is Gated DeltaNet ("recurrent") iff `qwen35.attention.recurrent_layers[i]` when that
//! key is present, else iff `(i + 1) % full_attention_interval != 0`. The trunk is the first
//! `block_count − nextn_predict_layers` blocks; MTP blocks after it are optional. Value head dim
//! = `ssm.inner_size / ssm.time_step_rank` (not assumed equal to `ssm.state_size`).

use super::error::ModelError;
use super::inventory::{validate, ExpectedTensor, TensorRole};
use super::json::{short, JsonConfig};
use crate::gguf::{Gguf, GgufHeader};
use flashtree_reference::model::Qwen35Hparams;
use serde_json::Value as Json;
use std::path::Path;

/// Largest layer count and dimension accepted (far above any real model; keeps later size
/// arithmetic from overflowing on a corrupt file).
pub const MAX_LAYERS: u64 = 4096;
pub const MAX_DIM: u64 = 1 << 24;
/// Largest Gated DeltaNet conv kernel accepted (Qwen3.5 uses 4).
pub const MAX_CONV_KERNEL: u64 = 64;

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
        return Err(ModelError::config(&h.file, key, format!("{v} is outside 1..={max}")));
    }
    Ok(v as usize)
}

/// A Qwen3.5 text model's HF `config.json` (flat `Qwen3_5TextConfig`, or the multimodal
/// `Qwen3_5Config` with the text part under `text_config`) read as the GGUF config it converts to.
#[derive(Clone, Debug, PartialEq)]
pub struct HfQwen35 {
    pub config: Qwen35Config,
    pub tie_word_embeddings: bool,
    /// `true` when tensors are under `model.language_model.` (multimodal checkpoint).
    pub multimodal: bool,
}

impl Qwen35Config {
    /// Reads and checks the hyperparameters of a (possibly split) qwen35 GGUF.
    pub fn from_gguf(g: &Gguf) -> Result<Qwen35Config, ModelError> {
        let vocab = g.tensor("token_embd.weight").and_then(|t| t.dims.get(1).copied());
        let has_output = g.tensor("output.weight").is_some();
        Self::from_header(g, vocab, has_output)
    }

    /// Reads the hyperparameters from metadata; `vocab_rows` (rows of `token_embd.weight`) is
    /// used when `tokenizer.ggml.tokens` is absent.
    pub fn from_header(h: &GgufHeader, vocab_rows: Option<u64>, has_output: bool) -> Result<Qwen35Config, ModelError> {
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
        let key_length = dim(h, &k("attention.key_length"), MAX_DIM)?;
        let interval = h.opt_u32(&k("full_attention_interval"))?.map(|v| v as usize);
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
                            format!("expected {block_count} bools (one per block), found {} values", arr.len()),
                        ))
                    }
                }
            }
            None => {
                let n = match interval {
                    Some(0) | None => return Err(ModelError::config(
                        &h.file,
                        &k("full_attention_interval"),
                        "missing or 0, and qwen35.attention.recurrent_layers is absent: the layer pattern is unknown",
                    )),
                    Some(n) => n,
                };
                (0..block_count).map(|i| !(i + 1).is_multiple_of(n)).collect()
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
                format!("missing, empty or over {MAX_DIM} tokens, and token_embd.weight gives no vocabulary size"),
            )
        })? as usize;
        let rope_dimension_sections = match h.get(&k("rope.dimension_sections")) {
            Some(_) => Some(h.get_int_array(&k("rope.dimension_sections"))?),
            None => None,
        };
        let c = Qwen35Config {
            block_count,
            nextn_predict_layers: nextn,
            context_length: dim(h, &k("context_length"), u32::MAX as u64)?,
            embedding_length: dim(h, &k("embedding_length"), MAX_DIM)?,
            feed_forward_length: dim(h, &k("feed_forward_length"), MAX_DIM)?,
            head_count: dim(h, &k("attention.head_count"), MAX_DIM)?,
            head_count_kv: dim(h, &k("attention.head_count_kv"), MAX_DIM)?,
            key_length,
            value_length: dim(h, &k("attention.value_length"), MAX_DIM)?,
            rms_norm_eps: h.get_f32(&k("attention.layer_norm_rms_epsilon"))?,
            rope_dimension_count: dim(h, &k("rope.dimension_count"), key_length as u64)?,
            rope_freq_base: h.get_f32(&k("rope.freq_base"))?,
            rope_dimension_sections,
            full_attention_interval: interval,
            recurrent_layers,
            ssm_conv_kernel: dim(h, &k("ssm.conv_kernel"), MAX_CONV_KERNEL)?,
            ssm_state_size: dim(h, &k("ssm.state_size"), MAX_DIM)?,
            ssm_group_count: dim(h, &k("ssm.group_count"), MAX_DIM)?,
            ssm_time_step_rank: dim(h, &k("ssm.time_step_rank"), MAX_DIM)?,
            ssm_inner_size: dim(h, &k("ssm.inner_size"), MAX_DIM)?,
            vocab_size,
            has_output,
            file_type: h.opt_u32("general.file_type")?,
        };
        c.check(&h.file, "qwen35.")?;
        Ok(c)
    }

    /// Reads an HF `config.json` (text; `file` for messages) of a Qwen3.5 text model, with the
    /// same bounds and checks as [`Qwen35Config::from_header`]. HF defaults that the config may
    /// omit: `partial_rotary_factor` 0.25, `full_attention_interval` 4 (when `layer_types` is
    /// absent), `rms_norm_eps` 1e-6, `max_position_embeddings` 262 144.
    pub fn from_hf_json(text: &str, file: &Path) -> Result<HfQwen35, ModelError> {
        let root: Json = serde_json::from_str(text)
            .map_err(|e| ModelError::config(file, "config.json", format!("invalid JSON: {e}")))?;
        if !root.is_object() {
            return Err(ModelError::config(file, "config.json", "expected a JSON object"));
        }
        let multimodal = root.get("text_config").is_some_and(|t| !t.is_null());
        let text_cfg = if multimodal { &root["text_config"] } else { &root };
        let c = JsonConfig::new(text_cfg, file);
        let block_count = c.req(&["num_hidden_layers"], MAX_LAYERS)?;
        let head_dim = c.req(&["head_dim"], MAX_DIM)?;
        let rope_key = if c.get(&["rope_parameters"]).is_some() { "rope_parameters" } else { "rope_scaling" };
        let rope_theta = match c.positive(&[rope_key, "rope_theta"])? {
            Some(t) => t,
            None => c.positive(&["rope_theta"])?.ok_or_else(|| c.err("rope_parameters.rope_theta", "missing"))?,
        };
        let factor = match c.positive(&[rope_key, "partial_rotary_factor"])? {
            Some(f) => f,
            None => c.positive(&["partial_rotary_factor"])?.unwrap_or(0.25), // HF's Qwen3_5TextConfig default
        };
        if factor > 1.0 {
            return Err(c.err("partial_rotary_factor", format!("{factor} is above 1")));
        }
        let n_rot = (head_dim as f64 * factor) as usize;
        let rope_dimension_sections = match c.array(&[rope_key, "mrope_section"], 4)? {
            None => None,
            Some(s) => {
                let mut out = vec![0i64; 4];
                for (dst, v) in out.iter_mut().zip(s) {
                    *dst = v
                        .as_u64()
                        .filter(|&x| x <= MAX_DIM)
                        .ok_or_else(|| c.err("mrope_section", format!("{} is not a section size", short(v))))?
                        as i64;
                }
                Some(out)
            }
        };
        let interval = c.uint(&["full_attention_interval"], MAX_LAYERS)?;
        let recurrent_layers = match c.array(&["layer_types"], MAX_LAYERS as usize)? {
            Some(types) => {
                if types.len() != block_count {
                    return Err(
                        c.err("layer_types", format!("{} entries for num_hidden_layers = {block_count}", types.len()))
                    );
                }
                types
                    .iter()
                    .map(|t| match t.as_str() {
                        Some("linear_attention") => Ok(true),
                        Some("full_attention") => Ok(false),
                        _ => Err(c.err(
                            "layer_types",
                            format!("{} is not \"linear_attention\" or \"full_attention\"", short(t)),
                        )),
                    })
                    .collect::<Result<Vec<_>, _>>()?
            }
            None => {
                let n = interval.unwrap_or(4);
                (0..block_count).map(|i| !(i + 1).is_multiple_of(n)).collect()
            }
        };
        let n_v = c.req(&["linear_num_value_heads"], MAX_DIM)?;
        let v_dim = c.req(&["linear_value_head_dim"], MAX_DIM)?;
        let ssm_inner_size = n_v
            .checked_mul(v_dim)
            .filter(|&n| n as u64 <= MAX_DIM)
            .ok_or_else(|| c.err("linear_value_head_dim", format!("{n_v} value heads × {v_dim} exceeds {MAX_DIM}")))?;
        let tie = match c.bool(&["tie_word_embeddings"])? {
            Some(t) => t,
            None => JsonConfig::new(&root, file).bool(&["tie_word_embeddings"])?.unwrap_or(false),
        };
        let config = Qwen35Config {
            block_count,
            nextn_predict_layers: 0,
            context_length: c.uint(&["max_position_embeddings"], u32::MAX as u64)?.unwrap_or(262_144),
            embedding_length: c.req(&["hidden_size"], MAX_DIM)?,
            feed_forward_length: c.req(&["intermediate_size"], MAX_DIM)?,
            head_count: c.req(&["num_attention_heads"], MAX_DIM)?,
            head_count_kv: c.req(&["num_key_value_heads"], MAX_DIM)?,
            key_length: head_dim,
            value_length: head_dim,
            rms_norm_eps: c.positive(&["rms_norm_eps"])?.unwrap_or(1e-6) as f32,
            rope_dimension_count: n_rot,
            rope_freq_base: rope_theta as f32,
            rope_dimension_sections,
            full_attention_interval: interval,
            recurrent_layers,
            ssm_conv_kernel: c.req(&["linear_conv_kernel_dim"], MAX_CONV_KERNEL)?,
            ssm_state_size: c.req(&["linear_key_head_dim"], MAX_DIM)?,
            ssm_group_count: c.req(&["linear_num_key_heads"], MAX_DIM)?,
            ssm_time_step_rank: n_v,
            ssm_inner_size,
            vocab_size: c.req(&["vocab_size"], MAX_DIM)?,
            has_output: !tie,
            file_type: None,
        };
        config.check(file, "")?;
        Ok(HfQwen35 { config, tie_word_embeddings: tie, multimodal })
    }

    /// The checks every source shares, on numbers already inside their per-key bounds (`prefix`
    /// is `"qwen35."` for GGUF key names in messages). Afterwards every product the inventory and
    /// the forward form from these numbers fits in [`MAX_DIM`] or, for tensor sizes, in u64.
    pub fn check(&self, file: &Path, prefix: &str) -> Result<(), ModelError> {
        let bad = |key: &str, msg: String| Err(ModelError::config(file, &format!("{prefix}{key}"), msg));
        if self.nextn_predict_layers >= self.block_count {
            return bad(
                "nextn_predict_layers",
                format!("{} leaves no trunk layers of block_count {}", self.nextn_predict_layers, self.block_count),
            );
        }
        if self.recurrent_layers.len() != self.block_count {
            return bad(
                "attention.recurrent_layers",
                format!("{} entries for block_count {}", self.recurrent_layers.len(), self.block_count),
            );
        }
        if !self.head_count.is_multiple_of(self.head_count_kv) {
            return bad(
                "attention.head_count_kv",
                format!("{} does not divide head_count {}", self.head_count_kv, self.head_count),
            );
        }
        if self.value_length != self.key_length {
            return bad(
                "attention.value_length",
                format!(
                    "{} differs from key_length {}; qwen35 attention has one head dim",
                    self.value_length, self.key_length
                ),
            );
        }
        if self.rope_dimension_count == 0
            || self.rope_dimension_count > self.key_length
            || !self.rope_dimension_count.is_multiple_of(2)
        {
            return bad(
                "rope.dimension_count",
                format!("{} must be even and in 2..=key_length {}", self.rope_dimension_count, self.key_length),
            );
        }
        // Query + gate rows of attn_q, and the K/V widths.
        if self
            .head_count
            .checked_mul(self.key_length)
            .and_then(|q| q.checked_mul(2))
            .is_none_or(|q| q as u64 > MAX_DIM)
        {
            return bad(
                "attention.head_count",
                format!("2 × {} heads × key_length {} exceeds {MAX_DIM}", self.head_count, self.key_length),
            );
        }
        if !self.ssm_inner_size.is_multiple_of(self.ssm_time_step_rank) {
            return bad(
                "ssm.inner_size",
                format!("{} is not a multiple of ssm.time_step_rank {}", self.ssm_inner_size, self.ssm_time_step_rank),
            );
        }
        if !self.ssm_time_step_rank.is_multiple_of(self.ssm_group_count) {
            return bad(
                "ssm.time_step_rank",
                format!(
                    "{} value heads is not a multiple of ssm.group_count {}",
                    self.ssm_time_step_rank, self.ssm_group_count
                ),
            );
        }
        let conv = self
            .ssm_group_count
            .checked_mul(self.ssm_state_size)
            .and_then(|x| x.checked_mul(2))
            .and_then(|x| x.checked_add(self.ssm_inner_size));
        if conv.is_none_or(|c| c as u64 > MAX_DIM) {
            return bad(
                "ssm.state_size",
                format!(
                    "conv channels 2 × {} groups × {} + {} exceed {MAX_DIM}",
                    self.ssm_group_count, self.ssm_state_size, self.ssm_inner_size
                ),
            );
        }
        for (key, v) in
            [("attention.layer_norm_rms_epsilon", self.rms_norm_eps), ("rope.freq_base", self.rope_freq_base)]
        {
            if !(v.is_finite() && v > 0.0) {
                return bad(key, format!("{v} is not a positive finite number"));
            }
        }
        if self.vocab_size == 0 || self.vocab_size as u64 > MAX_DIM {
            return bad("vocab_size", format!("{} is outside 1..={MAX_DIM}", self.vocab_size));
        }
        Ok(())
    }

    /// The reference forward's hyperparameters (trunk layers only).
    pub fn hparams(&self) -> Qwen35Hparams {
        Qwen35Hparams {
            n_embd: self.embedding_length,
            n_vocab: self.vocab_size,
            n_ff: self.feed_forward_length,
            n_head: self.head_count,
            n_head_kv: self.head_count_kv,
            head_dim: self.key_length,
            n_rot: self.rope_dimension_count,
            rope_theta: self.rope_freq_base as f64,
            rms_eps: self.rms_norm_eps,
            recurrent: self.recurrent_layers[..self.n_layer()].to_vec(),
            ssm_n_k_heads: self.ssm_group_count,
            ssm_n_v_heads: self.ssm_time_step_rank,
            ssm_k_dim: self.ssm_state_size,
            ssm_v_dim: self.ssm_value_head_dim(),
            conv_kernel: self.ssm_conv_kernel,
        }
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
        (0..self.n_layer()).filter(|&i| !self.is_recurrent(i)).collect()
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
            t.push(ExpectedTensor::new("output.weight", &[d, v], M, "[embedding_length, vocab]"));
        }
        for i in 0..self.n_layer() {
            let n = |s: &str| format!("blk.{i}.{s}");
            t.push(ExpectedTensor::new(n("attn_norm.weight"), &[d], V, "[embedding_length]"));
            t.push(ExpectedTensor::new(n("post_attention_norm.weight"), &[d], V, "[embedding_length]"));
            t.push(ExpectedTensor::new(n("ffn_gate.weight"), &[d, ff], M, "[embedding_length, feed_forward_length]"));
            t.push(ExpectedTensor::new(n("ffn_up.weight"), &[d, ff], M, "[embedding_length, feed_forward_length]"));
            t.push(ExpectedTensor::new(n("ffn_down.weight"), &[ff, d], M, "[feed_forward_length, embedding_length]"));
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
                t.push(ExpectedTensor::new(n("ssm_dt.bias"), &[vh], V, "[ssm.time_step_rank]"));
                t.push(ExpectedTensor::new(n("ssm_a"), &[vh], V, "[ssm.time_step_rank]"));
                t.push(ExpectedTensor::new(
                    n("ssm_norm.weight"),
                    &[self.ssm_value_head_dim() as u64],
                    V,
                    "[ssm.inner_size / ssm.time_step_rank]",
                ));
                t.push(ExpectedTensor::new(n("ssm_out.weight"), &[inner, d], M, "[ssm.inner_size, embedding_length]"));
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
                t.push(ExpectedTensor::new(n("attn_q_norm.weight"), &[hk], V, "[key_length]"));
                t.push(ExpectedTensor::new(n("attn_k_norm.weight"), &[hk], V, "[key_length]"));
            }
        }
        t
    }

    /// Checks that `g` holds every inventory tensor with the expected shape and an allowed type.
    pub fn validate(&self, g: &Gguf) -> Result<(), ModelError> {
        validate(g.path(), &self.tensor_inventory(), |name| g.tensor(name).map(|t| (t.dims.as_slice(), t.ty)))
    }

    /// Opens a (possibly split) qwen35 GGUF, reads its config and validates its tensors.
    pub fn load(path: &std::path::Path) -> Result<(Gguf, Qwen35Config), ModelError> {
        let g = Gguf::open(path)?;
        let c = Qwen35Config::from_gguf(&g)?;
        c.validate(&g)?;
        Ok((g, c))
    }
}
