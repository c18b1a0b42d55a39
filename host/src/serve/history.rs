//! Prefix reuse across turns: the tokens a request prefills when it continues the conversation
//! the worker's [`crate::spec::Session`] holds.
//!
//! **Why not just tokenise the rendered text.** A reply's text re-tokenised often gives other
//! tokens than the model generated (byte-level BPE's canonical split of a text is one of many;
//! a sampled or greedy reply need not be it), and then the next turn's tokens no longer start
//! with the ones in the caches, so the session prefills the whole conversation again.
//!
//! **What is kept.** [`History`] holds the tokens of the last turn — its prompt followed by every
//! token it generated (an EOS included), which the session's caches hold except possibly the
//! last, pending one ([`crate::spec::Session`]: a prompt that extends `prompt + output` always
//! reuses them) — and their text: the concatenated raw bytes of those ids. For the tokenizers we
//! load (byte-level BPE, `tokenizer.ggml.model = "gpt2"`, the only kind
//! [`crate::tokenizer::gguf::from_gguf`] accepts) that concatenation is the exact text the
//! tokens stand for: every id maps to fixed bytes, special tokens to their own text, with no
//! prefix space, normalisation or byte fallback undone on the way back. The text is kept only
//! when those bytes are valid UTF-8 and every id is in the tokenizer's vocabulary (the model's
//! may be larger); otherwise no request can extend it and every prompt is tokenised whole.
//!
//! **The rule** ([`History::continuation`]): when a request's rendered text starts with the
//! history's text and is longer, its tokens are the history's followed by the tokenisation of
//! the remaining text only, so the session reuses the caches; otherwise the whole text is
//! tokenised as a first request would be. A reply cut by a stop string, a client that rewrites
//! the assistant's text, an edited earlier message or another conversation run in between all
//! take the second way (all or nothing: the recurrent state cannot be rolled back).
//!
//! **Where it runs: in the worker, when the job starts.** The worker is the only owner of the
//! session and runs jobs one at a time, so the history it matches against is exactly what the
//! caches hold at that moment. Matching on the HTTP side when the request arrives would race
//! with the queue: a job of another conversation queued or running in between replaces the
//! caches, and the tokens chosen against the older history would no longer be reused (and
//! would differ from the plain tokenisation for no gain). So the HTTP side renders the text and
//! tokenises it whole — that *cold* tokenisation is what `count_tokens` reports, what the
//! context check uses and what a request runs when it does not continue the history — and the
//! worker swaps in the history's tokens only when they will be reused and still fit the context.

use crate::tokenizer::{Tokenizer, TokenizerError};

/// The tokens the session's caches hold after the last turn and their exact text.
#[derive(Debug, Clone, Default)]
pub struct History {
    /// The last turn's prompt and generated tokens.
    tokens: Vec<u32>,
    /// Their text (the ids' bytes concatenated), when that is valid UTF-8.
    text: Option<String>,
}

impl History {
    /// No conversation yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Forgets the conversation (after a failed turn, or when the caches were reset).
    pub fn clear(&mut self) {
        self.tokens.clear();
        self.text = None;
    }

    /// The tokens of the last turn (prompt, then output).
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// The exact text of [`Self::tokens`]; `None` when it is not valid UTF-8 (or holds an id
    /// outside the tokenizer's vocabulary), so no rendered prompt can continue it.
    pub fn text(&self) -> Option<&str> {
        self.text.as_deref()
    }

    /// Records a finished turn: `prompt` was run and `output` generated after it.
    pub fn record(&mut self, tk: &Tokenizer, prompt: &[u32], output: &[u32]) {
        self.tokens.clear();
        self.tokens.extend_from_slice(prompt);
        self.tokens.extend_from_slice(output);
        self.text = exact_text(tk, &self.tokens);
    }

    /// The tokens of the rendered prompt `text` when it continues this history: the history's
    /// tokens followed by the tokenisation of the text after the history's text. `None` when
    /// `text` does not start with the history's text or adds nothing to it.
    pub fn continuation(&self, tk: &Tokenizer, text: &str) -> Result<Option<Vec<u32>>, TokenizerError> {
        let Some(rest) = self.text.as_deref().and_then(|h| text.strip_prefix(h)).filter(|r| !r.is_empty()) else {
            return Ok(None);
        };
        let mut ids = self.tokens.clone();
        ids.extend(tk.encode(rest)?);
        Ok(Some(ids))
    }
}

/// The text `ids` stand for: their bytes concatenated, when every id is in the vocabulary and
/// the bytes are valid UTF-8.
fn exact_text(tk: &Tokenizer, ids: &[u32]) -> Option<String> {
    let mut bytes = Vec::new();
    for &id in ids {
        bytes.extend_from_slice(tk.token_bytes(id)?);
    }
    String::from_utf8(bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokenizer::tiktoken::QWEN35_PATTERN;
    use crate::tokenizer::Vocabulary;

    fn tiny() -> Tokenizer {
        let v = crate::synth::vocab::tiny_bpe(200, 512);
        let vocab = Vocabulary::from_gguf(v.tokens, &v.token_types, v.merges).unwrap();
        Tokenizer::new(vocab, QWEN35_PATTERN).unwrap()
    }

    fn byte_id(tk: &Tokenizer, b: u8) -> u32 {
        (0..256).find(|&id| tk.token_bytes(id) == Some(&[b][..])).unwrap()
    }

    #[test]
    fn detokenising_is_byte_exact_for_byte_level_bpe() {
        let tk = tiny();
        for text in ["the quick brown fox", "<|im_start|>user\nhello world!<|im_end|>\n", "é ß 日本 \u{1F600}\r\n\t x"]
        {
            let ids = tk.encode(text).unwrap();
            assert_eq!(exact_text(&tk, &ids).as_deref(), Some(text), "{ids:?}");
        }
        // A token split the tokenizer would not choose still decodes to its exact bytes.
        let split: Vec<u32> = "the".bytes().map(|b| byte_id(&tk, b)).collect();
        assert_ne!(split, tk.encode("the").unwrap());
        assert_eq!(exact_text(&tk, &split).as_deref(), Some("the"));
    }

    #[test]
    fn a_continuing_text_keeps_the_history_tokens_and_tokenises_only_the_rest() {
        let tk = tiny();
        let prompt = tk.encode("<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n").unwrap();
        // The "model" wrote `the fox` byte by byte, not in the canonical split.
        let output: Vec<u32> = "the fox".bytes().map(|b| byte_id(&tk, b)).collect();
        let mut h = History::new();
        h.record(&tk, &prompt, &output);
        assert_eq!(h.tokens().len(), prompt.len() + output.len());
        let next = format!("{}<|im_end|>\n<|im_start|>user\nmore<|im_end|>\n", h.text().unwrap());
        let ids = h.continuation(&tk, &next).unwrap().unwrap();
        assert!(ids.starts_with(h.tokens()));
        assert_eq!(ids[h.tokens().len()..], tk.encode(&next[h.text().unwrap().len()..]).unwrap()[..]);
        assert_eq!(exact_text(&tk, &ids).as_deref(), Some(next.as_str()));
        // The plain tokenisation differs: it would not extend the caches.
        assert!(!tk.encode(&next).unwrap().starts_with(h.tokens()));
    }

    #[test]
    fn a_text_that_does_not_continue_the_history_is_not_matched() {
        let tk = tiny();
        let mut h = History::new();
        assert_eq!(h.continuation(&tk, "anything").unwrap(), None);
        h.record(&tk, &tk.encode("hello world").unwrap(), &tk.encode("!").unwrap());
        assert_eq!(h.text(), Some("hello world!"));
        assert_eq!(h.continuation(&tk, "hello world!").unwrap(), None, "nothing new");
        assert_eq!(h.continuation(&tk, "hello there! more").unwrap(), None, "an edited start");
        assert_eq!(h.continuation(&tk, "hello").unwrap(), None, "shorter");
        assert!(h.continuation(&tk, "hello world! more").unwrap().is_some());
        h.clear();
        assert_eq!((h.tokens(), h.text()), (&[][..], None));
        assert_eq!(h.continuation(&tk, "hello world! more").unwrap(), None);
    }

    #[test]
    fn broken_utf8_or_unknown_ids_leave_no_text_to_continue() {
        let tk = tiny();
        let mut h = History::new();
        // Half of `é` (0xC3 0xA9): the bytes are not valid UTF-8.
        h.record(&tk, &tk.encode("a").unwrap(), &[byte_id(&tk, 0xC3)]);
        assert_eq!(h.text(), None);
        assert_eq!(h.continuation(&tk, "a\u{FFFD} b").unwrap(), None);
        // An id the model has but the tokenizer does not.
        h.record(&tk, &tk.encode("a").unwrap(), &[tk.vocab_size() as u32]);
        assert_eq!(h.text(), None);
    }
}
