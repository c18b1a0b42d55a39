//! Building the tokenizer from a GGUF's `tokenizer.*` metadata (gguf-format-and-quants.md §6).

use super::tiktoken::QWEN35_PATTERN;
use super::{Tokenizer, TokenizerError, Vocabulary};
use crate::gguf::Gguf;

/// The Qwen2 pre-tokenizer pattern (`tokenizer.ggml.pre = "qwen2"`): the qwen35 one without
/// the combining-mark classes.
pub const QWEN2_PATTERN: &str =
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// A GGUF's tokenizer with what generation needs from the same metadata.
#[derive(Debug)]
pub struct GgufTokenizer {
    /// The tokenizer.
    pub tokenizer: Tokenizer,
    /// Ids that end generation: `eos_token_id`, `eot_token_id`, and `<|im_end|>` /
    /// `<|endoftext|>` when the vocabulary has them.
    pub stop_ids: Vec<u32>,
    /// `tokenizer.chat_template`, if present.
    pub chat_template: Option<String>,
}

fn err(file: &Gguf, what: String) -> TokenizerError {
    TokenizerError::Vocab(format!("{}: {what}", file.path().display()))
}

/// Reads `tokenizer.ggml.{model, pre, tokens, token_type, merges, eos_token_id, eot_token_id}`
/// and `tokenizer.chat_template`. Only byte-level BPE (`gpt2`) with the `qwen35` or `qwen2`
/// pre-tokenizer is supported; anything else is an error naming the key.
pub fn from_gguf(file: &Gguf) -> Result<GgufTokenizer, TokenizerError> {
    let e = |k: &str, x: crate::gguf::GgufError| err(file, format!("{k}: {x}"));
    let model = file.get_str("tokenizer.ggml.model").map_err(|x| e("tokenizer.ggml.model", x))?;
    if model != "gpt2" {
        return Err(err(file, format!("tokenizer.ggml.model is {model:?}, expected \"gpt2\" (byte-level BPE)")));
    }
    let pre = file.opt_str("tokenizer.ggml.pre").map_err(|x| e("tokenizer.ggml.pre", x))?.unwrap_or("qwen35");
    let pattern = match pre {
        "qwen35" => QWEN35_PATTERN,
        "qwen2" => QWEN2_PATTERN,
        other => {
            return Err(err(
                file,
                format!("tokenizer.ggml.pre {other:?} is not supported (expected \"qwen35\" or \"qwen2\")"),
            ))
        }
    };
    let tokens: Vec<String> = file
        .get_str_array("tokenizer.ggml.tokens")
        .map_err(|x| e("tokenizer.ggml.tokens", x))?
        .into_iter()
        .map(String::from)
        .collect();
    let types: Vec<i32> = file
        .get_int_array("tokenizer.ggml.token_type")
        .map_err(|x| e("tokenizer.ggml.token_type", x))?
        .into_iter()
        .map(|t| i32::try_from(t).unwrap_or(-1))
        .collect();
    let merges: Vec<String> = match file.get("tokenizer.ggml.merges") {
        Some(_) => file
            .get_str_array("tokenizer.ggml.merges")
            .map_err(|x| e("tokenizer.ggml.merges", x))?
            .into_iter()
            .map(String::from)
            .collect(),
        None => Vec::new(),
    };
    let vocab = Vocabulary::from_gguf(tokens, &types, merges).map_err(|x| err(file, x.to_string()))?;
    let tokenizer = Tokenizer::new(vocab, pattern).map_err(|x| err(file, x.to_string()))?;
    let mut stop_ids = Vec::new();
    for key in ["tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"] {
        if let Some(id) = file.opt_u32(key).map_err(|x| e(key, x))? {
            if id as usize >= tokenizer.vocab_size() {
                return Err(err(file, format!("{key} = {id} is outside the vocabulary of {}", tokenizer.vocab_size())));
            }
            stop_ids.push(id);
        }
    }
    for name in ["<|im_end|>", "<|endoftext|>"] {
        if let Some(id) = tokenizer.token_id(name) {
            stop_ids.push(id);
        }
    }
    stop_ids.sort_unstable();
    stop_ids.dedup();
    let chat_template =
        file.opt_str("tokenizer.chat_template").map_err(|x| e("tokenizer.chat_template", x))?.map(String::from);
    Ok(GgufTokenizer { tokenizer, stop_ids, chat_template })
}
