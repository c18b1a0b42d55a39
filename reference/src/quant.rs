//! ggml quantization formats: the codecs of `flashtree-quants` (re-exported here, so
//! `flashtree_reference::quant::*` names the same [`GgmlType`] and (de)quantizers the runtime
//! uses) and the matrix-vector oracle of the quantized matmul kernels.

pub use flashtree_quants::*;

/// `y[o] = Σ_i W[o, i] · x[i]` (f64 accumulation) for a weight matrix stored as whole rows of
/// `ty` blocks (`w` = `out` rows of `x.len()` elements each), dequantizing one row at a time:
/// the oracle for quantized matmul kernels.
pub fn gemv(ty: GgmlType, w: &[u8], x: &[f32]) -> Result<Vec<f64>, QuantError> {
    let row_bytes = ty.row_bytes(x.len() as u64).ok_or(QuantError::NotBlockMultiple {
        ty,
        elements: x.len(),
        block: ty.block_size(),
    })? as usize;
    if row_bytes == 0 || !w.len().is_multiple_of(row_bytes) {
        return Err(QuantError::LengthMismatch { ty, bytes: w.len(), elements: x.len(), expected: row_bytes });
    }
    let mut row = vec![0.0f32; x.len()];
    w.chunks_exact(row_bytes)
        .map(|r| {
            dequantize_into(ty, r, &mut row)?;
            Ok(row.iter().zip(x).map(|(&a, &b)| a as f64 * b as f64).sum())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Q8_0 row of 32 ones (d = 1/127 · 127) times x = 1..32 sums to 528 within f16 rounding.
    #[test]
    fn gemv_dequantizes_each_row() {
        let w = quantize(GgmlType::Q8_0, &[1.0; 64]).expect("two rows of one block");
        let x: Vec<f32> = (1..=32).map(|v| v as f32).collect();
        let y = gemv(GgmlType::Q8_0, &w, &x).expect("shapes match");
        assert_eq!(y.len(), 2);
        let d = half::f16::from_f32(1.0 / 127.0).to_f32() as f64 * 127.0;
        assert!((y[0] - 528.0 * d).abs() < 1e-9, "{y:?}");
        assert!(gemv(GgmlType::Q8_0, &w[..30], &x).is_err());
    }
}
