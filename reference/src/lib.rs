//! The CPU oracle. Plain, obviously-correct f32/f64 code that every GPU kernel is judged by.
//!
//! One module per kernel family (`norm`, `qmatmul`, `sample`, …), named like the GPU kernels in
//! `gpu-kernels/src/<family>.rs` and the launchers in `host/src/gpu/<family>.rs`.

pub mod attention;
pub mod copy;
pub mod deltanet;
pub mod embed;
pub mod model;
pub mod norm;
pub mod qmatmul;
pub mod quant;
pub mod sample;
