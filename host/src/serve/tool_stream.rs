//! One tool-call block parsed as it streams: the call's name as soon as it is known, then its
//! arguments as JSON text fragments while the model writes them ([`super::reply`] relays them
//! as OpenAI `tool_calls` deltas or Anthropic `input_json_delta`s).
//!
//! A block starts at `<tool_call>` (and runs to `</tool_call>`, the next `<tool_call>` or the
//! end of the reply) or at a bare `<function=` (to `</function>`, the next call start or the
//! end). Its body is read in one of three ways:
//! - Qwen3-Coder XML, `<function=NAME>` then `<parameter=KEY>\nVALUE\n</parameter>`…: the
//!   arguments are built as `{"KEY":VALUE,…}` in the order written (compact). A value whose
//!   schema type is `string` streams as JSON-escaped chunks as it arrives (one leading and one
//!   trailing newline dropped, as [`super::tools`] reads it; a possible closing tag is held back);
//!   a value of another type is held until its end, then typed by the schema
//!   (`super::tools::value`); a value of unknown type streams as a string unless its first
//!   non-blank char may begin a JSON number, literal, object or array (then it is held and
//!   typed). The call *starts* (name sent) at its first complete `<parameter=KEY>` or at
//!   `</function>`, so text that never looked like a call is never sent as one.
//! - The JSON form, `{"name": "…", "arguments": {…}}` with `name` first (`parameters` is read as
//!   `arguments`): the call starts when `"arguments": {` is read and the arguments' text streams
//!   as the model wrote it, in prefixes that can be closed to valid JSON ([`JsonPrefix`]); the
//!   call ends with the object (what follows it in the block is dropped).
//! - Anything else (arguments before the name, arguments as a string, drift the streaming
//!   readers do not follow before the call started) is held to the block's end and parsed whole
//!   by `super::tools::parse_block`, leniently; what does not parse is reply text.
//!
//! A call that fails after it started (junk between XML parameters, JSON arguments that are
//! invalid or cut off) ends with the text that closes the JSON sent so far (`"` and `}` / `]`),
//! marked incomplete, and the block's raw text then follows as reply text: the client always
//! holds valid JSON, and sees what the model wrote.

use serde_json::{Map, Value};

use super::json_prefix::JsonPrefix;
use super::thinking::partial_tag_suffix;
use super::tools::{self, CLOSE, FUNCTION, OPEN};

const PARAM: &str = "<parameter=";
const PARAM_END: &str = "</parameter>";
const FUNCTION_END: &str = "</function>";

/// What a block gives as it streams.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallEvent {
    /// A call begins: its function's name.
    Start(String),
    /// More of its arguments' JSON text.
    Args(String),
    /// The call ends; `complete` is false when its JSON was closed early.
    End {
        /// The arguments were read whole.
        complete: bool,
    },
    /// Reply text (a block that is not a call, or the raw text of one that failed).
    Text(String),
}

/// The reading of a call's body failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Failed;

/// A block being read.
#[derive(Debug, Clone)]
pub struct CallBlock {
    /// Started at `<tool_call>` (else at a bare `<function=`).
    tagged: bool,
    /// The block's text so far, from its opening tag.
    text: String,
    /// Bytes of `text` handed to the body reader.
    fed: usize,
    body: Body,
    /// The call's name was sent.
    started: bool,
    /// The call's end was sent.
    ended: bool,
    /// It failed after it started: the block's text is sent as text at its end.
    failed: bool,
}

#[derive(Debug, Clone)]
enum Body {
    /// Blanks before the form is known (after `<tool_call>`).
    Undecided(String),
    Xml(Box<XmlCall>),
    Json(JsonCall),
    /// Parsed whole at the block's end.
    Whole,
}

impl CallBlock {
    /// A block whose text starts with `<tool_call>` or `<function=` (see [`tools::find_start`]).
    pub fn new(start: &str) -> Self {
        let tagged = start.starts_with(OPEN);
        let body = if tagged { Body::Undecided(String::new()) } else { Body::Xml(Box::default()) };
        Self { tagged, text: String::new(), fed: 0, body, started: false, ended: false, failed: false }
    }

    /// Where the body's readable text ends now, and where the block ends (bytes consumed),
    /// if it does within `text`.
    fn bounds(&self) -> (usize, Option<usize>) {
        let t = &self.text;
        if self.tagged {
            let from = OPEN.len().min(t.len());
            let close = t[from..].find(CLOSE).map(|e| (from + e, from + e + CLOSE.len()));
            let next = t[from..].find(OPEN).map(|n| (from + n, from + n));
            match (close, next) {
                (Some(c), Some(n)) if n.0 < c.0 => (n.0, Some(n.1)),
                (Some(c), _) => (c.0, Some(c.1)),
                (None, Some(n)) => (n.0, Some(n.1)),
                (None, None) => {
                    let keep = partial_tag_suffix(&t[from..], CLOSE).max(partial_tag_suffix(&t[from..], OPEN));
                    (t.len() - keep, None)
                }
            }
        } else {
            let from = FUNCTION.len().min(t.len());
            let close = t[from..].find(FUNCTION_END).map(|e| from + e + FUNCTION_END.len());
            let next = tools::find_start(&t[from..]).map(|n| from + n);
            match (close, next) {
                (Some(c), Some(n)) => (c.min(n), Some(c.min(n))),
                (Some(e), None) | (None, Some(e)) => (e, Some(e)),
                (None, None) => {
                    let s = &t[from..];
                    let keep = partial_tag_suffix(s, FUNCTION_END)
                        .max(partial_tag_suffix(s, OPEN))
                        .max(partial_tag_suffix(s, FUNCTION));
                    (t.len() - keep, None)
                }
            }
        }
    }

    /// Takes more of the reply; returns the events and, when the block ended, the reply text
    /// after it (to be read as reply text again).
    pub fn push(&mut self, piece: &str, tools: &[Value]) -> (Vec<CallEvent>, Option<String>) {
        self.text.push_str(piece);
        let (readable, end) = self.bounds();
        let mut out = Vec::new();
        if readable > self.fed {
            let new = self.text[self.fed..readable].to_string();
            self.fed = readable;
            self.read(&new, tools, &mut out);
        }
        match end {
            Some(e) => {
                let rest = self.text[e..].to_string();
                self.text.truncate(e);
                self.end(tools, &mut out);
                (coalesce(out), Some(rest))
            }
            None => (coalesce(out), None),
        }
    }

    /// The reply ended inside the block.
    pub fn finish(&mut self, tools: &[Value]) -> Vec<CallEvent> {
        let mut out = Vec::new();
        if self.fed < self.text.len() {
            let new = self.text[self.fed..].to_string();
            self.fed = self.text.len();
            self.read(&new, tools, &mut out);
        }
        self.end(tools, &mut out);
        coalesce(out)
    }

    /// Hands body text to the body's reader.
    fn read(&mut self, new: &str, tools: &[Value], out: &mut Vec<CallEvent>) {
        if self.failed {
            return;
        }
        let mut new = new.to_string();
        if let Body::Undecided(blank) = &mut self.body {
            // The text after `<tool_call>` (the first read includes the tag itself).
            blank.push_str(&new);
            let after = match blank.strip_prefix(OPEN) {
                Some(a) => a,
                None if OPEN.starts_with(blank.as_str()) => return, // the tag itself, in parts
                None => blank.as_str(),
            };
            let t = after.trim_start();
            if t.is_empty() || (FUNCTION.starts_with(t) && t.len() < FUNCTION.len()) {
                return;
            }
            new = t.to_string();
            self.body = if t.starts_with(FUNCTION) {
                Body::Xml(Box::default())
            } else if t.starts_with('{') {
                Body::Json(JsonCall::default())
            } else {
                Body::Whole
            };
        }
        let r = match &mut self.body {
            Body::Xml(x) => x.push(&new, tools, out),
            Body::Json(j) => j.push(&new, out),
            Body::Undecided(_) | Body::Whole => Ok(()),
        };
        self.after_read(r, out);
    }

    fn after_read(&mut self, r: Result<(), Failed>, out: &mut Vec<CallEvent>) {
        self.started |= out.iter().any(|e| matches!(e, CallEvent::Start(_)));
        self.ended |= out.iter().any(|e| matches!(e, CallEvent::End { .. }));
        if r.is_ok() {
            return;
        }
        if !self.started {
            self.body = Body::Whole; // not a call yet: parsed whole at the end
            return;
        }
        let closing = match &self.body {
            Body::Xml(x) => x.closing(),
            Body::Json(j) => j.closing(),
            _ => String::new(),
        };
        if !self.ended {
            out.push(CallEvent::Args(closing));
            out.push(CallEvent::End { complete: false });
            self.ended = true;
        }
        self.failed = true;
    }

    /// The block ended (its text is `self.text`).
    fn end(&mut self, tools: &[Value], out: &mut Vec<CallEvent>) {
        let r = if self.failed {
            Ok(())
        } else {
            match &mut self.body {
                Body::Xml(x) => x.finish(out),
                Body::Json(j) => match &j.args {
                    Some(a) if !a.done() => Err(Failed), // cut off inside the arguments
                    Some(_) => Ok(()),
                    None => {
                        self.body = Body::Whole;
                        Ok(())
                    }
                },
                Body::Undecided(_) | Body::Whole => {
                    self.body = Body::Whole;
                    Ok(())
                }
            }
        };
        self.after_read(r, out);
        if self.failed {
            out.push(CallEvent::Text(self.text.clone()));
            return;
        }
        if matches!(self.body, Body::Whole) {
            let body = if self.tagged {
                let b = &self.text[OPEN.len().min(self.text.len())..];
                b.strip_suffix(CLOSE).unwrap_or(b)
            } else {
                self.text.as_str()
            };
            match tools::parse_block(body, tools) {
                Some(call) => {
                    out.push(CallEvent::Start(call.name.clone()));
                    out.push(CallEvent::Args(call.arguments_json().to_string()));
                    out.push(CallEvent::End { complete: true });
                }
                None => out.push(CallEvent::Text(self.text.clone())),
            }
        }
    }
}

/// Joins adjacent argument fragments.
fn coalesce(events: Vec<CallEvent>) -> Vec<CallEvent> {
    let mut out: Vec<CallEvent> = Vec::with_capacity(events.len());
    for e in events {
        match (out.last_mut(), e) {
            (_, CallEvent::Args(a)) if a.is_empty() => {}
            (Some(CallEvent::Args(prev)), CallEvent::Args(a)) => prev.push_str(&a),
            (_, e) => out.push(e),
        }
    }
    out
}

/// A JSON string's inside (escaped, without quotes).
fn escaped(s: &str) -> String {
    let q = Value::String(s.to_string()).to_string();
    q[1..q.len() - 1].to_string()
}

/// How an XML parameter's value is read.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Mode {
    /// Sent as JSON string chunks.
    Stream,
    /// Held to its end, then typed.
    Hold,
    /// Unknown type, first non-blank char not seen yet.
    Undecided,
}

#[derive(Debug, Clone, Default)]
enum XmlState {
    /// Reading `<function=NAME>`.
    #[default]
    Name,
    /// Between parameters (or before the first).
    Between,
    /// Inside a value.
    Value {
        key: String,
        ty: Option<Value>,
        mode: Mode,
        /// The value's first char is not read yet (a leading newline is dropped).
        lead: bool,
    },
    /// After `</function>`: the block's rest.
    Ended,
}

/// A Qwen3-Coder XML call.
#[derive(Debug, Clone, Default)]
struct XmlCall {
    buf: String,
    state: XmlState,
    name: String,
    types: Option<Map<String, Value>>,
    /// Parameters sent (a comma precedes the next).
    params: usize,
    /// The JSON sent ends inside a string.
    in_string: bool,
    /// Text after `</function>`.
    trailing: String,
    /// The call's start was sent.
    started: bool,
}

/// `<TAG` + `KEY>` at the start of `s`: `Ok(Some((key, bytes)))`, `Ok(None)` = need more text.
fn tag_value(s: &str, tag: &str) -> Result<Option<(String, usize)>, Failed> {
    let a = &s[tag.len()..];
    match a.find('>') {
        Some(gt) => {
            let key = a[..gt].trim().trim_matches('"');
            if key.is_empty() || key.contains(['<', '\n']) {
                return Err(Failed);
            }
            Ok(Some((key.to_string(), tag.len() + gt + 1)))
        }
        None if a.contains(['<', '\n']) => Err(Failed),
        None => Ok(None),
    }
}

/// Whether `s` is a proper prefix of one of `tags`.
fn may_become(s: &str, tags: &[&str]) -> bool {
    tags.iter().any(|t| t.starts_with(s) && s.len() < t.len())
}

impl XmlCall {
    /// Sends the call's start, once.
    fn start(&mut self, out: &mut Vec<CallEvent>) {
        if !self.started {
            self.started = true;
            out.push(CallEvent::Start(self.name.clone()));
            out.push(CallEvent::Args("{".into()));
        }
    }

    fn closing(&self) -> String {
        if self.in_string {
            "\"}".into()
        } else {
            "}".into()
        }
    }

    /// `"KEY":` with the comma before it.
    fn key(&mut self, key: &str) -> String {
        let comma = if self.params > 0 { "," } else { "" };
        self.params += 1;
        format!("{comma}{}:", Value::String(key.to_string()))
    }

    fn push(&mut self, new: &str, tools: &[Value], out: &mut Vec<CallEvent>) -> Result<(), Failed> {
        self.buf.push_str(new);
        loop {
            match &mut self.state {
                XmlState::Name => {
                    if !self.buf.starts_with(FUNCTION) {
                        // (Only the tag's own first part: a block starts at a whole tag.)
                        return if FUNCTION.starts_with(&self.buf) { Ok(()) } else { Err(Failed) };
                    }
                    let Some((name, n)) = tag_value(&self.buf, FUNCTION)? else { return Ok(()) };
                    self.buf.drain(..n);
                    self.types = tools::parameter_types(tools, &name);
                    self.name = name;
                    self.state = XmlState::Between;
                }
                XmlState::Between => {
                    let t = self.buf.trim_start();
                    let blank = self.buf.len() - t.len();
                    self.buf.drain(..blank);
                    if self.buf.starts_with(PARAM_END) {
                        self.buf.drain(..PARAM_END.len());
                    } else if self.buf.starts_with(PARAM) {
                        let Some((key, n)) = tag_value(&self.buf, PARAM)? else { return Ok(()) };
                        self.buf.drain(..n);
                        self.start(out);
                        let ty = self.types.as_ref().and_then(|t| t.get(&key)).cloned();
                        let mode = match (&self.types, &ty) {
                            (_, Some(Value::String(s))) if s == "string" => Mode::Stream,
                            (_, Some(_)) => Mode::Hold,
                            (_, None) => Mode::Undecided,
                        };
                        if mode == Mode::Stream {
                            let k = self.key(&key);
                            out.push(CallEvent::Args(format!("{k}\"")));
                            self.in_string = true;
                        }
                        self.state = XmlState::Value { key, ty, mode, lead: true };
                    } else if self.buf.starts_with(FUNCTION_END) {
                        self.buf.drain(..FUNCTION_END.len());
                        self.start(out);
                        out.push(CallEvent::Args("}".into()));
                        out.push(CallEvent::End { complete: true });
                        self.state = XmlState::Ended;
                    } else if self.buf.is_empty() || may_become(&self.buf, &[PARAM, PARAM_END, FUNCTION_END]) {
                        return Ok(());
                    } else {
                        return Err(Failed);
                    }
                }
                XmlState::Value { .. } => {
                    let end = [PARAM_END, PARAM, FUNCTION_END].iter().filter_map(|t| self.buf.find(t)).min();
                    match end {
                        Some(at) => {
                            let raw: String = self.buf.drain(..at).collect();
                            self.end_value(&raw, out);
                            if self.buf.starts_with(PARAM_END) {
                                self.buf.drain(..PARAM_END.len());
                            }
                            self.state = XmlState::Between;
                        }
                        None => {
                            self.stream_value(out);
                            return Ok(());
                        }
                    }
                }
                XmlState::Ended => {
                    self.trailing.push_str(&std::mem::take(&mut self.buf));
                    return Ok(());
                }
            }
        }
    }

    /// Sends what can be sent of a value whose end is not read yet.
    fn stream_value(&mut self, out: &mut Vec<CallEvent>) {
        let keep = [PARAM_END, PARAM, FUNCTION_END].iter().map(|t| partial_tag_suffix(&self.buf, t)).max();
        let avail = self.buf.len() - keep.unwrap_or(0);
        let (key, undecided) = match &self.state {
            XmlState::Value { key, mode, .. } => (key.clone(), *mode == Mode::Undecided),
            _ => return,
        };
        if undecided {
            let Some(c) = self.buf[..avail].chars().find(|c| !c.is_whitespace()) else { return };
            let hold = c == '-' || c.is_ascii_digit() || "{[tfn".contains(c);
            if let XmlState::Value { mode, .. } = &mut self.state {
                *mode = if hold { Mode::Hold } else { Mode::Stream };
            }
            if hold {
                return;
            }
            let k = self.key(&key);
            out.push(CallEvent::Args(format!("{k}\"")));
            self.in_string = true;
        }
        let XmlState::Value { mode: Mode::Stream, lead, .. } = &mut self.state else { return };
        let mut from = 0;
        if *lead {
            if avail == 0 {
                return;
            }
            *lead = false;
            from = usize::from(self.buf.starts_with('\n'));
        }
        // A last newline may be the one dropped before the closing tag.
        let to = if avail > from && self.buf[from..avail].ends_with('\n') { avail - 1 } else { avail.max(from) };
        let chunk = self.buf[from..to].to_string();
        self.buf.drain(..to);
        if !chunk.is_empty() {
            out.push(CallEvent::Args(escaped(&chunk)));
        }
    }

    /// A value's end: the rest of its text is `raw`.
    fn end_value(&mut self, raw: &str, out: &mut Vec<CallEvent>) {
        let XmlState::Value { key, ty, mode, lead } = std::mem::take(&mut self.state) else { return };
        if mode == Mode::Stream {
            let s = if lead { raw.strip_prefix('\n').unwrap_or(raw) } else { raw };
            let s = s.strip_suffix('\n').unwrap_or(s);
            out.push(CallEvent::Args(format!("{}\"", escaped(s))));
            self.in_string = false;
        } else {
            let v = tools::value(raw, ty.as_ref());
            let k = self.key(&key);
            out.push(CallEvent::Args(format!("{k}{v}")));
        }
    }

    /// The block ended: an open value ends with it, then the call.
    fn finish(&mut self, out: &mut Vec<CallEvent>) -> Result<(), Failed> {
        match &self.state {
            XmlState::Name => Err(Failed),
            XmlState::Ended => {
                let t = std::mem::take(&mut self.trailing);
                if !t.trim().is_empty() {
                    out.push(CallEvent::Text(t.trim().to_string()));
                }
                Ok(())
            }
            XmlState::Between if !self.buf.trim().is_empty() => Err(Failed),
            XmlState::Between | XmlState::Value { .. } => {
                if matches!(self.state, XmlState::Value { .. }) {
                    let raw = std::mem::take(&mut self.buf);
                    self.end_value(&raw, out);
                }
                self.start(out);
                out.push(CallEvent::Args("}".into()));
                out.push(CallEvent::End { complete: true });
                self.state = XmlState::Ended;
                Ok(())
            }
        }
    }
}

/// A JSON-form call.
#[derive(Debug, Clone, Default)]
struct JsonCall {
    /// The body's text until the arguments start.
    head: String,
    args: Option<JsonPrefix>,
}

/// Reading `{"name": "…", "arguments": ` at the start of a body.
enum Head {
    More,
    No,
    Match { name: String, at: usize },
}

fn head(s: &str) -> Head {
    let b = s.as_bytes();
    let mut i = 0;
    let ws = |i: &mut usize| {
        while *i < b.len() && b[*i].is_ascii_whitespace() {
            *i += 1;
        }
    };
    // `lit` at `i`: Some(true) read, Some(false) differs, None = the text ends inside it.
    let lit = |i: &mut usize, lit: &str| -> Option<bool> {
        let rest = &s[*i..];
        if rest.starts_with(lit) {
            *i += lit.len();
            Some(true)
        } else if lit.starts_with(rest) {
            None
        } else {
            Some(false)
        }
    };
    macro_rules! expect {
        ($l:expr) => {
            match lit(&mut i, $l) {
                Some(true) => {}
                Some(false) => return Head::No,
                None => return Head::More,
            }
        };
    }
    ws(&mut i);
    expect!("{");
    ws(&mut i);
    expect!("\"name\"");
    ws(&mut i);
    expect!(":");
    ws(&mut i);
    expect!("\"");
    // The name's string literal.
    let open = i - 1;
    let mut j = i;
    loop {
        match b.get(j) {
            None => return Head::More,
            Some(b'\\') => j += 2,
            Some(b'"') => break,
            Some(_) => j += 1,
        }
    }
    let Ok(name) = serde_json::from_str::<String>(&s[open..=j]) else { return Head::No };
    if name.is_empty() {
        return Head::No;
    }
    i = j + 1;
    ws(&mut i);
    expect!(",");
    ws(&mut i);
    let args = lit(&mut i, "\"arguments\"");
    if args != Some(true) {
        match (args, lit(&mut i, "\"parameters\"")) {
            (_, Some(true)) => {}
            (None, _) | (_, None) => return Head::More,
            _ => return Head::No,
        }
    }
    ws(&mut i);
    expect!(":");
    ws(&mut i);
    match b.get(i) {
        None => Head::More,
        Some(b'{') => Head::Match { name, at: i },
        Some(_) => Head::No,
    }
}

impl JsonCall {
    fn closing(&self) -> String {
        self.args.as_ref().map_or_else(String::new, JsonPrefix::closing)
    }

    fn push(&mut self, new: &str, out: &mut Vec<CallEvent>) -> Result<(), Failed> {
        let text = match &mut self.args {
            Some(a) if a.done() => return Ok(()),
            Some(_) => new.to_string(),
            None => {
                self.head.push_str(new);
                match head(&self.head) {
                    Head::More => return Ok(()),
                    Head::No => return Err(Failed),
                    Head::Match { name, at } => {
                        out.push(CallEvent::Start(name));
                        self.args = Some(JsonPrefix::new());
                        self.head[at..].to_string()
                    }
                }
            }
        };
        let args = self.args.as_mut().expect("set above");
        let (released, end) = args.push(&text);
        out.push(CallEvent::Args(released));
        if end.map_err(|_| Failed)?.is_some() {
            out.push(CallEvent::End { complete: true });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Feeds `text` (a block and what follows) char by char: the events, the text after the block.
    fn feed(text: &str, tools: &[Value]) -> (Vec<CallEvent>, Option<String>) {
        let mut b = CallBlock::new(text);
        let mut out = Vec::new();
        for (i, c) in text.char_indices() {
            let (ev, rest) = b.push(&c.to_string(), tools);
            out.extend(ev);
            if let Some(r) = rest {
                return (coalesce(out), Some(format!("{r}{}", &text[i + c.len_utf8()..])));
            }
        }
        out.extend(b.finish(tools));
        (coalesce(out), None)
    }

    fn start(name: &str) -> CallEvent {
        CallEvent::Start(name.into())
    }

    fn args(j: &str) -> CallEvent {
        CallEvent::Args(j.into())
    }

    #[test]
    fn unknown_values_stream_as_strings_unless_they_look_like_json() {
        let text = "<tool_call>\n<function=run>\n<parameter=cmd>\n  ls -la\n</parameter>\n\
                    <parameter=n>\n 42\n</parameter>\n<parameter=flags>\n[\"a\"]\n</parameter>\n</function>\n</tool_call>\nafter";
        let (ev, rest) = feed(text, &[]);
        assert_eq!(rest.as_deref(), Some("\nafter"));
        assert_eq!(
            ev,
            [start("run"), args(r#"{"cmd":"  ls -la","n":42,"flags":["a"]}"#), CallEvent::End { complete: true }]
        );
    }

    #[test]
    fn a_call_starts_only_at_its_first_parameter_or_function_end() {
        // Junk right after the name: never a call, parsed whole (fails), the block is text.
        let text = "<tool_call><function=f>junk<parameter=a>1</parameter></function></tool_call>";
        assert_eq!(feed(text, &[]).0, [CallEvent::Text(text.into())]);
        // No parameters at all.
        let (ev, _) = feed("<function=noop>\n</function> then", &[]);
        assert_eq!(ev, [start("noop"), args("{}"), CallEvent::End { complete: true }]);
    }

    #[test]
    fn the_json_head_needs_the_name_before_the_arguments() {
        assert!(matches!(head(r#"{"name": "f", "arguments": {"#), Head::Match { ref name, at: 27 } if name == "f"));
        assert!(
            matches!(head(r#" { "name" : "a\"b" , "parameters" : {}"#), Head::Match { ref name, .. } if name == "a\"b")
        );
        assert!(matches!(head(r#"{"name": "f", "argu"#), Head::More));
        assert!(matches!(head(r#"{"name": "f", "arguments": "{}"}"#), Head::No));
        assert!(matches!(head(r#"{"arguments": {}, "name": "f"}"#), Head::No));
        assert!(matches!(head(r#"{"name": "", "arguments": {}}"#), Head::No));
        // Not streamable: sent whole at the block's end.
        let (ev, _) = feed(r#"<tool_call>{"arguments": {"x": 1}, "name": "f"}</tool_call>"#, &[]);
        assert_eq!(ev, [start("f"), args(r#"{"x":1}"#), CallEvent::End { complete: true }]);
        let tools = [json!({"type":"function","function":{"name":"f"}})];
        assert_eq!(feed("<tool_call>{\"name\": \"f\", \"arguments\": {}}", &tools).0.len(), 3);
    }
}
