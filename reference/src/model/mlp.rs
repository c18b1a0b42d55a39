//! SwiGLU MLP: `down · (silu(gate · x) ⊙ (up · x))`.

use super::ops::silu;
use super::tensor::Matrix;

/// Weights of one SwiGLU MLP (`gate`, `up`: `[n_ff, n_embd]`, `down`: `[n_embd, n_ff]`).
#[derive(Clone, Debug)]
pub struct MlpWeights {
    pub gate: Matrix,
    pub up: Matrix,
    pub down: Matrix,
}

/// `down · (silu(gate·x) ⊙ (up·x))` for one token.
pub fn swiglu(w: &MlpWeights, x: &[f32]) -> Vec<f32> {
    swiglu_rows(w, &[x]).pop().expect("one row")
}

/// [`swiglu`] of every row of `xs` (the same bits; one pass over each matrix).
pub fn swiglu_rows<X: AsRef<[f32]>>(w: &MlpWeights, xs: &[X]) -> Vec<Vec<f32>> {
    let (gs, us) = (w.gate.matmul(xs), w.up.matmul(xs));
    let hs: Vec<Vec<f32>> =
        gs.iter().zip(&us).map(|(g, u)| g.iter().zip(u).map(|(&g, &u)| silu(g) * u).collect()).collect();
    w.down.matmul(&hs)
}
