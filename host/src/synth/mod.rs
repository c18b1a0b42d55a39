//! Synthetic `qwen35` models with seeded random weights (design.md §7): a target GGUF in the
//! per-tensor type mix of a stock llama.cpp quantization (gguf-format-and-quants.md §5), with
//! tokenizer metadata, and a matching DFlash draft folder (z-lab layout: `config.json` +
//! `model.safetensors`, BF16).
//!
//! Both files are streamed tensor by tensor, so the 27B preset (≈16.5 GB + 3.5 GB) needs memory
//! for one row block only. The `tiny` preset (≈1.5 MB) quantizes N(0, σ²) f32 weights with the
//! reference quantizers; larger presets write random quant blocks directly ([`blocks`]).

pub mod blocks;
pub mod mix;
pub mod rng;
pub mod shape;
pub mod vocab;
mod write;

pub use mix::{tensor_type, QuantMix};
pub use shape::{DraftShape, SynthShape};
pub use write::{synth, SynthOptions, SynthOutput};

/// Writes the tiny preset (Q4_K_M, with its draft) into `dir` with `seed`: the fixture other
/// tests use. Takes well under a second in release builds.
pub fn tiny(dir: &std::path::Path, seed: u64) -> anyhow::Result<SynthOutput> {
    synth(&SynthOptions {
        shape: SynthShape::tiny(),
        draft: Some(DraftShape::tiny()),
        mix: QuantMix::Q4KM,
        seed,
        out_dir: dir.to_path_buf(),
        name: "tiny".into(),
        tiktoken: None,
    })
}
