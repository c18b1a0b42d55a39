//! A generated reply taken apart as it streams, for both APIs: reasoning (up to `</think>`,
//! [`super::thinking`]), reply text, and — when the request offered tools — tool calls, their
//! arguments streamed as the model writes them ([`super::tool_stream`]). Text before a call
//! streams as it comes; the blanks between a call and the text around it are dropped (text
//! before a call loses its trailing blanks, text after one its leading blanks), so a streaming
//! client and a non-streamed answer see the same text. Tags split across pieces are held back,
//! never sent in part.

use std::sync::Arc;

use serde_json::Value;

use super::thinking::{Piece, ThinkingSplitter};
use super::tool_stream::{CallBlock, CallEvent};
use super::tools::{self, ToolCall};

/// One piece of a split reply, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delta {
    /// Reasoning text.
    Reasoning(String),
    /// Reply text.
    Text(String),
    /// Tool call `index` (0, 1, … in the reply) begins.
    CallStart {
        /// Its place among the reply's calls.
        index: usize,
        /// The function's name.
        name: String,
    },
    /// More of call `index`'s arguments JSON (the fragments of a call joined are its JSON).
    CallArgs {
        /// The call.
        index: usize,
        /// The fragment.
        json: String,
    },
    /// Call `index` ended; `complete` is false when its text failed to parse after its start
    /// was sent: its JSON was closed early and its raw text follows as [`Delta::Text`].
    CallEnd {
        /// The call.
        index: usize,
        /// It was read whole.
        complete: bool,
    },
}

/// Splits one reply.
#[derive(Debug, Clone)]
pub struct ReplySplitter {
    thinking: ThinkingSplitter,
    /// Tool definitions (OpenAI shape); `None` = tool calls are not parsed.
    tools: Option<Arc<Vec<Value>>>,
    /// Reply text held because it may begin a tool call, or is trailing blanks.
    held: String,
    /// The call block being read, and the blanks before it (sent only if it is not a call).
    block: Option<(CallBlock, String)>,
    /// Right after a call: leading blanks are dropped.
    after_call: bool,
    /// The call being streamed: (name, JSON so far).
    current: Option<(String, String)>,
    /// Calls started so far.
    started: usize,
    /// The calls read whole.
    calls: Vec<ToolCall>,
}

impl ReplySplitter {
    /// `thinking`: the prompt opened a think block; `tools`: parse tool calls with these
    /// definitions (`None` when the request has no tools or `tool_choice` is `none`).
    pub fn new(thinking: bool, tools: Option<Vec<Value>>) -> Self {
        Self {
            thinking: ThinkingSplitter::new(thinking),
            tools: tools.map(Arc::new),
            held: String::new(),
            block: None,
            after_call: false,
            current: None,
            started: 0,
            calls: Vec::new(),
        }
    }

    /// Takes generated text; returns what can be released now.
    pub fn push(&mut self, text: &str) -> Vec<Delta> {
        let pieces = self.thinking.push(text);
        self.route(pieces)
    }

    /// The calls read whole so far (what `finish_reason: tool_calls` / `tool_use` and a
    /// non-streamed answer report; a call that failed after its start is not among them).
    pub fn calls(&self) -> &[ToolCall] {
        &self.calls
    }

    fn route(&mut self, pieces: Vec<Piece>) -> Vec<Delta> {
        let mut out = Vec::new();
        for p in pieces {
            match p {
                Piece::Reasoning(r) => out.push(Delta::Reasoning(r)),
                Piece::Text(t) if self.tools.is_none() => out.push(Delta::Text(t)),
                Piece::Text(t) => self.text(t, &mut out),
            }
        }
        out
    }

    /// Reply text when tools are parsed.
    fn text(&mut self, mut rest: String, out: &mut Vec<Delta>) {
        let tools = self.tools.clone().unwrap_or_default();
        let tools = tools.as_slice();
        loop {
            if let Some((block, blanks)) = &mut self.block {
                let (events, after) = block.push(&rest, tools);
                let blanks = if events.is_empty() { String::new() } else { std::mem::take(blanks) };
                self.relay(events, blanks, out);
                match after {
                    Some(r) => {
                        self.block = None;
                        rest = r;
                        continue;
                    }
                    None => return,
                }
            }
            self.held.push_str(&rest);
            if self.after_call {
                let t = self.held.trim_start();
                self.held = t.to_string();
                self.after_call = self.held.is_empty();
            }
            if let Some(at) = tools::find_start(&self.held) {
                let before = self.held[..at].trim_end();
                let blanks = self.held[before.len()..at].to_string();
                if !before.is_empty() {
                    out.push(Delta::Text(before.to_string()));
                }
                rest = self.held[at..].to_string();
                self.held.clear();
                self.after_call = false;
                self.block = Some((CallBlock::new(&rest), blanks));
                continue;
            }
            // Hold a possible call start, and trailing blanks (dropped if a call follows).
            let keep = tools::partial_start_suffix(&self.held);
            let blank =
                self.held[..self.held.len() - keep].len() - self.held[..self.held.len() - keep].trim_end().len();
            let release: String = self.held.drain(..self.held.len() - keep - blank).collect();
            if !release.is_empty() {
                out.push(Delta::Text(release));
            }
            return;
        }
    }

    /// Passes a block's events on as deltas; `blanks` (those before the block, with its first
    /// events) are dropped before a call and sent before text.
    fn relay(&mut self, events: Vec<CallEvent>, mut blanks: String, out: &mut Vec<Delta>) {
        for e in events {
            let blanks = std::mem::take(&mut blanks);
            match e {
                CallEvent::Start(name) => {
                    out.push(Delta::CallStart { index: self.started, name: name.clone() });
                    self.current = Some((name, String::new()));
                }
                CallEvent::Args(json) => {
                    if let Some((_, j)) = &mut self.current {
                        j.push_str(&json);
                    }
                    out.push(Delta::CallArgs { index: self.started, json });
                }
                CallEvent::End { complete } => {
                    out.push(Delta::CallEnd { index: self.started, complete });
                    if let Some((name, json)) = self.current.take() {
                        if complete {
                            self.calls.push(ToolCall::from_json(name, json));
                        }
                    }
                    self.started += 1;
                    self.after_call = complete;
                }
                CallEvent::Text(t) => {
                    out.push(Delta::Text(format!("{blanks}{t}")));
                }
            }
        }
    }

    /// Generation ended: what was held.
    pub fn finish(&mut self) -> Vec<Delta> {
        let last = self.thinking.finish();
        let mut out = self.route(last);
        if let Some((mut block, blanks)) = self.block.take() {
            let tools = self.tools.clone().unwrap_or_default();
            let events = block.finish(&tools);
            self.relay(events, blanks, &mut out);
        }
        let held = std::mem::take(&mut self.held);
        if !held.is_empty() {
            out.push(Delta::Text(held));
        }
        out
    }
}

/// A whole reply: (reasoning, text, calls read whole) — what a streaming client accumulates.
pub fn split_all(text: &str, thinking: bool, tools: Option<Vec<Value>>) -> (String, String, Vec<ToolCall>) {
    let mut s = ReplySplitter::new(thinking, tools);
    let mut deltas = s.push(text);
    deltas.extend(s.finish());
    let (mut r, mut t) = (String::new(), String::new());
    for d in deltas {
        match d {
            Delta::Reasoning(x) => r.push_str(&x),
            Delta::Text(x) => t.push_str(&x),
            _ => {}
        }
    }
    (r, t, s.calls)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// What a client accumulates from `deltas`: (reasoning, text, calls as (name, JSON, complete)).
    fn accumulate(deltas: &[Delta]) -> (String, String, Vec<(String, String, bool)>) {
        let (mut r, mut t, mut calls) = (String::new(), String::new(), Vec::<(String, String, bool)>::new());
        for d in deltas {
            match d {
                Delta::Reasoning(x) => r.push_str(x),
                Delta::Text(x) => t.push_str(x),
                Delta::CallStart { index, name } => {
                    assert_eq!(*index, calls.len(), "calls numbered in order");
                    calls.push((name.clone(), String::new(), false));
                }
                Delta::CallArgs { index, json } => calls[*index].1.push_str(json),
                Delta::CallEnd { index, complete } => calls[*index].2 = *complete,
            }
        }
        (r, t, calls)
    }

    /// Runs `pieces` through a splitter: the deltas and the calls it reports.
    fn run(pieces: &[&str], thinking: bool, tools: Option<Vec<Value>>) -> (Vec<Delta>, Vec<ToolCall>) {
        let mut s = ReplySplitter::new(thinking, tools);
        let mut out: Vec<Delta> = pieces.iter().flat_map(|p| s.push(p)).collect();
        out.extend(s.finish());
        (out, s.calls().to_vec())
    }

    /// The text cut at every char boundary into two pieces, and char by char.
    fn cuts(text: &str) -> Vec<Vec<&str>> {
        let mut v: Vec<Vec<&str>> = text.char_indices().map(|(i, _)| vec![&text[..i], &text[i..]]).collect();
        let mut bounds: Vec<usize> = text.char_indices().map(|(i, _)| i).collect();
        bounds.push(text.len());
        v.push(bounds.windows(2).map(|w| &text[w[0]..w[1]]).collect());
        v
    }

    fn weather() -> Option<Vec<Value>> {
        Some(vec![json!({"type":"function","function":{"name":"get_weather","parameters":{"type":"object",
            "properties":{"city":{"type":"string"},"days":{"type":"integer"}}}}})])
    }

    #[test]
    fn reasoning_text_and_calls_come_apart_in_any_streaming_cut() {
        let text = "I should look it up.\n</think>\n\nChecking.\n<tool_call>\n<function=get_weather>\n\
                    <parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>";
        let (r, t, calls) = split_all(text, true, weather());
        assert_eq!((r.as_str(), t.as_str()), ("I should look it up.", "Checking."));
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].arguments_json(), r#"{"city":"Paris","days":3}"#);
        for pieces in cuts(text) {
            let (deltas, got) = run(&pieces, true, weather());
            let (r2, t2, streamed) = accumulate(&deltas);
            assert_eq!((r2.as_str(), t2.as_str()), (r.as_str(), t.as_str()), "{pieces:?}");
            assert!(!t2.contains('<'), "{pieces:?}: part of a tag was streamed: {t2:?}");
            assert_eq!(streamed, vec![("get_weather".into(), calls[0].arguments_json().to_string(), true)]);
            assert_eq!(got, calls, "{pieces:?}");
        }
    }

    #[test]
    fn string_arguments_stream_while_typed_ones_wait_for_their_end() {
        let text = "<tool_call>\n<function=get_weather>\n<parameter=city>\nNew \"York\"\\ é\nline 2\n</parameter>\n\
                    <parameter=days>\n12\n</parameter>\n</function>\n</tool_call>";
        let pieces: Vec<String> = text.chars().map(String::from).collect();
        let pieces: Vec<&str> = pieces.iter().map(String::as_str).collect();
        let (deltas, calls) = run(&pieces, false, weather());
        let frags: Vec<&str> = deltas
            .iter()
            .filter_map(|d| if let Delta::CallArgs { json, .. } = d { Some(json.as_str()) } else { None })
            .collect();
        assert!(frags.len() > 10, "{frags:?}");
        assert!(frags.contains(&",\"days\":12"), "the integer is sent whole: {frags:?}");
        let joined: String = frags.concat();
        assert_eq!(joined, r#"{"city":"New \"York\"\\ é\nline 2","days":12}"#);
        assert_eq!(calls[0].arguments_json(), joined);
        assert_eq!(calls[0].arguments["city"], "New \"York\"\\ é\nline 2");
    }

    #[test]
    fn the_json_form_streams_its_arguments_as_written() {
        let text = "Sure.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"days\": [1, 2]}}\n</tool_call>\nDone.";
        for pieces in cuts(text) {
            let (deltas, calls) = run(&pieces, false, weather());
            let (_, t, streamed) = accumulate(&deltas);
            assert_eq!(t, "Sure.Done.", "{pieces:?}");
            assert_eq!(streamed, vec![("get_weather".into(), r#"{"city": "Oslo", "days": [1, 2]}"#.into(), true)]);
            assert_eq!(calls[0].arguments_json(), streamed[0].1);
        }
        // Arguments given as a string: sent whole when the block ends.
        let text = "<tool_call>{\"name\": \"b\", \"arguments\": \"{\\\"y\\\": 1}\"}</tool_call>";
        let (_, _, calls) = split_all(text, false, Some(vec![]));
        assert_eq!(calls[0].arguments_json(), r#"{"y":1}"#);
    }

    #[test]
    fn a_call_that_fails_after_its_start_is_closed_and_its_text_follows() {
        let cases = [
            // Junk between parameters.
            ("<tool_call><function=f><parameter=a>\nx y\n</parameter>junk<parameter=b>1</parameter></function></tool_call>",
             r#"{"a":"x y"}"#),
            // JSON arguments cut off inside a string, inside a number, after a comma.
            ("<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": \"unfinished", r#"{"a": "unfinished"}"#),
            ("<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": [1, 2", r#"{"a": [1]}"#),
            ("<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1, </tool_call>", r#"{"a": 1}"#),
            // Invalid JSON.
            ("<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1 \"b\"}}</tool_call>", r#"{"a": 1 }"#),
        ];
        for (text, json) in cases {
            for pieces in cuts(text) {
                let (deltas, calls) = run(&pieces, false, Some(vec![]));
                let (_, t, streamed) = accumulate(&deltas);
                assert_eq!(streamed, vec![("f".into(), json.into(), false)], "{pieces:?}");
                serde_json::from_str::<Value>(&streamed[0].1).unwrap();
                assert_eq!(t, text, "the raw text follows as text");
                assert!(calls.is_empty(), "a failed call is not reported: {calls:?}");
            }
        }
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
            "{\"name\": \"g\", \"arguments\": {\"s\": \"v",
            "\"}, ",
            "\n",
            " ",
            "x",
            "é",
            "<",
            ">",
            "{",
            "\"",
            "1",
            "[",
            "<parameter=",
            "</tool_call",
            "\\",
            "\"}",
            "-",
            "true",
            "]",
            ",",
            ":",
            "{\"name\": \"h\", \"parameters\": {",
        ];
        let mut seed = 0x2545_F491_4F6C_DD1Du64;
        let mut next = |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        for case in 0..4000 {
            let text: String = (0..next(24)).map(|_| BITS[next(BITS.len())]).collect();
            let thinking = case % 2 == 0;
            let tools = match case % 3 {
                0 => None,
                1 => Some(Vec::new()),
                _ => Some(vec![
                    json!({"type":"function","function":{"name":"f","parameters":{"properties":{"a":{"type":"string"}}}}}),
                ]),
            };
            let (whole_deltas, whole_calls) = run(&[&text], thinking, tools.clone());
            let whole = accumulate(&whole_deltas);
            for (_, json, _) in &whole.2 {
                serde_json::from_str::<Value>(json).unwrap_or_else(|e| panic!("{text:?}: {json:?}: {e}"));
            }
            // The same text in random pieces (at char boundaries).
            let bounds: Vec<usize> = text.char_indices().map(|(i, _)| i).chain([text.len()]).collect();
            let mut cut: Vec<usize> = (0..next(6)).map(|_| bounds[next(bounds.len())]).collect();
            cut.extend([0, text.len()]);
            cut.sort_unstable();
            let pieces: Vec<&str> = cut.windows(2).map(|w| &text[w[0]..w[1]]).collect();
            let (deltas, calls) = run(&pieces, thinking, tools);
            assert_eq!(accumulate(&deltas), whole, "{text:?} in {pieces:?}");
            assert_eq!(calls, whole_calls, "{text:?} in {pieces:?}");
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
