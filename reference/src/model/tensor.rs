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

    /// `y = W x` with f64 accumulation per output, rounded once to f32. Inside
    /// [`with_device_rounding`], `x` is first rounded to f16 as the GPU matmul's input is.
    pub fn matvec(&self, x: &[f32]) -> Vec<f32> {
        assert_eq!(x.len(), self.cols, "matvec input length");
        if device_rounding() {
            let x = round_f16_scaled(x);
            return self.data.chunks_exact(self.cols).map(|row| dot(row, &x) as f32).collect();
        }
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

thread_local! {
    static DEVICE_ROUNDING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` with the GPU engine's storage roundings emulated on this thread: every matmul
/// input rounded to f16 (`qmm_prep_x`: scaled by a power of two, then rounded to nearest f16)
/// and the attention K/V rows rounded to f16 (the F16 KV cache), and — for head dims 64, 128 and
/// 256, which the tensor-core attention kernel serves — the attention queries rounded to f16
/// (`model::qwen35`). The result is the reference
/// of the engine's arithmetic; without it the reference is the exact f32/f64 model. Only the
/// engine's tests use it, to separate the error these designed roundings cause from a bug.
pub fn with_device_rounding<R>(f: impl FnOnce() -> R) -> R {
    let old = DEVICE_ROUNDING.with(|c| c.replace(true));
    let r = f();
    DEVICE_ROUNDING.with(|c| c.set(old));
    r
}

/// Whether [`with_device_rounding`] is in force on this thread.
pub fn device_rounding() -> bool {
    DEVICE_ROUNDING.with(|c| c.get())
}

/// Each value rounded to f16 after scaling the vector by the power of two that puts its largest
/// magnitude in `[2^14, 2^15)` (so no value overflows and only values below `2^-24` of the
/// largest reach the subnormal range), then scaled back (exact).
pub fn round_f16_scaled(x: &[f32]) -> Vec<f32> {
    let max = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    if max == 0.0 || !max.is_finite() {
        return x.to_vec();
    }
    let e = max.log2().floor() as i32;
    let up = (2f64).powi(14 - e);
    x.iter().map(|&v| (half::f16::from_f64(v as f64 * up).to_f64() / up) as f32).collect()
}

/// Each value rounded to the nearest f16 (the KV cache's storage).
pub fn round_f16(x: &[f32]) -> Vec<f32> {
    x.iter().map(|&v| half::f16::from_f32(v).to_f32()).collect()
}
