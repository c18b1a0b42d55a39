//! z-lab DFlash draft folders (`config.json` + BF16 `model.safetensors`) → [`DFlashWeights`].

use super::safetensors::{open_folder, read_any};
use super::{ConvertError, TensorF32};
use flashtree_reference::model::dflash::{DFlashHparams, DFlashLayer, DFlashWeights};
use flashtree_reference::model::mlp::MlpWeights;
use flashtree_reference::model::Matrix;
use serde_json::Value;
use std::path::Path;

/// The draft config plus what the GGUF metadata needs.
#[derive(Clone, Debug, PartialEq)]
pub struct DFlashConfig {
    pub hparams: DFlashHparams,
    pub n_layer: usize,
    pub n_vocab: usize,
    pub context_length: usize,
    /// `use_sliding_window` or `dflash_config.use_swa`: llama.cpp writes the window keys only then.
    pub use_sliding_window: bool,
}

/// Parses a z-lab draft `config.json` value. `rope_theta` must be present (never defaulted:
/// a wrong theta is a silent acceptance killer, dflash-draft.md §2.4).
pub fn parse_config(v: &Value) -> Result<DFlashConfig, String> {
    let u = |k: &str| {
        v.get(k).and_then(Value::as_u64).map(|x| x as usize).ok_or_else(|| format!("missing or non-integer `{k}`"))
    };
    let dc = v.get("dflash_config");
    let n_layer = u("num_hidden_layers")?;
    let n_embd = u("hidden_size")?;
    let n_head = u("num_attention_heads")?;
    let head_dim = match v.get("head_dim").and_then(Value::as_u64) {
        Some(h) => h as usize,
        None => n_embd.checked_div(n_head).ok_or("num_attention_heads is 0")?,
    };
    let rope_theta = v
        .get("rope_theta")
        .and_then(Value::as_f64)
        .or_else(|| v.get("rope_parameters").and_then(|r| r.get("rope_theta")).and_then(Value::as_f64))
        .ok_or("missing `rope_theta` (it is never defaulted for DFlash drafts)")?;
    let ids_v = dc
        .and_then(|d| d.get("target_layer_ids"))
        .or_else(|| v.get("target_layer_ids"))
        .and_then(Value::as_array)
        .ok_or("missing `dflash_config.target_layer_ids`")?;
    let target_layer_ids = ids_v
        .iter()
        .map(|x| x.as_u64().map(|x| x as usize))
        .collect::<Option<Vec<_>>>()
        .ok_or("`target_layer_ids` is not a list of integers")?;
    let mask_token_id = dc
        .and_then(|d| d.get("mask_token_id"))
        .or_else(|| v.get("mask_token_id"))
        .and_then(Value::as_u64)
        .ok_or("missing `dflash_config.mask_token_id`")?;
    let mask_token_id = u32::try_from(mask_token_id).map_err(|_| "mask_token_id does not fit u32")?;
    let block_size = dc
        .and_then(|d| d.get("block_size"))
        .or_else(|| v.get("block_size"))
        .and_then(Value::as_u64)
        .map_or(16, |b| b as usize);
    let sliding = match v.get("layer_types").and_then(Value::as_array) {
        Some(t) => {
            if t.len() != n_layer {
                return Err(format!("`layer_types` has {} entries for {n_layer} layers", t.len()));
            }
            t.iter()
                .map(|x| match x.as_str() {
                    Some("sliding_attention") => Ok(true),
                    Some("full_attention") => Ok(false),
                    other => Err(format!("unknown layer type {other:?}")),
                })
                .collect::<Result<Vec<_>, _>>()?
        }
        None => vec![false; n_layer],
    };
    let sliding_window = dc
        .and_then(|d| d.get("swa_window_size"))
        .or_else(|| v.get("sliding_window"))
        .and_then(Value::as_u64)
        .map(|w| w as usize);
    let causal = v
        .get("is_causal")
        .and_then(Value::as_bool)
        .or_else(|| dc.and_then(|d| d.get("causal")).and_then(Value::as_bool));
    let use_sliding_window = v.get("use_sliding_window").and_then(Value::as_bool).unwrap_or(false)
        || dc.and_then(|d| d.get("use_swa")).and_then(Value::as_bool).unwrap_or(false);
    Ok(DFlashConfig {
        hparams: DFlashHparams {
            n_embd,
            n_head,
            n_head_kv: u("num_key_value_heads")?,
            head_dim,
            n_ff: u("intermediate_size")?,
            rope_theta,
            rms_eps: v.get("rms_norm_eps").and_then(Value::as_f64).unwrap_or(1e-6) as f32,
            target_layer_ids,
            mask_token_id,
            block_size,
            sliding,
            sliding_window,
            causal,
        },
        n_layer,
        n_vocab: u("vocab_size")?,
        context_length: u("max_position_embeddings").unwrap_or(4096),
        use_sliding_window,
    })
}

/// Builds draft weights from tensors named as in the z-lab safetensors (`fc.weight`, `layers.i.…`).
pub fn weights_from_named(
    cfg: &DFlashConfig,
    get: &mut dyn FnMut(&str) -> Result<TensorF32, ConvertError>,
) -> Result<DFlashWeights, ConvertError> {
    let hp = &cfg.hparams;
    let h = hp.n_embd;
    let mut m = |name: String, rows: usize, cols: usize| -> Result<Matrix, ConvertError> {
        let t = get(&name)?;
        if t.data.len() != rows * cols {
            return Err(ConvertError::Tensor { name, why: format!("shape {:?}, expected [{rows}, {cols}]", t.shape) });
        }
        Ok(Matrix::new(&name, rows, cols, t.data)?)
    };
    let (qd, kvd) = (hp.n_head * hp.head_dim, hp.n_head_kv * hp.head_dim);
    let fc = m("fc.weight".into(), h, hp.target_layer_ids.len() * h)?;
    let hidden_norm = m("hidden_norm.weight".into(), 1, h)?.data;
    let output_norm = m("norm.weight".into(), 1, h)?.data;
    let mut layers = Vec::with_capacity(cfg.n_layer);
    for i in 0..cfg.n_layer {
        let n = |s: &str| format!("layers.{i}.{s}");
        layers.push(DFlashLayer {
            attn_norm: m(n("input_layernorm.weight"), 1, h)?.data,
            post_attention_norm: m(n("post_attention_layernorm.weight"), 1, h)?.data,
            q: m(n("self_attn.q_proj.weight"), qd, h)?,
            k: m(n("self_attn.k_proj.weight"), kvd, h)?,
            v: m(n("self_attn.v_proj.weight"), kvd, h)?,
            o: m(n("self_attn.o_proj.weight"), h, qd)?,
            q_norm: m(n("self_attn.q_norm.weight"), 1, hp.head_dim)?.data,
            k_norm: m(n("self_attn.k_norm.weight"), 1, hp.head_dim)?.data,
            mlp: MlpWeights {
                gate: m(n("mlp.gate_proj.weight"), hp.n_ff, h)?,
                up: m(n("mlp.up_proj.weight"), hp.n_ff, h)?,
                down: m(n("mlp.down_proj.weight"), h, hp.n_ff)?,
            },
        });
    }
    let w = DFlashWeights { hparams: hp.clone(), fc, hidden_norm, layers, output_norm };
    w.validate()?;
    Ok(w)
}

/// Loads a z-lab DFlash draft folder.
pub fn load_zlab(dir: &Path) -> Result<(DFlashConfig, DFlashWeights), ConvertError> {
    let path = dir.join("config.json");
    let text = std::fs::read_to_string(&path).map_err(|source| ConvertError::Io { path: path.clone(), source })?;
    let v: Value =
        serde_json::from_str(&text).map_err(|e| ConvertError::Config { path: path.clone(), why: e.to_string() })?;
    let cfg = parse_config(&v).map_err(|why| ConvertError::Config { path, why })?;
    let files = open_folder(dir)?;
    let w = weights_from_named(&cfg, &mut |n| {
        // z-lab names are bare; llama.cpp-style re-exports may prefix `model.`.
        read_any(&files, n).or_else(|_| read_any(&files, &format!("model.{n}")))
    })?;
    Ok((cfg, w))
}
