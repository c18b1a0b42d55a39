//! Thinking split from the reply: when the rendered prompt leaves a think block open (the
//! Qwen3.5 generation prompt with thinking on ends in `<think>\n`), the model's text up to
//! `</think>` is reasoning (OpenAI `reasoning_content`, Anthropic `thinking` blocks) and the
//! rest is the reply; a prompt without an open block (thinking off, or a template without
//! thinking) gives a reply that is all text. Works on streamed
//! text: a suffix that may begin `</think>` is held back until the next piece decides it.
//!
//! Lenient: a reply that opens with its own `<think>` (some models repeat the tag) has it
//! dropped; a reply that never closes the block is all reasoning (it was cut by `max_tokens`);
//! with thinking off, a stray `</think>` is plain text.

/// The tag that ends reasoning.
pub const CLOSE: &str = "</think>";
/// The tag that opens it (already in the prompt; dropped if the model repeats it).
pub const OPEN: &str = "<think>";

/// The thinking end a template writes when it has none we can read (Qwen3.5's).
pub const DEFAULT_CLOSE: &str = "\n</think>\n\n";

/// The text `template` writes between an assistant turn's reasoning and its answer (Qwen3.5:
/// `\n</think>\n\n`): what the model writes to end its thinking, so what the server appends
/// when a thinking budget is spent ([`super::budget`]). Read from a rendered conversation with
/// marker texts; [`DEFAULT_CLOSE`] when the template keeps no reasoning or the text between
/// has no `</think>`.
pub fn template_close(template: &crate::chat::ChatTemplate) -> String {
    use crate::chat::{Message, RenderOptions};
    const R: &str = "flashtree-reasoning-mark";
    const A: &str = "flashtree-answer-mark";
    let mut asst = Message::new("assistant", A);
    asst.reasoning_content = Some(R.into());
    let opts = RenderOptions { add_generation_prompt: false, enable_thinking: true };
    let Ok(text) = template.render(&[Message::new("user", "x"), asst], opts) else { return DEFAULT_CLOSE.into() };
    let between = text.find(R).and_then(|r| Some(&text[r + R.len()..r + R.len() + text[r + R.len()..].find(A)?]));
    match between {
        Some(b) if b.contains(CLOSE) => b.to_string(),
        _ => DEFAULT_CLOSE.into(),
    }
}

/// The length of the longest suffix of `text` that is a proper prefix of `tag` (text that must
/// be held back because the next piece may complete the tag). At char boundaries.
pub fn partial_tag_suffix(text: &str, tag: &str) -> usize {
    text.char_indices()
        .map(|(i, _)| i)
        .find(|&i| tag.starts_with(&text[i..]) && text.len() - i < tag.len())
        .map_or(0, |i| text.len() - i)
}

/// Whether a rendered prompt leaves a think block open (its last `<think>` comes after its last
/// `</think>`): the Qwen3.5 generation prompt with thinking on does; with thinking off it closes
/// an empty block; a template without thinking (plain ChatML) has neither.
pub fn prompt_opens_think(prompt: &str) -> bool {
    match (prompt.rfind(OPEN), prompt.rfind(CLOSE)) {
        (Some(o), Some(c)) => o > c,
        (o, _) => o.is_some(),
    }
}

/// One piece of a split reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// Reasoning text (inside the think block).
    Reasoning(String),
    /// Reply text.
    Text(String),
}

/// Splits streamed text at `</think>`.
#[derive(Debug, Clone)]
pub struct ThinkingSplitter {
    /// Still inside the think block.
    thinking: bool,
    /// Nothing released yet in the current part (leading `<think>` / newlines are dropped).
    at_start: bool,
    /// The repeated `<think>` was dropped already (only one is, however the text is cut).
    open_dropped: bool,
    held: String,
}

impl ThinkingSplitter {
    /// `thinking` = the prompt opened a think block ([`prompt_opens_think`]); without one the
    /// text passes through unchanged.
    pub fn new(thinking: bool) -> Self {
        Self { thinking, at_start: thinking, open_dropped: false, held: String::new() }
    }

    /// Whether the text so far is still reasoning.
    pub fn in_reasoning(&self) -> bool {
        self.thinking
    }

    /// Takes `piece`; returns what can be released now, in order.
    pub fn push(&mut self, piece: &str) -> Vec<Piece> {
        self.held.push_str(piece);
        let mut out = Vec::new();
        loop {
            if self.at_start {
                // Leading newlines, and in reasoning a repeated `<think>`, are dropped.
                let trimmed = self.held.trim_start_matches('\n');
                let may_drop = self.thinking && !self.open_dropped;
                let trimmed = match trimmed.strip_prefix(OPEN) {
                    Some(t) if may_drop => {
                        self.open_dropped = true;
                        t
                    }
                    _ => trimmed,
                };
                let trimmed = trimmed.trim_start_matches('\n').to_string();
                let undecided =
                    trimmed.is_empty() || (self.thinking && !self.open_dropped && OPEN.starts_with(trimmed.as_str()));
                self.held = trimmed;
                if undecided {
                    return out;
                }
                self.at_start = false;
            }
            if !self.thinking {
                if !self.held.is_empty() {
                    out.push(Piece::Text(std::mem::take(&mut self.held)));
                }
                return out;
            }
            if let Some(at) = self.held.find(CLOSE) {
                let reasoning = self.held[..at].trim_end_matches('\n').to_string();
                if !reasoning.is_empty() {
                    out.push(Piece::Reasoning(reasoning));
                }
                self.held.drain(..at + CLOSE.len());
                self.thinking = false;
                self.at_start = true;
                continue;
            }
            // Hold a possible start of `</think>` and trailing newlines (they may precede it).
            let keep = partial_tag_suffix(&self.held, CLOSE);
            let cut = self.held[..self.held.len() - keep].trim_end_matches('\n').len();
            if cut > 0 {
                out.push(Piece::Reasoning(self.held[..cut].to_string()));
                self.held.drain(..cut);
            }
            return out;
        }
    }

    /// The end of the text: what is still held.
    pub fn finish(&mut self) -> Vec<Piece> {
        let rest = std::mem::take(&mut self.held);
        let rest = if self.thinking { rest.trim_end_matches('\n').to_string() } else { rest };
        if rest.is_empty() || (self.at_start && self.thinking && !self.open_dropped && OPEN.starts_with(rest.as_str()))
        {
            return Vec::new();
        }
        vec![if self.thinking { Piece::Reasoning(rest) } else { Piece::Text(rest) }]
    }
}

/// Splits a whole text: (reasoning, reply).
pub fn split(text: &str, thinking: bool) -> (String, String) {
    let mut s = ThinkingSplitter::new(thinking);
    let mut pieces = s.push(text);
    pieces.extend(s.finish());
    let (mut r, mut t) = (String::new(), String::new());
    for p in pieces {
        match p {
            Piece::Reasoning(x) => r.push_str(&x),
            Piece::Text(x) => t.push_str(&x),
        }
    }
    (r, t)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every split of `text` into two pieces (and char by char) gives the same result.
    fn streamed(text: &str, thinking: bool) -> (String, String) {
        let whole = split(text, thinking);
        let cuts: Vec<usize> = text.char_indices().map(|(i, _)| i).chain([text.len()]).collect();
        for &c in &cuts {
            let mut s = ThinkingSplitter::new(thinking);
            let mut pieces = s.push(&text[..c]);
            pieces.extend(s.push(&text[c..]));
            pieces.extend(s.finish());
            let (mut r, mut t) = (String::new(), String::new());
            for p in pieces {
                match p {
                    Piece::Reasoning(x) => r.push_str(&x),
                    Piece::Text(x) => t.push_str(&x),
                }
            }
            assert_eq!((r, t), whole, "cut at {c} of {text:?}");
        }
        let mut s = ThinkingSplitter::new(thinking);
        let mut pieces: Vec<Piece> = text.chars().flat_map(|ch| s.push(&ch.to_string())).collect();
        pieces.extend(s.finish());
        let r: String =
            pieces.iter().filter_map(|p| if let Piece::Reasoning(x) = p { Some(x.as_str()) } else { None }).collect();
        let t: String =
            pieces.iter().filter_map(|p| if let Piece::Text(x) = p { Some(x.as_str()) } else { None }).collect();
        assert_eq!((r, t), whole, "char by char: {text:?}");
        whole
    }

    #[test]
    fn the_thinking_end_is_read_from_the_template() {
        assert_eq!(template_close(&crate::chat::ChatTemplate::qwen35()), "\n</think>\n\n");
        let plain = crate::chat::ChatTemplate::new(
            "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}",
        )
        .unwrap();
        assert_eq!(template_close(&plain), DEFAULT_CLOSE);
    }

    #[test]
    fn an_open_think_block_is_found_in_the_prompt() {
        assert!(prompt_opens_think("<|im_start|>assistant\n<think>\n"));
        assert!(!prompt_opens_think("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
        assert!(!prompt_opens_think("<|im_start|>assistant\n"));
        assert!(prompt_opens_think("<think>a</think> b <think>\n"));
    }

    #[test]
    fn reasoning_ends_at_the_close_tag_in_any_streaming_cut() {
        let r = |a: &str, b: &str| (a.to_string(), b.to_string());
        assert_eq!(streamed("let me see\n</think>\n\nThe answer is 4.", true), r("let me see", "The answer is 4."));
        assert_eq!(streamed("<think>\nhm</think>ok", true), r("hm", "ok"));
        assert_eq!(streamed("\n</think>\n\nhi", true), r("", "hi"));
        // Never closed: all reasoning (cut by max_tokens).
        assert_eq!(streamed("still thinking </thi", true), r("still thinking </thi", ""));
        // Thinking off: everything is text, unchanged, a stray tag included.
        assert_eq!(streamed("a </think> b", false), r("", "a </think> b"));
        assert_eq!(streamed("\n\nx\n", false), r("", "\n\nx\n"));
        // Only the first close tag splits.
        assert_eq!(streamed("x</think>y</think>z", true), r("x", "y</think>z"));
        assert_eq!(streamed("", true), r("", ""));
        assert_eq!(streamed("<thi", true), r("", ""));
        // Only one repeated `<think>` is dropped, however the text is cut.
        assert_eq!(streamed("<think><think>x", true), r("<think>x", ""));
        assert_eq!(streamed("é</think>ü", true), r("é", "ü"));
    }
}
