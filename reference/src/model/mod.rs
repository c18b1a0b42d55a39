//! The whole-model references: the `qwen35` target (Gated DeltaNet + gated full attention) and the
//! DFlash block-diffusion draft, in plain f32 with f64 accumulation for every dot product.
//!
//! Weights are plain f32 structs ([`weights::Qwen35Weights`], [`dflash::DFlashWeights`]) that the
//! host fills from a GGUF or HF checkpoint. They are always in **GGUF conventions**: norms already
//! carry `1 + w` where the converter adds it, `ssm_a = −exp(A_log)`, and the Gated DeltaNet
//! value-head axis is in *tiled* order (value head `j` reads key head `j mod n_k_heads`).

pub mod attention;
pub mod deltanet;
pub mod dflash;
pub mod error;
pub mod mlp;
pub mod ops;
pub mod qwen35;
pub mod rope;
pub mod state;
pub mod tensor;
pub mod weights;

pub use error::ModelError;
pub use qwen35::{DeltaNetMode, ForwardOptions, ForwardOutput, TreeOutput};
pub use state::Qwen35State;
pub use tensor::Matrix;
pub use weights::{Qwen35Hparams, Qwen35Weights};
