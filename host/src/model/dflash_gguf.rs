//! Writing a draft as a llama.cpp `dflash` GGUF (llamacpp-dflash.md §1): the same keys and
//! tensor names llama.cpp's converter produces — 2-D weights in their stored type (BF16 from
//! z-lab), 1-D tensors as F32, `dflash.target_layers` = HF ids + 1, and the target's tokenizer
//! metadata when a target header is given.

use super::draft::{zlab_to_gguf_name, DraftModel};
use crate::gguf::{GgmlType, GgufHeader, GgufWriter, Value};
use anyhow::{Context, Result};

use std::path::Path;

/// Writes `draft` to `out` in the `dflash` layout; `target` supplies `tokenizer.*` keys.
pub fn write_dflash_gguf(draft: &DraftModel, target: Option<&GgufHeader>, out: &Path) -> Result<u64> {
    let c = &draft.config;
    let mut w = GgufWriter::new();
    let u = |x: usize| Value::U32(x as u32);
    w.set("general.architecture", Value::String("dflash".into()));
    w.set("general.name", Value::String("DFlash draft".into()));
    w.set("dflash.block_count", u(c.num_layers));
    if let Some(ctx) = c.max_position_embeddings {
        w.set("dflash.context_length", u(ctx));
    }
    w.set("dflash.embedding_length", u(c.hidden_size));
    w.set("dflash.feed_forward_length", u(c.intermediate_size));
    w.set("dflash.attention.head_count", u(c.num_heads));
    w.set("dflash.attention.head_count_kv", u(c.num_kv_heads));
    w.set("dflash.rope.freq_base", Value::F32(c.rope_theta));
    w.set("dflash.attention.layer_norm_rms_epsilon", Value::F32(c.rms_norm_eps));
    w.set("dflash.attention.key_length", u(c.head_dim));
    w.set("dflash.attention.value_length", u(c.head_dim));
    w.set("dflash.block_size", u(c.block_size));
    w.set("dflash.target_layers", Value::i32_array(c.target_layer_ids.iter().map(|&i| i as i32 + 1)));
    w.set("dflash.rope.dimension_sections", Value::i32_array([c.head_dim as i32 / 2, 0, 0, 0]));
    if let Some(causal) = c.causal {
        w.set("dflash.attention.causal", Value::Bool(causal));
    }
    if let Some(h) = target {
        for (k, v) in &h.metadata {
            if k.starts_with("tokenizer.") {
                w.set(k.clone(), v.clone());
            }
        }
    }
    w.set("tokenizer.ggml.mask_token_id", Value::U32(c.mask_token_id));

    let inv = c.tensor_inventory();
    let mut sources = Vec::new();
    for e in &inv {
        let t = draft.tensor(&e.name).with_context(|| format!("draft tensor {} missing", e.name))?;
        let ty = if t.ne.len() < 2 { GgmlType::F32 } else { t.ty };
        w.add_tensor(zlab_to_gguf_name(&e.name), t.ne, ty)?;
        sources.push((t, ty));
    }
    Ok(w.write_file(out, |i, _, sink| {
        let (t, ty) = sources[i];
        if ty == t.ty {
            sink.write_all(t.data)
        } else {
            let x = flashtree_reference::quant::dequantize(t.ty, t.data).map_err(std::io::Error::other)?;
            let b = flashtree_reference::quant::quantize(ty, &x).map_err(std::io::Error::other)?;
            sink.write_all(&b)
        }
    })?)
}
