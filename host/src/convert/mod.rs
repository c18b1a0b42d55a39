//! Checkpoint conversion: HF Qwen3.5 text checkpoints and z-lab DFlash drafts → reference weights
//! (and, with the GGUF writer, → GGUF files).
//!
//! Every HF → GGUF transform of `qwen35-architecture.md` §12 lives in [`transforms`] and is applied
//! per tensor by [`qwen35::hf_to_gguf_tensor`], so the direct HF loader and the GGUF converter
//! produce exactly the same tensors.

pub mod dflash;
pub mod error;
pub mod gguf_load;
pub mod gguf_write;
pub mod hf_config;
pub mod out_type;
pub mod qwen35;
pub mod safetensors;
pub mod tokenizer;
pub mod transforms;

pub use error::ConvertError;

/// An f32 tensor with its PyTorch shape (outermost first; a `[out, in]` matrix is `[rows, cols]`).
#[derive(Clone, Debug, PartialEq)]
pub struct TensorF32 {
    pub shape: Vec<usize>,
    pub data: Vec<f32>,
}
