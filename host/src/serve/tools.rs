//! Tool calls: the request's tool definitions (OpenAI's `{"type":"function","function":{…}}`,
//! Anthropic's `{"name","description","input_schema"}`, both normalised to OpenAI's shape for
//! the chat template) and the calls parsed back from the model's text.
//!
//! Two output forms are read, leniently:
//! - Qwen3-Coder XML (Qwen3.5's template):
//!   `<tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n</function>\n</tool_call>`
//! - the older JSON form: `<tool_call>{"name": …, "arguments": {…}}</tool_call>`.
//!
//! Drift tolerated: missing `</parameter>`, `</function>` or `</tool_call>` (the next tag or the
//! end of the text closes them), a `<function=…>` block without `<tool_call>`, `parameters` for
//! `arguments`, arguments given as a JSON string, text around the calls. A parameter's value is
//! the text between its tags less one leading and one trailing newline; it is read as JSON when
//! the tool's schema says the parameter is not a string (or the schema is unknown and the value
//! is a JSON object, array, number, boolean or null), else kept as a string. A block that does
//! not parse stays in the reply as text: a parse never fails the request.
//!
//! Replies are read as they stream by [`super::tool_stream`] (which follows the well-formed
//! shapes token by token and hands every other block to `parse_block` whole); `parse`, the
//! whole-text reading, is kept for the tests of that leniency.

use serde_json::{json, Map, Value};

/// Where a tool call begins.
pub const OPEN: &str = "<tool_call>";
/// Where it ends.
pub const CLOSE: &str = "</tool_call>";
/// A Qwen3-Coder function block (also accepted without `<tool_call>`).
pub const FUNCTION: &str = "<function=";

/// One parsed call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The function's name.
    pub name: String,
    /// Its arguments (a JSON object).
    pub arguments: Map<String, Value>,
    /// The arguments' JSON text as sent (streamed fragments joined): keys in the order written.
    json: String,
}

impl ToolCall {
    /// A call with `arguments` (its JSON text is theirs, compact).
    pub fn new(name: String, arguments: Map<String, Value>) -> Self {
        let json = Value::Object(arguments.clone()).to_string();
        Self { name, arguments, json }
    }

    /// A call from its arguments' JSON text (a JSON object; anything else reads as `{}`).
    pub fn from_json(name: String, json: String) -> Self {
        let arguments = serde_json::from_str::<Map<String, Value>>(&json).unwrap_or_default();
        Self { name, arguments, json }
    }

    /// The arguments as a JSON string (OpenAI's `function.arguments`): the text streamed.
    pub fn arguments_json(&self) -> &str {
        &self.json
    }

    /// As a message's `tool_calls` entry for the chat template (arguments as an object).
    pub fn template_value(&self, id: &str) -> Value {
        json!({ "id": id, "type": "function",
                "function": { "name": self.name, "arguments": Value::Object(self.arguments.clone()) } })
    }
}

/// A reply split into text and calls.
#[cfg(test)]
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Parsed {
    /// The text outside the calls (trimmed), including blocks that did not parse.
    pub text: String,
    /// The calls, in order.
    pub calls: Vec<ToolCall>,
}

/// Index of the earliest tool-call start (`<tool_call>` or `<function=`) in `text`.
pub fn find_start(text: &str) -> Option<usize> {
    [text.find(OPEN), text.find(FUNCTION)].into_iter().flatten().min()
}

/// Length of the longest suffix of `text` that may begin a tool call (held back in streams).
pub fn partial_start_suffix(text: &str) -> usize {
    use super::thinking::partial_tag_suffix;
    partial_tag_suffix(text, OPEN).max(partial_tag_suffix(text, FUNCTION))
}

/// Splits `text` into reply text and tool calls; `tools` (OpenAI shape) give parameter types.
#[cfg(test)]
pub fn parse(text: &str, tools: &[Value]) -> Parsed {
    let mut out = Parsed::default();
    let mut rest = text;
    let mut plain = String::new();
    while let Some(at) = find_start(rest) {
        plain.push_str(&rest[..at]);
        let block = &rest[at..];
        // The block runs to its `</tool_call>`, else to the next call's start, else to the end.
        let (body, len) = if let Some(b) = block.strip_prefix(OPEN) {
            // (A new `<tool_call>` before this one's close tag closes it.)
            let end = b.find(CLOSE).map(|e| (e, e + CLOSE.len()));
            let next = b.find(OPEN).map(|n| (n, n));
            let (body_end, skip) = match (end, next) {
                (Some(e), Some(n)) if n.0 < e.0 => n,
                (Some(e), _) => e,
                (None, Some(n)) => n,
                (None, None) => (b.len(), b.len()),
            };
            (&b[..body_end], OPEN.len() + skip)
        } else {
            // A bare `<function=…>`: up to `</function>` (or the next start, or the end).
            let after = &block[FUNCTION.len()..];
            let end = after.find("</function>").map(|e| FUNCTION.len() + e + "</function>".len());
            let next = find_start(after).map(|n| FUNCTION.len() + n);
            let len = match (end, next) {
                (Some(e), Some(n)) => e.min(n),
                (e, n) => e.or(n).unwrap_or(block.len()),
            };
            (&block[..len], len)
        };
        match parse_block(body, tools) {
            Some(call) => out.calls.push(call),
            None => plain.push_str(&block[..len]),
        }
        rest = &block[len..];
    }
    plain.push_str(rest);
    out.text = plain.trim().to_string();
    out
}

/// One call's body (between the tags): XML form, else JSON form.
pub(super) fn parse_block(body: &str, tools: &[Value]) -> Option<ToolCall> {
    let t = body.trim();
    if t.starts_with(FUNCTION) {
        parse_xml(t, tools)
    } else {
        parse_json(t)
    }
}

/// `<function=NAME>` then `<parameter=KEY>VALUE</parameter>`… (closing tags optional).
fn parse_xml(t: &str, tools: &[Value]) -> Option<ToolCall> {
    let after = &t[FUNCTION.len()..];
    let gt = after.find('>')?;
    let name = after[..gt].trim().trim_matches('"').to_string();
    if name.is_empty() || name.contains(['<', '\n']) {
        return None;
    }
    let schema = parameter_types(tools, &name);
    let mut arguments = Map::new();
    let mut rest = &after[gt + 1..];
    while let Some(p) = rest.find("<parameter=") {
        let between = &rest[..p];
        if !between.trim().is_empty() && between.trim() != "</parameter>" {
            return None; // text that is neither a parameter nor whitespace
        }
        let a = &rest[p + "<parameter=".len()..];
        let gt = a.find('>')?;
        let key = a[..gt].trim().trim_matches('"').to_string();
        if key.is_empty() || key.contains(['<', '\n']) {
            return None;
        }
        let v = &a[gt + 1..];
        let end = ["</parameter>", "<parameter=", "</function>"].iter().filter_map(|tag| v.find(tag)).min();
        let raw = &v[..end.unwrap_or(v.len())];
        arguments.insert(key.clone(), value(raw, schema.as_ref().and_then(|s| s.get(&key))));
        rest = &v[end.unwrap_or(v.len())..];
        rest = rest.strip_prefix("</parameter>").unwrap_or(rest);
    }
    let tail = rest.trim();
    let tail = tail.strip_prefix("</function>").unwrap_or(tail).trim();
    if !tail.is_empty() {
        return None;
    }
    Some(ToolCall::new(name, arguments))
}

/// A parameter's value: the text less one newline at each end, typed by the schema.
pub(super) fn value(raw: &str, ty: Option<&Value>) -> Value {
    let s = raw.strip_prefix('\n').unwrap_or(raw);
    let s = s.strip_suffix('\n').unwrap_or(s);
    let is_string = ty.and_then(Value::as_str) == Some("string");
    let known = ty.is_some();
    if is_string {
        return Value::String(s.to_string());
    }
    match serde_json::from_str::<Value>(s.trim()) {
        // With a known non-string type any JSON value; without a schema, not a bare string.
        Ok(v) if known || !v.is_string() => v,
        _ => Value::String(s.to_string()),
    }
}

/// The `type` of each parameter of tool `name` (`None` when the tool or its schema is unknown).
pub(super) fn parameter_types(tools: &[Value], name: &str) -> Option<Map<String, Value>> {
    let tool = tools.iter().map(|t| t.get("function").unwrap_or(t)).find(|f| f["name"] == name)?;
    let props = tool["parameters"]["properties"].as_object()?;
    Some(props.iter().map(|(k, v)| (k.clone(), v.get("type").cloned().unwrap_or(Value::Null))).collect())
}

/// `{"name": …, "arguments": {…}}` (or `parameters`, or arguments as a JSON string).
fn parse_json(t: &str) -> Option<ToolCall> {
    let v: Value = serde_json::from_str(t).ok().or_else(|| {
        // Trailing junk after the object (a common drift): the first complete value.
        serde_json::Deserializer::from_str(t).into_iter::<Value>().next()?.ok()
    })?;
    let name = v.get("name")?.as_str()?.to_string();
    if name.is_empty() {
        return None;
    }
    let args = v.get("arguments").or_else(|| v.get("parameters")).cloned().unwrap_or(json!({}));
    let arguments = match args {
        Value::Object(m) => m,
        Value::String(s) => match serde_json::from_str::<Value>(&s) {
            Ok(Value::Object(m)) => m,
            _ => return None,
        },
        Value::Null => Map::new(),
        _ => return None,
    };
    Some(ToolCall::new(name, arguments))
}

/// Normalises tool definitions to OpenAI's shape (what the chat templates read): OpenAI's are
/// kept; Anthropic's `{"name","description","input_schema"}` become `{"type":"function",
/// "function":{"name","description","parameters"}}`. Errors name the index and what is missing.
pub fn normalise(tools: &[Value], field: &str) -> Result<Vec<Value>, String> {
    tools
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let f = t.get("function").unwrap_or(t);
            let name = f.get("name").and_then(Value::as_str).filter(|n| !n.is_empty());
            let Some(name) = name else {
                return Err(format!("{field}[{i}]: a tool needs a non-empty string `name`"));
            };
            let params = f.get("parameters").or_else(|| f.get("input_schema")).cloned().unwrap_or(json!({}));
            if !params.is_object() {
                return Err(format!("{field}[{i}].parameters: must be a JSON schema object"));
            }
            let mut func = json!({ "name": name, "parameters": params });
            if let Some(d) = f.get("description").and_then(Value::as_str) {
                func["description"] = json!(d);
            }
            Ok(json!({ "type": "function", "function": func }))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn weather() -> Vec<Value> {
        vec![json!({"type":"function","function":{"name":"get_weather","parameters":{"type":"object",
            "properties":{"city":{"type":"string"},"days":{"type":"integer"},"zip":{"type":"string"}}}}})]
    }

    fn call(name: &str, args: Value) -> ToolCall {
        ToolCall::new(name.into(), args.as_object().unwrap().clone())
    }

    #[test]
    fn qwen3_coder_xml_calls_are_parsed_with_schema_types() {
        let text = "Let me check.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n\
                    <parameter=days>\n3\n</parameter>\n<parameter=zip>\n75001\n</parameter>\n</function>\n</tool_call>";
        let p = parse(text, &weather());
        assert_eq!(p.text, "Let me check.");
        assert_eq!(p.calls, vec![call("get_weather", json!({"city":"Paris","days":3,"zip":"75001"}))]);
        assert_eq!(p.calls[0].arguments_json(), r#"{"city":"Paris","days":3,"zip":"75001"}"#);
    }

    #[test]
    fn json_form_and_several_calls_are_parsed() {
        let text = "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": 1}}\n</tool_call>\n\
                    <tool_call>{\"name\": \"b\", \"arguments\": \"{\\\"y\\\": [1, 2]}\"}</tool_call>";
        let p = parse(text, &[]);
        assert_eq!(p.text, "");
        assert_eq!(p.calls, vec![call("a", json!({"x":1})), call("b", json!({"y":[1,2]}))]);
    }

    #[test]
    fn drifted_xml_is_still_read() {
        // No closing tags at all, multi-line value, no schema (JSON-looking values typed).
        let p = parse("<tool_call>\n<function=run>\n<parameter=cmd>\nls -la\ncd /\n<parameter=n>\n2", &[]);
        assert_eq!(p.calls, vec![call("run", json!({"cmd":"ls -la\ncd /","n":2}))]);
        // A bare function block, text after it.
        let p = parse("ok <function=f><parameter=q>{\"k\": true}</parameter></function> done", &[]);
        assert_eq!(p.calls, vec![call("f", json!({"q":{"k":true}}))]);
        assert_eq!(p.text, "ok  done");
        // Two calls where the first lacks </tool_call>.
        let p = parse("<tool_call><function=a></function><tool_call><function=b></function></tool_call>", &[]);
        assert_eq!(p.calls, vec![call("a", json!({})), call("b", json!({}))]);
    }

    #[test]
    fn malformed_calls_degrade_to_text_and_never_panic() {
        let cases = [
            "<tool_call>not json</tool_call>",
            "<tool_call>{\"arguments\": {}}</tool_call>",
            "<tool_call>{\"name\": \"x\", \"arguments\": 5}</tool_call>",
            "<tool_call><function=>\n</function></tool_call>",
            "<tool_call><function=f><parameter=>v</parameter></function></tool_call>",
            "<tool_call><function=f>junk<parameter=a>1</parameter></function></tool_call>",
            "<tool_call><function=f",
            "<tool_call>",
            "<function=",
            "<tool_call>{\"name\": \"é\", \"arguments\": {\"ü\": \"</tool_call>",
        ];
        for c in cases {
            let p = parse(c, &weather());
            assert!(p.calls.is_empty(), "{c:?} gave {:?}", p.calls);
            assert_eq!(p.text, c.trim(), "{c:?}");
        }
        // Trailing junk after a JSON object is dropped, the call kept.
        let p = parse("<tool_call>{\"name\": \"a\", \"arguments\": {}} }}</tool_call>", &[]);
        assert_eq!(p.calls, vec![call("a", json!({}))]);
        // Every prefix of a valid call parses without panicking.
        let full =
            "<tool_call>\n<function=get_weather>\n<parameter=city>\nNice é\n</parameter>\n</function>\n</tool_call>";
        for (i, _) in full.char_indices() {
            let _ = parse(&full[..i], &weather());
        }
    }

    #[test]
    fn anthropic_tools_are_normalised_to_openai_shape() {
        let t = normalise(&[json!({"name":"f","description":"d","input_schema":{"type":"object"}})], "tools").unwrap();
        assert_eq!(
            t[0],
            json!({"type":"function","function":{"name":"f","description":"d","parameters":{"type":"object"}}})
        );
        assert_eq!(normalise(&weather(), "tools").unwrap()[0]["function"]["name"], "get_weather");
        assert!(normalise(&[json!({"type":"function"})], "tools").unwrap_err().contains("tools[0]"));
        assert!(normalise(&[json!({"name":"f","parameters":3})], "tools").unwrap_err().contains("parameters"));
    }

    #[test]
    fn the_template_renders_tools_and_calls_that_parse_back() {
        use crate::chat::{ChatTemplate, Message, RenderOptions};
        let calls = vec![call("get_weather", json!({"city":"Paris","days":3})), call("noop", json!({}))];
        let mut asst = Message::new("assistant", "Checking.");
        asst.tool_calls = calls.iter().enumerate().map(|(i, c)| c.template_value(&format!("call_{i}"))).collect();
        let result = Message::new("tool", "sunny");
        let msgs = [Message::new("system", "be brief"), Message::new("user", "weather?"), asst, result];
        let opts = RenderOptions { add_generation_prompt: true, enable_thinking: true };
        let text = ChatTemplate::qwen35().render_with_tools(&msgs, &weather(), opts).unwrap();
        assert!(text.starts_with("<|im_start|>system\n# Tools\n"), "{text}");
        assert!(text.contains("\"get_weather\""), "{text}");
        assert!(text.contains("\n\nbe brief<|im_end|>\n<|im_start|>user\nweather?"), "{text}");
        assert!(text.contains("<tool_response>\nsunny\n</tool_response>"), "{text}");
        let turn = text.split("<|im_start|>assistant\n").nth(1).unwrap().split("<|im_end|>").next().unwrap();
        let p = parse(turn, &weather());
        assert_eq!(p.calls, calls, "{turn}");
        assert!(p.text.ends_with("Checking."), "{turn}");
        // Without tools the system turn is the plain one.
        let plain = ChatTemplate::qwen35().render_with_tools(&msgs[..2], &[], opts).unwrap();
        assert!(plain.starts_with("<|im_start|>system\nbe brief<|im_end|>"), "{plain}");
    }

    #[test]
    fn partial_starts_are_held() {
        assert_eq!(partial_start_suffix("abc <tool_"), 6);
        assert_eq!(partial_start_suffix("abc <func"), 5);
        assert_eq!(partial_start_suffix("abc <"), 1);
        assert_eq!(partial_start_suffix("abc"), 0);
        assert_eq!(find_start("x <function=f>"), Some(2));
    }
}
