//! HF `config.json` of a Qwen3.5 text model (flat `Qwen3_5TextConfig`, or the multimodal
//! `Qwen3_5Config` with the text part under `text_config`) → [`Qwen35Hparams`].

use super::ConvertError;
use flashtree_reference::model::Qwen35Hparams;
use serde_json::Value;
use std::path::Path;

/// The parsed text config plus what the GGUF metadata needs beyond the forward's hyperparameters.
#[derive(Clone, Debug, PartialEq)]
pub struct HfQwen35Config {
    pub hparams: Qwen35Hparams,
    pub tie_word_embeddings: bool,
    pub context_length: usize,
    /// `full_attention_interval` as given or inferred (the pattern itself is in `hparams.recurrent`).
    pub full_attention_interval: Option<usize>,
    /// `rope_parameters.mrope_section` (for `rope.dimension_sections`), padded to 4 with zeros.
    pub mrope_sections: [i32; 4],
    /// `true` when tensors are under `model.language_model.` (multimodal checkpoint).
    pub multimodal: bool,
}

/// Reads and parses `dir/config.json`.
pub fn read(dir: &Path) -> Result<HfQwen35Config, ConvertError> {
    let path = dir.join("config.json");
    let text = std::fs::read_to_string(&path).map_err(|source| ConvertError::Io { path: path.clone(), source })?;
    let v: Value =
        serde_json::from_str(&text).map_err(|e| ConvertError::Config { path: path.clone(), why: e.to_string() })?;
    parse(&v).map_err(|why| ConvertError::Config { path, why })
}

fn get_usize(c: &Value, key: &str) -> Result<usize, String> {
    c.get(key).and_then(Value::as_u64).map(|v| v as usize).ok_or_else(|| format!("missing or non-integer `{key}`"))
}

fn get_f64(c: &Value, key: &str) -> Option<f64> {
    c.get(key).and_then(Value::as_f64)
}

/// Parses a config value (already JSON).
pub fn parse(root: &Value) -> Result<HfQwen35Config, String> {
    let multimodal = root.get("text_config").is_some();
    let c = root.get("text_config").unwrap_or(root);
    let n_layer = get_usize(c, "num_hidden_layers")?;
    let head_dim = get_usize(c, "head_dim")?;
    let rope = c.get("rope_parameters").or_else(|| c.get("rope_scaling"));
    let rope_theta = rope
        .and_then(|r| get_f64(r, "rope_theta"))
        .or_else(|| get_f64(c, "rope_theta"))
        .ok_or("missing `rope_parameters.rope_theta`")?;
    let factor = rope
        .and_then(|r| get_f64(r, "partial_rotary_factor"))
        .or_else(|| get_f64(c, "partial_rotary_factor"))
        .unwrap_or(0.25); // HF's Qwen3_5TextConfig default
    let n_rot = (head_dim as f64 * factor) as usize;
    let mut mrope_sections = [0i32; 4];
    if let Some(s) = rope.and_then(|r| r.get("mrope_section")).and_then(Value::as_array) {
        for (dst, v) in mrope_sections.iter_mut().zip(s) {
            *dst = v.as_i64().ok_or("`mrope_section` is not a list of integers")? as i32;
        }
    }
    let interval = c.get("full_attention_interval").and_then(Value::as_u64).map(|v| v as usize);
    let recurrent = match c.get("layer_types").and_then(Value::as_array) {
        Some(types) => {
            if types.len() != n_layer {
                return Err(format!("`layer_types` has {} entries for {n_layer} layers", types.len()));
            }
            types
                .iter()
                .map(|t| match t.as_str() {
                    Some("linear_attention") => Ok(true),
                    Some("full_attention") => Ok(false),
                    other => Err(format!("unknown layer type {other:?}")),
                })
                .collect::<Result<Vec<_>, _>>()?
        }
        None => Qwen35Hparams::pattern_from_interval(n_layer, interval.unwrap_or(4)),
    };
    let n_vocab = get_usize(c, "vocab_size")?;
    let hparams = Qwen35Hparams {
        n_embd: get_usize(c, "hidden_size")?,
        n_vocab,
        n_ff: get_usize(c, "intermediate_size")?,
        n_head: get_usize(c, "num_attention_heads")?,
        n_head_kv: get_usize(c, "num_key_value_heads")?,
        head_dim,
        n_rot,
        rope_theta,
        rms_eps: get_f64(c, "rms_norm_eps").unwrap_or(1e-6) as f32,
        recurrent,
        ssm_n_k_heads: get_usize(c, "linear_num_key_heads")?,
        ssm_n_v_heads: get_usize(c, "linear_num_value_heads")?,
        ssm_k_dim: get_usize(c, "linear_key_head_dim")?,
        ssm_v_dim: get_usize(c, "linear_value_head_dim")?,
        conv_kernel: get_usize(c, "linear_conv_kernel_dim")?,
    };
    hparams.validate().map_err(|e| e.to_string())?;
    let tie = c
        .get("tie_word_embeddings")
        .or_else(|| root.get("tie_word_embeddings"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    Ok(HfQwen35Config {
        hparams,
        tie_word_embeddings: tie,
        context_length: get_usize(c, "max_position_embeddings").unwrap_or(262_144),
        full_attention_interval: interval,
        mrope_sections,
        multimodal,
    })
}
