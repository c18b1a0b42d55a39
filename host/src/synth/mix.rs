//! Per-tensor types of a stock llama.cpp quantization (gguf-format-and-quants.md §5.1, legacy
//! name-based rules): 1-D tensors, `*_norm.weight` and `ssm_conv1d` stay F32; `output.weight` is
//! Q6_K in K-quant mixes; `ffn_down` and `attn_v` get Q6_K in the `use_more_bits` layers;
//! `attn_qkv` is Q5_K in Q4_K_M.

use crate::gguf::GgmlType;

/// A file-level quantization choice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuantMix {
    Q4KM,
    Q8_0,
    BF16,
    F32,
}

impl QuantMix {
    pub fn parse(s: &str) -> Option<QuantMix> {
        match s.to_ascii_lowercase().as_str() {
            "q4_k_m" => Some(QuantMix::Q4KM),
            "q8_0" => Some(QuantMix::Q8_0),
            "bf16" => Some(QuantMix::BF16),
            "f32" => Some(QuantMix::F32),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            QuantMix::Q4KM => "q4_k_m",
            QuantMix::Q8_0 => "q8_0",
            QuantMix::BF16 => "bf16",
            QuantMix::F32 => "f32",
        }
    }

    /// `general.file_type` (llama_ftype).
    pub fn file_type(self) -> u32 {
        match self {
            QuantMix::Q4KM => 15,
            QuantMix::Q8_0 => 7,
            QuantMix::BF16 => 32,
            QuantMix::F32 => 0,
        }
    }
}

/// llama.cpp's `use_more_bits(i, n)`: the first and last eighth of layers and every third one
/// in between.
pub fn use_more_bits(i: usize, n: usize) -> bool {
    i < n / 8 || i >= 7 * n / 8 || (i >= n / 8 && (i - n / 8) % 3 == 2)
}

/// The type of tensor `name` (`n_dims` dims) in a file of `mix` whose trunk has `n_layer`
/// layers; `attn_v_index` is the running index of `attn_v` tensors (attention layers in order).
pub fn tensor_type(
    mix: QuantMix,
    name: &str,
    n_dims: usize,
    n_layer: usize,
    attn_v_index: usize,
) -> GgmlType {
    let keep_f32 = n_dims < 2 || name.contains("_norm.weight") || name.contains("ssm_conv1d");
    if keep_f32 || mix == QuantMix::F32 {
        return GgmlType::F32;
    }
    match mix {
        QuantMix::F32 => GgmlType::F32,
        QuantMix::BF16 => GgmlType::BF16,
        QuantMix::Q8_0 => GgmlType::Q8_0,
        QuantMix::Q4KM => {
            let layer: Option<usize> = name
                .strip_prefix("blk.")
                .and_then(|r| r.split('.').next())
                .and_then(|s| s.parse().ok());
            if name == "output.weight" {
                GgmlType::Q6_K
            } else if name.ends_with("ffn_down.weight")
                && layer.is_some_and(|i| use_more_bits(i, n_layer))
            {
                GgmlType::Q6_K
            } else if name.ends_with("attn_v.weight") && use_more_bits(attn_v_index, n_layer) {
                // legacy rules: n_attention_wv counts attn_v + attn_qkv (= n_layer) while the
                // running index advances on attn_v only
                GgmlType::Q6_K
            } else if name.ends_with("attn_qkv.weight") {
                GgmlType::Q5_K
            } else {
                GgmlType::Q4_K
            }
        }
    }
}
