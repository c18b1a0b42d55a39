//! Reference of `embed`: rows of a token-embedding table, dequantized.

use crate::quant::{dequantize_into, GgmlType, QuantError};

/// `out[r, :] = dequant(row tokens[r] of table)` for a table of whole rows of `n_embd` elements of
/// type `ty` (`table.len() / row_bytes` = `n_vocab` rows). A token `≥ n_vocab` gives a row of NaN
/// (what the GPU kernel writes). Returns `tokens.len() · n_embd` values, bit for bit
/// [`crate::quant::dequantize`] of each row.
pub fn embed_rows(ty: GgmlType, table: &[u8], n_embd: usize, tokens: &[u32]) -> Result<Vec<f32>, QuantError> {
    let block = ty.block_size();
    let row_bytes =
        ty.row_bytes(n_embd as u64).ok_or(QuantError::NotBlockMultiple { ty, elements: n_embd, block })? as usize;
    if row_bytes == 0 || !table.len().is_multiple_of(row_bytes) {
        return Err(QuantError::LengthMismatch { ty, bytes: table.len(), elements: n_embd, expected: row_bytes });
    }
    let n_vocab = table.len() / row_bytes;
    let mut out = vec![f32::NAN; tokens.len() * n_embd];
    for (&tok, o) in tokens.iter().zip(out.chunks_exact_mut(n_embd.max(1))) {
        if (tok as usize) < n_vocab {
            let t = tok as usize;
            dequantize_into(ty, &table[t * row_bytes..(t + 1) * row_bytes], o)?;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::{dequantize, quantize};

    #[test]
    fn rows_are_the_dequantized_table_rows_and_bad_tokens_are_nan() {
        let n_embd = 512;
        let x: Vec<f32> = (0..3 * n_embd).map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0).collect();
        for ty in [
            GgmlType::F32,
            GgmlType::F16,
            GgmlType::BF16,
            GgmlType::Q8_0,
            GgmlType::Q4_K,
            GgmlType::Q5_K,
            GgmlType::Q6_K,
        ] {
            let table = quantize(ty, &x).expect("quantize");
            let all = dequantize(ty, &table).expect("dequantize");
            let out = embed_rows(ty, &table, n_embd, &[2, 0, 2, 3]).expect("embed");
            assert_eq!(out.len(), 4 * n_embd);
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&out[..n_embd]), bits(&all[2 * n_embd..]), "{ty}");
            assert_eq!(bits(&out[n_embd..2 * n_embd]), bits(&all[..n_embd]), "{ty}");
            assert_eq!(bits(&out[2 * n_embd..3 * n_embd]), bits(&all[2 * n_embd..]), "{ty}");
            assert!(out[3 * n_embd..].iter().all(|v| v.is_nan()), "{ty}: token 3 ≥ n_vocab = 3");
        }
    }

    #[test]
    fn table_must_be_whole_rows() {
        let table = vec![0u8; 144 * 3];
        assert!(embed_rows(GgmlType::Q4_K, &table, 256, &[0]).is_ok());
        assert!(embed_rows(GgmlType::Q4_K, &table, 512, &[0]).is_err());
        assert!(embed_rows(GgmlType::Q4_K, &table, 100, &[0]).is_err());
    }
}
