//! GGUF → reference weights for `qwen35` targets (ours, or llama.cpp's converter output, which has
//! the same tiled value-head order and `1 + w` norms). Every tensor is dequantized to f32 from its
//! own type. Drafts (`dflash` GGUFs too) load through [`super::dflash::load_draft`].

use super::qwen35::weights_from_gguf_tensors;
use super::{ConvertError, TensorF32};
use crate::gguf::{Gguf, GgufError};
use crate::model::Qwen35Config;
use flashtree_quants::{dequantize, dequantize_as_matmul, GgmlType, QuantError};
use flashtree_reference::model::Qwen35Weights;
use std::path::Path;

fn g(e: GgufError) -> ConvertError {
    ConvertError::Tensor { name: "<gguf>".into(), why: e.to_string() }
}

/// Reads tensor `name` as f32 with its PyTorch-order shape (`ne` reversed); `None` if absent.
pub fn read_tensor(file: &Gguf, name: &str) -> Result<Option<TensorF32>, ConvertError> {
    read_tensor_with(file, name, dequantize)
}

/// [`read_tensor`] with the values from `decode(type, bytes)`.
fn read_tensor_with(
    file: &Gguf,
    name: &str,
    decode: fn(GgmlType, &[u8]) -> Result<Vec<f32>, QuantError>,
) -> Result<Option<TensorF32>, ConvertError> {
    let Some(info) = file.tensor(name) else {
        return Ok(None);
    };
    let (ty, dims) = (info.ty, info.dims.clone());
    let bytes = file.tensor_data(name).map_err(g)?;
    let data =
        decode(ty, bytes).map_err(|e| ConvertError::Tensor { name: name.to_string(), why: format!("{ty}: {e}") })?;
    let shape = dims.iter().rev().map(|&d| d as usize).collect();
    Ok(Some(TensorF32 { shape, data }))
}

/// Loads a `qwen35` GGUF (any shard of a split set) into reference weights. The config and the
/// tensor inventory are checked by [`Qwen35Config::load`] first (the same checks as `inspect`).
pub fn load_qwen35(path: &Path) -> Result<Qwen35Weights, ConvertError> {
    load_qwen35_with_progress(path, &mut |_, _| {})
}

/// [`load_qwen35`] with every matrix that the GPU multiplies through `qmm` (all but the token
/// embedding, which the embedding kernel dequantizes exactly) as `qmm` multiplies it
/// ([`dequantize_as_matmul`]: the K-quants' f16 A operands): the weights of the references that
/// emulate the device's roundings (`with_device_rounding`). A model without `output.weight`
/// (head tied to the embedding) keeps the exact embedding as its head here.
pub fn load_qwen35_as_matmul(path: &Path) -> Result<Qwen35Weights, ConvertError> {
    let (file, config) = Qwen35Config::load(path)?;
    weights_from_gguf_tensors(&config.hparams(), &mut |n| {
        let decode = if n == "token_embd.weight" { dequantize } else { dequantize_as_matmul };
        read_tensor_with(&file, n, decode)
    })
}

/// [`load_qwen35`], calling `progress(done, total)` after each tensor with the file's tensor
/// bytes read so far and in all (for a progress bar).
pub fn load_qwen35_with_progress(
    path: &Path,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Qwen35Weights, ConvertError> {
    let (file, config) = Qwen35Config::load(path)?;
    let total = file.tensor_bytes();
    let mut done = 0u64;
    weights_from_gguf_tensors(&config.hparams(), &mut |n| {
        let t = read_tensor(&file, n)?;
        if t.is_some() {
            done = done.saturating_add(file.tensor_data(n).map_or(0, |b| b.len() as u64));
            progress(done.min(total), total);
        }
        Ok(t)
    })
}
