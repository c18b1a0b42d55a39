//! The DFlash draft (dflash-draft.md §2–3): `DraftConfig` and weights from a z-lab folder
//! (`config.json` + `model.safetensors`) or from a llama.cpp `dflash` GGUF
//! (llamacpp-dflash.md §1). Tensors are addressed by their z-lab names
//! (`layers.0.self_attn.q_proj.weight`) whatever the source; shapes are in GGUF `ne` order.

use super::error::ModelError;
use super::inventory::{validate, ExpectedTensor, TensorRole};
use super::qwen35::{Qwen35Config, MAX_DIM, MAX_LAYERS};
use super::safetensors_io::read_safetensors;
use crate::gguf::{GgmlType, Gguf, GgufHeader};
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
    /// Explicit causal flag (`is_causal` / `dflash.attention.causal`), if given.
    pub causal: Option<bool>,
}

/// Where the weights live.
enum Source {
    Safetensors { map: Mmap, index: HashMap<String, (Vec<u64>, GgmlType, std::ops::Range<usize>)> },
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

fn jget<'a>(j: &'a Json, path: &[&str]) -> Option<&'a Json> {
    path.iter().try_fold(j, |v, k| v.get(k))
}

impl DraftConfig {
    /// Parses a z-lab `config.json` (text; `file` for messages).
    pub fn from_zlab_json(text: &str, file: &Path) -> Result<DraftConfig, ModelError> {
        let j: Json = serde_json::from_str(text)
            .map_err(|e| ModelError::config(file, "config.json", format!("invalid JSON: {e}")))?;
        let uint = |path: &[&str], max: u64| -> Result<Option<usize>, ModelError> {
            match jget(&j, path) {
                None | Some(Json::Null) => Ok(None),
                Some(v) => match v.as_u64() {
                    Some(n) if n >= 1 && n <= max => Ok(Some(n as usize)),
                    _ => Err(ModelError::config(file, &path.join("."), format!("{v} is not an integer in 1..={max}"))),
                },
            }
        };
        let req = |path: &[&str], max: u64| -> Result<usize, ModelError> {
            uint(path, max)?.ok_or_else(|| ModelError::config(file, &path.join("."), "missing"))
        };
        let float = |path: &[&str]| -> Result<Option<f32>, ModelError> {
            match jget(&j, path) {
                None | Some(Json::Null) => Ok(None),
                Some(v) => {
                    v.as_f64().filter(|f| f.is_finite() && *f > 0.0).map(|f| Some(f as f32)).ok_or_else(|| {
                        ModelError::config(file, &path.join("."), format!("{v} is not a positive number"))
                    })
                }
            }
        };
        let hidden_size = req(&["hidden_size"], MAX_DIM)?;
        let num_layers = req(&["num_hidden_layers"], MAX_LAYERS)?;
        let num_heads = req(&["num_attention_heads"], MAX_DIM)?;
        let num_kv_heads = req(&["num_key_value_heads"], MAX_DIM)?;
        let head_dim = match uint(&["head_dim"], MAX_DIM)? {
            Some(d) => d,
            None => hidden_size / num_heads,
        };
        let rope_theta = match float(&["rope_theta"])? {
            Some(t) => t,
            None => float(&["rope_parameters", "rope_theta"])?.ok_or_else(|| {
                ModelError::config(
                    file,
                    "rope_theta",
                    "missing (also no rope_parameters.rope_theta); it must come from the config",
                )
            })?,
        };
        let mask_token_id = req(&["dflash_config", "mask_token_id"], u32::MAX as u64)? as u32;
        let num_target_layers = uint(&["num_target_layers"], MAX_LAYERS)?;
        let target_layer_ids =
            match jget(&j, &["dflash_config", "target_layer_ids"]).or_else(|| jget(&j, &["target_layer_ids"])) {
                Some(Json::Array(a)) => a
                    .iter()
                    .map(|v| v.as_u64().filter(|&n| n < MAX_LAYERS).map(|n| n as usize))
                    .collect::<Option<Vec<_>>>()
                    .filter(|v| !v.is_empty())
                    .ok_or_else(|| {
                        ModelError::config(
                            file,
                            "dflash_config.target_layer_ids",
                            "expected a non-empty array of layer indices",
                        )
                    })?,
                Some(other) => {
                    return Err(ModelError::config(
                        file,
                        "dflash_config.target_layer_ids",
                        format!("expected an array, found {other}"),
                    ))
                }
                None => match num_target_layers {
                    Some(t) => default_target_layer_ids(t, num_layers),
                    None => {
                        return Err(ModelError::config(
                            file,
                            "dflash_config.target_layer_ids",
                            "missing, and num_target_layers is absent too",
                        ))
                    }
                },
            };
        let block_size = match uint(&["dflash_config", "block_size"], 1024)? {
            Some(b) => b,
            None => uint(&["block_size"], 1024)?.unwrap_or(16),
        };
        let sliding_layers = match jget(&j, &["layer_types"]) {
            Some(Json::Array(a)) if a.len() == num_layers => a
                .iter()
                .map(|v| match v.as_str() {
                    Some("sliding_attention") => Ok(true),
                    Some("full_attention") => Ok(false),
                    _ => Err(ModelError::config(
                        file,
                        "layer_types",
                        format!("{v} is not \"full_attention\" or \"sliding_attention\""),
                    )),
                })
                .collect::<Result<Vec<_>, _>>()?,
            Some(other) => {
                return Err(ModelError::config(
                    file,
                    "layer_types",
                    format!("expected {num_layers} layer types, found {other}"),
                ))
            }
            None => vec![false; num_layers],
        };
        let causal = match jget(&j, &["is_causal"]).or_else(|| jget(&j, &["dflash_config", "causal"])) {
            None | Some(Json::Null) => None,
            Some(Json::Bool(b)) => Some(*b),
            Some(other) => {
                return Err(ModelError::config(file, "is_causal", format!("expected a bool, found {other}")))
            }
        };
        Ok(DraftConfig {
            hidden_size,
            num_layers,
            num_heads,
            num_kv_heads,
            head_dim,
            intermediate_size: req(&["intermediate_size"], MAX_DIM)?,
            vocab_size: uint(&["vocab_size"], MAX_DIM)?,
            rms_norm_eps: float(&["rms_norm_eps"])?.unwrap_or(1e-6),
            rope_theta,
            max_position_embeddings: uint(&["max_position_embeddings"], u32::MAX as u64)?,
            block_size,
            mask_token_id,
            target_layer_ids,
            sliding_window: if sliding_layers.iter().any(|&s| s) {
                uint(&["sliding_window"], u32::MAX as u64)?
            } else {
                None
            },
            sliding_layers,
            causal,
        })
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
            None => hidden_size / num_heads,
        };
        let layers_key = "dflash.target_layers";
        let target_layers = h.get_int_array(layers_key)?;
        let target_layer_ids = target_layers
            .iter()
            .map(|&l| l.checked_sub(1).and_then(|v| usize::try_from(v).ok()).filter(|&v| (v as u64) < MAX_LAYERS))
            .collect::<Option<Vec<_>>>()
            .filter(|v| !v.is_empty())
            .ok_or_else(|| {
                ModelError::config(
                    &h.file,
                    layers_key,
                    format!("{target_layers:?}: expected non-empty HF layer ids + 1 (each ≥ 1)"),
                )
            })?;
        let sliding_window = h.opt_u32("dflash.attention.sliding_window")?.filter(|&w| w > 0).map(|w| w as usize);
        let sliding_layers = match (sliding_window, h.get("dflash.attention.sliding_window_pattern")) {
            (Some(_), Some(_)) => {
                let key = "dflash.attention.sliding_window_pattern";
                let a = h.get_array(key)?;
                let v: Option<Vec<bool>> = a.iter().map(|x| x.as_bool()).collect();
                match v {
                    Some(v) if v.len() == num_layers => v,
                    _ => return Err(ModelError::config(&h.file, key, format!("expected {num_layers} bools"))),
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
        let eps = h.get_f32("dflash.attention.layer_norm_rms_epsilon")?;
        let theta = h.get_f32("dflash.rope.freq_base")?;
        for (k, v) in [("dflash.attention.layer_norm_rms_epsilon", eps), ("dflash.rope.freq_base", theta)] {
            if !(v.is_finite() && v > 0.0) {
                return Err(ModelError::config(&h.file, k, format!("{v} is not a positive finite number")));
            }
        }
        Ok(DraftConfig {
            hidden_size,
            num_layers,
            num_heads,
            num_kv_heads: dim("dflash.attention.head_count_kv", MAX_DIM)?,
            head_dim,
            intermediate_size: dim("dflash.feed_forward_length", MAX_DIM)?,
            vocab_size: h.get("tokenizer.ggml.tokens").and_then(|v| v.as_array()).map(|a| a.len()),
            rms_norm_eps: eps,
            rope_theta: theta,
            max_position_embeddings: h.opt_u32("dflash.context_length")?.map(|v| v as usize),
            block_size: match h.opt_u32("dflash.block_size")? {
                None => 16,
                Some(b) if (1..=1024).contains(&b) => b as usize,
                Some(b) => {
                    return Err(ModelError::config(&h.file, "dflash.block_size", format!("{b} is outside 1..=1024")))
                }
            },
            mask_token_id: h.get_u32("tokenizer.ggml.mask_token_id")?,
            target_layer_ids,
            sliding_layers,
            sliding_window,
            causal: h.opt_bool("dflash.attention.causal")?,
        })
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
        let text = std::fs::read_to_string(&cfg_path).map_err(|e| io_err(&cfg_path, e))?;
        let config = DraftConfig::from_zlab_json(&text, &cfg_path)?;
        let st_path = dir.join("model.safetensors");
        let file = std::fs::File::open(&st_path).map_err(|e| io_err(&st_path, e))?;
        // SAFETY: read-only private map; see `GgufFile::open` for the same caveat.
        let map = unsafe { Mmap::map(&file) }.map_err(|e| io_err(&st_path, e))?;
        let mut index = HashMap::new();
        {
            let table = read_safetensors(&map, &st_path)?;
            let base = map.as_ptr() as usize;
            for e in table.tensors() {
                let data = table.data(&e.name)?;
                let start = data.as_ptr() as usize - base;
                index.insert(e.name.clone(), (e.ne(), e.ty, start..start + data.len()));
            }
        }
        validate(&st_path, &config.tensor_inventory(), |n| index.get(n).map(|(ne, ty, _)| (ne.as_slice(), *ty)))?;
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
