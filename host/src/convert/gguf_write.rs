//! Writing converted checkpoints as GGUF: HF Qwen3.5 → `qwen35`, z-lab DFlash → llama.cpp `dflash`.
//! Tensors are streamed: each one is read, transformed and quantized while it is written.

use super::hf_config::HfQwen35Config;
use super::out_type::{tensor_type, OutType};
use super::qwen35::{apply_transform, plan_tensor, strip_prefix, TensorPlan};
use super::safetensors::SafeTensors;
use super::tokenizer;
use super::ConvertError;
use crate::gguf::{GgufWriter, Value};
use crate::model::draft::zlab_gguf_name;
use crate::model::DraftConfig;
use flashtree_quants::{quantize, GgmlType};
use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

/// One tensor to stream: where to read it, how to transform it, what to write.
struct Planned {
    file: usize,
    hf_name: String,
    plan: TensorPlan,
    ty: GgmlType,
}

/// ggml `ne` of a PyTorch-order shape (reversed).
fn ne(shape: &[usize]) -> Vec<u64> {
    shape.iter().rev().map(|&d| d as u64).collect()
}

fn gguf_err(e: crate::gguf::GgufError) -> ConvertError {
    ConvertError::Tensor { name: "<gguf>".into(), why: e.to_string() }
}

/// Streams `planned` tensors into `writer`'s table and writes the file.
fn write_planned(
    writer: &mut GgufWriter,
    files: &[SafeTensors],
    planned: &[Planned],
    out: &Path,
    transform: &dyn Fn(&Planned, &[f32]) -> Vec<f32>,
) -> Result<u64, ConvertError> {
    for p in planned {
        writer.add_tensor(p.plan.gguf_name.clone(), &ne(&p.plan.shape), p.ty).map_err(gguf_err)?;
    }
    let mut failure: Option<ConvertError> = None;
    let res = writer.write_file(out, |i, _spec, sink: &mut dyn Write| {
        let p = &planned[i];
        let t = match files[p.file].read_f32(&p.hf_name) {
            Ok(t) => t,
            Err(e) => {
                let msg = e.to_string();
                failure = Some(e);
                return Err(std::io::Error::other(msg));
            }
        };
        let data = transform(p, &t.data);
        let bytes =
            quantize(p.ty, &data).map_err(|e| std::io::Error::other(format!("tensor {}: {e}", p.plan.gguf_name)))?;
        sink.write_all(&bytes)
    });
    match (res, failure) {
        (_, Some(e)) => Err(e),
        (Err(e), None) => Err(gguf_err(e)),
        (Ok(n), None) => Ok(n),
    }
}

/// Converts an HF Qwen3.5 text checkpoint folder to a `qwen35` GGUF at `out`.
pub fn convert_qwen35(
    dir: &Path,
    cfg: &HfQwen35Config,
    files: &[SafeTensors],
    out_type: OutType,
    out: &Path,
) -> Result<u64, ConvertError> {
    let hp = &cfg.hparams;
    let mut planned = Vec::new();
    for (fi, f) in files.iter().enumerate() {
        for (name, info) in f.tensors() {
            let Some(stripped) = strip_prefix(name) else {
                continue;
            };
            if cfg.tie_word_embeddings && stripped == "lm_head.weight" {
                continue;
            }
            if let Some(plan) = plan_tensor(hp, stripped, &info.shape)? {
                let row = plan.shape.last().copied().unwrap_or(1);
                let ty = tensor_type(out_type, &plan.gguf_name, plan.shape.len(), row, plan.layer, hp.n_layer());
                planned.push(Planned { file: fi, hf_name: name.clone(), plan, ty });
            }
        }
    }
    // llama.cpp order: global tensors first, then by layer (stable within a layer).
    planned.sort_by_key(|p| (p.plan.layer.map_or(0, |l| l + 1), p.plan.gguf_name.clone()));
    let mut w = GgufWriter::new();
    let a = "qwen35";
    w.set("general.architecture", Value::String(a.into()));
    w.set("general.name", Value::String(dir.file_name().map_or("qwen35".into(), |n| n.to_string_lossy().into_owned())));
    w.set("general.file_type", Value::U32(out_type.file_type()));
    w.set("general.quantization_version", Value::U32(2));
    let u = |v: usize| Value::U32(v as u32);
    w.set(format!("{a}.block_count"), u(hp.n_layer()));
    w.set(format!("{a}.context_length"), u(cfg.context_length));
    w.set(format!("{a}.embedding_length"), u(hp.n_embd));
    w.set(format!("{a}.feed_forward_length"), u(hp.n_ff));
    w.set(format!("{a}.attention.head_count"), u(hp.n_head));
    w.set(format!("{a}.attention.head_count_kv"), u(hp.n_head_kv));
    w.set(format!("{a}.attention.key_length"), u(hp.head_dim));
    w.set(format!("{a}.attention.value_length"), u(hp.head_dim));
    w.set(format!("{a}.attention.layer_norm_rms_epsilon"), Value::F32(hp.rms_eps));
    w.set(format!("{a}.rope.dimension_count"), u(hp.n_rot));
    w.set(format!("{a}.rope.freq_base"), Value::F32(hp.rope_theta as f32));
    w.set(format!("{a}.rope.dimension_sections"), Value::i32_array(cfg.mrope_sections));
    let interval = cfg
        .full_attention_interval
        .unwrap_or_else(|| hp.recurrent.iter().position(|&r| !r).map_or(hp.n_layer(), |i| i + 1));
    w.set(format!("{a}.full_attention_interval"), u(interval));
    w.set(
        format!("{a}.attention.recurrent_layers"),
        Value::Array {
            elem: crate::gguf::ValueType::Bool,
            items: hp.recurrent.iter().map(|&r| Value::Bool(r)).collect(),
        },
    );
    w.set(format!("{a}.ssm.conv_kernel"), u(hp.conv_kernel));
    w.set(format!("{a}.ssm.state_size"), u(hp.ssm_k_dim));
    w.set(format!("{a}.ssm.group_count"), u(hp.ssm_n_k_heads));
    w.set(format!("{a}.ssm.time_step_rank"), u(hp.ssm_n_v_heads));
    w.set(format!("{a}.ssm.inner_size"), u(hp.ssm_n_v_heads * hp.ssm_v_dim));
    tokenizer::add_tokenizer_metadata(&mut w, dir, hp.n_vocab)?;
    write_planned(&mut w, files, &planned, out, &|p, data| apply_transform(hp, &p.plan, data))
}

/// Where a draft GGUF's `tokenizer.*` metadata (the target's) and `rope.dimension_sections` come
/// from: the target's HF folder, or the target's GGUF (its `tokenizer.*` keys are copied).
fn draft_target_metadata(w: &mut GgufWriter, cfg: &DraftConfig, target: &Path) -> Result<(), ConvertError> {
    let a = "dflash";
    let sections = Value::i32_array([cfg.head_dim as i32 / 2, 0, 0, 0]);
    if target.is_dir() {
        // llama.cpp writes the sections only when the target config has an M-RoPE section.
        let t = super::hf_config::read(target)?;
        if t.mrope_sections.iter().any(|&s| s != 0) {
            w.set(format!("{a}.rope.dimension_sections"), sections);
        }
        let n_vocab = cfg.vocab_size.unwrap_or(t.hparams.n_vocab);
        tokenizer::add_tokenizer_metadata(w, target, n_vocab)?;
    } else {
        let g = crate::gguf::Gguf::open(target).map_err(gguf_err)?;
        if g.get("qwen35.rope.dimension_sections").is_some() {
            w.set(format!("{a}.rope.dimension_sections"), sections);
        }
        for (k, v) in &g.metadata {
            if k.starts_with("tokenizer.") {
                w.set(k.clone(), v.clone());
            }
        }
    }
    Ok(())
}

/// Converts a z-lab DFlash draft folder `dir` (its config already read by
/// [`DraftConfig::from_zlab_json`]) to a llama.cpp `dflash` GGUF (llamacpp-dflash.md §1): the same
/// keys and tensor names llama.cpp's converter writes, 1-D tensors as F32. Every tensor of the
/// config's inventory must be in `files` with its shape before anything is written. `target`, when
/// given (the target's HF folder or GGUF), supplies the tokenizer metadata.
pub fn convert_dflash(
    dir: &Path,
    cfg: &DraftConfig,
    files: &[SafeTensors],
    target: Option<&Path>,
    out_type: OutType,
    out: &Path,
) -> Result<u64, ConvertError> {
    // Bare z-lab names, or `model.`-prefixed re-exports.
    let mut found: HashMap<String, (usize, String, Vec<u64>, GgmlType)> = HashMap::new();
    for (fi, f) in files.iter().enumerate() {
        for (name, info) in f.tensors() {
            let bare = name.strip_prefix("model.").unwrap_or(name);
            if zlab_gguf_name(bare).is_none() {
                return Err(ConvertError::Tensor { name: name.clone(), why: "not a DFlash draft tensor".into() });
            }
            let ty = match info.dtype.as_str() {
                "F32" => GgmlType::F32,
                "F16" => GgmlType::F16,
                "BF16" => GgmlType::BF16,
                other => {
                    return Err(ConvertError::Tensor {
                        name: name.clone(),
                        why: format!("dtype {other}, expected BF16, F16 or F32"),
                    })
                }
            };
            found.insert(bare.to_string(), (fi, name.clone(), ne(&info.shape), ty));
        }
    }
    let inventory = cfg.tensor_inventory();
    crate::model::inventory::validate(files.first().map_or(dir, |f| f.path()), &inventory, |n| {
        found.get(n).map(|(_, _, dims, ty)| (dims.as_slice(), *ty))
    })?;
    if let Some(extra) = found.keys().find(|n| !inventory.iter().any(|e| &e.name == *n)) {
        return Err(ConvertError::Tensor {
            name: extra.clone(),
            why: format!("not part of a {}-layer draft", cfg.num_layers),
        });
    }
    let mut planned = Vec::new();
    for e in &inventory {
        let (fi, hf_name, _, _) = &found[&e.name];
        let (gguf, layer) = zlab_gguf_name(&e.name).unwrap_or_else(|| (e.name.clone(), None));
        let shape: Vec<usize> = e.dims.iter().rev().map(|&d| d as usize).collect();
        let row = shape.last().copied().unwrap_or(1);
        let ty = tensor_type(out_type, &gguf, shape.len(), row, layer, cfg.num_layers);
        let plan = TensorPlan { gguf_name: gguf, shape, transform: super::qwen35::Transform::Keep, layer };
        planned.push(Planned { file: *fi, hf_name: hf_name.clone(), plan, ty });
    }
    planned.sort_by_key(|p| (p.plan.layer.map_or(0, |l| l + 1), p.plan.gguf_name.clone()));
    let mut w = GgufWriter::new();
    let a = "dflash";
    let u = |v: usize| Value::U32(v as u32); // every size is bounded by the config checks
    w.set("general.architecture", Value::String(a.into()));
    w.set("general.name", Value::String(dir.file_name().map_or("dflash".into(), |n| n.to_string_lossy().into_owned())));
    w.set("general.file_type", Value::U32(out_type.file_type()));
    w.set("general.quantization_version", Value::U32(2));
    w.set(format!("{a}.block_count"), u(cfg.num_layers));
    if let Some(ctx) = cfg.max_position_embeddings {
        w.set(format!("{a}.context_length"), u(ctx));
    }
    w.set(format!("{a}.embedding_length"), u(cfg.hidden_size));
    w.set(format!("{a}.feed_forward_length"), u(cfg.intermediate_size));
    w.set(format!("{a}.attention.head_count"), u(cfg.num_heads));
    w.set(format!("{a}.attention.head_count_kv"), u(cfg.num_kv_heads));
    w.set(format!("{a}.attention.key_length"), u(cfg.head_dim));
    w.set(format!("{a}.attention.value_length"), u(cfg.head_dim));
    w.set(format!("{a}.attention.layer_norm_rms_epsilon"), Value::F32(cfg.rms_norm_eps));
    w.set(format!("{a}.rope.freq_base"), Value::F32(cfg.rope_theta));
    w.set(format!("{a}.block_size"), u(cfg.block_size));
    w.set(format!("{a}.target_layers"), Value::i32_array(cfg.target_layer_ids.iter().map(|&l| l as i32 + 1)));
    if let Some(c) = cfg.causal {
        w.set(format!("{a}.attention.causal"), Value::Bool(c));
    }
    if cfg.use_sliding_window {
        if let Some(win) = cfg.sliding_window {
            w.set(format!("{a}.attention.sliding_window"), u(win));
            w.set(
                format!("{a}.attention.sliding_window_pattern"),
                Value::Array {
                    elem: crate::gguf::ValueType::Bool,
                    items: cfg.sliding_layers.iter().map(|&s| Value::Bool(s)).collect(),
                },
            );
        }
    }
    if let Some(t) = target {
        draft_target_metadata(&mut w, cfg, t)?;
    }
    w.set("tokenizer.ggml.mask_token_id", Value::U32(cfg.mask_token_id));
    write_planned(&mut w, files, &planned, out, &|_, data| data.to_vec())
}
