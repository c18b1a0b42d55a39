//! Writing converted checkpoints as GGUF: HF Qwen3.5 → `qwen35`, z-lab DFlash → llama.cpp `dflash`.
//! Tensors are streamed: each one is read, transformed and quantized while it is written.

use super::dflash::DFlashConfig;
use super::hf_config::HfQwen35Config;
use super::out_type::{tensor_type, OutType};
use super::qwen35::{apply_transform, plan_tensor, strip_prefix, TensorPlan};
use super::safetensors::SafeTensors;
use super::tokenizer;
use super::ConvertError;
use crate::gguf::{GgufWriter, Value};
use crate::model::draft::zlab_gguf_name;
use flashtree_reference::quant::{quantize, GgmlType};
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

/// Converts a z-lab DFlash draft folder to a llama.cpp `dflash` GGUF (llamacpp-dflash.md §1).
/// `target_dir`, when given, supplies the tokenizer metadata (the target's).
pub fn convert_dflash(
    cfg: &DFlashConfig,
    files: &[SafeTensors],
    target_dir: Option<&Path>,
    out_type: OutType,
    out: &Path,
) -> Result<u64, ConvertError> {
    let hp = &cfg.hparams;
    let mut planned = Vec::new();
    for (fi, f) in files.iter().enumerate() {
        for (name, info) in f.tensors() {
            let bare = name.strip_prefix("model.").unwrap_or(name);
            let (gguf, layer) = zlab_gguf_name(bare)
                .ok_or_else(|| ConvertError::Tensor { name: name.clone(), why: "not a DFlash draft tensor".into() })?;
            if layer.is_some_and(|l| l >= cfg.n_layer) {
                return Err(ConvertError::Tensor {
                    name: name.clone(),
                    why: format!("layer beyond num_hidden_layers {}", cfg.n_layer),
                });
            }
            let plan = TensorPlan {
                gguf_name: gguf,
                shape: info.shape.clone(),
                transform: super::qwen35::Transform::Keep,
                layer,
            };
            let row = plan.shape.last().copied().unwrap_or(1);
            let ty = tensor_type(out_type, &plan.gguf_name, plan.shape.len(), row, layer, cfg.n_layer);
            planned.push(Planned { file: fi, hf_name: name.clone(), plan, ty });
        }
    }
    planned.sort_by_key(|p| (p.plan.layer.map_or(0, |l| l + 1), p.plan.gguf_name.clone()));
    let mut w = GgufWriter::new();
    let a = "dflash";
    let u = |v: usize| Value::U32(v as u32);
    w.set("general.architecture", Value::String(a.into()));
    w.set("general.file_type", Value::U32(out_type.file_type()));
    w.set("general.quantization_version", Value::U32(2));
    w.set(format!("{a}.block_count"), u(cfg.n_layer));
    w.set(format!("{a}.context_length"), u(cfg.context_length));
    w.set(format!("{a}.embedding_length"), u(hp.n_embd));
    w.set(format!("{a}.feed_forward_length"), u(hp.n_ff));
    w.set(format!("{a}.attention.head_count"), u(hp.n_head));
    w.set(format!("{a}.attention.head_count_kv"), u(hp.n_head_kv));
    w.set(format!("{a}.attention.key_length"), u(hp.head_dim));
    w.set(format!("{a}.attention.value_length"), u(hp.head_dim));
    w.set(format!("{a}.attention.layer_norm_rms_epsilon"), Value::F32(hp.rms_eps));
    w.set(format!("{a}.rope.freq_base"), Value::F32(hp.rope_theta as f32));
    w.set(format!("{a}.block_size"), u(hp.block_size));
    w.set(format!("{a}.target_layers"), Value::i32_array(hp.target_layer_ids.iter().map(|&l| l as i32 + 1)));
    if let Some(c) = hp.causal {
        w.set(format!("{a}.attention.causal"), Value::Bool(c));
    }
    if cfg.use_sliding_window {
        if let Some(win) = hp.sliding_window {
            w.set(format!("{a}.attention.sliding_window"), u(win));
            w.set(
                format!("{a}.attention.sliding_window_pattern"),
                Value::Array {
                    elem: crate::gguf::ValueType::Bool,
                    items: hp.sliding.iter().map(|&s| Value::Bool(s)).collect(),
                },
            );
        }
    }
    w.set("tokenizer.ggml.mask_token_id", Value::U32(hp.mask_token_id));
    if let Some(t) = target_dir {
        tokenizer::add_tokenizer_metadata(&mut w, t, cfg.n_vocab)?;
    }
    write_planned(&mut w, files, &planned, out, &|_, data| data.to_vec())
}
