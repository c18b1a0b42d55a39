//! DFlash drafts (a z-lab folder or a `dflash` GGUF) → reference [`DFlashWeights`]. The config and
//! the tensor inventory come from [`crate::model::DraftModel`], the one draft reader, so `generate`
//! accepts exactly what `inspect` accepts.

use super::{ConvertError, TensorF32};
use crate::model::{DraftConfig, DraftModel};
use flashtree_quants::dequantize;
use flashtree_reference::model::dflash::{DFlashLayer, DFlashWeights};
use flashtree_reference::model::mlp::MlpWeights;
use flashtree_reference::model::Matrix;
use std::path::Path;

/// Builds draft weights from tensors named as in the z-lab safetensors (`fc.weight`, `layers.i.…`).
pub fn weights_from_named(
    cfg: &DraftConfig,
    get: &mut dyn FnMut(&str) -> Result<TensorF32, ConvertError>,
) -> Result<DFlashWeights, ConvertError> {
    let hp = cfg.hparams();
    let h = hp.n_embd;
    let mut m = |name: String, rows: usize, cols: usize| -> Result<Matrix, ConvertError> {
        let t = get(&name)?;
        if Some(t.data.len()) != rows.checked_mul(cols) {
            return Err(ConvertError::Tensor { name, why: format!("shape {:?}, expected [{rows}, {cols}]", t.shape) });
        }
        Ok(Matrix::new(&name, rows, cols, t.data)?)
    };
    let (qd, kvd) = (hp.n_head * hp.head_dim, hp.n_head_kv * hp.head_dim);
    let fc = m("fc.weight".into(), h, hp.target_layer_ids.len() * h)?;
    let hidden_norm = m("hidden_norm.weight".into(), 1, h)?.data;
    let output_norm = m("norm.weight".into(), 1, h)?.data;
    let mut layers = Vec::with_capacity(cfg.num_layers);
    for i in 0..cfg.num_layers {
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
    let w = DFlashWeights { hparams: hp, fc, hidden_norm, layers, output_norm };
    w.validate()?;
    Ok(w)
}

/// The f32 weights of a loaded (already validated) draft.
pub fn reference_weights(draft: &DraftModel) -> Result<DFlashWeights, ConvertError> {
    weights_from_named(&draft.config, &mut |name| {
        let t = draft.tensor(name).ok_or_else(|| ConvertError::Missing {
            name: name.to_string(),
            looked: draft.path.display().to_string(),
        })?;
        let data = dequantize(t.ty, t.data)
            .map_err(|e| ConvertError::Tensor { name: name.to_string(), why: format!("{}: {e}", t.ty) })?;
        Ok(TensorF32 { shape: t.ne.iter().rev().map(|&d| d as usize).collect(), data })
    })
}

/// Loads a draft — a z-lab folder (`config.json` + `model.safetensors`) or a llama.cpp `dflash`
/// GGUF — through [`DraftModel::open`] (config checks and tensor inventory) into f32 weights.
pub fn load_draft(path: &Path) -> Result<(DraftConfig, DFlashWeights), ConvertError> {
    let draft = DraftModel::open(path)?;
    let w = reference_weights(&draft)?;
    Ok((draft.config, w))
}
