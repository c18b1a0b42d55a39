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
    let g = w.gate.matvec(x);
    let u = w.up.matvec(x);
    let h: Vec<f32> = g.iter().zip(&u).map(|(&g, &u)| silu(g) * u).collect();
    w.down.matvec(&h)
}
