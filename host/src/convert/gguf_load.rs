//! GGUF → reference weights: `qwen35` targets (ours, or llama.cpp's converter output, which has the
//! same tiled value-head order and `1 + w` norms) and `dflash` drafts. Every tensor is dequantized
//! to f32 from its own type.

use super::dflash::{weights_from_named, DFlashConfig};
use super::qwen35::weights_from_gguf_tensors;
use super::{ConvertError, TensorF32};
use crate::gguf::{Gguf, GgufError};
use crate::model::draft::zlab_to_gguf_name;
use flashtree_reference::model::dflash::{DFlashHparams, DFlashWeights};
use flashtree_reference::model::{Qwen35Hparams, Qwen35Weights};
use flashtree_reference::quant::dequantize;
use std::path::Path;

fn g(e: GgufError) -> ConvertError {
    ConvertError::Tensor { name: "<gguf>".into(), why: e.to_string() }
}

fn bad_key(file: &Gguf, key: &str, why: impl std::fmt::Display) -> ConvertError {
    ConvertError::Config { path: file.path().to_path_buf(), why: format!("{key}: {why}") }
}

/// Reads tensor `name` as f32 with its PyTorch-order shape (`ne` reversed); `None` if absent.
pub fn read_tensor(file: &Gguf, name: &str) -> Result<Option<TensorF32>, ConvertError> {
    let Some(info) = file.tensor(name) else {
        return Ok(None);
    };
    let (ty, dims) = (info.ty, info.dims.clone());
    let bytes = file.tensor_data(name).map_err(g)?;
    let data = dequantize(ty, bytes)
        .map_err(|e| ConvertError::Tensor { name: name.to_string(), why: format!("{ty}: {e}") })?;
    let shape = dims.iter().rev().map(|&d| d as usize).collect();
    Ok(Some(TensorF32 { shape, data }))
}

fn u(file: &Gguf, key: &str) -> Result<usize, ConvertError> {
    file.get_u64(key).map(|v| v as usize).map_err(g)
}

fn opt_u(file: &Gguf, key: &str) -> Result<Option<usize>, ConvertError> {
    match file.get(key) {
        None => Ok(None),
        Some(_) => u(file, key).map(Some),
    }
}

/// The `qwen35` hyperparameters of a GGUF (qwen35-architecture.md §13).
pub fn qwen35_hparams(file: &Gguf) -> Result<Qwen35Hparams, ConvertError> {
    let arch = file.get_str("general.architecture").map_err(g)?;
    if arch != "qwen35" {
        return Err(bad_key(file, "general.architecture", format!("is {arch:?}, expected \"qwen35\"")));
    }
    let a = "qwen35";
    let blocks = u(file, &format!("{a}.block_count"))?;
    let nextn = opt_u(file, &format!("{a}.nextn_predict_layers"))?.unwrap_or(0);
    let n_layer =
        blocks.checked_sub(nextn).ok_or_else(|| bad_key(file, "nextn_predict_layers", "exceeds block_count"))?;
    let n_embd = u(file, &format!("{a}.embedding_length"))?;
    let n_head = u(file, &format!("{a}.attention.head_count"))?;
    let head_dim = match opt_u(file, &format!("{a}.attention.key_length"))? {
        Some(h) => h,
        None => n_embd.checked_div(n_head).ok_or_else(|| bad_key(file, "attention.head_count", "is 0"))?,
    };
    let recurrent = match file.get(&format!("{a}.attention.recurrent_layers")) {
        Some(v) => {
            let items = v.as_array().ok_or_else(|| bad_key(file, "attention.recurrent_layers", "not an array"))?;
            if items.len() < n_layer {
                return Err(bad_key(
                    file,
                    "attention.recurrent_layers",
                    format!("{} entries for {n_layer} layers", items.len()),
                ));
            }
            items[..n_layer]
                .iter()
                .map(|b| b.as_bool().or_else(|| b.as_integer().map(|i| i != 0)))
                .collect::<Option<Vec<bool>>>()
                .ok_or_else(|| bad_key(file, "attention.recurrent_layers", "not booleans"))?
        }
        None => Qwen35Hparams::pattern_from_interval(
            n_layer,
            opt_u(file, &format!("{a}.full_attention_interval"))?.unwrap_or(4),
        ),
    };
    let n_v = u(file, &format!("{a}.ssm.time_step_rank"))?;
    let inner = u(file, &format!("{a}.ssm.inner_size"))?;
    let n_vocab = file.tensor("token_embd.weight").and_then(|t| t.dims.get(1).copied()).ok_or_else(|| {
        ConvertError::Missing { name: "token_embd.weight".into(), looked: file.path().display().to_string() }
    })? as usize;
    let hp = Qwen35Hparams {
        n_embd,
        n_vocab,
        n_ff: u(file, &format!("{a}.feed_forward_length"))?,
        n_head,
        n_head_kv: u(file, &format!("{a}.attention.head_count_kv"))?,
        head_dim,
        n_rot: opt_u(file, &format!("{a}.rope.dimension_count"))?.unwrap_or(head_dim),
        rope_theta: file.get_f32(&format!("{a}.rope.freq_base")).map_err(g)? as f64,
        rms_eps: file.get_f32(&format!("{a}.attention.layer_norm_rms_epsilon")).map_err(g)?,
        recurrent,
        ssm_n_k_heads: u(file, &format!("{a}.ssm.group_count"))?,
        ssm_n_v_heads: n_v,
        ssm_k_dim: u(file, &format!("{a}.ssm.state_size"))?,
        ssm_v_dim: inner.checked_div(n_v).ok_or_else(|| bad_key(file, "ssm.time_step_rank", "is 0"))?,
        conv_kernel: u(file, &format!("{a}.ssm.conv_kernel"))?,
    };
    hp.validate()?;
    Ok(hp)
}

/// Loads a `qwen35` GGUF (any shard of a split set) into reference weights.
pub fn load_qwen35(path: &Path) -> Result<Qwen35Weights, ConvertError> {
    let file = Gguf::open(path).map_err(g)?;
    let hp = qwen35_hparams(&file)?;
    weights_from_gguf_tensors(&hp, &mut |n| read_tensor(&file, n))
}

/// Loads a llama.cpp `dflash` GGUF into reference draft weights.
pub fn load_dflash(path: &Path) -> Result<(DFlashConfig, DFlashWeights), ConvertError> {
    let file = Gguf::open(path).map_err(g)?;
    let arch = file.get_str("general.architecture").map_err(g)?;
    if arch != "dflash" {
        return Err(bad_key(&file, "general.architecture", format!("is {arch:?}, expected \"dflash\"")));
    }
    let a = "dflash";
    let n_layer = u(&file, &format!("{a}.block_count"))?;
    let n_embd = u(&file, &format!("{a}.embedding_length"))?;
    let n_head = u(&file, &format!("{a}.attention.head_count"))?;
    let head_dim = match opt_u(&file, &format!("{a}.attention.key_length"))? {
        Some(h) => h,
        None => n_embd.checked_div(n_head).ok_or_else(|| bad_key(&file, "attention.head_count", "is 0"))?,
    };
    let target_layer_ids = file
        .get_int_array(&format!("{a}.target_layers"))
        .map_err(g)?
        .into_iter()
        .map(|x| usize::try_from(x - 1).map_err(|_| bad_key(&file, "dflash.target_layers", format!("entry {x} < 1"))))
        .collect::<Result<Vec<_>, _>>()?;
    let window = opt_u(&file, &format!("{a}.attention.sliding_window"))?.filter(|&w| w > 0);
    let sliding = match (window, file.get(&format!("{a}.attention.sliding_window_pattern"))) {
        (Some(_), Some(v)) => v
            .as_array()
            .and_then(|it| it.iter().map(|b| b.as_bool()).collect::<Option<Vec<_>>>())
            .filter(|p| p.len() == n_layer)
            .ok_or_else(|| bad_key(&file, "attention.sliding_window_pattern", format!("not {n_layer} booleans")))?,
        _ => vec![false; n_layer],
    };
    let mask = u(&file, "tokenizer.ggml.mask_token_id")?;
    let hparams = DFlashHparams {
        n_embd,
        n_head,
        n_head_kv: u(&file, &format!("{a}.attention.head_count_kv"))?,
        head_dim,
        n_ff: u(&file, &format!("{a}.feed_forward_length"))?,
        rope_theta: file.get_f32(&format!("{a}.rope.freq_base")).map_err(g)? as f64,
        rms_eps: file.get_f32(&format!("{a}.attention.layer_norm_rms_epsilon")).map_err(g)?,
        target_layer_ids,
        mask_token_id: u32::try_from(mask)
            .map_err(|_| bad_key(&file, "tokenizer.ggml.mask_token_id", "does not fit u32"))?,
        block_size: opt_u(&file, &format!("{a}.block_size"))?.unwrap_or(16),
        sliding,
        sliding_window: window,
        causal: file.opt_bool(&format!("{a}.attention.causal")).map_err(g)?,
    };
    let cfg = DFlashConfig {
        hparams,
        n_layer,
        n_vocab: 0,
        context_length: opt_u(&file, &format!("{a}.context_length"))?.unwrap_or(0),
        use_sliding_window: window.is_some(),
    };
    let w = weights_from_named(&cfg, &mut |zlab| {
        let gguf = zlab_to_gguf_name(zlab);
        read_tensor(&file, &gguf)?
            .ok_or_else(|| ConvertError::Missing { name: gguf, looked: file.path().display().to_string() })
    })?;
    Ok((cfg, w))
}
