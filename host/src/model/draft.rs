//! The DFlash draft (dflash-draft.md §2–3): `DraftConfig` and weights from a z-lab folder
//! (`config.json` + `model.safetensors`) or from a llama.cpp `dflash` GGUF
//! (llamacpp-dflash.md §1). Tensors are addressed by their z-lab names
//! (`layers.0.self_attn.q_proj.weight`) whatever the source; shapes are in GGUF `ne` order.

use super::error::ModelError;
use super::inventory::{validate, ExpectedTensor, TensorRole};
use super::json::{read_config_text, short, JsonConfig};
use super::qwen35::{Qwen35Config, MAX_DIM, MAX_LAYERS};
use super::safetensors_io::read_safetensors;
use crate::gguf::{GgmlType, Gguf, GgufHeader};
use flashtree_reference::model::dflash::DFlashHparams;
use memmap2::Mmap;
use serde_json::Value as Json;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Hyperparameters of a DFlash draft.
#[derive(Clone, Debug, PartialEq)]
pub struct DraftConfig {
    /// `H`; equals the target's hidden size.
    pub hidden_size: usize,
    pub num_layers: usize,
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    pub intermediate_size: usize,
    /// The (padded) vocabulary of the target, when the source states it.
    pub vocab_size: Option<usize>,
    pub rms_norm_eps: f32,
    pub rope_theta: f32,
    pub max_position_embeddings: Option<usize>,
    /// Block size `B` (16: one anchor + 15 drafted tokens).
    pub block_size: usize,
    pub mask_token_id: u32,
    /// 0-based target layers whose outputs are concatenated into the `fc` input.
    pub target_layer_ids: Vec<usize>,
    /// Per draft layer: true = sliding-window attention.
    pub sliding_layers: Vec<bool>,
    pub sliding_window: Option<usize>,
    /// Whether the source enables sliding-window attention (`use_sliding_window` /
    /// `dflash_config.use_swa`; in a GGUF: a window is stored). llama.cpp's converter writes the
    /// window keys only then (llamacpp-dflash.md §1.2).
    pub use_sliding_window: bool,
    /// Explicit causal flag (`is_causal` / `dflash.attention.causal`), if given.
    pub causal: Option<bool>,
}

/// Where the weights live.
enum Source {
    Safetensors { map: Mmap, index: SafetensorsIndex },
    Gguf(Gguf),
}

/// A draft's config and (memory-mapped) weights.
pub struct DraftModel {
    pub config: DraftConfig,
    pub path: PathBuf,
    source: Source,
}

/// One weight tensor: `ne` shape, type and bytes.
#[derive(Clone, Copy, Debug)]
pub struct DraftTensor<'a> {
    pub ne: &'a [u64],
    pub ty: GgmlType,
    pub data: &'a [u8],
}

/// z-lab tensor name → (llama.cpp `dflash` GGUF name, layer) (llamacpp-dflash.md §1.3);
/// `None` for a name that is not a DFlash tensor.
pub fn zlab_gguf_name(zlab: &str) -> Option<(String, Option<usize>)> {
    match zlab {
        "fc.weight" => return Some(("fc.weight".into(), None)),
        "hidden_norm.weight" => return Some(("enc.output_norm.weight".into(), None)),
        "norm.weight" => return Some(("output_norm.weight".into(), None)),
        _ => {}
    }
    let (idx, sub) = zlab.strip_prefix("layers.").and_then(|r| r.split_once('.'))?;
    let il: usize = idx.parse().ok()?;
    let g = match sub {
        "input_layernorm.weight" => "attn_norm.weight",
        "post_attention_layernorm.weight" => "ffn_norm.weight",
        "self_attn.q_proj.weight" => "attn_q.weight",
        "self_attn.k_proj.weight" => "attn_k.weight",
        "self_attn.v_proj.weight" => "attn_v.weight",
        "self_attn.o_proj.weight" => "attn_output.weight",
        "self_attn.q_norm.weight" => "attn_q_norm.weight",
        "self_attn.k_norm.weight" => "attn_k_norm.weight",
        "mlp.gate_proj.weight" => "ffn_gate.weight",
        "mlp.up_proj.weight" => "ffn_up.weight",
        "mlp.down_proj.weight" => "ffn_down.weight",
        _ => return None,
    };
    Some((format!("blk.{il}.{g}"), Some(il)))
}

/// The llama.cpp `dflash` GGUF name of a z-lab tensor name (the name itself if it is not one).
pub fn zlab_to_gguf_name(name: &str) -> String {
    zlab_gguf_name(name).map_or_else(|| name.to_string(), |(n, _)| n)
}

/// Default target layer ids when a config omits them (z-lab `build_target_layer_ids`): one
/// layer → `T/2`; else `k = n_layers` points `round(1 + i·(T−4)/(k−1))` (round half to even).
pub fn default_target_layer_ids(num_target_layers: usize, num_draft_layers: usize) -> Vec<usize> {
    if num_draft_layers <= 1 {
        return vec![num_target_layers / 2];
    }
    let (t, k) = (num_target_layers as f64, num_draft_layers as f64);
    (0..num_draft_layers)
        .map(|i| {
            let x = 1.0 + i as f64 * (t - 4.0) / (k - 1.0);
            x.round_ties_even().max(0.0) as usize
        })
        .collect()
}

/// Largest block size accepted: z-lab drafts use 16; every draft pass costs `B` rows of each
/// layer and `B − 1` vocabulary-sized logit rows, so a corrupt `block_size: 100000` must be refused
/// up front rather than run.
pub const MAX_BLOCK_SIZE: usize = 256;

impl DraftConfig {
    /// Parses a z-lab `config.json` (text; `file` for messages).
    ///
    /// Keys (dflash-draft.md §2, llamacpp-dflash.md §1.2): `hidden_size`, `num_hidden_layers`,
    /// `num_attention_heads`, `num_key_value_heads`, `intermediate_size` (required), `head_dim`
    /// (default `hidden_size / num_attention_heads`), `rope_theta` or `rope_parameters.rope_theta`
    /// (required, never defaulted), `dflash_config.mask_token_id` (or top-level),
    /// `dflash_config.target_layer_ids` (or top-level, or derived from `num_target_layers`),
    /// `dflash_config.block_size` / `block_size` (default 16), `layer_types`, `sliding_window` /
    /// `dflash_config.swa_window_size`, `use_sliding_window` / `dflash_config.use_swa`,
    /// `is_causal` / `dflash_config.causal`, `vocab_size`, `max_position_embeddings`, `rms_norm_eps`.
    pub fn from_zlab_json(text: &str, file: &Path) -> Result<DraftConfig, ModelError> {
        let j: Json = serde_json::from_str(text)
            .map_err(|e| ModelError::config(file, "config.json", format!("invalid JSON: {e}")))?;
        if !j.is_object() {
            return Err(ModelError::config(file, "config.json", "expected a JSON object"));
        }
        let c = JsonConfig::new(&j, file);
        let hidden_size = c.req(&["hidden_size"], MAX_DIM)?;
        let num_layers = c.req(&["num_hidden_layers"], MAX_LAYERS)?;
        let num_heads = c.req(&["num_attention_heads"], MAX_DIM)?;
        let num_kv_heads = c.req(&["num_key_value_heads"], MAX_DIM)?;
        let head_dim = match c.uint(&["head_dim"], MAX_DIM)? {
            Some(d) => d,
            None => match hidden_size / num_heads {
                0 => {
                    return Err(c.err(
                        "head_dim",
                        format!("missing, and hidden_size {hidden_size} / num_attention_heads {num_heads} is 0"),
                    ))
                }
                d => d,
            },
        };
        let rope_theta = match c.positive(&["rope_theta"])? {
            Some(t) => t,
            None => c.positive(&["rope_parameters", "rope_theta"])?.ok_or_else(|| {
                c.err("rope_theta", "missing (also no rope_parameters.rope_theta); it must come from the config")
            })?,
        } as f32;
        let mask_token_id = match c.uint_in(&["dflash_config", "mask_token_id"], 0, u32::MAX as u64)? {
            Some(m) => m,
            None => c
                .uint_in(&["mask_token_id"], 0, u32::MAX as u64)?
                .ok_or_else(|| c.err("dflash_config.mask_token_id", "missing"))?,
        } as u32;
        let ids_key = "dflash_config.target_layer_ids";
        let target_layer_ids = match c.get_any(&[&["dflash_config", "target_layer_ids"], &["target_layer_ids"]]) {
            Some((Json::Array(a), key)) => {
                if a.is_empty() || a.len() as u64 > MAX_LAYERS {
                    return Err(c.err(&key, format!("{} entries, expected 1..={MAX_LAYERS}", a.len())));
                }
                a.iter()
                    .map(|v| v.as_u64().filter(|&n| n < MAX_LAYERS).map(|n| n as usize))
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| c.err(&key, format!("expected layer indices below {MAX_LAYERS}")))?
            }
            Some((other, key)) => {
                return Err(c.err(&key, format!("expected an array of layer indices, found {}", short(other))))
            }
            None => match c.uint(&["num_target_layers"], MAX_LAYERS)? {
                Some(t) => default_target_layer_ids(t, num_layers),
                None => return Err(c.err(ids_key, "missing, and num_target_layers is absent too")),
            },
        };
        let block_size = match c.uint(&["dflash_config", "block_size"], MAX_BLOCK_SIZE as u64)? {
            Some(b) => b,
            None => c.uint(&["block_size"], MAX_BLOCK_SIZE as u64)?.unwrap_or(16),
        };
        let use_swa = c.bool(&["dflash_config", "use_swa"])?.unwrap_or(false);
        let use_sliding_window = c.bool(&["use_sliding_window"])?.unwrap_or(false) || use_swa;
        let sliding_layers = match c.array(&["layer_types"], MAX_LAYERS as usize)? {
            _ if use_swa => vec![true; num_layers],
            Some(a) if a.len() == num_layers => a
                .iter()
                .map(|v| match v.as_str() {
                    Some("sliding_attention") => Ok(true),
                    Some("full_attention") => Ok(false),
                    _ => Err(c.err(
                        "layer_types",
                        format!("{} is not \"full_attention\" or \"sliding_attention\"", short(v)),
                    )),
                })
                .collect::<Result<Vec<_>, _>>()?,
            Some(a) => {
                return Err(c.err(
                    "layer_types",
                    format!("{} entries, expected one per layer (num_hidden_layers = {num_layers})", a.len()),
                ))
            }
            None => vec![false; num_layers],
        };
        let sliding_window = match c.uint(&["dflash_config", "swa_window_size"], u32::MAX as u64)? {
            Some(w) => Some(w),
            None => c.uint(&["sliding_window"], u32::MAX as u64)?,
        };
        let causal = match c.bool(&["is_causal"])? {
            Some(b) => Some(b),
            None => c.bool(&["dflash_config", "causal"])?,
        };
        let config = DraftConfig {
            hidden_size,
            num_layers,
            num_heads,
            num_kv_heads,
            head_dim,
            intermediate_size: c.req(&["intermediate_size"], MAX_DIM)?,
            vocab_size: c.uint(&["vocab_size"], MAX_DIM)?,
            rms_norm_eps: c.positive(&["rms_norm_eps"])?.unwrap_or(1e-6) as f32,
            rope_theta,
            max_position_embeddings: c.uint(&["max_position_embeddings"], u32::MAX as u64)?,
            block_size,
            mask_token_id,
            target_layer_ids,
            // Only sliding layers use the window; keep it only then (or when llama.cpp would write it).
            sliding_window: sliding_window.filter(|_| use_sliding_window || sliding_layers.iter().any(|&s| s)),
            sliding_layers,
            use_sliding_window,
            causal,
        };
        config.check(file, false)?;
        Ok(config)
    }

    /// Reads the config of a llama.cpp `dflash` GGUF (keys `dflash.*`, llamacpp-dflash.md §1.2).
    pub fn from_dflash_header(h: &GgufHeader) -> Result<DraftConfig, ModelError> {
        let arch = h.get_str("general.architecture")?;
        if arch != "dflash" {
            return Err(ModelError::WrongArchitecture {
                file: h.file.clone(),
                found: arch.to_string(),
                expected: "dflash".into(),
            });
        }
        let dim = |key: &str, max: u64| -> Result<usize, ModelError> {
            let v = h.get_u64(key)?;
            if v == 0 || v > max {
                return Err(ModelError::config(&h.file, key, format!("{v} is outside 1..={max}")));
            }
            Ok(v as usize)
        };
        let hidden_size = dim("dflash.embedding_length", MAX_DIM)?;
        let num_layers = dim("dflash.block_count", MAX_LAYERS)?;
        let num_heads = dim("dflash.attention.head_count", MAX_DIM)?;
        let head_dim = match h.get("dflash.attention.key_length") {
            Some(_) => dim("dflash.attention.key_length", MAX_DIM)?,
            None => match hidden_size / num_heads {
                0 => {
                    return Err(ModelError::config(
                        &h.file,
                        "dflash.attention.key_length",
                        format!("missing, and embedding_length {hidden_size} / head_count {num_heads} is 0"),
                    ))
                }
                d => d,
            },
        };
        if let Some(v) = h.opt_u32("dflash.attention.value_length")? {
            if v as usize != head_dim {
                return Err(ModelError::config(
                    &h.file,
                    "dflash.attention.value_length",
                    format!("{v} differs from the key length {head_dim}; DFlash drafts have one head_dim"),
                ));
            }
        }
        let layers_key = "dflash.target_layers";
        let target_layers = h.get_array(layers_key)?;
        if target_layers.is_empty() || target_layers.len() as u64 > MAX_LAYERS {
            return Err(ModelError::config(
                &h.file,
                layers_key,
                format!("{} entries, expected 1..={MAX_LAYERS}", target_layers.len()),
            ));
        }
        let target_layer_ids = target_layers
            .iter()
            .map(|v| {
                v.as_integer()
                    .and_then(|l| l.checked_sub(1))
                    .and_then(|v| u64::try_from(v).ok())
                    .filter(|&v| v < MAX_LAYERS)
                    .map(|v| v as usize)
            })
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| {
                ModelError::config(&h.file, layers_key, format!("expected HF layer ids + 1, each in 1..={MAX_LAYERS}"))
            })?;
        let sliding_window = h.opt_u32("dflash.attention.sliding_window")?.filter(|&w| w > 0).map(|w| w as usize);
        let sliding_layers = match (sliding_window, h.get("dflash.attention.sliding_window_pattern")) {
            (Some(_), Some(_)) => {
                let key = "dflash.attention.sliding_window_pattern";
                let a = h.get_array(key)?;
                let v: Option<Vec<bool>> = a.iter().map(|x| x.as_bool()).collect();
                match v {
                    Some(v) if v.len() == num_layers => v,
                    _ => {
                        return Err(ModelError::config(
                            &h.file,
                            key,
                            format!("expected {num_layers} bools (one per layer), found {} values", a.len()),
                        ))
                    }
                }
            }
            (Some(_), None) => {
                return Err(ModelError::config(
                    &h.file,
                    "dflash.attention.sliding_window_pattern",
                    "required when dflash.attention.sliding_window > 0",
                ))
            }
            _ => vec![false; num_layers],
        };
        let vocab_size = match h.get("tokenizer.ggml.tokens") {
            None => None,
            Some(v) => match v.as_array().map(|a| a.len() as u64).filter(|&n| n > 0 && n <= MAX_DIM) {
                Some(n) => Some(n as usize),
                None => {
                    return Err(ModelError::config(
                        &h.file,
                        "tokenizer.ggml.tokens",
                        format!("expected an array of 1..={MAX_DIM} tokens"),
                    ))
                }
            },
        };
        let config = DraftConfig {
            hidden_size,
            num_layers,
            num_heads,
            num_kv_heads: dim("dflash.attention.head_count_kv", MAX_DIM)?,
            head_dim,
            intermediate_size: dim("dflash.feed_forward_length", MAX_DIM)?,
            vocab_size,
            rms_norm_eps: h.get_f32("dflash.attention.layer_norm_rms_epsilon")?,
            rope_theta: h.get_f32("dflash.rope.freq_base")?,
            max_position_embeddings: h.opt_u32("dflash.context_length")?.filter(|&v| v > 0).map(|v| v as usize),
            block_size: match h.opt_u32("dflash.block_size")? {
                None => 16,
                Some(b) => b as usize,
            },
            mask_token_id: h.get_u32("tokenizer.ggml.mask_token_id")?,
            target_layer_ids,
            use_sliding_window: sliding_window.is_some(),
            sliding_layers,
            sliding_window,
            causal: h.opt_bool("dflash.attention.causal")?,
        };
        config.check(&h.file, true)?;
        Ok(config)
    }

    /// The checks every source shares, on numbers already inside their per-key bounds: heads
    /// divide, RoPE has an even head dim, the block size and the feature layer count are sane, the
    /// attention projections stay inside [`MAX_DIM`], sliding layers have a window and the mask
    /// id is inside the stated vocabulary. `file` names the source in errors; keys are named as
    /// in a `dflash` GGUF (`dflash.*`) when `gguf`, else as in `config.json`.
    pub fn check(&self, file: &Path, gguf: bool) -> Result<(), ModelError> {
        let bad = |json_key: &str, gguf_key: &str, msg: String| {
            Err(ModelError::config(file, if gguf { gguf_key } else { json_key }, msg))
        };
        if !self.num_heads.is_multiple_of(self.num_kv_heads) {
            return bad(
                "num_key_value_heads",
                "dflash.attention.head_count_kv",
                format!("{} does not divide num_attention_heads {}", self.num_kv_heads, self.num_heads),
            );
        }
        if !self.head_dim.is_multiple_of(2) {
            return bad(
                "head_dim",
                "dflash.attention.key_length",
                format!("{} is odd; RoPE rotates pairs over the full head", self.head_dim),
            );
        }
        for (key, gkey, heads) in [
            ("num_attention_heads", "dflash.attention.head_count", self.num_heads),
            ("num_key_value_heads", "dflash.attention.head_count_kv", self.num_kv_heads),
        ] {
            if heads.checked_mul(self.head_dim).is_none_or(|w| w as u64 > MAX_DIM) {
                return bad(key, gkey, format!("{heads} heads × head_dim {} exceeds {MAX_DIM}", self.head_dim));
            }
        }
        if !(2..=MAX_BLOCK_SIZE).contains(&self.block_size) {
            return bad(
                "block_size",
                "dflash.block_size",
                format!(
                    "{} is outside 2..={MAX_BLOCK_SIZE} (one anchor plus at least one drafted slot)",
                    self.block_size
                ),
            );
        }
        if self.target_layer_ids.is_empty() || self.target_layer_ids.len() as u64 > MAX_LAYERS {
            return bad(
                "target_layer_ids",
                "dflash.target_layers",
                format!("{} entries, expected 1..={MAX_LAYERS}", self.target_layer_ids.len()),
            );
        }
        if let Some(&l) = self.target_layer_ids.iter().find(|&&l| l as u64 >= MAX_LAYERS) {
            return bad("target_layer_ids", "dflash.target_layers", format!("layer {l} is not below {MAX_LAYERS}"));
        }
        if self.sliding_layers.len() != self.num_layers {
            return bad(
                "layer_types",
                "dflash.attention.sliding_window_pattern",
                format!("{} entries for {} layers", self.sliding_layers.len(), self.num_layers),
            );
        }
        if self.sliding_layers.iter().any(|&s| s) && self.sliding_window.is_none_or(|w| w == 0) {
            return bad(
                "sliding_window",
                "dflash.attention.sliding_window",
                "missing or 0, but some layers are sliding_attention".into(),
            );
        }
        if let Some(v) = self.vocab_size {
            if self.mask_token_id as usize >= v {
                return bad(
                    "mask_token_id",
                    "tokenizer.ggml.mask_token_id",
                    format!("{} is outside vocab_size {v}", self.mask_token_id),
                );
            }
        }
        for (key, gkey, v) in [
            ("rms_norm_eps", "dflash.attention.layer_norm_rms_epsilon", self.rms_norm_eps),
            ("rope_theta", "dflash.rope.freq_base", self.rope_theta),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return bad(key, gkey, format!("{v} is not a positive finite number"));
            }
        }
        Ok(())
    }

    /// The reference forward's hyperparameters.
    pub fn hparams(&self) -> DFlashHparams {
        DFlashHparams {
            n_embd: self.hidden_size,
            n_head: self.num_heads,
            n_head_kv: self.num_kv_heads,
            head_dim: self.head_dim,
            n_ff: self.intermediate_size,
            rope_theta: self.rope_theta as f64,
            rms_eps: self.rms_norm_eps,
            target_layer_ids: self.target_layer_ids.clone(),
            mask_token_id: self.mask_token_id,
            block_size: self.block_size,
            sliding: self.sliding_layers.clone(),
            sliding_window: self.sliding_window,
            causal: self.causal,
        }
    }
    /// Every weight tensor (z-lab names) with its `ne` shape and role.
    pub fn tensor_inventory(&self) -> Vec<ExpectedTensor> {
        let h = self.hidden_size as u64;
        let k = self.target_layer_ids.len() as u64;
        let q = (self.num_heads * self.head_dim) as u64;
        let kv = (self.num_kv_heads * self.head_dim) as u64;
        let d = self.head_dim as u64;
        let i = self.intermediate_size as u64;
        use TensorRole::{Matrix as M, Vector as V};
        let mut t = vec![
            ExpectedTensor::new("fc.weight", &[k * h, h], M, "[len(target_layer_ids)·hidden_size, hidden_size]"),
            ExpectedTensor::new("hidden_norm.weight", &[h], V, "[hidden_size]"),
            ExpectedTensor::new("norm.weight", &[h], V, "[hidden_size]"),
        ];
        for l in 0..self.num_layers {
            let n = |s: &str| format!("layers.{l}.{s}");
            t.push(ExpectedTensor::new(n("input_layernorm.weight"), &[h], V, "[hidden_size]"));
            t.push(ExpectedTensor::new(n("post_attention_layernorm.weight"), &[h], V, "[hidden_size]"));
            t.push(ExpectedTensor::new(
                n("self_attn.q_proj.weight"),
                &[h, q],
                M,
                "[hidden_size, num_attention_heads·head_dim]",
            ));
            t.push(ExpectedTensor::new(
                n("self_attn.k_proj.weight"),
                &[h, kv],
                M,
                "[hidden_size, num_key_value_heads·head_dim]",
            ));
            t.push(ExpectedTensor::new(
                n("self_attn.v_proj.weight"),
                &[h, kv],
                M,
                "[hidden_size, num_key_value_heads·head_dim]",
            ));
            t.push(ExpectedTensor::new(
                n("self_attn.o_proj.weight"),
                &[q, h],
                M,
                "[num_attention_heads·head_dim, hidden_size]",
            ));
            t.push(ExpectedTensor::new(n("self_attn.q_norm.weight"), &[d], V, "[head_dim]"));
            t.push(ExpectedTensor::new(n("self_attn.k_norm.weight"), &[d], V, "[head_dim]"));
            t.push(ExpectedTensor::new(n("mlp.gate_proj.weight"), &[h, i], M, "[hidden_size, intermediate_size]"));
            t.push(ExpectedTensor::new(n("mlp.up_proj.weight"), &[h, i], M, "[hidden_size, intermediate_size]"));
            t.push(ExpectedTensor::new(n("mlp.down_proj.weight"), &[i, h], M, "[intermediate_size, hidden_size]"));
        }
        t
    }

    /// Checks the draft against its target: same hidden size, feature layers inside the trunk,
    /// mask id inside the vocabulary.
    pub fn check_target(&self, target: &Qwen35Config, file: &Path) -> Result<(), ModelError> {
        if self.hidden_size != target.embedding_length {
            return Err(ModelError::config(
                file,
                "hidden_size",
                format!("{} differs from the target's embedding_length {}", self.hidden_size, target.embedding_length),
            ));
        }
        if let Some(&bad) = self.target_layer_ids.iter().find(|&&l| l >= target.n_layer()) {
            return Err(ModelError::config(
                file,
                "target_layer_ids",
                format!("layer {bad} is not below the target's {} trunk layers", target.n_layer()),
            ));
        }
        if self.mask_token_id as usize >= target.vocab_size {
            return Err(ModelError::config(
                file,
                "mask_token_id",
                format!("{} is outside the target vocabulary of {}", self.mask_token_id, target.vocab_size),
            ));
        }
        Ok(())
    }
}

/// Tensor name → (`ne` shape, type, byte range inside the file).
pub type SafetensorsIndex = HashMap<String, (Vec<u64>, GgmlType, std::ops::Range<usize>)>;

/// Parses the bytes of a z-lab `model.safetensors` (`file` for messages) and checks them against
/// `config`'s tensor inventory: every tensor present with its shape and an allowed type.
pub fn index_zlab_safetensors(bytes: &[u8], file: &Path, config: &DraftConfig) -> Result<SafetensorsIndex, ModelError> {
    let mut index = HashMap::new();
    let table = read_safetensors(bytes, file)?;
    let base = bytes.as_ptr() as usize;
    for e in table.tensors() {
        let data = table.data(&e.name)?;
        let start = data.as_ptr() as usize - base;
        index.insert(e.name.clone(), (e.ne(), e.ty, start..start + data.len()));
    }
    validate(file, &config.tensor_inventory(), |n| index.get(n).map(|(ne, ty, _)| (ne.as_slice(), *ty)))?;
    Ok(index)
}

fn io_err(file: &Path, e: std::io::Error) -> ModelError {
    ModelError::Io { file: file.to_path_buf(), msg: e.to_string() }
}

impl DraftModel {
    /// Loads a draft from a z-lab folder (`config.json` + `model.safetensors`) or a `dflash`
    /// GGUF file, and validates its tensors.
    pub fn open(path: &Path) -> Result<DraftModel, ModelError> {
        if path.is_dir() {
            Self::from_zlab_dir(path)
        } else {
            Self::from_dflash_gguf(path)
        }
    }

    pub fn from_zlab_dir(dir: &Path) -> Result<DraftModel, ModelError> {
        let cfg_path = dir.join("config.json");
        let text = read_config_text(&cfg_path)?;
        let config = DraftConfig::from_zlab_json(&text, &cfg_path)?;
        let st_path = dir.join("model.safetensors");
        let file = std::fs::File::open(&st_path).map_err(|e| io_err(&st_path, e))?;
        // SAFETY: read-only private map; see `GgufFile::open` for the same caveat.
        let map = unsafe { Mmap::map(&file) }.map_err(|e| io_err(&st_path, e))?;
        let index = index_zlab_safetensors(&map, &st_path, &config)?;
        Ok(DraftModel { config, path: dir.to_path_buf(), source: Source::Safetensors { map, index } })
    }

    pub fn from_dflash_gguf(path: &Path) -> Result<DraftModel, ModelError> {
        let g = Gguf::open(path)?;
        let config = DraftConfig::from_dflash_header(&g)?;
        let inv = config.tensor_inventory();
        validate(g.path(), &inv, |n| g.tensor(&zlab_to_gguf_name(n)).map(|t| (t.dims.as_slice(), t.ty))).map_err(
            |e| match e {
                // Name the GGUF tensor, not the z-lab one.
                ModelError::MissingTensor { file, name, expected } => {
                    ModelError::MissingTensor { file, name: zlab_to_gguf_name(&name), expected }
                }
                ModelError::WrongShape { file, name, found, expected, why } => {
                    ModelError::WrongShape { file, name: zlab_to_gguf_name(&name), found, expected, why }
                }
                ModelError::WrongType { file, name, found, expected } => {
                    ModelError::WrongType { file, name: zlab_to_gguf_name(&name), found, expected }
                }
                other => other,
            },
        )?;
        Ok(DraftModel { config, path: path.to_path_buf(), source: Source::Gguf(g) })
    }

    /// Weight `name` (z-lab naming).
    pub fn tensor(&self, name: &str) -> Option<DraftTensor<'_>> {
        match &self.source {
            Source::Safetensors { map, index } => {
                index.get(name).map(|(ne, ty, r)| DraftTensor { ne, ty: *ty, data: &map[r.clone()] })
            }
            Source::Gguf(g) => {
                let gname = zlab_to_gguf_name(name);
                let t = g.tensor(&gname)?;
                let data = g.tensor_data(&gname).ok()?;
                Some(DraftTensor { ne: &t.dims, ty: t.ty, data })
            }
        }
    }

    /// Total bytes of the inventory's weights.
    pub fn weight_bytes(&self) -> u64 {
        self.config.tensor_inventory().iter().filter_map(|e| self.tensor(&e.name)).map(|t| t.data.len() as u64).sum()
    }
}
