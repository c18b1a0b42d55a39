//! The tokenizer as GGUF stores it (`tokenizer.ggml.tokens`, `.token_type`, `.merges`): byte-level
//! token strings indexed by id, a type per id, and `"left right"` merges in priority order. Built
//! from a GGUF's metadata or from tiktoken ranks (the merges of a tiktoken vocabulary are derived
//! the way tiktoken itself would form each token, see [`merge_of`]).

use std::collections::HashMap;

use super::TokenizerError;

/// GGUF token types (llama.cpp `llama_token_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenType {
    /// An ordinary BPE token.
    Normal = 1,
    /// Unknown token.
    Unknown = 2,
    /// A control (special) token such as `<|im_end|>`.
    Control = 3,
    /// A user-defined added token (matched in text like a special token).
    UserDefined = 4,
    /// A padding slot of the embedding matrix.
    Unused = 5,
    /// A byte-fallback token.
    Byte = 6,
}

impl TokenType {
    /// From the GGUF integer.
    pub fn from_i32(v: i32) -> Option<Self> {
        Some(match v {
            1 => Self::Normal,
            2 => Self::Unknown,
            3 => Self::Control,
            4 => Self::UserDefined,
            5 => Self::Unused,
            6 => Self::Byte,
            _ => return None,
        })
    }
}

/// GPT-2's byte → char table of byte-level BPE: printable bytes map to themselves, the other 68
/// to U+0100.. in byte order.
pub fn byte_to_char() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut extra = 0u32;
    for b in 0..=255u8 {
        let printable = matches!(b, 33..=126 | 161..=172 | 174..=255);
        table[b as usize] = if printable {
            b as char
        } else {
            extra += 1;
            char::from_u32(255 + extra).unwrap_or('\0')
        };
    }
    table
}

/// Byte-level string of raw bytes.
pub fn bytes_to_token_string(bytes: &[u8], table: &[char; 256]) -> String {
    bytes.iter().map(|&b| table[b as usize]).collect()
}

/// A tokenizer in GGUF form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vocabulary {
    /// Token strings by id (byte-level for normal tokens, literal text for added/control ones).
    pub tokens: Vec<String>,
    /// Type of each id.
    pub token_types: Vec<TokenType>,
    /// `"left right"` merges, highest priority first.
    pub merges: Vec<String>,
}

impl Vocabulary {
    /// From GGUF arrays. Checks lengths and types.
    pub fn from_gguf(tokens: Vec<String>, token_types: &[i32], merges: Vec<String>) -> Result<Self, TokenizerError> {
        if tokens.len() != token_types.len() {
            return Err(TokenizerError::Vocab(format!(
                "tokenizer.ggml.token_type has {} entries, tokenizer.ggml.tokens has {}",
                token_types.len(),
                tokens.len()
            )));
        }
        let token_types = token_types
            .iter()
            .enumerate()
            .map(|(i, &t)| {
                TokenType::from_i32(t).ok_or_else(|| {
                    TokenizerError::Vocab(format!("tokenizer.ggml.token_type[{i}] = {t}, expected 1..=6"))
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Self { tokens, token_types, merges })
    }

    /// From tiktoken `ranks` (rank = id) and `specials` (`(id, text)`, control tokens), padded
    /// with `[PAD{id}]` unused tokens up to `vocab_size` (e.g. the embedding rows, 248 320).
    ///
    /// Merges: see [`merge_of`]; one per token that tiktoken can form, with the token's rank as
    /// priority, so BPE over these merges (with whole-piece lookup first) gives tiktoken's ids.
    /// With the Qwen3.5 ranks that is 247 587 merges, the count real Qwen3.5 GGUFs carry.
    pub fn from_tiktoken(
        ranks: &[(Vec<u8>, u32)],
        specials: &[(u32, String)],
        vocab_size: usize,
    ) -> Result<Self, TokenizerError> {
        let max_id = ranks.iter().map(|r| r.1).chain(specials.iter().map(|s| s.0)).max().map_or(0, |m| m as usize + 1);
        let n = vocab_size.max(max_id);
        if n > 16_000_000 {
            return Err(TokenizerError::Vocab(format!("vocabulary of {n} tokens is absurd")));
        }
        let table = byte_to_char();
        let mut tokens: Vec<Option<String>> = vec![None; n];
        let mut token_types = vec![TokenType::Unused; n];
        let by_bytes: HashMap<&[u8], u32> = ranks.iter().map(|(b, r)| (b.as_slice(), *r)).collect();
        for (b, r) in ranks {
            let slot = &mut tokens[*r as usize];
            if slot.is_some() {
                return Err(TokenizerError::Vocab(format!("rank {r} appears twice")));
            }
            *slot = Some(bytes_to_token_string(b, &table));
            token_types[*r as usize] = TokenType::Normal;
        }
        for (id, text) in specials {
            let slot = &mut tokens[*id as usize];
            if slot.is_some() {
                return Err(TokenizerError::Vocab(format!(
                    "special token {text} has id {id}, which a rank already uses"
                )));
            }
            *slot = Some(text.clone());
            token_types[*id as usize] = TokenType::Control;
        }
        let mut merges: Vec<(u32, String)> = Vec::new();
        for (b, r) in ranks {
            if b.len() < 2 {
                continue;
            }
            if let Some((l, rr)) = merge_of(b, &by_bytes) {
                merges
                    .push((*r, format!("{} {}", bytes_to_token_string(l, &table), bytes_to_token_string(rr, &table))));
            }
        }
        merges.sort();
        let tokens = tokens.into_iter().enumerate().map(|(i, t)| t.unwrap_or_else(|| format!("[PAD{i}]"))).collect();
        Ok(Self { tokens, token_types, merges: merges.into_iter().map(|m| m.1).collect() })
    }
}

/// A merge: the left and right parts of a token.
pub type MergePair<'a> = (&'a [u8], &'a [u8]);

/// tiktoken's byte-pair merge of `piece` with every rank: repeatedly merge the adjacent pair
/// whose concatenation has the lowest rank (leftmost on ties) until no adjacent pair is a token.
/// Returns the parts left and the last merge made.
pub fn bpe_parts<'a>(piece: &'a [u8], ranks: &HashMap<&[u8], u32>) -> (Vec<&'a [u8]>, Option<MergePair<'a>>) {
    let mut parts: Vec<&[u8]> = piece.chunks(1).collect();
    let mut last = None;
    loop {
        let mut best: Option<(u32, usize)> = None;
        for i in 0..parts.len().saturating_sub(1) {
            let joined = &piece[offset(piece, parts[i])..offset(piece, parts[i + 1]) + parts[i + 1].len()];
            if let Some(&r) = ranks.get(joined) {
                if best.is_none_or(|b| r < b.0) {
                    best = Some((r, i));
                }
            }
        }
        let Some((_, i)) = best else { return (parts, last) };
        last = Some((parts[i], parts[i + 1]));
        let start = offset(piece, parts[i]);
        let end = offset(piece, parts[i + 1]) + parts[i + 1].len();
        parts[i] = &piece[start..end];
        parts.remove(i + 1);
    }
}

/// The merge `(left, right)` by which tiktoken forms `token` (≥ 2 bytes), or `None` when it
/// never does (BPE over its bytes ends in several parts).
///
/// It is the last merge of tiktoken's BPE over the token's own bytes *with every rank*. Inside
/// any larger piece that ends up holding the token, no part crossed the token's boundary before
/// it was formed, so the merges inside its span are exactly those of the token alone, and the
/// last one is this pair. Restricting the BPE to ranks below the token's own (HF's older
/// `bpe(…, max_rank)` derivation) misses tokens whose formation passes through a higher-ranked
/// intermediate: 31 of the Qwen3.5 vocabulary, e.g. `人力资源` = `人力` (rank 108 583) +
/// `资源`, where `人力` outranks `人力资源` (99 655).
pub fn merge_of<'a>(token: &'a [u8], ranks: &HashMap<&[u8], u32>) -> Option<MergePair<'a>> {
    match bpe_parts(token, ranks) {
        (parts, last) if parts.len() == 1 => last,
        _ => None,
    }
}

/// Byte offset of subslice `part` inside `whole`.
fn offset(whole: &[u8], part: &[u8]) -> usize {
    part.as_ptr() as usize - whole.as_ptr() as usize
}
