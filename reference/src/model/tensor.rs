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
        let x = if device_rounding() { round_f16_scaled(x) } else { x.to_vec() };
        (0..self.rows).map(|r| dot(self.row(r), &x) as f32).collect()
    }

    /// `y_j = W x_j` for every `x_j` of `xs`: bit for bit [`Matrix::matvec`] (the definition)
    /// of each — every output is the same f64 sum of the same products in the same order,
    /// rounded once to f32 — but faster: [`LANES`] such sums run side by side as independent
    /// accumulators (one f64 add chain each, so their latencies overlap instead of serialising
    /// one chain), over [`LANES`] inputs of two weight rows when there are enough inputs (one
    /// pass over `W` for all of them), else over [`LANES`] rows for one input; and large
    /// products split their rows over the rayon pool (a row's outputs are computed whole by
    /// one thread, so the split changes no bit).
    pub fn matmul<X: AsRef<[f32]>>(&self, xs: &[X]) -> Vec<Vec<f32>> {
        for x in xs {
            assert_eq!(x.as_ref().len(), self.cols, "matmul input length");
        }
        if self.rows == 0 {
            return vec![Vec::new(); xs.len()];
        }
        let round = device_rounding();
        let inputs: Vec<Vec<f64>> = xs
            .iter()
            .map(|x| {
                let x = x.as_ref();
                let x = if round { round_f16_scaled(x) } else { x.to_vec() };
                x.iter().map(|&v| v as f64).collect()
            })
            .collect();
        if inputs.len() < LANES / 2 {
            return inputs.iter().map(|x| self.rows_side_by_side(x)).collect();
        }
        // Each group of LANES inputs interleaved: `xts[g][c · LANES + j]` = input `g · LANES + j`,
        // column `c` (lanes past the last input hold 0 and are discarded).
        let groups = inputs.len().div_ceil(LANES);
        let xts: Vec<Vec<f64>> = inputs
            .chunks(LANES)
            .map(|group| {
                let mut xt = vec![0f64; self.cols * LANES];
                for (j, x) in group.iter().enumerate() {
                    for (c, &v) in x.iter().enumerate() {
                        xt[c * LANES + j] = v;
                    }
                }
                xt
            })
            .collect();
        // `ys[(r · groups + g) · LANES + j]`: output row `r` of input `g · LANES + j`. Each pair of
        // weight rows is read once and multiplied by every group while it is in L1.
        let per_row = groups * LANES;
        let mut ys = vec![0f32; self.rows * per_row];
        self.for_row_blocks(&mut ys, per_row, inputs.len(), |r0, ys| {
            let last_row = r0 + ys.len() / per_row - 1;
            let mut pairs = ys.chunks_exact_mut(2 * per_row);
            for (i, y) in (&mut pairs).enumerate() {
                let r = r0 + 2 * i;
                let (ya, yb) = y.split_at_mut(per_row);
                for (g, xt) in xts.iter().enumerate() {
                    let [a, b] = dot_lanes([self.row(r), self.row(r + 1)], xt);
                    ya[g * LANES..(g + 1) * LANES].copy_from_slice(&a);
                    yb[g * LANES..(g + 1) * LANES].copy_from_slice(&b);
                }
            }
            let last = pairs.into_remainder();
            if !last.is_empty() {
                for (g, xt) in xts.iter().enumerate() {
                    last[g * LANES..(g + 1) * LANES].copy_from_slice(&dot_lanes([self.row(last_row)], xt)[0]);
                }
            }
        });
        let mut out = vec![vec![0f32; self.rows]; xs.len()];
        for (i, y) in out.iter_mut().enumerate() {
            for (r, v) in y.iter_mut().enumerate() {
                *v = ys[r * per_row + i];
            }
        }
        out
    }

    /// `W x` for one input (as f64), [`LANES`] rows side by side.
    fn rows_side_by_side(&self, x: &[f64]) -> Vec<f32> {
        let mut y = vec![0f32; self.rows];
        self.for_row_blocks(&mut y, 1, 1, |r0, ys| {
            let done = ys.len() / LANES * LANES;
            let mut blocks = ys.chunks_exact_mut(LANES);
            for (b, y) in (&mut blocks).enumerate() {
                let rows: [&[f32]; LANES] = std::array::from_fn(|j| self.row(r0 + b * LANES + j));
                y.copy_from_slice(&dot_rows(rows, x));
            }
            for (i, y) in blocks.into_remainder().iter_mut().enumerate() {
                *y = self.row(r0 + done + i).iter().zip(x).fold(-0.0f64, |a, (&w, &v)| a + w as f64 * v) as f32;
            }
        });
        y
    }

    /// Runs `f(first_row, out)` over `out` (`per_row` values per row) in blocks of rows: one
    /// block below [`PARALLEL_MIN_MACS`] multiply-adds (`inputs` per weight), else blocks of a
    /// multiple of [`LANES`] rows and at least [`TASK_MIN_MACS`] on the rayon pool.
    fn for_row_blocks(&self, out: &mut [f32], per_row: usize, inputs: usize, f: impl Fn(usize, &mut [f32]) + Sync) {
        let work = self.rows.saturating_mul(self.cols).saturating_mul(inputs);
        if work < PARALLEL_MIN_MACS {
            return f(0, out);
        }
        // At most 64 blocks, each of at least TASK_MIN_MACS (a rayon task's cost is a few µs).
        let min_rows = TASK_MIN_MACS.div_ceil(self.cols.saturating_mul(inputs).max(1));
        let rows = self.rows.div_ceil(64).max(min_rows).next_multiple_of(LANES);
        use rayon::prelude::*;
        out.par_chunks_mut(rows * per_row).enumerate().for_each(|(t, o)| f(t * rows, o));
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

/// Inputs whose dot products [`Matrix::matmul`] runs side by side.
pub const LANES: usize = 8;

/// Below this many multiply-adds a [`Matrix::matmul`] runs on the calling thread.
const PARALLEL_MIN_MACS: usize = 1 << 17;

/// Least multiply-adds of one parallel block of [`Matrix::matmul`].
const TASK_MIN_MACS: usize = 1 << 16;

/// [`dot`] of each of [`LANES`] rows with `x`, each rounded to f32: lane `j` is exactly
/// `dot(rows[j], x) as f32` (summed from `−0.0` in column order, as [`Iterator::sum`]).
#[inline]
fn dot_rows(rows: [&[f32]; LANES], x: &[f64]) -> [f32; LANES] {
    dot_rows_f64(rows, x).map(|a| a as f32)
}

/// [`dot`] of each of [`LANES`] rows with `x` (as f64), unrounded.
#[inline]
fn dot_rows_f64(rows: [&[f32]; LANES], x: &[f64]) -> [f64; LANES] {
    let rows = rows.map(|r| &r[..x.len()]);
    let mut acc = [-0.0f64; LANES];
    for (c, &v) in x.iter().enumerate() {
        for j in 0..LANES {
            acc[j] += rows[j][c] as f64 * v;
        }
    }
    acc
}

/// `dot(rows[i], x)` for every row (each `x.len()` long): bit for bit [`dot`], [`LANES`] rows side
/// by side (independent add chains).
pub fn dots(rows: &[&[f32]], x: &[f32]) -> Vec<f64> {
    let xd: Vec<f64> = x.iter().map(|&v| v as f64).collect();
    let mut out = Vec::with_capacity(rows.len());
    let mut blocks = rows.chunks_exact(LANES);
    for b in &mut blocks {
        out.extend(dot_rows_f64(std::array::from_fn(|j| b[j]), &xd));
    }
    out.extend(blocks.remainder().iter().map(|r| dot(r, x)));
    out
}

/// [`dot`] of each of `R` rows with each of [`LANES`] interleaved inputs (`xt[c · LANES + j]`),
/// each rounded to f32: `[r][j]` is exactly `dot(rows[r], x_j) as f32` — the same products,
/// summed from `−0.0` in the same order ([`Iterator::sum`]'s definition for floats). `R · LANES`
/// independent add chains: with two rows, enough to keep the adds' pipeline full. Compiled
/// twice, plain and with AVX (chosen at run time); both are the same IEEE operations — Rust
/// never fuses a multiply and an add — so the bits do not depend on the CPU.
#[inline]
fn dot_lanes<const R: usize>(rows: [&[f32]; R], xt: &[f64]) -> [[f32; LANES]; R] {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx") {
        // SAFETY: this CPU has AVX (checked just above).
        return unsafe { dot_lanes_avx(rows, xt) };
    }
    dot_lanes_body(rows, xt)
}

/// [`dot_lanes`] compiled for AVX.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
fn dot_lanes_avx<const R: usize>(rows: [&[f32]; R], xt: &[f64]) -> [[f32; LANES]; R] {
    dot_lanes_body(rows, xt)
}

/// The arithmetic of [`dot_lanes`].
#[inline(always)]
fn dot_lanes_body<const R: usize>(rows: [&[f32]; R], xt: &[f64]) -> [[f32; LANES]; R] {
    let cols = xt.len() / LANES;
    let rows = rows.map(|r| &r[..cols]);
    let mut acc = [[-0.0f64; LANES]; R];
    for (c, x) in xt.chunks_exact(LANES).enumerate() {
        for r in 0..R {
            let w = rows[r][c] as f64;
            for j in 0..LANES {
                acc[r][j] += w * x[j];
            }
        }
    }
    acc.map(|a| a.map(|v| v as f32))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic values with exact zeros of both signs, tiny and large magnitudes.
    fn values(seed: u64, n: usize) -> Vec<f32> {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                match s % 16 {
                    0 => 0.0,
                    1 => -0.0,
                    2 => ((s >> 8) as f32 / u64::MAX as f32) * 1e-30,
                    _ => ((s >> 11) as f64 / (1u64 << 53) as f64 * 8.0 - 4.0) as f32 * ((s >> 4) % 7) as f32,
                }
            })
            .collect()
    }

    #[test]
    fn dots_are_dot_of_each_row_bit_for_bit() {
        for n in [0usize, 1, 7, 8, 9, 17, 40] {
            let data = values(n as u64, n * 64);
            let mut rows: Vec<&[f32]> = data.chunks_exact(64).collect();
            let neg = vec![-0.0f32; 64];
            if n > 0 {
                rows[0] = &neg; // x is positive: every product −0.0, the sum −0.0 only from a −0.0 start
            }
            let x: Vec<f32> = values(99, 64).iter().map(|v| v.abs() + 1.0).collect();
            let got = dots(&rows, &x);
            let want: Vec<f64> = rows.iter().map(|r| dot(r, &x)).collect();
            assert_eq!(
                got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "{n} rows"
            );
        }
    }

    #[test]
    fn matmul_is_matvec_of_each_input_bit_for_bit() {
        // Shapes on both sides of the lane count and of the parallel threshold.
        for (i, &(rows, cols, n)) in [
            (1, 1, 1),
            (3, 5, 0),
            (0, 4, 9),
            (2, 0, 9),
            (7, 33, 1),
            (16, 64, 8),
            (9, 40, 9),
            (130, 300, 23),
            (1100, 1000, 3),
            (2048, 600, 17),
        ]
        .iter()
        .enumerate()
        {
            let mut data = values(i as u64, rows * cols);
            if rows > 0 {
                data[..cols].iter_mut().for_each(|v| *v = 1.0); // row 0 × an all −0.0 input: −0.0
            }
            let w = Matrix::new("w", rows, cols, data).unwrap();
            let mut xs: Vec<Vec<f32>> = (0..n).map(|j| values(100 + (i * 31 + j) as u64, cols)).collect();
            if let Some(x) = xs.first_mut() {
                x.iter_mut().for_each(|v| *v = -0.0); // every product ±0.0: the sum's sign
            }
            for rounded in [false, true] {
                let run = || (w.matmul(&xs), xs.iter().map(|x| w.matvec(x)).collect::<Vec<_>>());
                let (got, want) = if rounded { with_device_rounding(run) } else { run() };
                assert_eq!(got.len(), n);
                for (j, (g, e)) in got.iter().zip(&want).enumerate() {
                    let gb: Vec<u32> = g.iter().map(|v| v.to_bits()).collect();
                    let eb: Vec<u32> = e.iter().map(|v| v.to_bits()).collect();
                    assert!(gb == eb, "rows {rows} cols {cols} n {n} input {j} rounded {rounded}");
                }
            }
        }
    }
}
