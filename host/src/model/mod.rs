//! Model configurations read from files, and the tensor inventories checked on load.
//!
//! * [`qwen35`]: the target — `Qwen35Config` from GGUF metadata (qwen35-architecture.md §13) and
//!   the expected tensor table (§12), validated against the file.
//! * [`draft`]: the DFlash draft — `DraftConfig` + weights from a z-lab folder (`config.json` +
//!   `model.safetensors`) or from a llama.cpp `dflash` GGUF (llamacpp-dflash.md §1).
//!
//! These are the only readers of model hyperparameters: `convert` (HF `config.json` in, GGUF
//! out), `inspect`, `generate`/`logits` and the CPU backend all go through `Qwen35Config` and
//! `DraftConfig`. Every size is bounded ([`qwen35::MAX_DIM`], [`qwen35::MAX_LAYERS`],
//! [`draft::MAX_BLOCK_SIZE`]) and cross-checked before anything is allocated from it, and every
//! error names the file, the key, what it holds and what was expected.

pub mod draft;
pub mod error;
pub mod inventory;
pub mod json;
pub mod qwen35;
pub mod safetensors_io;

pub use draft::{DraftConfig, DraftModel};
pub use error::ModelError;
pub use inventory::{ExpectedTensor, TensorRole};
pub use qwen35::{HfQwen35, Qwen35Config};
