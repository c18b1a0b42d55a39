//! HF `config.json` of a Qwen3.5 text model → what the converter needs. The parsing and every
//! check live in [`Qwen35Config::from_hf_json`] (the one target config reader); this adds the
//! reference hyperparameters and the GGUF-only details.

use super::ConvertError;
use crate::model::json::read_config_text;
use crate::model::Qwen35Config;
use flashtree_reference::model::Qwen35Hparams;
use std::path::Path;

/// The parsed text config plus what the GGUF metadata needs beyond the forward's hyperparameters.
#[derive(Clone, Debug, PartialEq)]
pub struct HfQwen35Config {
    /// The config as the GGUF will state it.
    pub config: Qwen35Config,
    pub hparams: Qwen35Hparams,
    pub tie_word_embeddings: bool,
    pub context_length: usize,
    /// `full_attention_interval` as given (the pattern itself is in `hparams.recurrent`).
    pub full_attention_interval: Option<usize>,
    /// `rope_parameters.mrope_section` (for `rope.dimension_sections`), padded to 4 with zeros.
    pub mrope_sections: [i32; 4],
    /// `true` when tensors are under `model.language_model.` (multimodal checkpoint).
    pub multimodal: bool,
}

/// Reads and parses `dir/config.json`.
pub fn read(dir: &Path) -> Result<HfQwen35Config, ConvertError> {
    let path = dir.join("config.json");
    parse(&read_config_text(&path)?, &path)
}

/// Parses config text (`file` for messages).
pub fn parse(text: &str, file: &Path) -> Result<HfQwen35Config, ConvertError> {
    let hf = Qwen35Config::from_hf_json(text, file)?;
    let c = hf.config;
    let mut mrope_sections = [0i32; 4];
    for (dst, &v) in mrope_sections.iter_mut().zip(c.rope_dimension_sections.iter().flatten()) {
        *dst = v as i32; // bounded by MAX_DIM when read
    }
    Ok(HfQwen35Config {
        hparams: c.hparams(),
        tie_word_embeddings: hf.tie_word_embeddings,
        context_length: c.context_length,
        full_attention_interval: c.full_attention_interval,
        mrope_sections,
        multimodal: hf.multimodal,
        config: c,
    })
}
