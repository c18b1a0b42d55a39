//! OpenAI chat-completions request and response bodies. Requests are parsed leniently (unknown
//! fields ignored); fields that would change the answer but are not implemented are refused
//! (never silently ignored).

use serde::Deserialize;
use serde_json::{json, Value};

use super::error::ApiError;
use super::reply::Delta;
use super::tools::ToolCall;
use crate::chat::Message;

/// `POST /v1/chat/completions` body (the fields read; others are ignored).
#[derive(Debug, Clone, Deserialize)]
pub struct ChatRequest {
    /// Echoed back in the response; any value is accepted.
    pub model: Option<String>,
    /// The conversation.
    pub messages: Vec<ChatMessage>,
    /// Answer as server-sent events.
    pub stream: Option<bool>,
    /// `include_usage`: a last chunk with `usage`.
    pub stream_options: Option<StreamOptions>,
    /// Deprecated name of `max_completion_tokens`.
    pub max_tokens: Option<u64>,
    /// Most tokens to generate (clamped to what the context leaves).
    pub max_completion_tokens: Option<u64>,
    /// Up to four stop strings.
    pub stop: Option<Stop>,
    /// 0 (or absent) = greedy.
    pub temperature: Option<f32>,
    /// Nucleus mass in (0, 1].
    pub top_p: Option<f32>,
    /// Keep the K most likely tokens (an extension many servers accept; 0 = no limit).
    pub top_k: Option<usize>,
    /// Drop tokens below this fraction of the most likely one (extension).
    pub min_p: Option<f32>,
    /// Sampling seed.
    pub seed: Option<u64>,
    /// Number of choices; only 1.
    pub n: Option<u32>,
    /// Token log-probabilities: not implemented, so `true` is refused.
    pub logprobs: Option<bool>,
    /// Tool definitions (`{"type":"function","function":{"name","description","parameters"}}`),
    /// rendered by the chat template; calls are parsed from the reply.
    pub tools: Option<Vec<Value>>,
    /// `"auto"` (default) or `"none"` (tools neither shown nor parsed); `"required"` and a named
    /// function are refused (the output is not constrained).
    pub tool_choice: Option<Value>,
    /// Several calls per reply (the default) are always allowed; `false` is refused.
    pub parallel_tool_calls: Option<bool>,
    /// Keep generating after an EOS token (vLLM's extension; for benchmarks and tests).
    pub ignore_eos: Option<bool>,
    /// Template switches (vLLM's name): `enable_thinking`.
    pub chat_template_kwargs: Option<TemplateKwargs>,
}

/// `stream_options`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct StreamOptions {
    /// Send a last chunk with `usage` (and `"usage": null` on the others).
    pub include_usage: Option<bool>,
}

/// `chat_template_kwargs`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct TemplateKwargs {
    /// Open a `<think>` block in the generation prompt (default: on, as the template does).
    pub enable_thinking: Option<bool>,
}

/// `stop`: one string or a list.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    /// One stop string.
    One(String),
    /// Several.
    Many(Vec<String>),
}

/// One message.
#[derive(Debug, Clone, Deserialize)]
pub struct ChatMessage {
    /// `system`, `developer` (as system), `user`, `assistant` or `tool`.
    pub role: String,
    /// Text, or a list of content parts of type `text`; absent or null is empty.
    pub content: Option<Content>,
    /// An assistant turn's earlier thinking.
    pub reasoning_content: Option<String>,
    /// An assistant turn's tool calls.
    pub tool_calls: Option<Vec<RequestToolCall>>,
}

/// An assistant turn's tool call in a request.
#[derive(Debug, Clone, Deserialize)]
pub struct RequestToolCall {
    /// The call.
    pub function: RequestFunction,
}

/// The function of a request's tool call.
#[derive(Debug, Clone, Deserialize)]
pub struct RequestFunction {
    /// Its name.
    pub name: String,
    /// Its arguments: a JSON object, or (as OpenAI sends them) a string holding one.
    pub arguments: Option<Value>,
}

/// A tool call's arguments as an object (the template writes each as a parameter); `what` names
/// the field in errors.
pub fn arguments_object(args: Option<&Value>, what: &str) -> Result<Value, ApiError> {
    match args {
        None | Some(Value::Null) => Ok(json!({})),
        Some(v @ Value::Object(_)) => Ok(v.clone()),
        Some(Value::String(s)) if s.trim().is_empty() => Ok(json!({})),
        Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
            Ok(v @ Value::Object(_)) => Ok(v),
            _ => Err(ApiError::bad_request(format!("{what}: must be a JSON object (or a string holding one)"))),
        },
        Some(_) => Err(ApiError::bad_request(format!("{what}: must be a JSON object (or a string holding one)"))),
    }
}

/// Message content.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Content {
    /// Plain text.
    Text(String),
    /// Content parts.
    Parts(Vec<Part>),
}

/// One content part.
#[derive(Debug, Clone, Deserialize)]
pub struct Part {
    /// Only `text` is accepted.
    #[serde(rename = "type")]
    pub kind: String,
    /// The text of a `text` part.
    pub text: Option<String>,
}

/// Most stop strings accepted (OpenAI's limit).
pub const MAX_STOPS: usize = 4;

impl ChatRequest {
    /// Parses a body: malformed JSON or a wrong type is a 400 naming the place.
    pub fn parse(body: &[u8]) -> Result<Self, ApiError> {
        let de = &mut serde_json::Deserializer::from_slice(body);
        serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner();
            if path == "." {
                ApiError::bad_request(format!("invalid request body: {inner}"))
            } else {
                ApiError::bad_request(format!("invalid request body: {path}: {inner}"))
            }
        })
    }

    /// The messages for the chat template; refuses roles and parts it cannot render, and
    /// options that are not implemented.
    pub fn messages(&self) -> Result<Vec<Message>, ApiError> {
        if self.n.is_some_and(|n| n != 1) {
            return Err(ApiError::bad_request("n: only n = 1 is supported"));
        }
        if self.logprobs == Some(true) {
            return Err(ApiError::bad_request("logprobs: log-probabilities are not supported"));
        }
        if self.messages.is_empty() {
            return Err(ApiError::bad_request("messages: at least one message is needed"));
        }
        self.messages
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let role = match m.role.as_str() {
                    "developer" | "system" => "system",
                    r @ ("user" | "assistant" | "tool") => r,
                    other => {
                        return Err(ApiError::bad_request(format!(
                            "messages[{i}].role: \"{}\" is not one of system, developer, user, assistant, tool",
                            crate::cli::limits::cut(other)
                        )))
                    }
                };
                let content = match &m.content {
                    None => String::new(),
                    Some(Content::Text(t)) => t.clone(),
                    Some(Content::Parts(parts)) => {
                        let mut s = String::new();
                        for (j, p) in parts.iter().enumerate() {
                            match (p.kind.as_str(), &p.text) {
                                ("text", Some(t)) => s.push_str(t),
                                ("text", None) => {
                                    return Err(ApiError::bad_request(format!(
                                        "messages[{i}].content[{j}]: a text part needs `text`"
                                    )))
                                }
                                (k, _) => {
                                    return Err(ApiError::bad_request(format!(
                                        "messages[{i}].content[{j}].type: \"{}\" is not supported (only text)",
                                        crate::cli::limits::cut(k)
                                    )))
                                }
                            }
                        }
                        s
                    }
                };
                let mut msg = Message::new(role, &content);
                msg.reasoning_content = m.reasoning_content.clone();
                for (j, c) in m.tool_calls.iter().flatten().enumerate() {
                    if role != "assistant" {
                        return Err(ApiError::bad_request(format!(
                            "messages[{i}].tool_calls: only an assistant message has tool calls"
                        )));
                    }
                    let what = format!("messages[{i}].tool_calls[{j}].function.arguments");
                    let arguments = arguments_object(c.function.arguments.as_ref(), &what)?;
                    msg.tool_calls.push(json!({ "type": "function",
                        "function": { "name": c.function.name, "arguments": arguments } }));
                }
                Ok(msg)
            })
            .collect()
    }

    /// The tool definitions to render (OpenAI's shape), none when `tool_choice` is `"none"`.
    pub fn tools(&self) -> Result<Vec<Value>, ApiError> {
        let tools = self.tools.as_deref().unwrap_or(&[]);
        if self.parallel_tool_calls == Some(false) && !tools.is_empty() {
            return Err(ApiError::bad_request(
                "parallel_tool_calls: false is not supported (the model may call several tools in one reply)",
            ));
        }
        match &self.tool_choice {
            None => {}
            Some(Value::String(c)) if c == "auto" => {}
            Some(Value::String(c)) if c == "none" => return Ok(Vec::new()),
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "tool_choice: {} is not supported; use \"auto\" or \"none\" (the output is not constrained, so \
                     a call cannot be forced)",
                    crate::cli::limits::cut(&other.to_string())
                )))
            }
        }
        super::tools::normalise(tools, "tools").map_err(ApiError::bad_request)
    }

    /// The tools to parse calls with (`None` = no tools offered: tool-call text stays text).
    pub fn parsed_tools(&self) -> Option<Vec<Value>> {
        self.tools().ok().filter(|t| !t.is_empty())
    }

    /// Whether the generation prompt opens a think block (`chat_template_kwargs.enable_thinking`,
    /// default on as the template does).
    pub fn thinking(&self) -> bool {
        self.chat_template_kwargs.as_ref().and_then(|k| k.enable_thinking).unwrap_or(true)
    }

    /// The sampling parameters.
    pub fn sampling(&self) -> super::routes::Sampling {
        super::routes::Sampling {
            temperature: self.temperature,
            top_p: self.top_p,
            top_k: self.top_k,
            min_p: self.min_p,
            seed: self.seed,
        }
    }

    /// The stop strings (at most [`MAX_STOPS`], none empty).
    pub fn stops(&self) -> Result<Vec<String>, ApiError> {
        let v = match &self.stop {
            None => Vec::new(),
            Some(Stop::One(s)) => vec![s.clone()],
            Some(Stop::Many(v)) => v.clone(),
        };
        if v.len() > MAX_STOPS {
            return Err(ApiError::bad_request(format!("stop: at most {MAX_STOPS} stop strings, got {}", v.len())));
        }
        if v.iter().any(String::is_empty) {
            return Err(ApiError::bad_request("stop: a stop string is empty"));
        }
        Ok(v)
    }

    /// The requested most tokens (`max_completion_tokens`, else `max_tokens`); 0 is refused.
    pub fn max_tokens(&self) -> Result<Option<usize>, ApiError> {
        match self.max_completion_tokens.or(self.max_tokens) {
            Some(0) => Err(ApiError::bad_request("max_completion_tokens: must be at least 1")),
            Some(n) => Ok(Some(usize::try_from(n).unwrap_or(usize::MAX))),
            None => Ok(None),
        }
    }

    /// Whether the answer is streamed, and whether its last chunk carries `usage`.
    pub fn streaming(&self) -> (bool, bool) {
        let stream = self.stream.unwrap_or(false);
        (stream, stream && self.stream_options.as_ref().and_then(|o| o.include_usage).unwrap_or(false))
    }
}

/// Token counts of one answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    /// Prompt tokens (the whole rendered conversation).
    pub prompt: usize,
    /// Of them, tokens whose caches were kept from the previous request (not prefilled again).
    pub reused: usize,
    /// Generated tokens.
    pub completion: usize,
}

impl Usage {
    /// OpenAI's `usage` object (`prompt_tokens_details.cached_tokens` = reused tokens).
    pub fn json(&self) -> Value {
        json!({
            "prompt_tokens": self.prompt,
            "completion_tokens": self.completion,
            "total_tokens": self.prompt + self.completion,
            "prompt_tokens_details": { "cached_tokens": self.reused },
        })
    }
}

/// Identity of one answer: shared by all its chunks.
#[derive(Debug, Clone)]
pub struct Answer {
    /// `chatcmpl-…`.
    pub id: String,
    /// Unix seconds.
    pub created: u64,
    /// The model name echoed.
    pub model: String,
}

impl Answer {
    /// The non-streamed `chat.completion`: `content` (null when empty and tools were called),
    /// `reasoning_content` when there was reasoning, `tool_calls` when calls were parsed.
    pub fn completion(&self, text: &str, reasoning: &str, calls: &[ToolCall], finish: &str, usage: Usage) -> Value {
        let mut message = json!({ "role": "assistant", "content": text });
        if text.is_empty() && !calls.is_empty() {
            message["content"] = Value::Null;
        }
        if !reasoning.is_empty() {
            message["reasoning_content"] = json!(reasoning);
        }
        if !calls.is_empty() {
            message["tool_calls"] = calls.iter().enumerate().map(|(i, c)| self.tool_call(i, c)).collect();
        }
        json!({
            "id": self.id, "object": "chat.completion", "created": self.created, "model": self.model,
            "choices": [{ "index": 0, "message": message, "logprobs": null, "finish_reason": finish }],
            "usage": usage.json(),
        })
    }

    /// The id of call `i` of this answer: `call_<answer id>_<i>`.
    pub fn call_id(&self, i: usize) -> String {
        format!("call_{}_{i}", self.id)
    }

    /// Call `i` of this answer in OpenAI's shape.
    pub fn tool_call(&self, i: usize, c: &ToolCall) -> Value {
        json!({ "id": self.call_id(i), "type": "function",
                "function": { "name": c.name, "arguments": c.arguments_json() } })
    }

    /// A stream chunk's `delta` for `d` (`None` for a call's end, which OpenAI does not mark):
    /// a call's first delta carries its index, id, type and name with empty arguments, the
    /// next ones its index and an arguments fragment.
    pub fn delta(&self, d: Delta) -> Option<Value> {
        Some(match d {
            Delta::Reasoning(r) => json!({ "reasoning_content": r }),
            Delta::Text(t) => json!({ "content": t }),
            Delta::CallStart { index, name } => json!({ "tool_calls": [{ "index": index, "id": self.call_id(index),
                "type": "function", "function": { "name": name, "arguments": "" } }] }),
            Delta::CallArgs { index, json } => {
                json!({ "tool_calls": [{ "index": index, "function": { "arguments": json } }] })
            }
            Delta::CallEnd { .. } => return None,
        })
    }

    /// One `chat.completion.chunk` with `delta` and `finish_reason`; `"usage": null` when the
    /// stream ends with a usage chunk.
    pub fn chunk(&self, delta: Value, finish: Option<&str>, with_usage: bool) -> Value {
        let mut v = json!({
            "id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
            "choices": [{ "index": 0, "delta": delta, "logprobs": null, "finish_reason": finish }],
        });
        if with_usage {
            v["usage"] = Value::Null;
        }
        v
    }

    /// The last chunk of a stream with `include_usage`: no choices, the usage.
    pub fn usage_chunk(&self, usage: Usage) -> Value {
        json!({
            "id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
            "choices": [], "usage": usage.json(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::ChatRequest;

    fn req(body: &str) -> ChatRequest {
        ChatRequest::parse(body.as_bytes()).unwrap()
    }

    #[test]
    fn messages_map_roles_and_join_text_parts() {
        let r = req(r#"{"messages":[{"role":"developer","content":"be brief"},
            {"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},
            {"role":"assistant","content":null,"reasoning_content":"hm"}],"extra":1}"#);
        let m = r.messages().unwrap();
        assert_eq!((m[0].role.as_str(), m[0].content.as_str()), ("system", "be brief"));
        assert_eq!((m[1].role.as_str(), m[1].content.as_str()), ("user", "ab"));
        assert_eq!((m[2].content.as_str(), m[2].reasoning_content.as_deref()), ("", Some("hm")));
    }

    #[test]
    fn stop_max_tokens_and_stream_options_are_read() {
        let r = req(r#"{"messages":[],"stop":"x","max_tokens":5,"max_completion_tokens":7,"stream":true,
            "stream_options":{"include_usage":true}}"#);
        assert_eq!(r.stops().unwrap(), vec!["x".to_string()]);
        assert_eq!(r.max_tokens().unwrap(), Some(7));
        assert_eq!(r.streaming(), (true, true));
        let r = req(r#"{"messages":[],"stop":["a","b"],"stream_options":{"include_usage":true}}"#);
        assert_eq!(r.stops().unwrap().len(), 2);
        assert_eq!(r.streaming(), (false, false));
        assert_eq!(r.max_tokens().unwrap(), None);
    }

    #[test]
    fn wrong_types_name_the_field() {
        let e =
            ChatRequest::parse(br#"{"messages":[{"role":"user","content":"hi"}],"temperature":"hot"}"#).unwrap_err();
        assert!(e.message.contains("temperature"), "{}", e.message);
        let e = ChatRequest::parse(br#"{"messages":[{"role":7}]}"#).unwrap_err();
        assert!(e.message.contains("messages[0].role"), "{}", e.message);
        assert_eq!(e.status.as_u16(), 400);
    }
}
