//! flashtree: speculative decoding (DFlash block-diffusion draft + DDTree tree verification) of
//! `qwen35` GGUF models on one NVIDIA GPU, with kernels written in Rust.

pub mod chat;
pub mod cli;
pub mod convert;
pub mod engine;
pub mod gguf;
pub mod gpu;
pub mod inspect;
pub mod model;
pub mod serve;
pub mod spec;
pub mod synth;
pub mod tokenizer;
