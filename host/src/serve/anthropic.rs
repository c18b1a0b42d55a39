//! Anthropic Messages request and response bodies: the request mapped onto the chat template's
//! messages (system text or blocks; `text`, `tool_use`, `tool_result` and `thinking` blocks),
//! the answer's content blocks (`thinking`, `text`, `tool_use`), `stop_reason` and usage.
//! Unknown fields are ignored; what would change the answer but is not implemented is refused.

use serde::Deserialize;
use serde_json::{json, Value};

use super::error::ApiError;
use super::openai::arguments_object;
use super::routes::Sampling;
use super::tools::ToolCall;
use crate::chat::Message;

/// The smallest `thinking.budget_tokens` Anthropic's API accepts.
pub const MIN_THINKING_BUDGET: u64 = 1024;

/// `POST /v1/messages` (and `/v1/messages/count_tokens`) body.
#[derive(Debug, Clone, Deserialize)]
pub struct MessagesRequest {
    /// Echoed back; any value is accepted.
    pub model: Option<String>,
    /// Most tokens to generate; clamped to what the context leaves (absent = all it leaves).
    pub max_tokens: Option<u64>,
    /// The conversation (`user` / `assistant`).
    pub messages: Vec<AnthropicMessage>,
    /// System prompt: text or a list of text blocks.
    pub system: Option<Content>,
    /// Stop strings.
    pub stop_sequences: Option<Vec<String>>,
    /// Answer as server-sent events.
    pub stream: Option<bool>,
    /// 0 (or absent) = greedy.
    pub temperature: Option<f32>,
    /// Nucleus mass.
    pub top_p: Option<f32>,
    /// Top-k.
    pub top_k: Option<usize>,
    /// Tool definitions (`{"name","description","input_schema"}`).
    pub tools: Option<Vec<Value>>,
    /// `{"type":"auto"}` (default) or `{"type":"none"}`; `any` / `tool` are refused.
    pub tool_choice: Option<Value>,
    /// `{"type":"enabled","budget_tokens":N}` (the server closes the thinking after N tokens),
    /// `{"type":"adaptive"}` or `{"type":"disabled"}` (pre-fills an empty think block).
    pub thinking: Option<Value>,
}

/// One message.
#[derive(Debug, Clone, Deserialize)]
pub struct AnthropicMessage {
    /// `user` or `assistant`.
    pub role: String,
    /// Text or blocks.
    pub content: Content,
}

/// Text or a list of content blocks.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Content {
    /// Plain text.
    Text(String),
    /// Blocks (kept as JSON: their kinds differ in shape).
    Blocks(Vec<Value>),
}

fn cut(s: &str) -> String {
    crate::cli::limits::cut(s)
}

/// The text of a `tool_result`'s content: a string or text blocks.
fn result_text(v: Option<&Value>, what: &str) -> Result<String, ApiError> {
    match v {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(blocks)) => {
            let mut s = String::new();
            for (k, b) in blocks.iter().enumerate() {
                match (b["type"].as_str(), b["text"].as_str()) {
                    (Some("text"), Some(t)) => s.push_str(t),
                    _ => {
                        return Err(ApiError::bad_request(format!(
                            "{what}[{k}]: only text blocks are supported in a tool result"
                        )))
                    }
                }
            }
            Ok(s)
        }
        Some(_) => Err(ApiError::bad_request(format!("{what}: must be a string or a list of text blocks"))),
    }
}

impl MessagesRequest {
    /// Parses a body: malformed JSON or a wrong type is a 400 naming the place.
    pub fn parse(b: &[u8]) -> Result<Self, ApiError> {
        let de = &mut serde_json::Deserializer::from_slice(b);
        serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            ApiError::bad_request(format!("invalid request body: {path}: {}", e.into_inner())).anthropic()
        })
    }

    /// The chat template's messages: the system prompt first, then each turn; a user turn's
    /// `tool_result` blocks become `tool` messages (in order), its text one `user` message; an
    /// assistant turn's `thinking` blocks its reasoning, `tool_use` blocks its tool calls.
    pub fn chat_messages(&self) -> Result<Vec<Message>, ApiError> {
        if self.messages.is_empty() {
            return Err(ApiError::bad_request("messages: at least one message is needed"));
        }
        if self.messages.last().is_some_and(|m| m.role == "assistant") {
            return Err(ApiError::bad_request(
                "messages: a last assistant message (a prefill to continue) is not supported; end with a user turn",
            ));
        }
        let mut out = Vec::new();
        match &self.system {
            None => {}
            Some(Content::Text(t)) => out.push(Message::new("system", t)),
            Some(Content::Blocks(blocks)) => {
                let mut s = String::new();
                for (k, b) in blocks.iter().enumerate() {
                    match (b["type"].as_str(), b["text"].as_str()) {
                        (Some("text"), Some(t)) => {
                            if !s.is_empty() {
                                s.push('\n');
                            }
                            s.push_str(t)
                        }
                        _ => return Err(ApiError::bad_request(format!("system[{k}]: a system block must be text"))),
                    }
                }
                out.push(Message::new("system", &s));
            }
        }
        for (i, m) in self.messages.iter().enumerate() {
            let role = match m.role.as_str() {
                r @ ("user" | "assistant") => r,
                other => {
                    return Err(ApiError::bad_request(format!(
                        "messages[{i}].role: \"{}\" is not user or assistant",
                        cut(other)
                    )))
                }
            };
            let blocks = match &m.content {
                Content::Text(t) => {
                    out.push(Message::new(role, t));
                    continue;
                }
                Content::Blocks(b) => b,
            };
            let mut text = String::new();
            let mut reasoning: Option<String> = None;
            let mut calls = Vec::new();
            for (j, b) in blocks.iter().enumerate() {
                let at = format!("messages[{i}].content[{j}]");
                let kind = b["type"].as_str().unwrap_or("");
                match (role, kind) {
                    (_, "text") => match b["text"].as_str() {
                        Some(t) => text.push_str(t),
                        None => return Err(ApiError::bad_request(format!("{at}: a text block needs `text`"))),
                    },
                    ("user", "tool_result") => {
                        if !text.is_empty() {
                            out.push(Message::new("user", &std::mem::take(&mut text)));
                        }
                        let mut r = result_text(b.get("content"), &format!("{at}.content"))?;
                        if b["is_error"] == json!(true) {
                            r = format!("Error: {r}");
                        }
                        out.push(Message::new("tool", &r));
                    }
                    ("assistant", "thinking") => {
                        reasoning.get_or_insert_with(String::new).push_str(b["thinking"].as_str().unwrap_or(""))
                    }
                    ("assistant", "redacted_thinking") => {}
                    ("assistant", "tool_use") => {
                        let Some(name) = b["name"].as_str() else {
                            return Err(ApiError::bad_request(format!("{at}: a tool_use block needs `name`")));
                        };
                        let input = arguments_object(b.get("input"), &format!("{at}.input"))?;
                        calls.push(json!({ "type": "function", "function": { "name": name, "arguments": input } }));
                    }
                    (_, k) => {
                        return Err(ApiError::bad_request(format!(
                            "{at}.type: \"{}\" is not supported in a {role} message",
                            cut(k)
                        )))
                    }
                }
            }
            if role == "assistant" {
                let mut msg = Message::new("assistant", &text);
                msg.reasoning_content = reasoning;
                msg.tool_calls = calls;
                out.push(msg);
            } else if !text.is_empty() || !blocks.iter().any(|b| b["type"] == "tool_result") {
                out.push(Message::new("user", &text));
            }
        }
        Ok(out)
    }

    /// The tool definitions in OpenAI's shape; none when `tool_choice` is `none`.
    pub fn tool_definitions(&self) -> Result<Vec<Value>, ApiError> {
        let tools = self.tools.as_deref().unwrap_or(&[]);
        if let Some(c) = &self.tool_choice {
            if c["disable_parallel_tool_use"] == json!(true) && !tools.is_empty() {
                return Err(ApiError::bad_request(
                    "tool_choice.disable_parallel_tool_use: not supported (the model may call several tools)",
                ));
            }
            match c["type"].as_str() {
                Some("auto") => {}
                Some("none") => return Ok(Vec::new()),
                Some(t) => {
                    return Err(ApiError::bad_request(format!(
                        "tool_choice.type: \"{}\" is not supported; use \"auto\" or \"none\" (the output is not \
                         constrained, so a call cannot be forced)",
                        cut(t)
                    )))
                }
                None => return Err(ApiError::bad_request("tool_choice: needs a `type`")),
            }
        }
        super::tools::normalise(tools, "tools").map_err(ApiError::bad_request)
    }

    /// Whether the generation prompt opens a think block: on unless `thinking.type` is
    /// `disabled` (the Qwen template's default is on).
    pub fn thinking_on(&self) -> Result<bool, ApiError> {
        match &self.thinking {
            None | Some(Value::Null) => Ok(true),
            Some(t) => match t["type"].as_str() {
                Some("enabled" | "adaptive") => Ok(true),
                Some("disabled") => Ok(false),
                _ => Err(ApiError::bad_request("thinking.type: must be \"enabled\" or \"disabled\"")),
            },
        }
    }

    /// `thinking.budget_tokens` of `{"type": "enabled", …}`, checked as Anthropic's API checks
    /// it: required, an integer of at least [`MIN_THINKING_BUDGET`], less than `max_tokens` when
    /// that is given; `None` for the other thinking types (no budget).
    pub fn thinking_budget(&self) -> Result<Option<usize>, ApiError> {
        let Some(t) = self.thinking.as_ref().filter(|t| t["type"] == "enabled") else { return Ok(None) };
        let budget = match t.get("budget_tokens") {
            None | Some(Value::Null) => {
                return Err(ApiError::bad_request("thinking.budget_tokens: required when thinking.type is \"enabled\""))
            }
            Some(v) => v.as_u64().ok_or_else(|| {
                ApiError::bad_request(format!(
                    "thinking.budget_tokens: must be an integer of at least {MIN_THINKING_BUDGET}, got {}",
                    cut(&v.to_string())
                ))
            })?,
        };
        if budget < MIN_THINKING_BUDGET {
            return Err(ApiError::bad_request(format!(
                "thinking.budget_tokens: must be at least {MIN_THINKING_BUDGET}, got {budget}"
            )));
        }
        if let Some(max) = self.max_tokens.filter(|&m| budget >= m) {
            return Err(ApiError::bad_request(format!(
                "max_tokens: must be greater than thinking.budget_tokens ({max} ≤ {budget})"
            )));
        }
        Ok(Some(usize::try_from(budget).unwrap_or(usize::MAX)))
    }

    /// The sampling parameters.
    pub fn sampling(&self) -> Sampling {
        Sampling { temperature: self.temperature, top_p: self.top_p, top_k: self.top_k, min_p: None, seed: None }
    }

    /// The stop strings (none empty).
    pub fn stops(&self) -> Result<Vec<String>, ApiError> {
        let v = self.stop_sequences.clone().unwrap_or_default();
        if v.iter().any(String::is_empty) {
            return Err(ApiError::bad_request("stop_sequences: a stop sequence is empty"));
        }
        Ok(v)
    }

    /// The requested most tokens; 0 is refused.
    pub fn max_tokens(&self) -> Result<Option<usize>, ApiError> {
        match self.max_tokens {
            Some(0) => Err(ApiError::bad_request("max_tokens: must be at least 1")),
            n => Ok(n.map(|n| usize::try_from(n).unwrap_or(usize::MAX))),
        }
    }
}

/// Anthropic's usage: `input_tokens` are the prompt tokens prefilled for this request,
/// `cache_read_input_tokens` those whose caches were kept from the previous one (their sum is
/// the prompt run: what `count_tokens` gives, except for a request that continues the session's
/// conversation, whose earlier replies count as the tokens generated: [`super::history`]).
pub fn usage_json(prompt: usize, reused: usize, output: usize) -> Value {
    json!({
        "input_tokens": prompt - reused.min(prompt),
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": reused,
        "output_tokens": output,
    })
}

/// Anthropic's `stop_reason` (and `stop_sequence`) of an answer.
pub fn stop_reason(
    finish: &str,
    stop_string: Option<usize>,
    stops: &[String],
    called: bool,
) -> (&'static str, Option<String>) {
    match (called, stop_string.and_then(|i| stops.get(i)), finish) {
        (true, _, _) => ("tool_use", None),
        (false, Some(s), _) => ("stop_sequence", Some(s.clone())),
        (false, None, "length") => ("max_tokens", None),
        _ => ("end_turn", None),
    }
}

/// A `tool_use` block with its whole `input`.
pub fn tool_use_block(id: &str, c: &ToolCall) -> Value {
    json!({ "type": "tool_use", "id": id, "name": c.name, "input": Value::Object(c.arguments.clone()) })
}

/// The `content_block_start` block of a streamed `tool_use` (`input: {}`; the input follows as
/// `input_json_delta`s).
pub fn tool_use_start(id: &str, name: &str) -> Value {
    json!({ "type": "tool_use", "id": id, "name": name, "input": {} })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(body: &str) -> MessagesRequest {
        MessagesRequest::parse(body.as_bytes()).unwrap()
    }

    #[test]
    fn blocks_map_to_template_messages() {
        let r = req(r#"{"model":"claude-x","max_tokens":64000,
            "system":[{"type":"text","text":"be brief"},{"type":"text","text":"and kind"}],
            "messages":[
              {"role":"user","content":"weather?"},
              {"role":"assistant","content":[{"type":"thinking","thinking":"hm","signature":"s"},
                 {"type":"text","text":"Checking."},
                 {"type":"tool_use","id":"t1","name":"get_weather","input":{"city":"Paris"}}]},
              {"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"sunny"}]},
                 {"type":"text","text":"thanks"}]}],
            "unknown":1}"#);
        let m = r.chat_messages().unwrap();
        let roles: Vec<&str> = m.iter().map(|m| m.role.as_str()).collect();
        assert_eq!(roles, ["system", "user", "assistant", "tool", "user"]);
        assert_eq!(m[0].content, "be brief\nand kind");
        assert_eq!(m[2].reasoning_content.as_deref(), Some("hm"));
        assert_eq!(m[2].tool_calls[0]["function"]["arguments"]["city"], "Paris");
        assert_eq!((m[3].content.as_str(), m[4].content.as_str()), ("sunny", "thanks"));
    }

    #[test]
    fn unsupported_parts_are_refused_naming_the_field() {
        let e = req(r#"{"messages":[{"role":"user","content":[{"type":"image","source":{}}]}]}"#)
            .chat_messages()
            .unwrap_err();
        assert!(e.message.contains("messages[0].content[0].type"), "{}", e.message);
        let e = req(r#"{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"}]}"#)
            .chat_messages()
            .unwrap_err();
        assert!(e.message.contains("prefill"), "{}", e.message);
        let e = req(r#"{"messages":[{"role":"system","content":"x"}]}"#).chat_messages().unwrap_err();
        assert!(e.message.contains("messages[0].role"), "{}", e.message);
        let e = req(r#"{"messages":[],"tool_choice":{"type":"any"},"tools":[]}"#).tool_definitions().unwrap_err();
        assert!(e.message.contains("tool_choice"), "{}", e.message);
        let e = MessagesRequest::parse(br#"{"messages":[{"role":"user","content":5}]}"#).unwrap_err();
        assert!(e.anthropic && e.message.contains("messages[0].content"), "{e:?}");
    }

    #[test]
    fn thinking_budgets_are_checked_as_anthropic_checks_them() {
        let budget = |t: &str| req(&format!(r#"{{"messages":[],"max_tokens":4096,"thinking":{t}}}"#)).thinking_budget();
        assert_eq!(budget(r#"{"type":"enabled","budget_tokens":2048}"#).unwrap(), Some(2048));
        assert_eq!(budget(r#"{"type":"adaptive"}"#).unwrap(), None);
        assert_eq!(budget(r#"{"type":"disabled"}"#).unwrap(), None);
        for (bad, what) in [
            (r#"{"type":"enabled"}"#, "required"),
            (r#"{"type":"enabled","budget_tokens":1023}"#, "at least 1024"),
            (r#"{"type":"enabled","budget_tokens":-5}"#, "integer"),
            (r#"{"type":"enabled","budget_tokens":"many"}"#, "integer"),
            (r#"{"type":"enabled","budget_tokens":4096}"#, "greater than thinking.budget_tokens"),
        ] {
            let e = budget(bad).unwrap_err();
            assert!(e.message.contains(what), "{bad}: {}", e.message);
        }
        let r = req(r#"{"messages":[],"thinking":{"type":"enabled","budget_tokens":100000}}"#);
        assert_eq!(r.thinking_budget().unwrap(), Some(100000), "no max_tokens: only the minimum");
    }

    #[test]
    fn stop_reasons_follow_the_outcome() {
        let stops = vec!["END".to_string()];
        assert_eq!(stop_reason("stop", Some(0), &stops, false), ("stop_sequence", Some("END".into())));
        assert_eq!(stop_reason("length", None, &stops, false), ("max_tokens", None));
        assert_eq!(stop_reason("stop", None, &stops, false), ("end_turn", None));
        assert_eq!(stop_reason("stop", None, &stops, true), ("tool_use", None));
        assert_eq!(usage_json(10, 4, 3)["input_tokens"], 6);
    }
}
