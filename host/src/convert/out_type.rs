//! Output types of `flashtree convert` and the per-tensor type rules (gguf-format-and-quants.md §5.1).

use flashtree_quants::GgmlType;

/// The `--outtype` of a conversion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutType {
    F32,
    F16,
    BF16,
    Q8_0,
    /// llama.cpp's Q4_K_M mix (category rules): Q4_K by default, Q6_K for `output`, and for
    /// `ffn_down`, `attn_v`, `attn_qkv` in the `use_more_bits` layers.
    Q4KM,
}

impl OutType {
    /// Parses `f32`, `f16`, `bf16`, `q8_0`, `q4_k_m` (case-insensitive).
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s.to_ascii_lowercase().as_str() {
            "f32" => Self::F32,
            "f16" => Self::F16,
            "bf16" => Self::BF16,
            "q8_0" => Self::Q8_0,
            "q4_k_m" => Self::Q4KM,
            _ => return None,
        })
    }

    /// `general.file_type` (llama_ftype).
    pub fn file_type(self) -> u32 {
        match self {
            Self::F32 => 0,
            Self::F16 => 1,
            Self::Q8_0 => 7,
            Self::Q4KM => 15,
            Self::BF16 => 32,
        }
    }

    fn base(self) -> GgmlType {
        match self {
            Self::F32 => GgmlType::F32,
            Self::F16 => GgmlType::F16,
            Self::BF16 => GgmlType::BF16,
            Self::Q8_0 => GgmlType::Q8_0,
            Self::Q4KM => GgmlType::Q4_K,
        }
    }
}

/// llama.cpp's `use_more_bits(i, n)`: `i < n/8 || i ≥ 7n/8 || (i − n/8) % 3 == 2`.
pub fn use_more_bits(i: usize, n: usize) -> bool {
    i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2
}

/// The type of one tensor: 1-D tensors, norms and `ssm_conv1d` stay F32; matrices take the
/// out type with the Q4_K_M upgrades. When the row length (`row_len` = ne0) is not a multiple of
/// the chosen type's block, it falls back to Q8_0 (row % 32 == 0) or F16 — llama.cpp falls back
/// to Q5_0/Q5_1/Q8_0/F16, the Q5 ones having no quantizer here; only tiny test models hit this.
pub fn tensor_type(
    out: OutType,
    gguf_name: &str,
    n_dims: usize,
    row_len: usize,
    layer: Option<usize>,
    n_layer: usize,
) -> GgmlType {
    if n_dims < 2 || gguf_name.contains("_norm.weight") || gguf_name.ends_with("ssm_conv1d.weight") {
        return GgmlType::F32;
    }
    let mut ty = out.base();
    if out == OutType::Q4KM {
        let more = layer.is_some_and(|l| use_more_bits(l, n_layer));
        if gguf_name == "output.weight"
            || (more
                && (gguf_name.ends_with("ffn_down.weight")
                    || gguf_name.ends_with("attn_v.weight")
                    || gguf_name.ends_with("attn_qkv.weight")))
        {
            ty = GgmlType::Q6_K;
        }
    }
    if !row_len.is_multiple_of(ty.block_size()) {
        ty = if row_len.is_multiple_of(32) { GgmlType::Q8_0 } else { GgmlType::F16 };
    }
    ty
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn use_more_bits_for_64_layers_matches_the_documented_list() {
        let more: Vec<usize> = (0..64).filter(|&i| use_more_bits(i, 64)).collect();
        let mut want: Vec<usize> = (0..8).collect();
        want.extend((10..56).step_by(3));
        want.extend(56..64);
        assert_eq!(more, want);
        assert_eq!(more.len(), 32);
    }

    #[test]
    fn norms_and_conv_stay_f32_and_short_rows_fall_back() {
        assert_eq!(tensor_type(OutType::Q4KM, "blk.0.attn_norm.weight", 1, 5120, Some(0), 64), GgmlType::F32);
        assert_eq!(tensor_type(OutType::Q4KM, "blk.0.ssm_conv1d.weight", 2, 4, Some(0), 64), GgmlType::F32);
        assert_eq!(tensor_type(OutType::Q4KM, "blk.8.ffn_down.weight", 2, 17408, Some(8), 64), GgmlType::Q4_K);
        assert_eq!(tensor_type(OutType::Q4KM, "blk.10.ffn_down.weight", 2, 17408, Some(10), 64), GgmlType::Q6_K);
        assert_eq!(tensor_type(OutType::Q4KM, "output.weight", 2, 5120, None, 64), GgmlType::Q6_K);
        assert_eq!(tensor_type(OutType::Q4KM, "blk.1.ffn_up.weight", 2, 64, Some(1), 4), GgmlType::Q8_0);
        assert_eq!(tensor_type(OutType::Q8_0, "blk.1.ffn_up.weight", 2, 80, Some(1), 4), GgmlType::F16);
    }
}
