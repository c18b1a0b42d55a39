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
//! prefix space, normalisation or byte fallback undone on the way back. A prompt may continue
//! the text of all the tokens, or of all but the last (a raw completion continued without the
//! EOS token's text, a reply cut inside a character): each only where its bytes are valid UTF-8
//! and every id is in the tokenizer's vocabulary (the model's may be larger). A reply broken
//! before its last token reaches the client with U+FFFD in it: no prompt continues it.
//!
//! **The rule** ([`History::continuation`]): when a request's rendered text starts with one of
//! those texts and is longer, its tokens are the history's (all, or all but the last) followed
//! by the tokenisation of the remaining text only, so the session reuses the caches; otherwise
//! the whole text is tokenised as a first request would be. A reply cut by a stop string (its
//! tokens spell text the client never got), a client that rewrites the assistant's text, an
//! edited earlier message or another conversation run in between all take the second way (all
//! or nothing: the recurrent state cannot be rolled back).
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
    /// Their bytes concatenated (empty when an id is outside the tokenizer's vocabulary).
    bytes: Vec<u8>,
    /// The prefixes a prompt may continue, longest first, as (tokens, bytes) lengths: all the
    /// tokens, and all but the last (a trailing EOS the client does not send back, or a last
    /// token cut inside a character) — each only when its bytes are valid UTF-8.
    ends: Vec<(usize, usize)>,
}

impl History {
    /// No conversation yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Forgets the conversation (after a failed turn, or when the caches were reset).
    pub fn clear(&mut self) {
        self.tokens.clear();
        self.bytes.clear();
        self.ends.clear();
    }

    /// The tokens of the last turn (prompt, then output).
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// The exact text of [`Self::tokens`]; `None` when it is not valid UTF-8 (or holds an id
    /// outside the tokenizer's vocabulary).
    pub fn text(&self) -> Option<&str> {
        match self.ends.first() {
            Some(&(n, _)) if n == self.tokens.len() => std::str::from_utf8(&self.bytes).ok(),
            _ => None,
        }
    }

    /// Records a finished turn: `prompt` was run and `output` generated after it.
    pub fn record(&mut self, tk: &Tokenizer, prompt: &[u32], output: &[u32]) {
        self.clear();
        self.tokens.extend_from_slice(prompt);
        self.tokens.extend_from_slice(output);
        let mut last = 0;
        for &id in &self.tokens {
            let Some(b) = tk.token_bytes(id) else {
                self.clear();
                return;
            };
            last = b.len();
            self.bytes.extend_from_slice(b);
        }
        let n = self.tokens.len();
        for (tokens, bytes) in [(n, self.bytes.len()), (n.saturating_sub(1), self.bytes.len() - last)] {
            if tokens > 0
                && !self.ends.iter().any(|e| e.0 == tokens)
                && std::str::from_utf8(&self.bytes[..bytes]).is_ok()
            {
                self.ends.push((tokens, bytes));
            }
        }
    }

    /// The tokens of the rendered prompt `text` when it continues this history: the history's
    /// tokens (all, or all but the last when `text` continues only those) followed by the
    /// tokenisation of the rest of `text`. `None` when `text` starts with neither text or adds
    /// nothing to it.
    pub fn continuation(&self, tk: &Tokenizer, text: &str) -> Result<Option<Vec<u32>>, TokenizerError> {
        for &(n, len) in &self.ends {
            // The prefix is valid UTF-8, so `len` is a character boundary of `text` when it matches.
            let rest = match text.get(len..) {
                Some(rest) if !rest.is_empty() && text.as_bytes().starts_with(&self.bytes[..len]) => rest,
                _ => continue,
            };
            let mut ids = self.tokens[..n].to_vec();
            ids.extend(tk.encode(rest)?);
            return Ok(Some(ids));
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokenizer::tiktoken::QWEN35_PATTERN;
    use crate::tokenizer::Vocabulary;

    /// The text of `ids` as a one-turn history holds it.
    fn exact_text(tk: &Tokenizer, ids: &[u32]) -> Option<String> {
        let mut h = History::new();
        h.record(tk, ids, &[]);
        h.text().map(str::to_string)
    }

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
        // Nothing new after all the tokens; but it continues all but the last.
        let ids = h.continuation(&tk, "hello world!").unwrap().unwrap();
        assert_eq!(ids, [tk.encode("hello world").unwrap(), tk.encode("!").unwrap()].concat());
        assert_eq!(h.continuation(&tk, "hello there! more").unwrap(), None, "an edited start");
        assert_eq!(h.continuation(&tk, "hello").unwrap(), None, "shorter");
        assert!(h.continuation(&tk, "hello world! more").unwrap().is_some());
        h.clear();
        assert_eq!((h.tokens(), h.text()), (&[][..], None));
        assert_eq!(h.continuation(&tk, "hello world! more").unwrap(), None);
    }

    #[test]
    fn broken_utf8_or_unknown_ids_leave_no_text_to_continue_past_them() {
        let tk = tiny();
        let mut h = History::new();
        // Half of `é` (0xC3 0xA9): the bytes are not valid UTF-8.
        h.record(&tk, &tk.encode("a").unwrap(), &[byte_id(&tk, 0xC3)]);
        assert_eq!(h.text(), None);
        // Only the text before the broken token can be continued.
        let ids = h.continuation(&tk, "a\u{FFFD} b").unwrap().unwrap();
        assert_eq!(ids, [tk.encode("a").unwrap(), tk.encode("\u{FFFD} b").unwrap()].concat());
        // Broken before the last token: nothing can be continued.
        h.record(&tk, &tk.encode("a").unwrap(), &[byte_id(&tk, 0xC3), byte_id(&tk, b'b')]);
        assert_eq!(h.continuation(&tk, "a\u{FFFD}b c").unwrap(), None);
        // An id the model has but the tokenizer does not.
        h.record(&tk, &tk.encode("a").unwrap(), &[tk.vocab_size() as u32]);
        assert_eq!(h.text(), None);
        assert_eq!(h.continuation(&tk, "a b").unwrap(), None);
    }

    #[test]
    fn a_text_may_continue_the_history_without_its_last_token() {
        let tk = tiny();
        let prompt = tk.encode("one two").unwrap();
        let eos = tk.token_id("<|im_end|>").unwrap();
        let mut h = History::new();
        // A raw completion continued without the EOS token's text.
        h.record(&tk, &prompt, &[byte_id(&tk, b'!'), eos]);
        let ids = h.continuation(&tk, "one two! three").unwrap().unwrap();
        assert_eq!(ids[..prompt.len() + 1], h.tokens()[..prompt.len() + 1]);
        assert_eq!(ids[prompt.len() + 1..], tk.encode(" three").unwrap()[..]);
        // With it, all the tokens are kept.
        let ids = h.continuation(&tk, "one two!<|im_end|> three").unwrap().unwrap();
        assert!(ids.starts_with(h.tokens()));
        // A reply cut inside `é`: its text is not valid UTF-8, the text before the cut is.
        h.record(&tk, &prompt, &[byte_id(&tk, b'!'), byte_id(&tk, 0xC3)]);
        assert_eq!(h.text(), None);
        let ids = h.continuation(&tk, "one two!\u{FFFD} more").unwrap().unwrap();
        assert_eq!(ids[..prompt.len() + 1], h.tokens()[..prompt.len() + 1]);
        assert_eq!(h.continuation(&tk, "one two").unwrap(), None, "shorter than both");
    }
}
