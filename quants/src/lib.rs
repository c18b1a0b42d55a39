//! ggml quantization formats, shared by the runtime (GGUF loading, the GPU engine, `convert`,
//! `synth`) and the CPU reference: [`GgmlType`] (ids, names, block geometry, row sizes with
//! checked arithmetic), dequantization (the oracle every GPU kernel and the GGUF loader is
//! judged by) and simple quantizers (for synthetic models, `convert` and tests).
//!
//! Layouts follow `docs/gguf-format-and-quants.md` §3. Every format stores `block_size` elements
//! in `type_size` bytes; a row of `n` elements (`n % block_size == 0`) is `n / block_size`
//! consecutive blocks. Dequantization reproduces ggml / gguf-py bit for bit: every product is an
//! f32 product in the same association as `ggml-quants.c` (e.g. Q4_K: `(d·sc)·q − (dmin·m)`).
//!
//! Quantizers are *not* required to match llama.cpp's (the K-quant ones use a simpler min/max fit
//! than ggml's iterative search); F16, BF16, Q8_0 and Q4_0 do match gguf-py bit for bit, and every
//! quantizer has a documented round-trip error bound (see each module). The committed gguf-py
//! fixtures (`tests/tests/cpu/quant_fixtures.rs`) check both directions.

pub mod as_matmul;
pub mod bf16;
pub mod f16;
pub mod f32;
pub mod k_scales;
pub mod promote;
pub mod q4_0;
pub mod q4_k;
pub mod q5_k;
pub mod q6_k;
pub mod q8_0;
pub mod q8_1;

pub use as_matmul::dequantize_as_matmul;
pub use promote::common_lossless_type;

use std::fmt;

/// A ggml tensor element type, identified in GGUF by its `u32` id.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GgmlType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q8_1,
    Q4_K,
    Q5_K,
    Q6_K,
    Q8_K,
    BF16,
}

impl GgmlType {
    /// Every type this crate knows the size of, in id order.
    pub const ALL: [GgmlType; 13] = [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
        GgmlType::Q8_1,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
        GgmlType::Q8_K,
        GgmlType::BF16,
    ];

    /// Types with a dequantizer and a quantizer here.
    pub const SUPPORTED: [GgmlType; 9] = [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::BF16,
        GgmlType::Q8_0,
        GgmlType::Q4_0,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
        GgmlType::Q8_1,
    ];

    /// The GGUF / ggml type id.
    pub const fn id(self) -> u32 {
        match self {
            GgmlType::F32 => 0,
            GgmlType::F16 => 1,
            GgmlType::Q4_0 => 2,
            GgmlType::Q4_1 => 3,
            GgmlType::Q5_0 => 6,
            GgmlType::Q5_1 => 7,
            GgmlType::Q8_0 => 8,
            GgmlType::Q8_1 => 9,
            GgmlType::Q4_K => 12,
            GgmlType::Q5_K => 13,
            GgmlType::Q6_K => 14,
            GgmlType::Q8_K => 15,
            GgmlType::BF16 => 30,
        }
    }

    /// The type with GGUF id `id`, or `None` for ids this crate does not know.
    pub fn from_id(id: u32) -> Option<GgmlType> {
        Self::ALL.into_iter().find(|t| t.id() == id)
    }

    /// ggml's name (`"Q4_K"`, `"BF16"`, …).
    pub const fn name(self) -> &'static str {
        match self {
            GgmlType::F32 => "F32",
            GgmlType::F16 => "F16",
            GgmlType::Q4_0 => "Q4_0",
            GgmlType::Q4_1 => "Q4_1",
            GgmlType::Q5_0 => "Q5_0",
            GgmlType::Q5_1 => "Q5_1",
            GgmlType::Q8_0 => "Q8_0",
            GgmlType::Q8_1 => "Q8_1",
            GgmlType::Q4_K => "Q4_K",
            GgmlType::Q5_K => "Q5_K",
            GgmlType::Q6_K => "Q6_K",
            GgmlType::Q8_K => "Q8_K",
            GgmlType::BF16 => "BF16",
        }
    }

    /// Parses a ggml name, case-insensitively.
    pub fn from_name(name: &str) -> Option<GgmlType> {
        Self::ALL.into_iter().find(|t| t.name().eq_ignore_ascii_case(name))
    }

    /// Elements per block.
    pub const fn block_size(self) -> usize {
        match self {
            GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => 1,
            GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q5_0 | GgmlType::Q5_1 | GgmlType::Q8_0 | GgmlType::Q8_1 => 32,
            GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K | GgmlType::Q8_K => 256,
        }
    }

    /// Bytes per block.
    pub const fn type_size(self) -> usize {
        match self {
            GgmlType::F32 => 4,
            GgmlType::F16 | GgmlType::BF16 => 2,
            GgmlType::Q4_0 => 18,
            GgmlType::Q4_1 => 20,
            GgmlType::Q5_0 => 22,
            GgmlType::Q5_1 => 24,
            GgmlType::Q8_0 => 34,
            GgmlType::Q8_1 => 36,
            GgmlType::Q4_K => 144,
            GgmlType::Q5_K => 176,
            GgmlType::Q6_K => 210,
            GgmlType::Q8_K => 292,
        }
    }

    /// Bytes of a row of `n` elements: `n / block_size · type_size`, or `None` when `n` is not a
    /// multiple of the block size or the product overflows.
    pub fn row_bytes(self, n: u64) -> Option<u64> {
        let bs = self.block_size() as u64;
        if !n.is_multiple_of(bs) {
            return None;
        }
        (n / bs).checked_mul(self.type_size() as u64)
    }

    /// Whether [`dequantize`] and [`quantize`] handle this type.
    pub fn is_supported(self) -> bool {
        Self::SUPPORTED.contains(&self)
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a (de)quantization request was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantError {
    #[error("{ty}: no (de)quantizer for this type (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, Q8_1)")]
    Unsupported { ty: GgmlType },
    #[error("{ty}: {elements} elements is not a multiple of the block size {block}")]
    NotBlockMultiple { ty: GgmlType, elements: usize, block: usize },
    #[error("{ty}: {bytes} bytes given for {elements} elements, expected {expected}")]
    LengthMismatch { ty: GgmlType, bytes: usize, elements: usize, expected: usize },
    #[error("{from} blocks cannot be rewritten as {to} without changing values (lossless: equal types, Q4_K → Q5_K)")]
    NotLossless { from: GgmlType, to: GgmlType },
}

pub(crate) fn check_lengths(ty: GgmlType, bytes: usize, elements: usize) -> Result<(), QuantError> {
    let block = ty.block_size();
    if !elements.is_multiple_of(block) {
        return Err(QuantError::NotBlockMultiple { ty, elements, block });
    }
    let expected = elements / block * ty.type_size();
    if bytes != expected {
        return Err(QuantError::LengthMismatch { ty, bytes, elements, expected });
    }
    Ok(())
}

/// Dequantizes `src` (whole blocks of `ty`) into `dst`; `dst.len()` is the element count.
pub fn dequantize_into(ty: GgmlType, src: &[u8], dst: &mut [f32]) -> Result<(), QuantError> {
    check_lengths(ty, src.len(), dst.len())?;
    let bs = ty.block_size();
    let ts = ty.type_size();
    let blocks = src.chunks_exact(ts).zip(dst.chunks_exact_mut(bs));
    match ty {
        GgmlType::F32 => blocks.for_each(|(b, o)| f32::dequantize_block(b, o)),
        GgmlType::F16 => blocks.for_each(|(b, o)| f16::dequantize_block(b, o)),
        GgmlType::BF16 => blocks.for_each(|(b, o)| bf16::dequantize_block(b, o)),
        GgmlType::Q8_0 => blocks.for_each(|(b, o)| q8_0::dequantize_block(b, o)),
        GgmlType::Q8_1 => blocks.for_each(|(b, o)| q8_1::dequantize_block(b, o)),
        GgmlType::Q4_0 => blocks.for_each(|(b, o)| q4_0::dequantize_block(b, o)),
        GgmlType::Q4_K => blocks.for_each(|(b, o)| q4_k::dequantize_block(b, o)),
        GgmlType::Q5_K => blocks.for_each(|(b, o)| q5_k::dequantize_block(b, o)),
        GgmlType::Q6_K => blocks.for_each(|(b, o)| q6_k::dequantize_block(b, o)),
        GgmlType::Q4_1 | GgmlType::Q5_0 | GgmlType::Q5_1 | GgmlType::Q8_K => {
            return Err(QuantError::Unsupported { ty })
        }
    }
    Ok(())
}

/// Dequantizes whole blocks of `ty` to a new vector of `src.len() / type_size · block_size` f32.
pub fn dequantize(ty: GgmlType, src: &[u8]) -> Result<Vec<f32>, QuantError> {
    let n = src.len() / ty.type_size() * ty.block_size();
    let mut out = vec![0.0; n];
    dequantize_into(ty, src, &mut out)?;
    Ok(out)
}

/// Quantizes `src` (a multiple of the block size) into `dst` (exactly the blocks' bytes).
pub fn quantize_into(ty: GgmlType, src: &[f32], dst: &mut [u8]) -> Result<(), QuantError> {
    check_lengths(ty, dst.len(), src.len())?;
    let bs = ty.block_size();
    let ts = ty.type_size();
    let blocks = src.chunks_exact(bs).zip(dst.chunks_exact_mut(ts));
    match ty {
        GgmlType::F32 => blocks.for_each(|(x, o)| f32::quantize_block(x, o)),
        GgmlType::F16 => blocks.for_each(|(x, o)| f16::quantize_block(x, o)),
        GgmlType::BF16 => blocks.for_each(|(x, o)| bf16::quantize_block(x, o)),
        GgmlType::Q8_0 => blocks.for_each(|(x, o)| q8_0::quantize_block(x, o)),
        GgmlType::Q8_1 => blocks.for_each(|(x, o)| q8_1::quantize_block(x, o)),
        GgmlType::Q4_0 => blocks.for_each(|(x, o)| q4_0::quantize_block(x, o)),
        GgmlType::Q4_K => blocks.for_each(|(x, o)| q4_k::quantize_block(x, o)),
        GgmlType::Q5_K => blocks.for_each(|(x, o)| q5_k::quantize_block(x, o)),
        GgmlType::Q6_K => blocks.for_each(|(x, o)| q6_k::quantize_block(x, o)),
        GgmlType::Q4_1 | GgmlType::Q5_0 | GgmlType::Q5_1 | GgmlType::Q8_K => {
            return Err(QuantError::Unsupported { ty })
        }
    }
    Ok(())
}

/// Quantizes `src` (a multiple of the block size) to a new byte vector.
pub fn quantize(ty: GgmlType, src: &[f32]) -> Result<Vec<u8>, QuantError> {
    let bs = ty.block_size();
    let mut out = vec![0u8; src.len() / bs * ty.type_size()];
    quantize_into(ty, src, &mut out)?;
    Ok(out)
}

/// IEEE binary16 from two little-endian bytes, as f32 (exact, subnormals/inf/NaN included).
#[inline]
pub(crate) fn f16_le(b: &[u8]) -> f32 {
    half::f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32()
}

/// f32 → IEEE binary16 (round to nearest even, like numpy's `astype(float16)`), little-endian.
#[inline]
pub(crate) fn put_f16(dst: &mut [u8], v: f32) {
    dst[..2].copy_from_slice(&half::f16::from_f32(v).to_bits().to_le_bytes());
}

/// Smallest f16 that is ≥ `v` (for positive finite `v` ≤ 65504), so that a scale stored as f16
/// never shrinks the representable range.
pub(crate) fn f16_round_up(v: f32) -> half::f16 {
    let h = half::f16::from_f32(v);
    if h.to_f32() < v && h.to_bits() < 0x7bff {
        half::f16::from_bits(h.to_bits() + 1)
    } else {
        h
    }
}

/// C `roundf`: round half away from zero (what ggml and gguf-py's `np_roundf` do).
#[inline]
pub(crate) fn round_half_away(v: f32) -> f32 {
    v.round()
}

/// `max |x|` over a slice (0 for an empty slice; NaN-free inputs assumed).
pub(crate) fn amax(x: &[f32]) -> f32 {
    x.iter().fold(0.0f32, |m, v| m.max(v.abs()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ids and names round-trip for every type; unknown ones are `None`.
    #[test]
    fn ids_and_names_round_trip() {
        for t in GgmlType::ALL {
            assert_eq!(GgmlType::from_id(t.id()), Some(t));
            assert_eq!(GgmlType::from_name(&t.name().to_lowercase()), Some(t));
        }
        assert_eq!(GgmlType::from_id(4), None);
        assert_eq!(GgmlType::from_name("Q4_2"), None);
    }

    /// Row sizes: whole blocks only, and an overflowing product is `None`, not a wrap.
    #[test]
    fn row_bytes_refuses_partial_blocks_and_overflow() {
        assert_eq!(GgmlType::Q4_K.row_bytes(512), Some(288));
        assert_eq!(GgmlType::Q8_0.row_bytes(96), Some(102));
        assert_eq!(GgmlType::BF16.row_bytes(3), Some(6));
        assert_eq!(GgmlType::Q4_K.row_bytes(300), None);
        assert_eq!(GgmlType::F32.row_bytes(u64::MAX / 2), None);
    }

    /// Length checks name the type and the numbers; types without a codec are refused.
    #[test]
    fn codecs_refuse_bad_lengths_and_unsupported_types() {
        let e = dequantize(GgmlType::Q8_0, &[0u8; 35]).unwrap_err();
        assert_eq!(e, QuantError::LengthMismatch { ty: GgmlType::Q8_0, bytes: 35, elements: 32, expected: 34 });
        let e = quantize(GgmlType::Q4_K, &[0.0; 100]).unwrap_err();
        assert!(e.to_string().contains("Q4_K: 100 elements is not a multiple of the block size 256"), "{e}");
        assert_eq!(quantize(GgmlType::Q5_0, &[0.0; 32]), Err(QuantError::Unsupported { ty: GgmlType::Q5_0 }));
        for t in GgmlType::SUPPORTED {
            let x: Vec<f32> = (0..t.block_size()).map(|i| i as f32 / 8.0 - 1.0).collect();
            let q = quantize(t, &x).expect("supported");
            assert_eq!(q.len(), t.type_size());
            assert_eq!(dequantize(t, &q).expect("supported").len(), t.block_size());
        }
    }
}
