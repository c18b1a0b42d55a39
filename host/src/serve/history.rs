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
//! edited earlier message or another conversation run in between all take the second way.
//!
//! **The snapshot.** A chat template may re-render the last reply differently from what was
//! generated (Qwen3.5 drops an earlier turn's `<think>` block; OpenAI clients send no reasoning
//! back), so the next request's text leaves the history right after the last generation prompt
//! starts. The recurrent state cannot be rolled back, so each turn saves it where the generation
//! prompt starts ([`crate::spec::Session::generate_with_snapshot`]; the position from
//! [`generation_prompt_start`] and [`token_boundary`]), and [`History::record`] keeps that
//! position as a third prefix a text may continue: its tokens are then the history's up to the
//! snapshot followed by the rest tokenised, and the session goes back to the snapshot and runs
//! only the rest. A text that leaves the history before the snapshot (an edited message) is
//! tokenised whole.
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
    /// tokens, all but the last (a trailing EOS the client does not send back, or a last token
    /// cut inside a character), and the tokens before the session's snapshot — each only when
    /// its bytes are valid UTF-8.
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

    /// Records a finished turn: `prompt` was run and `output` generated after it, and the
    /// session holds a snapshot at position `snapshot` (the first tokens of `prompt`), if any.
    pub fn record(&mut self, tk: &Tokenizer, prompt: &[u32], output: &[u32], snapshot: Option<usize>) {
        self.clear();
        self.tokens.extend_from_slice(prompt);
        self.tokens.extend_from_slice(output);
        let mut last = 0;
        let mut snapshot_bytes = None;
        for (i, &id) in self.tokens.iter().enumerate() {
            if snapshot == Some(i) {
                snapshot_bytes = Some(self.bytes.len());
            }
            let Some(b) = tk.token_bytes(id) else {
                self.clear();
                return;
            };
            last = b.len();
            self.bytes.extend_from_slice(b);
        }
        let n = self.tokens.len();
        let snapshot = snapshot.zip(snapshot_bytes);
        for (tokens, bytes) in
            [(n, self.bytes.len()), (n.saturating_sub(1), self.bytes.len() - last)].into_iter().chain(snapshot)
        {
            if tokens > 0
                && !self.ends.iter().any(|e| e.0 == tokens)
                && std::str::from_utf8(&self.bytes[..bytes]).is_ok()
            {
                self.ends.push((tokens, bytes));
            }
        }
    }

    /// The tokens of the rendered prompt `text` when it continues this history: the history's
    /// tokens (all, all but the last, or those before the snapshot: the longest prefix whose text
    /// `text` continues) followed by the tokenisation of the rest of `text`. `None` when `text`
    /// starts with none of those texts or adds nothing to it.
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

/// Where the generation prompt starts in the rendered prompt `text`, given `base`, the same
/// conversation rendered without it: `base`'s length when `text` starts with it and adds to it.
pub fn generation_prompt_start(base: &str, text: &str) -> Option<usize> {
    (base.len() < text.len() && text.starts_with(base) && !base.is_empty()).then_some(base.len())
}

/// The most tokens of `ids` (at least one) whose bytes together are at most `bytes` long: the
/// snapshot position of a prompt whose first `bytes` bytes are the conversation before its
/// generation prompt (exactly there when a token ends there, as after `<|im_end|>\n`).
/// `None` when the first token is longer, or an id is outside the vocabulary before then.
pub fn token_boundary(tk: &Tokenizer, ids: &[u32], bytes: usize) -> Option<usize> {
    let mut len = 0;
    let mut k = 0;
    for &id in ids {
        len += tk.token_bytes(id)?.len();
        if len > bytes {
            break;
        }
        k += 1;
    }
    (k > 0).then_some(k)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokenizer::tiktoken::QWEN35_PATTERN;
    use crate::tokenizer::Vocabulary;

    /// The text of `ids` as a one-turn history holds it.
    fn exact_text(tk: &Tokenizer, ids: &[u32]) -> Option<String> {
        let mut h = History::new();
        h.record(tk, ids, &[], None);
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
        h.record(&tk, &prompt, &output, None);
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
        h.record(&tk, &tk.encode("hello world").unwrap(), &tk.encode("!").unwrap(), None);
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
        h.record(&tk, &tk.encode("a").unwrap(), &[byte_id(&tk, 0xC3)], None);
        assert_eq!(h.text(), None);
        // Only the text before the broken token can be continued.
        let ids = h.continuation(&tk, "a\u{FFFD} b").unwrap().unwrap();
        assert_eq!(ids, [tk.encode("a").unwrap(), tk.encode("\u{FFFD} b").unwrap()].concat());
        // Broken before the last token: nothing can be continued.
        h.record(&tk, &tk.encode("a").unwrap(), &[byte_id(&tk, 0xC3), byte_id(&tk, b'b')], None);
        assert_eq!(h.continuation(&tk, "a\u{FFFD}b c").unwrap(), None);
        // An id the model has but the tokenizer does not.
        h.record(&tk, &tk.encode("a").unwrap(), &[tk.vocab_size() as u32], None);
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
        h.record(&tk, &prompt, &[byte_id(&tk, b'!'), eos], None);
        let ids = h.continuation(&tk, "one two! three").unwrap().unwrap();
        assert_eq!(ids[..prompt.len() + 1], h.tokens()[..prompt.len() + 1]);
        assert_eq!(ids[prompt.len() + 1..], tk.encode(" three").unwrap()[..]);
        // With it, all the tokens are kept.
        let ids = h.continuation(&tk, "one two!<|im_end|> three").unwrap().unwrap();
        assert!(ids.starts_with(h.tokens()));
        // A reply cut inside `é`: its text is not valid UTF-8, the text before the cut is.
        h.record(&tk, &prompt, &[byte_id(&tk, b'!'), byte_id(&tk, 0xC3)], None);
        assert_eq!(h.text(), None);
        let ids = h.continuation(&tk, "one two!\u{FFFD} more").unwrap().unwrap();
        assert_eq!(ids[..prompt.len() + 1], h.tokens()[..prompt.len() + 1]);
        assert_eq!(h.continuation(&tk, "one two").unwrap(), None, "shorter than both");
    }

    #[test]
    fn a_text_that_leaves_the_history_after_the_snapshot_continues_the_tokens_before_it() {
        let tk = tiny();
        let base = "<|im_start|>user\nhello<|im_end|>\n";
        let text1 = format!("{base}<|im_start|>assistant\n<think>\n");
        let prompt = tk.encode(&text1).unwrap();
        let s = token_boundary(&tk, &prompt, generation_prompt_start(base, &text1).unwrap()).unwrap();
        assert_eq!(prompt[..s], tk.encode(base).unwrap()[..], "the snapshot is where the generation prompt starts");
        // The reply, generated byte by byte (not the canonical split).
        let output: Vec<u32> = "hmm</think>\n\nhi".bytes().map(|b| byte_id(&tk, b)).collect();
        let mut h = History::new();
        h.record(&tk, &prompt, &output, Some(s));
        // The next request drops the reasoning: it leaves the history inside the generation prompt.
        let text2 = format!("{base}<|im_start|>assistant\nhi<|im_end|>\n<|im_start|>user\nmore<|im_end|>\n");
        let ids = h.continuation(&tk, &text2).unwrap().unwrap();
        assert_eq!(ids[..s], prompt[..s]);
        assert_eq!(ids[s..], tk.encode(&text2[base.len()..]).unwrap()[..]);
        // One that continues the whole turn still keeps all of it.
        let whole = format!("{}<|im_end|>\n", h.text().unwrap());
        assert!(h.continuation(&tk, &whole).unwrap().unwrap().starts_with(h.tokens()));
        // One that differs before the snapshot, or ends at it, is not matched.
        assert_eq!(h.continuation(&tk, &text2.replace("hello", "hullo")).unwrap(), None);
        assert_eq!(h.continuation(&tk, base).unwrap(), None);
        // Without a snapshot, the reasoning-less text is not matched either.
        h.record(&tk, &prompt, &output, None);
        assert_eq!(h.continuation(&tk, &text2).unwrap(), None);
    }

    #[test]
    fn the_token_boundary_is_the_most_tokens_within_the_bytes() {
        let tk = tiny();
        let ids: Vec<u32> = "abc".bytes().map(|b| byte_id(&tk, b)).collect();
        assert_eq!(token_boundary(&tk, &ids, 2), Some(2));
        assert_eq!(token_boundary(&tk, &ids, 9), Some(3));
        assert_eq!(token_boundary(&tk, &ids, 0), None);
        // A boundary inside a token of several bytes falls back to the token before it.
        let joined = tk.encode("the quick").unwrap();
        let lens: Vec<usize> = joined.iter().map(|&id| tk.token_bytes(id).unwrap().len()).collect();
        let i = lens.iter().position(|&l| l > 1).expect("a merged token");
        let before: usize = lens[..i].iter().sum();
        assert_eq!(token_boundary(&tk, &joined, before + 1), Some(i).filter(|&i| i > 0), "{joined:?}");
        assert_eq!(token_boundary(&tk, &joined, before + lens[i]), Some(i + 1));
        assert_eq!(token_boundary(&tk, &[tk.vocab_size() as u32], 5), None);
        assert_eq!(generation_prompt_start("ab", "abc"), Some(2));
        assert_eq!(generation_prompt_start("ab", "ab"), None);
        assert_eq!(generation_prompt_start("ax", "abc"), None);
        assert_eq!(generation_prompt_start("", "abc"), None);
    }
}
