//! Lossless promotion between quant formats: rewriting blocks of one type as blocks of another
//! that dequantize to bitwise the same values, so that matrices of different types can be
//! stacked into one (one matmul launch instead of several).
//!
//! The only non-trivial pair is **Q4_K → Q5_K**: both are 256-element super-blocks with the same
//! `d`, `dmin`, 12-byte 6-bit scales/mins and the same `qs` nibble order
//! (gguf-format-and-quants.md §3.6–3.7); Q5_K adds `qh[32]` (the 5th bit of each `q`) between
//! the scales and `qs`. A Q4_K block `d, dmin, scales[12], qs[128]` is the Q5_K block
//! `d, dmin, scales[12], qh = [0; 32], qs[128]`: `q = low | 0 << 4 = low`, and both dequantizers
//! compute `(d·sc)·q − (dmin·m)` with the same operands, so every value (NaN and ±Inf included)
//! is the same bits. It costs `176/144 = 1.22×` the bytes (0.6875 instead of 0.5625 B/weight).
//!
//! Not lossless, so never promoted: Q4_K/Q5_K → Q6_K (Q6_K is symmetric, `d·sc16·(q − 32)`, with
//! 8-bit signed scales per 16 elements and no min), anything → Q8_0 (one f16 scale per 32), and
//! every pair of differing float types.

use crate::{check_lengths, GgmlType, QuantError};

/// The type every one of `tys` converts to without changing a dequantized bit, or `None`:
/// the type itself when all are equal; Q5_K when every one is Q4_K or Q5_K; `None` for an empty
/// list and every other mix.
pub fn common_lossless_type(tys: &[GgmlType]) -> Option<GgmlType> {
    let &first = tys.first()?;
    if tys.iter().all(|&t| t == first) {
        return Some(first);
    }
    if tys.iter().all(|&t| matches!(t, GgmlType::Q4_K | GgmlType::Q5_K)) {
        return Some(GgmlType::Q5_K);
    }
    None
}

/// Whether blocks of `from` can be rewritten losslessly as blocks of `to` ([`promote`]).
pub fn promotes_losslessly(from: GgmlType, to: GgmlType) -> bool {
    from == to || (from == GgmlType::Q4_K && to == GgmlType::Q5_K)
}

/// Bytes of `raw` (whole blocks of `from`) once rewritten as blocks of `to`: the same block count
/// times `to`'s block size.
pub fn promoted_len(from: GgmlType, to: GgmlType, raw_len: usize) -> usize {
    raw_len / from.type_size() * to.type_size()
}

/// `raw` (whole blocks of `from`, `elements` values) rewritten as blocks of `to` that dequantize to
/// bitwise the same values ([`promotes_losslessly`]): a copy when the types are equal; Q4_K →
/// Q5_K inserts `qh = [0; 32]` after each block's scales. Errors: a pair that is not lossless
/// (named), or a length that is not `elements` values of `from`.
pub fn promote(from: GgmlType, to: GgmlType, raw: &[u8], elements: usize) -> Result<Vec<u8>, QuantError> {
    check_lengths(from, raw.len(), elements)?;
    if from == to {
        return Ok(raw.to_vec());
    }
    if !promotes_losslessly(from, to) {
        return Err(QuantError::NotLossless { from, to });
    }
    // Q4_K → Q5_K: d, dmin, scales (16 bytes) | qh = 0 (32) | qs (128).
    let mut out = Vec::with_capacity(promoted_len(from, to, raw.len()));
    for b in raw.chunks_exact(from.type_size()) {
        out.extend_from_slice(&b[..16]);
        out.extend_from_slice(&[0u8; 32]);
        out.extend_from_slice(&b[16..]);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dequantize;
    use GgmlType::*;

    #[test]
    fn common_lossless_type_of_k_quant_mixes() {
        assert_eq!(common_lossless_type(&[Q4_K, Q5_K]), Some(Q5_K));
        assert_eq!(common_lossless_type(&[Q5_K, Q4_K, Q4_K]), Some(Q5_K));
        for t in GgmlType::ALL {
            assert_eq!(common_lossless_type(&[t, t, t]), Some(t), "{t}");
        }
        assert_eq!(common_lossless_type(&[Q4_K, Q6_K]), None, "Q6_K is symmetric: no min");
        assert_eq!(common_lossless_type(&[Q5_K, Q6_K]), None);
        assert_eq!(common_lossless_type(&[Q4_K, Q5_K, Q6_K]), None);
        assert_eq!(common_lossless_type(&[Q4_K, Q8_0]), None);
        assert_eq!(common_lossless_type(&[F16, BF16]), None);
        assert_eq!(common_lossless_type(&[F16, F32]), None);
        assert_eq!(common_lossless_type(&[Q4_0, Q4_K]), None);
        assert_eq!(common_lossless_type(&[]), None);
    }

    /// A small xorshift stream (tests only).
    fn bytes(seed: u64, n: usize) -> Vec<u8> {
        let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s >> 24) as u8
            })
            .collect()
    }

    /// Random Q4_K blocks — every one of the 2^8 values of each scale byte (so every 6-bit scale
    /// and min of every sub-block, and their packed high bits), random `d`/`dmin` (NaN, ±Inf and
    /// subnormal bit patterns included) and random nibbles — dequantize to bitwise the same values
    /// as Q4_K and as the promoted Q5_K blocks.
    #[test]
    fn promoted_q4k_blocks_dequantize_bitwise_equal() {
        let mut raw = bytes(1, 256 * 144);
        for (i, b) in raw.chunks_exact_mut(144).enumerate() {
            for (j, s) in b[4..16].iter_mut().enumerate() {
                *s = (i + 37 * j) as u8;
            }
        }
        // Special scales: d, dmin = ±0, subnormal, max, Inf, NaN.
        let specials = [0x0000u16, 0x8000, 0x0001, 0x03ff, 0x7bff, 0x7c00, 0xfc00, 0x7e00, 0x7c01];
        for (i, b) in raw.chunks_exact_mut(144).take(specials.len() * specials.len()).enumerate() {
            b[0..2].copy_from_slice(&specials[i % specials.len()].to_le_bytes());
            b[2..4].copy_from_slice(&specials[i / specials.len()].to_le_bytes());
        }
        let n = raw.len() / 144 * 256;
        let promoted = promote(Q4_K, Q5_K, &raw, n).unwrap();
        assert_eq!(promoted.len(), promoted_len(Q4_K, Q5_K, raw.len()));
        assert_eq!(promoted.len(), n / 256 * 176);
        let (a, b) = (dequantize(Q4_K, &raw).unwrap(), dequantize(Q5_K, &promoted).unwrap());
        assert_eq!(a.len(), n);
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            assert_eq!(x.to_bits(), y.to_bits(), "element {i}: {x} vs {y}");
        }
        assert!(a.iter().any(|v| v.is_nan()) && a.iter().any(|v| v.is_infinite()), "specials reached");
    }

    #[test]
    fn promote_refuses_lossy_pairs_and_bad_lengths() {
        assert_eq!(promote(Q4_K, Q6_K, &[0; 144], 256), Err(QuantError::NotLossless { from: Q4_K, to: Q6_K }));
        assert_eq!(promote(Q5_K, Q4_K, &[0; 176], 256), Err(QuantError::NotLossless { from: Q5_K, to: Q4_K }));
        assert!(matches!(promote(Q4_K, Q5_K, &[0; 143], 256), Err(QuantError::LengthMismatch { .. })));
        let e = promote(Q4_K, Q6_K, &[0; 144], 256).unwrap_err().to_string();
        assert!(e.contains("Q4_K") && e.contains("Q6_K"), "{e}");
        let same = bytes(3, 2 * 34);
        assert_eq!(promote(Q8_0, Q8_0, &same, 64).unwrap(), same);
    }
}
