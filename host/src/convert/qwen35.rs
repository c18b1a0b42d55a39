//! Qwen3.5 text checkpoints: HF tensor names and values → GGUF names and values (the converter
//! transforms), and GGUF-named f32 tensors → [`Qwen35Weights`].

use super::hf_config::{self, HfQwen35Config};
use super::safetensors::{open_folder, SafeTensors};
use super::transforms::*;
use super::{ConvertError, TensorF32};
use flashtree_reference::model::mlp::MlpWeights;
use flashtree_reference::model::weights::{AttentionWeights, DeltaNetWeights, LayerWeights, Mixer};
use flashtree_reference::model::{Matrix, Qwen35Hparams, Qwen35Weights};
use std::collections::HashMap;
use std::path::Path;

/// Strips the checkpoint prefix: `model.language_model.` (multimodal), `model.` (text-only);
/// `lm_head.weight` stays. Returns `None` for tensors outside the text trunk (vision tower, MTP).
pub fn strip_prefix(name: &str) -> Option<&str> {
    if name == "lm_head.weight" {
        return Some(name);
    }
    if let Some(rest) = name.strip_prefix("model.language_model.") {
        return Some(rest);
    }
    if name.starts_with("model.visual.") || name.starts_with("mtp.") || name.starts_with("model.mtp.") {
        return None;
    }
    name.strip_prefix("model.")
}

fn bad(name: &str, why: impl Into<String>) -> ConvertError {
    ConvertError::Tensor { name: name.to_string(), why: why.into() }
}

/// The value transform one HF tensor needs on its way to GGUF (§12).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transform {
    /// Copied as is.
    Keep,
    /// Zero-centred norm: `1 + w`.
    PlusOne,
    /// `in_proj_qkv` / `conv1d`: value rows (after the `2·n_k·d_k` q and k rows) grouped → tiled.
    TailRows,
    /// Every row block (one per value head) grouped → tiled: `in_proj_z`, `in_proj_a/b`, `dt_bias`.
    Blocks,
    /// `A_log` → `−exp(A_log)`, then grouped → tiled.
    NegExpBlocks,
    /// `out_proj`: value-head *columns* grouped → tiled.
    Columns,
}

/// Where one HF tensor goes: GGUF name, PyTorch-order shape in the GGUF file, transform.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorPlan {
    pub gguf_name: String,
    pub shape: Vec<usize>,
    pub transform: Transform,
    /// Transformer layer of the tensor (`None` for global tensors).
    pub layer: Option<usize>,
}

/// Plans one HF tensor (name already stripped by [`strip_prefix`], `shape` as in the file):
/// its GGUF name, output shape (the conv is squeezed to `[channels, kernel]`) and transform.
/// `Ok(None)`: a tensor the text model does not use. Shapes are checked against `hp`.
pub fn plan_tensor(hp: &Qwen35Hparams, name: &str, shape: &[usize]) -> Result<Option<TensorPlan>, ConvertError> {
    let numel: usize = shape.iter().product();
    let (n_k, n_v, d) = (hp.ssm_n_k_heads, hp.ssm_n_v_heads, hp.n_embd);
    let (kd, vd) = (n_k * hp.ssm_k_dim, n_v * hp.ssm_v_dim);
    let check = |want: usize| {
        if numel == want {
            Ok(())
        } else {
            Err(bad(name, format!("shape {shape:?} has {numel} values, expected {want} for this config")))
        }
    };
    let global = |g: &str, t: Transform, want: usize| -> Result<Option<TensorPlan>, ConvertError> {
        check(want)?;
        Ok(Some(TensorPlan { gguf_name: g.to_string(), shape: shape.to_vec(), transform: t, layer: None }))
    };
    match name {
        "embed_tokens.weight" => return global("token_embd.weight", Transform::Keep, hp.n_vocab * d),
        "lm_head.weight" => return global("output.weight", Transform::Keep, hp.n_vocab * d),
        "norm.weight" => return global("output_norm.weight", Transform::PlusOne, d),
        _ => {}
    }
    let Some(rest) = name.strip_prefix("layers.") else {
        return Ok(None);
    };
    let (idx, sub) = rest.split_once('.').ok_or_else(|| bad(name, "no layer index"))?;
    let il: usize = idx.parse().map_err(|_| bad(name, "layer index is not an integer"))?;
    if il >= hp.n_layer() {
        return Err(bad(name, format!("layer {il} beyond num_hidden_layers {}", hp.n_layer())));
    }
    let (hq, hkv) = (hp.n_head * hp.head_dim, hp.n_head_kv * hp.head_dim);
    use Transform::*;
    let (g, t, want): (&str, Transform, usize) = match sub {
        "input_layernorm.weight" => ("attn_norm.weight", PlusOne, d),
        "post_attention_layernorm.weight" => ("post_attention_norm.weight", PlusOne, d),
        "mlp.gate_proj.weight" => ("ffn_gate.weight", Keep, hp.n_ff * d),
        "mlp.up_proj.weight" => ("ffn_up.weight", Keep, hp.n_ff * d),
        "mlp.down_proj.weight" => ("ffn_down.weight", Keep, hp.n_ff * d),
        "self_attn.q_proj.weight" => ("attn_q.weight", Keep, 2 * hq * d),
        "self_attn.k_proj.weight" => ("attn_k.weight", Keep, hkv * d),
        "self_attn.v_proj.weight" => ("attn_v.weight", Keep, hkv * d),
        "self_attn.o_proj.weight" => ("attn_output.weight", Keep, hq * d),
        "self_attn.q_norm.weight" => ("attn_q_norm.weight", PlusOne, hp.head_dim),
        "self_attn.k_norm.weight" => ("attn_k_norm.weight", PlusOne, hp.head_dim),
        "linear_attn.in_proj_qkv.weight" => ("attn_qkv.weight", TailRows, (2 * kd + vd) * d),
        "linear_attn.in_proj_z.weight" => ("attn_gate.weight", Blocks, vd * d),
        "linear_attn.in_proj_b.weight" => ("ssm_beta.weight", Blocks, n_v * d),
        "linear_attn.in_proj_a.weight" => ("ssm_alpha.weight", Blocks, n_v * d),
        "linear_attn.conv1d.weight" => ("ssm_conv1d.weight", TailRows, (2 * kd + vd) * hp.conv_kernel),
        "linear_attn.dt_bias" => ("ssm_dt.bias", Blocks, n_v),
        "linear_attn.A_log" => ("ssm_a", NegExpBlocks, n_v),
        "linear_attn.norm.weight" => ("ssm_norm.weight", Keep, hp.ssm_v_dim),
        "linear_attn.out_proj.weight" => ("ssm_out.weight", Columns, d * vd),
        _ => return Err(bad(name, "unknown Qwen3.5 text tensor")),
    };
    check(want)?;
    let shape = if sub == "linear_attn.conv1d.weight" { vec![2 * kd + vd, hp.conv_kernel] } else { shape.to_vec() };
    Ok(Some(TensorPlan { gguf_name: format!("blk.{il}.{g}"), shape, transform: t, layer: Some(il) }))
}

/// Applies a planned transform to the HF values (row length of the tensor: `plan.shape.last()`).
pub fn apply_transform(hp: &Qwen35Hparams, plan: &TensorPlan, data: &[f32]) -> Vec<f32> {
    let (n_k, n_v) = (hp.ssm_n_k_heads, hp.ssm_n_v_heads);
    let row_len = plan.shape.last().copied().unwrap_or(1).max(1);
    match plan.transform {
        Transform::Keep => data.to_vec(),
        Transform::PlusOne => norm_plus_one(data),
        Transform::TailRows => grouped_to_tiled_tail_rows(data, row_len, 2 * n_k * hp.ssm_k_dim, n_k, n_v),
        Transform::Blocks => grouped_to_tiled_blocks(data, n_k, n_v),
        Transform::NegExpBlocks => grouped_to_tiled_blocks(&ssm_a_from_a_log(data), n_k, n_v),
        Transform::Columns => grouped_to_tiled_columns(data, data.len() / row_len, n_k, n_v),
    }
}

/// Maps one HF tensor to its GGUF name and value with the §12 transforms applied
/// ([`plan_tensor`] + [`apply_transform`]). `Ok(None)`: a tensor the text model does not use.
pub fn hf_to_gguf_tensor(
    hp: &Qwen35Hparams,
    name: &str,
    t: TensorF32,
) -> Result<Option<(String, TensorF32)>, ConvertError> {
    let Some(plan) = plan_tensor(hp, name, &t.shape)? else {
        return Ok(None);
    };
    let data = apply_transform(hp, &plan, &t.data);
    Ok(Some((plan.gguf_name, TensorF32 { shape: plan.shape, data })))
}

/// Builds the reference weights from GGUF-named f32 tensors (values in GGUF conventions).
/// `get(name)` returns the tensor or `None` when absent; only `output.weight` may be absent (tied).
pub fn weights_from_gguf_tensors(
    hp: &Qwen35Hparams,
    get: &mut dyn FnMut(&str) -> Result<Option<TensorF32>, ConvertError>,
) -> Result<Qwen35Weights, ConvertError> {
    let mut need = |name: &str| -> Result<TensorF32, ConvertError> {
        get(name)?.ok_or_else(|| ConvertError::Missing { name: name.to_string(), looked: "the checkpoint".into() })
    };
    fn mat(name: &str, t: TensorF32, rows: usize, cols: usize) -> Result<Matrix, ConvertError> {
        if t.data.len() != rows * cols {
            return Err(ConvertError::Tensor {
                name: name.to_string(),
                why: format!("shape {:?}, expected [{rows}, {cols}]", t.shape),
            });
        }
        Ok(Matrix::new(name, rows, cols, t.data)?)
    }
    let d = hp.n_embd;
    let mut m = |name: String, rows: usize, cols: usize| -> Result<Matrix, ConvertError> {
        mat(&name, need(&name)?, rows, cols)
    };
    let token_embd = m("token_embd.weight".into(), hp.n_vocab, d)?;
    let mut layers = Vec::with_capacity(hp.n_layer());
    let (hq, hkv) = (hp.n_head * hp.head_dim, hp.n_head_kv * hp.head_dim);
    let (kd, vd) = (hp.ssm_n_k_heads * hp.ssm_k_dim, hp.ssm_n_v_heads * hp.ssm_v_dim);
    for il in 0..hp.n_layer() {
        let n = |s: &str| format!("blk.{il}.{s}");
        let mixer = if hp.recurrent[il] {
            Mixer::DeltaNet(DeltaNetWeights {
                qkv: m(n("attn_qkv.weight"), 2 * kd + vd, d)?,
                gate: m(n("attn_gate.weight"), vd, d)?,
                beta: m(n("ssm_beta.weight"), hp.ssm_n_v_heads, d)?,
                alpha: m(n("ssm_alpha.weight"), hp.ssm_n_v_heads, d)?,
                conv: m(n("ssm_conv1d.weight"), 2 * kd + vd, hp.conv_kernel)?,
                ssm_a: m(n("ssm_a"), 1, hp.ssm_n_v_heads)?.data,
                dt_bias: m(n("ssm_dt.bias"), 1, hp.ssm_n_v_heads)?.data,
                norm: m(n("ssm_norm.weight"), 1, hp.ssm_v_dim)?.data,
                out: m(n("ssm_out.weight"), d, vd)?,
            })
        } else {
            Mixer::Attention(AttentionWeights {
                q: m(n("attn_q.weight"), 2 * hq, d)?,
                k: m(n("attn_k.weight"), hkv, d)?,
                v: m(n("attn_v.weight"), hkv, d)?,
                o: m(n("attn_output.weight"), d, hq)?,
                q_norm: m(n("attn_q_norm.weight"), 1, hp.head_dim)?.data,
                k_norm: m(n("attn_k_norm.weight"), 1, hp.head_dim)?.data,
            })
        };
        layers.push(LayerWeights {
            attn_norm: m(n("attn_norm.weight"), 1, d)?.data,
            post_attention_norm: m(n("post_attention_norm.weight"), 1, d)?.data,
            mixer,
            mlp: MlpWeights {
                gate: m(n("ffn_gate.weight"), hp.n_ff, d)?,
                up: m(n("ffn_up.weight"), hp.n_ff, d)?,
                down: m(n("ffn_down.weight"), d, hp.n_ff)?,
            },
        });
    }
    let output_norm = m("output_norm.weight".into(), 1, d)?.data;
    let output = match get("output.weight")? {
        Some(t) => Some(mat("output.weight", t, hp.n_vocab, d)?),
        None => None,
    };
    let w = Qwen35Weights { hparams: hp.clone(), token_embd, layers, output_norm, output };
    w.validate()?;
    Ok(w)
}

/// Every text tensor of an HF checkpoint, converted to GGUF names and values, in file order.
pub fn read_hf_as_gguf(files: &[SafeTensors], hp: &Qwen35Hparams) -> Result<Vec<(String, TensorF32)>, ConvertError> {
    let mut out = Vec::new();
    for f in files {
        for name in f.tensors().keys() {
            let Some(stripped) = strip_prefix(name) else {
                continue;
            };
            if let Some(pair) = hf_to_gguf_tensor(hp, stripped, f.read_f32(name)?)? {
                out.push(pair);
            }
        }
    }
    Ok(out)
}

/// Loads an HF Qwen3.5 checkpoint folder (`config.json` + safetensors) into reference weights,
/// through the same transforms as the GGUF converter.
pub fn load_hf(dir: &Path) -> Result<(HfQwen35Config, Qwen35Weights), ConvertError> {
    let cfg = hf_config::read(dir)?;
    let files = open_folder(dir)?;
    let mut map: HashMap<String, TensorF32> = read_hf_as_gguf(&files, &cfg.hparams)?.into_iter().collect();
    if cfg.tie_word_embeddings {
        map.remove("output.weight");
    }
    let w = weights_from_gguf_tensors(&cfg.hparams, &mut |n| Ok(map.remove(n)))?;
    Ok((cfg, w))
}
