//! Streams the text of one JSON object as it arrives, in prefixes that can always be closed to
//! valid JSON: how a tool call written in the JSON form (`{"name": …, "arguments": {…}}`) has
//! its arguments streamed before the model has finished writing them.
//!
//! The text is checked by a small pushdown automaton (RFC 8259 syntax; scalars are checked
//! whole by `serde_json` when they end). A prefix is released only at a *safe point*: right
//! after `{`, `[` or a complete value (whitespace included), or inside a value string outside
//! an escape sequence. Held back until the next safe point: keys and their colon, commas,
//! numbers and literals still being written, a partial escape. So every released prefix is
//! closed by [`JsonPrefix::closing`] (`"` when inside a string, then one `}` / `]` per open
//! container), and the released text of a whole object is the object's text exactly.

/// Where the scanner is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Before the top-level value (whitespace allowed).
    Start,
    /// Expecting a value (after `:` or after `,` in an array).
    Value,
    /// After `[`: a value or `]`.
    ArrayFirst,
    /// After `{`: a key or `}`.
    ObjectFirst,
    /// After `,` in an object: a key.
    Key,
    /// Inside a key string; `escape` as in [`State::Str`].
    KeyStr { escape: u8 },
    /// After a key: `:`.
    Colon,
    /// Inside a value string; `escape`: 0 none, 1 after `\`, 2..=5 hex digits of `\u` left + 1.
    Str { escape: u8 },
    /// Inside a number or literal (its text is in `scalar`).
    Scalar,
    /// After a value: `,` or the container's closer.
    After,
    /// The top-level value is complete.
    Done,
}

/// The scanner of one JSON value (an object, for tool arguments).
#[derive(Debug, Clone)]
pub struct JsonPrefix {
    state: State,
    /// Open containers, innermost last (`b'{'` or `b'['`).
    stack: Vec<u8>,
    /// The current number or literal.
    scalar: String,
    /// Text taken but not released (after the last safe point).
    held: String,
    /// The released text ends inside a value string.
    in_string: bool,
}

/// The text is not JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotJson;

impl Default for JsonPrefix {
    fn default() -> Self {
        Self::new()
    }
}

impl JsonPrefix {
    /// A scanner before its value.
    pub fn new() -> Self {
        Self { state: State::Start, stack: Vec::new(), scalar: String::new(), held: String::new(), in_string: false }
    }

    /// Whether the value is complete.
    pub fn done(&self) -> bool {
        self.state == State::Done
    }

    /// Takes more text; returns the text released (up to the last safe point) and, when the
    /// value ended inside `text`, the byte index in `text` just after it (the rest is not
    /// read). Invalid JSON is an error; the text released before it stays valid to close.
    pub fn push(&mut self, text: &str) -> (String, Result<Option<usize>, NotJson>) {
        let mut out = String::new();
        for (i, c) in text.char_indices() {
            if self.state == State::Done {
                return (out, Ok(Some(i)));
            }
            if self.state == State::Scalar && !scalar_char(c) {
                // The scalar ends before `c`: release it before `c` is read.
                if let Err(e) = self.end_scalar() {
                    return (out, Err(e));
                }
                self.release(&mut out);
            }
            if let Err(e) = self.step(c) {
                return (out, Err(e));
            }
            self.held.push(c);
            self.release(&mut out);
        }
        let end = (self.state == State::Done).then_some(text.len());
        (out, Ok(end))
    }

    /// Moves the held text to `out` at a safe point.
    fn release(&mut self, out: &mut String) {
        if self.safe() {
            out.push_str(&self.held);
            self.held.clear();
            self.in_string = matches!(self.state, State::Str { .. });
        }
    }

    /// The text that closes what was released: `"` when it ends inside a string, then the
    /// closers of the open containers (every change of the container stack is followed by a
    /// safe point in the same char, so the stack now is the stack at the last release).
    pub fn closing(&self) -> String {
        if self.state == State::Done {
            return String::new();
        }
        let mut s = String::new();
        if self.in_string {
            s.push('"');
        }
        for &b in self.stack.iter().rev() {
            s.push(if b == b'{' { '}' } else { ']' });
        }
        s
    }

    /// Whether the position after the text taken is a safe point.
    fn safe(&self) -> bool {
        match self.state {
            State::ArrayFirst | State::ObjectFirst | State::After | State::Done => true,
            State::Str { escape } => escape == 0,
            _ => false,
        }
    }

    /// A closed value: back to the container (or done).
    fn value_ended(&mut self) {
        self.state = if self.stack.is_empty() { State::Done } else { State::After };
    }

    /// Checks and consumes a finished number or literal.
    fn end_scalar(&mut self) -> Result<(), NotJson> {
        let ok = matches!(
            serde_json::from_str::<serde_json::Value>(&self.scalar),
            Ok(serde_json::Value::Number(_) | serde_json::Value::Bool(_) | serde_json::Value::Null)
        );
        self.scalar.clear();
        if !ok {
            return Err(NotJson);
        }
        self.value_ended();
        Ok(())
    }

    fn open(&mut self, c: char) -> Result<(), NotJson> {
        match c {
            '{' => {
                self.stack.push(b'{');
                self.state = State::ObjectFirst;
            }
            '[' => {
                self.stack.push(b'[');
                self.state = State::ArrayFirst;
            }
            '"' => self.state = State::Str { escape: 0 },
            c if c == '-' || c.is_ascii_alphanumeric() => {
                self.scalar.push(c);
                self.state = State::Scalar;
            }
            _ => return Err(NotJson),
        }
        Ok(())
    }

    fn close(&mut self, c: char) -> Result<(), NotJson> {
        let want = if c == '}' { b'{' } else { b'[' };
        if self.stack.last() != Some(&want) {
            return Err(NotJson);
        }
        self.stack.pop();
        self.value_ended();
        Ok(())
    }

    fn step(&mut self, c: char) -> Result<(), NotJson> {
        let ws = matches!(c, ' ' | '\t' | '\n' | '\r');
        match self.state {
            State::Done => Err(NotJson),
            State::Start | State::Value => {
                if ws {
                    Ok(())
                } else {
                    self.open(c)
                }
            }
            State::ArrayFirst => match c {
                _ if ws => Ok(()),
                ']' => self.close(c),
                _ => self.open(c),
            },
            State::ObjectFirst | State::Key => match c {
                _ if ws => Ok(()),
                '}' if self.state == State::ObjectFirst => self.close(c),
                '"' => {
                    self.state = State::KeyStr { escape: 0 };
                    Ok(())
                }
                _ => Err(NotJson),
            },
            State::KeyStr { escape } => {
                let next = string_step(escape, c)?;
                self.state = match next {
                    None => State::Colon,
                    Some(e) => State::KeyStr { escape: e },
                };
                Ok(())
            }
            State::Colon => match c {
                _ if ws => Ok(()),
                ':' => {
                    self.state = State::Value;
                    Ok(())
                }
                _ => Err(NotJson),
            },
            State::Str { escape } => {
                match string_step(escape, c)? {
                    None => self.value_ended(),
                    Some(e) => self.state = State::Str { escape: e },
                }
                Ok(())
            }
            State::Scalar => {
                if scalar_char(c) {
                    self.scalar.push(c);
                    return Ok(());
                }
                self.end_scalar()?;
                self.step(c)
            }
            State::After => match c {
                _ if ws => Ok(()),
                ',' => {
                    self.state = if self.stack.last() == Some(&b'{') { State::Key } else { State::Value };
                    Ok(())
                }
                '}' | ']' => self.close(c),
                _ => Err(NotJson),
            },
        }
    }
}

/// A char of a number or literal.
fn scalar_char(c: char) -> bool {
    c == '-' || c == '+' || c == '.' || c.is_ascii_alphanumeric()
}

/// One char inside a string: the next escape state, or `None` when the string ended.
fn string_step(escape: u8, c: char) -> Result<Option<u8>, NotJson> {
    match escape {
        0 => match c {
            '"' => Ok(None),
            '\\' => Ok(Some(1)),
            c if (c as u32) < 0x20 => Err(NotJson),
            _ => Ok(Some(0)),
        },
        1 => match c {
            '"' | '\\' | '/' | 'b' | 'f' | 'n' | 'r' | 't' => Ok(Some(0)),
            'u' => Ok(Some(5)),
            _ => Err(NotJson),
        },
        n if c.is_ascii_hexdigit() => Ok(Some(if n == 2 { 0 } else { n - 1 })),
        _ => Err(NotJson),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `text` char by char: every released prefix closes to valid JSON, and the whole
    /// is released exactly once the value ends; returns where it ended.
    fn stream(text: &str) -> Result<Option<usize>, NotJson> {
        let mut p = JsonPrefix::new();
        let mut released = String::new();
        for (i, c) in text.char_indices() {
            let (out, end) = p.push(&c.to_string());
            let end = end?;
            released.push_str(&out);
            let closed = format!("{released}{}", p.closing());
            if !released.is_empty() {
                serde_json::from_str::<serde_json::Value>(&closed)
                    .unwrap_or_else(|e| panic!("{closed:?} (prefix of {text:?}): {e}"));
            }
            if let Some(e) = end {
                assert_eq!(e, c.len_utf8());
                assert_eq!(released, text[..i + e], "released text of {text:?}");
                return Ok(Some(i + e));
            }
        }
        Ok(None)
    }

    #[test]
    fn every_released_prefix_closes_to_valid_json() {
        let cases = [
            r#"{}"#,
            r#"{"a": 1}"#,
            r#"{ "city" : "Par\"is\u00e9 \\ x", "days": -3.5e2, "ok": true, "n": null }"#,
            r#"{"list": [1, [2, {"x": []}], "s", false], "o": {"p": {"q": "é ü"}}}"#,
            "{\n  \"code\": \"def f():\\n    return 1\\n\"\n}",
        ];
        for c in cases {
            assert_eq!(stream(c), Ok(Some(c.len())), "{c}");
            // In one piece, with trailing text: the end is found and the rest not read.
            let mut p = JsonPrefix::new();
            let (out, end) = p.push(&format!("{c}}} junk"));
            assert_eq!((out.as_str(), end), (c, Ok(Some(c.len()))));
            assert!(p.done() && p.closing().is_empty());
        }
    }

    #[test]
    fn invalid_json_is_an_error_and_what_was_released_still_closes() {
        for bad in [
            r#"{a: 1}"#,
            r#"{"a" 1}"#,
            r#"{"a": tru }"#,
            r#"{"a": 1,}"#,
            r#"{"a": [1}"#,
            "{\"a\": \"x\ny\"}",
            r#"{"a": "\q"}"#,
        ] {
            assert_eq!(stream(bad), Err(NotJson), "{bad}");
        }
        let mut p = JsonPrefix::new();
        let (out, _) = p.push(r#"{"a": "xy"#);
        assert_eq!(out, r#"{"a": "xy"#);
        assert_eq!(p.closing(), "\"}");
        let (out, _) = p.push(r#"z", "b": 12"#);
        assert_eq!(out, r#"z""#, "the key, colon and unfinished number are held");
        assert_eq!(p.closing(), "}");
        assert_eq!(p.push(", \"c\": [3, 4"), (r#", "b": 12, "c": [3"#.to_string(), Ok(None)));
        assert_eq!(p.closing(), "]}");
        assert_eq!(p.push("}"), (", 4".to_string(), Err(NotJson)), "released up to the error");
        assert_eq!(p.closing(), "]}", "a mismatched closer changes nothing");
        let mut p = JsonPrefix::new();
        assert_eq!(p.push("{\"a\": 1 \"b\""), ("{\"a\": 1 ".to_string(), Err(NotJson)));
        assert_eq!(p.closing(), "}");
    }
}
