//! `POST /v1/messages` and `POST /v1/messages/count_tokens` (Anthropic Messages API).
//!
//! The prompt is rendered by the chat template (system and tools included) by [`prompt_text`],
//! the one function both routes call, and tokenised whole, so `count_tokens` is exactly what the
//! same request prefills *cold* (`usage.input_tokens + usage.cache_read_input_tokens` of it on a
//! server whose session holds no conversation it continues). A request that continues the
//! session's conversation runs the conversation's tokens as generated followed by the rest
//! tokenised ([`super::history`]); their count can differ from the cold one by the difference
//! between the model's split of its replies and the canonical one.
//! A stream is the full event sequence: `message_start`, `ping`, per block
//! `content_block_start` / `content_block_delta`… / `content_block_stop` (`thinking_delta` then
//! `signature_delta`, `text_delta`, `input_json_delta`), `message_delta` (`stop_reason`,
//! `stop_sequence`, usage), `message_stop`; a failure mid-stream is an `error` event.
//! `max_tokens` is clamped to what the context leaves; `thinking.budget_tokens` closes the
//! thinking after that many tokens ([`super::budget`]); errors use Anthropic's shape.

use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::anthropic::{stop_reason, tool_use_block, tool_use_start, usage_json, MessagesRequest};
use super::budget::ThinkBudget;
use super::error::ApiError;
use super::history::generation_prompt_start;
use super::reply::{self, Delta, ReplySplitter};
use super::routes::{blocking, body, collect, now, prepare, rule, submit, tokenize, AppState};
use super::worker::{Event, Outcome};
use crate::chat::RenderOptions;

/// The request's prompt text: messages, system and tools rendered by the chat template.
pub fn prompt_text(st: &AppState, req: &MessagesRequest) -> Result<String, ApiError> {
    rendered(st, req, true)
}

/// The request rendered with or without the generation prompt.
fn rendered(st: &AppState, req: &MessagesRequest, add_generation_prompt: bool) -> Result<String, ApiError> {
    let messages = req.chat_messages()?;
    let tools = req.tool_definitions()?;
    let opts = RenderOptions { add_generation_prompt, enable_thinking: req.thinking_on()? };
    st.model
        .template
        .render_with_tools(&messages, &tools, opts)
        .map_err(|e| ApiError::bad_request(format!("messages: the chat template failed: {e}")))
}

/// `POST /v1/messages/count_tokens`: `{"input_tokens": N}`.
pub async fn count_tokens(State(st): State<Arc<AppState>>, b: Result<Bytes, BytesRejection>) -> Response {
    let r = async {
        let req = MessagesRequest::parse(&body(b)?)?;
        let n = blocking(move || Ok(tokenize(&st, &prompt_text(&st, &req)?)?.len())).await?;
        Ok::<_, ApiError>(Json(json!({ "input_tokens": n })).into_response())
    };
    r.await.unwrap_or_else(|e| e.anthropic().into_response())
}

/// `POST /v1/messages`.
pub async fn handler(State(st): State<Arc<AppState>>, b: Result<Bytes, BytesRejection>) -> Response {
    messages(st, b).await.unwrap_or_else(|e| e.anthropic().into_response())
}

/// What one answer's events share.
#[derive(Debug, Clone)]
struct Head {
    id: String,
    model: String,
    stops: Vec<String>,
}

impl Head {
    fn tool_id(&self, i: usize) -> String {
        format!("toolu_{}_{i}", self.id)
    }
}

async fn messages(st: Arc<AppState>, b: Result<Bytes, BytesRejection>) -> Result<Response, ApiError> {
    let req = Arc::new(MessagesRequest::parse(&body(b)?)?);
    let (st2, req2) = (st.clone(), req.clone());
    let planned = blocking(move || {
        let stops = req2.stops()?;
        let rule = rule(&req2.sampling())?;
        let requested = req2.max_tokens()?;
        let budget = req2.thinking_budget()?;
        let text = prompt_text(&st2, &req2)?;
        // Where the generation prompt starts: the session's snapshot (`super::history`).
        let start = rendered(&st2, &req2, false).ok().and_then(|base| generation_prompt_start(&base, &text));
        let mut p = prepare(&st2, text, requested, rule, false, stops)?;
        p.snapshot_bytes = start;
        if let Some(tokens) = budget.filter(|_| p.thinking) {
            let close = super::thinking::template_close(&st2.model.template);
            let close = tokenize(&st2, &close)?;
            p.think_budget = Some(ThinkBudget { tokens, close });
        }
        Ok(p)
    })
    .await?;
    let (prompt_len, thinking, stops) = (planned.prompt.len(), planned.thinking, planned.stops.clone());
    let tools = Some(req.tool_definitions()?).filter(|t| !t.is_empty());
    let rx = submit(&st, planned)?;
    let n = st.served.fetch_add(1, Ordering::Relaxed);
    let head = Head {
        id: format!("msg_{n}_{}", now()),
        model: req.model.clone().unwrap_or_else(|| st.model.id.clone()),
        stops,
    };
    if req.stream.unwrap_or(false) {
        return Ok(sse(head, rx, ReplySplitter::new(thinking, tools), prompt_len).into_response());
    }
    let (text, o) = collect(rx).await?;
    let (reasoning, content, calls) = reply::split_all(&text, thinking, tools);
    let mut blocks = Vec::new();
    if !reasoning.is_empty() {
        blocks.push(json!({ "type": "thinking", "thinking": reasoning, "signature": "" }));
    }
    if !content.is_empty() || (calls.is_empty() && reasoning.is_empty()) {
        blocks.push(json!({ "type": "text", "text": content }));
    }
    for (i, c) in calls.iter().enumerate() {
        blocks.push(tool_use_block(&head.tool_id(i), c));
    }
    let (reason, seq) = stop_reason(o.finish, o.stop_string, &head.stops, !calls.is_empty());
    Ok(Json(json!({
        "id": head.id, "type": "message", "role": "assistant", "model": head.model,
        "content": blocks, "stop_reason": reason, "stop_sequence": seq,
        "usage": usage_json(o.prompt_tokens, o.reused_tokens, o.completion_tokens),
    }))
    .into_response())
}

/// The open content block of a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Open {
    None,
    Thinking,
    Text,
    Tool,
}

/// Builds the event sequence as pieces arrive.
struct Events {
    head: Head,
    /// Index of the next block.
    next: usize,
    open: Open,
    out: Vec<SseEvent>,
}

fn event(kind: &str, data: Value) -> SseEvent {
    SseEvent::default().event(kind).data(data.to_string())
}

impl Events {
    fn close(&mut self) {
        if self.open == Open::Thinking {
            let d = json!({ "type": "content_block_delta", "index": self.next - 1,
                            "delta": { "type": "signature_delta", "signature": "" } });
            self.out.push(event("content_block_delta", d));
        }
        if self.open != Open::None {
            let d = json!({ "type": "content_block_stop", "index": self.next - 1 });
            self.out.push(event("content_block_stop", d));
            self.open = Open::None;
        }
    }

    fn start(&mut self, kind: Open, block: Value) {
        self.close();
        let d = json!({ "type": "content_block_start", "index": self.next, "content_block": block });
        self.out.push(event("content_block_start", d));
        self.next += 1;
        self.open = kind;
    }

    /// One delta: text and thinking open (or continue) a block of their kind; a call is a
    /// `tool_use` block of its own whose input streams as `input_json_delta`s.
    fn delta(&mut self, d: Delta) {
        let (kind, delta) = match d {
            Delta::Reasoning(r) => (Open::Thinking, json!({ "type": "thinking_delta", "thinking": r })),
            Delta::Text(t) => (Open::Text, json!({ "type": "text_delta", "text": t })),
            Delta::CallStart { index, name } => {
                let block = tool_use_start(&self.head.tool_id(index), &name);
                self.start(Open::Tool, block);
                return;
            }
            Delta::CallArgs { json, .. } => (Open::Tool, json!({ "type": "input_json_delta", "partial_json": json })),
            Delta::CallEnd { .. } => {
                self.close();
                return;
            }
        };
        if self.open != kind {
            let block = match kind {
                Open::Thinking => json!({ "type": "thinking", "thinking": "", "signature": "" }),
                Open::Text => json!({ "type": "text", "text": "" }),
                // Arguments outside a call do not occur (a call starts before them).
                _ => return,
            };
            self.start(kind, block);
        }
        let d = json!({ "type": "content_block_delta", "index": self.next - 1, "delta": delta });
        self.out.push(event("content_block_delta", d));
    }

    fn done(&mut self, tail: Vec<Delta>, called: bool, o: &Outcome) {
        for d in tail {
            self.delta(d);
        }
        if self.next == 0 {
            // An empty answer still has one (empty) text block.
            self.start(Open::Text, json!({ "type": "text", "text": "" }));
        }
        self.close();
        let (reason, seq) = stop_reason(o.finish, o.stop_string, &self.head.stops, called);
        let d = json!({ "type": "message_delta", "delta": { "stop_reason": reason, "stop_sequence": seq },
                        "usage": usage_json(o.prompt_tokens, o.reused_tokens, o.completion_tokens) });
        self.out.push(event("message_delta", d));
        self.out.push(event("message_stop", json!({ "type": "message_stop" })));
    }

    fn failed(&mut self, message: String) {
        let e = ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", message).anthropic();
        self.out.push(event("error", e.body()));
    }
}

/// The SSE answer. `message_start`'s usage counts the whole cold prompt as input (how much of
/// it was reused, and the prompt's length when it continues the session's conversation, are
/// known when the job runs); `message_delta` carries the final usage.
/// Dropping the stream (client gone) closes `rx`, which stops the worker after its round.
fn sse(
    head: Head,
    rx: mpsc::UnboundedReceiver<Event>,
    splitter: ReplySplitter,
    prompt_len: usize,
) -> Sse<impl futures_util::Stream<Item = Result<SseEvent, Infallible>>> {
    let start = json!({ "type": "message_start", "message": {
        "id": head.id, "type": "message", "role": "assistant", "model": head.model, "content": [],
        "stop_reason": null, "stop_sequence": null, "usage": usage_json(prompt_len, 0, 0) } });
    let mut ev = Events { head, next: 0, open: Open::None, out: Vec::new() };
    ev.out.push(event("message_start", start));
    ev.out.push(event("ping", json!({ "type": "ping" })));
    let stream =
        futures_util::stream::unfold((rx, ev, false, splitter), |(mut rx, mut ev, mut ended, mut sp)| async move {
            loop {
                if !ev.out.is_empty() {
                    let e = ev.out.remove(0);
                    return Some((Ok(e), (rx, ev, ended, sp)));
                }
                if ended {
                    return None;
                }
                match rx.recv().await {
                    Some(Event::Text(t)) => {
                        for d in sp.push(&t) {
                            ev.delta(d);
                        }
                    }
                    Some(Event::Done(o)) => {
                        let tail = sp.finish();
                        ev.done(tail, !sp.calls().is_empty(), &o);
                        ended = true;
                    }
                    Some(Event::Failed(m)) => {
                        ev.failed(m);
                        ended = true;
                    }
                    None => {
                        ev.failed("the worker stopped".into());
                        ended = true;
                    }
                }
            }
        });
    Sse::new(stream).keep_alive(KeepAlive::default())
}
