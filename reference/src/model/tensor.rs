//! A dense row-major f32 matrix `[rows = out features, cols = in features]`, the HF/GGUF layout.

use super::ModelError;

/// `W[out, in]`, row-major: row `o` holds the `cols` input weights of output `o`.
#[derive(Clone, Debug, PartialEq)]
pub struct Matrix {
    pub rows: usize,
    pub cols: usize,
    pub data: Vec<f32>,
}

impl Matrix {
    /// Wraps `data` as `[rows, cols]`; `name` is used in the error if the length does not match.
    pub fn new(name: &str, rows: usize, cols: usize, data: Vec<f32>) -> Result<Self, ModelError> {
        if rows.checked_mul(cols) != Some(data.len()) {
            return Err(ModelError::Shape {
                name: name.to_string(),
                got: vec![data.len()],
                expected: vec![rows, cols],
            });
        }
        Ok(Self { rows, cols, data })
    }

    /// Row `r` (the weights of output feature `r`).
    pub fn row(&self, r: usize) -> &[f32] {
        &self.data[r * self.cols..(r + 1) * self.cols]
    }

    /// `y = W x` with f64 accumulation per output, rounded once to f32.
    pub fn matvec(&self, x: &[f32]) -> Vec<f32> {
        assert_eq!(x.len(), self.cols, "matvec input length");
        self.data.chunks_exact(self.cols).map(|row| dot(row, x) as f32).collect()
    }

    /// Checks the shape against `[rows, cols]`, naming the tensor on mismatch.
    pub fn expect_shape(&self, name: &str, rows: usize, cols: usize) -> Result<(), ModelError> {
        if self.rows != rows || self.cols != cols || self.data.len() != rows * cols {
            return Err(ModelError::Shape {
                name: name.to_string(),
                got: vec![self.rows, self.cols],
                expected: vec![rows, cols],
            });
        }
        Ok(())
    }
}

/// `Σ a[i]·b[i]` accumulated in f64.
pub fn dot(a: &[f32], b: &[f32]) -> f64 {
    debug_assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(&x, &y)| x as f64 * y as f64).sum()
}

/// Checks a vector's length, naming the tensor on mismatch.
pub fn expect_len(name: &str, v: &[f32], len: usize) -> Result<(), ModelError> {
    if v.len() != len {
        return Err(ModelError::Shape { name: name.to_string(), got: vec![v.len()], expected: vec![len] });
    }
    Ok(())
}
