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
    if name.starts_with("model.visual.")
        || name.starts_with("mtp.")
        || name.starts_with("model.mtp.")
    {
        return None;
    }
    name.strip_prefix("model.")
}

fn bad(name: &str, why: impl Into<String>) -> ConvertError {
    ConvertError::Tensor {
        name: name.to_string(),
        why: why.into(),
    }
}

fn expect_numel(name: &str, t: &TensorF32, n: usize) -> Result<(), ConvertError> {
    if t.data.len() != n {
        return Err(bad(
            name,
            format!(
                "shape {:?} has {} values, expected {n}",
                t.shape,
                t.data.len()
            ),
        ));
    }
    Ok(())
}

/// Maps one HF tensor (name already stripped by [`strip_prefix`]) to its GGUF name and value with
/// the §12 transforms applied: `+1` on the five zero-centred norm kinds, `ssm_a = −exp(A_log)`,
/// conv squeezed to `[channels, kernel]`, and the value-head axis reordered grouped → tiled.
/// `Ok(None)`: a tensor the text model does not use.
pub fn hf_to_gguf_tensor(
    hp: &Qwen35Hparams,
    name: &str,
    t: TensorF32,
) -> Result<Option<(String, TensorF32)>, ConvertError> {
    let (n_k, n_v) = (hp.ssm_n_k_heads, hp.ssm_n_v_heads);
    let simple = |gguf: &str, t: TensorF32| Ok(Some((gguf.to_string(), t)));
    match name {
        "embed_tokens.weight" => return simple("token_embd.weight", t),
        "lm_head.weight" => return simple("output.weight", t),
        "norm.weight" => {
            return simple(
                "output_norm.weight",
                TensorF32 {
                    data: norm_plus_one(&t.data),
                    shape: t.shape,
                },
            )
        }
        _ => {}
    }
    let Some(rest) = name.strip_prefix("layers.") else {
        return Ok(None);
    };
    let (idx, sub) = rest
        .split_once('.')
        .ok_or_else(|| bad(name, "no layer index"))?;
    let il: usize = idx
        .parse()
        .map_err(|_| bad(name, "layer index is not an integer"))?;
    if il >= hp.n_layer() {
        return Err(bad(
            name,
            format!("layer {il} beyond num_hidden_layers {}", hp.n_layer()),
        ));
    }
    let g = |s: &str| format!("blk.{il}.{s}");
    let plus1 = |s: &str, t: TensorF32| {
        Ok(Some((
            g(s),
            TensorF32 {
                data: norm_plus_one(&t.data),
                shape: t.shape,
            },
        )))
    };
    let keep = |s: &str, t: TensorF32| Ok(Some((g(s), t)));
    let kd = n_k * hp.ssm_k_dim;
    let vd = n_v * hp.ssm_v_dim;
    match sub {
        "input_layernorm.weight" => plus1("attn_norm.weight", t),
        "post_attention_layernorm.weight" => plus1("post_attention_norm.weight", t),
        "mlp.gate_proj.weight" => keep("ffn_gate.weight", t),
        "mlp.up_proj.weight" => keep("ffn_up.weight", t),
        "mlp.down_proj.weight" => keep("ffn_down.weight", t),
        "self_attn.q_proj.weight" => keep("attn_q.weight", t),
        "self_attn.k_proj.weight" => keep("attn_k.weight", t),
        "self_attn.v_proj.weight" => keep("attn_v.weight", t),
        "self_attn.o_proj.weight" => keep("attn_output.weight", t),
        "self_attn.q_norm.weight" => plus1("attn_q_norm.weight", t),
        "self_attn.k_norm.weight" => plus1("attn_k_norm.weight", t),
        "linear_attn.in_proj_qkv.weight" => {
            expect_numel(name, &t, (2 * kd + vd) * hp.n_embd)?;
            let data = grouped_to_tiled_tail_rows(&t.data, hp.n_embd, 2 * kd, n_k, n_v);
            keep(
                "attn_qkv.weight",
                TensorF32 {
                    data,
                    shape: t.shape,
                },
            )
        }
        "linear_attn.in_proj_z.weight" => {
            expect_numel(name, &t, vd * hp.n_embd)?;
            keep(
                "attn_gate.weight",
                TensorF32 {
                    data: grouped_to_tiled_blocks(&t.data, n_k, n_v),
                    shape: t.shape,
                },
            )
        }
        "linear_attn.in_proj_b.weight" | "linear_attn.in_proj_a.weight" => {
            expect_numel(name, &t, n_v * hp.n_embd)?;
            let to = if sub.ends_with("b.weight") {
                "ssm_beta.weight"
            } else {
                "ssm_alpha.weight"
            };
            keep(
                to,
                TensorF32 {
                    data: grouped_to_tiled_blocks(&t.data, n_k, n_v),
                    shape: t.shape,
                },
            )
        }
        "linear_attn.conv1d.weight" => {
            let ch = 2 * kd + vd;
            expect_numel(name, &t, ch * hp.conv_kernel)?;
            let data = grouped_to_tiled_tail_rows(&t.data, hp.conv_kernel, 2 * kd, n_k, n_v);
            keep(
                "ssm_conv1d.weight",
                TensorF32 {
                    data,
                    shape: vec![ch, hp.conv_kernel],
                },
            )
        }
        "linear_attn.dt_bias" => {
            expect_numel(name, &t, n_v)?;
            keep(
                "ssm_dt.bias",
                TensorF32 {
                    data: grouped_to_tiled_blocks(&t.data, n_k, n_v),
                    shape: t.shape,
                },
            )
        }
        "linear_attn.A_log" => {
            expect_numel(name, &t, n_v)?;
            let a = ssm_a_from_a_log(&t.data);
            keep(
                "ssm_a",
                TensorF32 {
                    data: grouped_to_tiled_blocks(&a, n_k, n_v),
                    shape: t.shape,
                },
            )
        }
        "linear_attn.norm.weight" => keep("ssm_norm.weight", t),
        "linear_attn.out_proj.weight" => {
            expect_numel(name, &t, hp.n_embd * vd)?;
            let data = grouped_to_tiled_columns(&t.data, hp.n_embd, n_k, n_v);
            keep(
                "ssm_out.weight",
                TensorF32 {
                    data,
                    shape: t.shape,
                },
            )
        }
        _ => Err(bad(name, "unknown Qwen3.5 text tensor")),
    }
}

/// Builds the reference weights from GGUF-named f32 tensors (values in GGUF conventions).
/// `get(name)` returns the tensor or `None` when absent; only `output.weight` may be absent (tied).
pub fn weights_from_gguf_tensors(
    hp: &Qwen35Hparams,
    get: &mut dyn FnMut(&str) -> Result<Option<TensorF32>, ConvertError>,
) -> Result<Qwen35Weights, ConvertError> {
    let mut need = |name: &str| -> Result<TensorF32, ConvertError> {
        get(name)?.ok_or_else(|| ConvertError::Missing {
            name: name.to_string(),
            looked: "the checkpoint".into(),
        })
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
    let (kd, vd) = (
        hp.ssm_n_k_heads * hp.ssm_k_dim,
        hp.ssm_n_v_heads * hp.ssm_v_dim,
    );
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
    drop(m);
    let output = match get("output.weight")? {
        Some(t) => Some(mat("output.weight", t, hp.n_vocab, d)?),
        None => None,
    };
    let w = Qwen35Weights {
        hparams: hp.clone(),
        token_embd,
        layers,
        output_norm,
        output,
    };
    w.validate()?;
    Ok(w)
}

/// Every text tensor of an HF checkpoint, converted to GGUF names and values, in file order.
pub fn read_hf_as_gguf(
    files: &[SafeTensors],
    hp: &Qwen35Hparams,
) -> Result<Vec<(String, TensorF32)>, ConvertError> {
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
    let mut map: HashMap<String, TensorF32> =
        read_hf_as_gguf(&files, &cfg.hparams)?.into_iter().collect();
    if cfg.tie_word_embeddings {
        map.remove("output.weight");
    }
    let w = weights_from_gguf_tensors(&cfg.hparams, &mut |n| Ok(map.remove(n)))?;
    Ok((cfg, w))
}
