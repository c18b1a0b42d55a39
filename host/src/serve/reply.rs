//! A generated reply taken apart as it streams, for both APIs: reasoning (up to `</think>`,
//! [`super::thinking`]), reply text, and — when the request offered tools — tool calls
//! ([`super::tools`]). Text before a tool call streams as it comes; from the first
//! `<tool_call>` (or bare `<function=`) on, the rest is held and parsed when generation ends,
//! and what does not parse comes back as text.

use serde_json::Value;

use super::thinking::{Piece, ThinkingSplitter};
use super::tools::{self, ToolCall};

/// Splits one reply.
#[derive(Debug, Clone)]
pub struct ReplySplitter {
    thinking: ThinkingSplitter,
    /// Tool definitions (OpenAI shape); `None` = tool calls are not parsed.
    tools: Option<Vec<Value>>,
    /// Reply text held because it may begin a tool call.
    held: String,
    /// From the first tool-call start on.
    calls: Option<String>,
}

/// Everything a reply held back, released when generation ends.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Tail {
    /// Last pieces of reasoning or text.
    pub pieces: Vec<Piece>,
    /// The tool calls parsed.
    pub calls: Vec<ToolCall>,
}

impl ReplySplitter {
    /// `thinking`: the prompt opened a think block; `tools`: parse tool calls with these
    /// definitions (`None` when the request has no tools or `tool_choice` is `none`).
    pub fn new(thinking: bool, tools: Option<Vec<Value>>) -> Self {
        Self { thinking: ThinkingSplitter::new(thinking), tools, held: String::new(), calls: None }
    }

    /// Takes generated text; returns the reasoning and text that can be released now.
    pub fn push(&mut self, text: &str) -> Vec<Piece> {
        let pieces = self.thinking.push(text);
        self.route(pieces)
    }

    fn route(&mut self, pieces: Vec<Piece>) -> Vec<Piece> {
        let mut out = Vec::new();
        for p in pieces {
            match p {
                Piece::Reasoning(r) => out.push(Piece::Reasoning(r)),
                Piece::Text(t) if self.tools.is_none() => out.push(Piece::Text(t)),
                Piece::Text(t) => {
                    if let Some(c) = &mut self.calls {
                        c.push_str(&t);
                        continue;
                    }
                    self.held.push_str(&t);
                    if let Some(at) = tools::find_start(&self.held) {
                        let before = self.held[..at].to_string();
                        self.calls = Some(self.held[at..].to_string());
                        self.held.clear();
                        if !before.is_empty() {
                            out.push(Piece::Text(before));
                        }
                    } else {
                        let keep = tools::partial_start_suffix(&self.held);
                        let release: String = self.held.drain(..self.held.len() - keep).collect();
                        if !release.is_empty() {
                            out.push(Piece::Text(release));
                        }
                    }
                }
            }
        }
        out
    }

    /// Generation ended: the held text and the parsed calls.
    pub fn finish(&mut self) -> Tail {
        let last = self.thinking.finish();
        let mut pieces = self.route(last);
        let held = std::mem::take(&mut self.held);
        if !held.is_empty() {
            pieces.push(Piece::Text(held));
        }
        let mut calls = Vec::new();
        if let Some(c) = self.calls.take() {
            let parsed = tools::parse(&c, self.tools.as_deref().unwrap_or(&[]));
            calls = parsed.calls;
            if !parsed.text.is_empty() {
                // What did not parse (or followed the calls) is text; a newline keeps it apart
                // from text already sent.
                let sep = if calls.is_empty() { "" } else { "\n" };
                pieces.push(Piece::Text(format!("{sep}{}", parsed.text)));
            }
        }
        Tail { pieces, calls }
    }
}

/// A whole reply: (reasoning, text, calls). Text is trimmed at the end when calls follow it.
pub fn split_all(text: &str, thinking: bool, tools: Option<Vec<Value>>) -> (String, String, Vec<ToolCall>) {
    let mut s = ReplySplitter::new(thinking, tools);
    let mut pieces = s.push(text);
    let tail = s.finish();
    pieces.extend(tail.pieces);
    let (mut r, mut t) = (String::new(), String::new());
    for p in pieces {
        match p {
            Piece::Reasoning(x) => r.push_str(&x),
            Piece::Text(x) => t.push_str(&x),
        }
    }
    if !tail.calls.is_empty() {
        t = t.trim().to_string();
    }
    (r, t, tail.calls)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reasoning_text_and_calls_come_apart_in_any_streaming_cut() {
        let text = "I should look it up.\n</think>\n\nChecking.\n<tool_call>\n<function=get_weather>\n\
                    <parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>";
        let tools = Some(vec![json!({"type":"function","function":{"name":"get_weather"}})]);
        let (r, t, calls) = split_all(text, true, tools.clone());
        assert_eq!((r.as_str(), t.as_str()), ("I should look it up.", "Checking."));
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].arguments_json(), r#"{"city":"Paris"}"#);
        for (cut, _) in text.char_indices() {
            let mut s = ReplySplitter::new(true, tools.clone());
            let mut pieces = s.push(&text[..cut]);
            pieces.extend(s.push(&text[cut..]));
            let tail = s.finish();
            pieces.extend(tail.pieces);
            let streamed: String =
                pieces.iter().filter_map(|p| if let Piece::Text(x) = p { Some(x.as_str()) } else { None }).collect();
            assert_eq!(streamed.trim(), "Checking.", "cut {cut}");
            assert!(!streamed.contains('<'), "cut {cut}: part of a tag was streamed: {streamed:?}");
            assert_eq!(tail.calls, calls, "cut {cut}");
        }
    }

    /// Runs `pieces` through a splitter: (reasoning, text, calls), text untrimmed.
    fn run(pieces: &[&str], thinking: bool, tools: Option<Vec<Value>>) -> (String, String, Vec<ToolCall>) {
        let mut s = ReplySplitter::new(thinking, tools);
        let mut out: Vec<Piece> = pieces.iter().flat_map(|p| s.push(p)).collect();
        let tail = s.finish();
        out.extend(tail.pieces);
        let (mut r, mut t) = (String::new(), String::new());
        for p in out {
            match p {
                Piece::Reasoning(x) => r.push_str(&x),
                Piece::Text(x) => t.push_str(&x),
            }
        }
        (r, t, tail.calls)
    }

    #[test]
    fn random_tag_soup_streams_like_the_whole_text_and_never_panics() {
        const BITS: &[&str] = &[
            "<tool_call>",
            "</tool_call>",
            "<function=f>",
            "<function=",
            "<parameter=a>",
            "</parameter>",
            "</function>",
            "<think>",
            "</think>",
            "{\"name\":\"f\",\"arguments\":{\"k\":1}}",
            "\n",
            "x",
            "é",
            "<",
            ">",
            "{",
            "\"",
        ];
        let mut seed = 0x2545_F491_4F6C_DD1Du64;
        let mut next = |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        for case in 0..2000 {
            let text: String = (0..next(24)).map(|_| BITS[next(BITS.len())]).collect();
            let thinking = case % 2 == 0;
            let tools = if case % 3 == 0 { None } else { Some(Vec::new()) };
            let whole = run(&[&text], thinking, tools.clone());
            // The same text in random pieces (at char boundaries).
            let bounds: Vec<usize> = text.char_indices().map(|(i, _)| i).chain([text.len()]).collect();
            let mut cuts: Vec<usize> = (0..next(6)).map(|_| bounds[next(bounds.len())]).collect();
            cuts.extend([0, text.len()]);
            cuts.sort_unstable();
            let pieces: Vec<&str> = cuts.windows(2).map(|w| &text[w[0]..w[1]]).collect();
            assert_eq!(run(&pieces, thinking, tools), whole, "{text:?} in {pieces:?}");
        }
    }

    #[test]
    fn without_tools_a_call_is_text_and_a_failed_parse_is_text() {
        let text = "<tool_call>{\"name\":\"f\",\"arguments\":{}}</tool_call>";
        let (_, t, calls) = split_all(text, false, None);
        assert_eq!((t.as_str(), calls.len()), (text, 0));
        let bad = "sure <tool_call>{oops</tool_call> then";
        let (_, t, calls) = split_all(bad, false, Some(vec![]));
        assert_eq!((t.as_str(), calls.len()), (bad, 0));
    }
}
