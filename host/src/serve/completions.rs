//! `POST /v1/completions`: OpenAI's legacy text completion — the raw prompt tokenised as it is
//! (no chat template, no thinking split, no tool parsing), JSON or SSE (`text_completion`
//! chunks, `[DONE]`), `usage` as in chat completions.

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
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::error::ApiError;
use super::openai::{Stop, StreamOptions, MAX_STOPS};
use super::routes::{blocking, body, collect, now, prepare, rule, submit, usage, AppState, Sampling};
use super::worker::Event;

/// `POST /v1/completions` body (the fields read; others are ignored).
#[derive(Debug, Clone, Deserialize)]
pub struct CompletionRequest {
    /// Echoed back; any value is accepted.
    pub model: Option<String>,
    /// The prompt: one string (or a list holding exactly one).
    pub prompt: Prompt,
    /// Answer as server-sent events.
    pub stream: Option<bool>,
    /// `include_usage`: a last chunk with `usage`.
    pub stream_options: Option<StreamOptions>,
    /// Most tokens to generate (clamped to what the context leaves; absent = all it leaves).
    pub max_tokens: Option<u64>,
    /// Up to four stop strings.
    pub stop: Option<Stop>,
    /// 0 (or absent) = greedy.
    pub temperature: Option<f32>,
    /// Nucleus mass in (0, 1].
    pub top_p: Option<f32>,
    /// Top-k (extension).
    pub top_k: Option<usize>,
    /// Min-p (extension).
    pub min_p: Option<f32>,
    /// Sampling seed.
    pub seed: Option<u64>,
    /// Only 1.
    pub n: Option<u32>,
    /// Not supported: a number is refused.
    pub logprobs: Option<Value>,
    /// Prompt echoed in the text: refused when true.
    pub echo: Option<bool>,
    /// Text after the completion (insertion): refused.
    pub suffix: Option<String>,
    /// Keep generating after an EOS token (vLLM's extension).
    pub ignore_eos: Option<bool>,
}

/// `prompt`: a string or a list of strings.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Prompt {
    /// One prompt.
    One(String),
    /// Several (only one is accepted).
    Many(Vec<String>),
}

impl CompletionRequest {
    /// Parses a body: malformed JSON or a wrong type is a 400 naming the place.
    pub fn parse(b: &[u8]) -> Result<Self, ApiError> {
        let de = &mut serde_json::Deserializer::from_slice(b);
        serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            ApiError::bad_request(format!("invalid request body: {path}: {}", e.into_inner()))
        })
    }

    /// The prompt text; refuses what is not implemented.
    pub fn text(&self) -> Result<&str, ApiError> {
        if self.n.is_some_and(|n| n != 1) {
            return Err(ApiError::bad_request("n: only n = 1 is supported"));
        }
        if self.logprobs.as_ref().is_some_and(|v| !v.is_null()) {
            return Err(ApiError::bad_request("logprobs: log-probabilities are not supported"));
        }
        if self.echo == Some(true) {
            return Err(ApiError::bad_request("echo: echoing the prompt is not supported"));
        }
        if self.suffix.as_ref().is_some_and(|s| !s.is_empty()) {
            return Err(ApiError::bad_request("suffix: insertion is not supported"));
        }
        match &self.prompt {
            Prompt::One(s) => Ok(s),
            Prompt::Many(v) if v.len() == 1 => Ok(&v[0]),
            Prompt::Many(v) => {
                Err(ApiError::bad_request(format!("prompt: exactly one prompt is supported, got {}", v.len())))
            }
        }
    }

    /// The stop strings (at most [`MAX_STOPS`], none empty).
    pub fn stops(&self) -> Result<Vec<String>, ApiError> {
        let v = match &self.stop {
            None => Vec::new(),
            Some(Stop::One(s)) => vec![s.clone()],
            Some(Stop::Many(v)) => v.clone(),
        };
        if v.len() > MAX_STOPS || v.iter().any(String::is_empty) {
            return Err(ApiError::bad_request(format!("stop: at most {MAX_STOPS} non-empty stop strings")));
        }
        Ok(v)
    }
}

/// The handler.
pub async fn handler(State(st): State<Arc<AppState>>, b: Result<Bytes, BytesRejection>) -> Response {
    match complete(st, b).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn complete(st: Arc<AppState>, b: Result<Bytes, BytesRejection>) -> Result<Response, ApiError> {
    let req = Arc::new(CompletionRequest::parse(&body(b)?)?);
    let (st2, req2) = (st.clone(), req.clone());
    let planned = blocking(move || {
        let text = req2.text()?;
        let stops = req2.stops()?;
        let sampling = Sampling {
            temperature: req2.temperature,
            top_p: req2.top_p,
            top_k: req2.top_k,
            min_p: req2.min_p,
            seed: req2.seed,
        };
        let rule = rule(&sampling)?;
        let requested = match req2.max_tokens {
            Some(0) => return Err(ApiError::bad_request("max_tokens: must be at least 1")),
            n => n.map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
        };
        prepare(&st2, text.to_string(), requested, rule, req2.ignore_eos == Some(true), stops)
    })
    .await?;
    let rx = submit(&st, planned)?;
    let n = st.served.fetch_add(1, Ordering::Relaxed);
    let head = Head {
        id: format!("cmpl-{n}-{}", now()),
        created: now(),
        model: req.model.clone().unwrap_or_else(|| st.model.id.clone()),
    };
    let stream = req.stream.unwrap_or(false);
    if stream {
        let include_usage = req.stream_options.as_ref().and_then(|o| o.include_usage).unwrap_or(false);
        return Ok(sse(head, rx, include_usage).into_response());
    }
    let (text, o) = collect(rx).await?;
    let mut v = head.chunk(&text, Some(o.finish));
    v["usage"] = usage(&o).json();
    Ok(Json(v).into_response())
}

/// What every object of one answer shares.
#[derive(Debug, Clone)]
struct Head {
    id: String,
    created: u64,
    model: String,
}

impl Head {
    /// A `text_completion` object with one choice.
    fn chunk(&self, text: &str, finish: Option<&str>) -> Value {
        json!({
            "id": self.id, "object": "text_completion", "created": self.created, "model": self.model,
            "choices": [{ "index": 0, "text": text, "logprobs": null, "finish_reason": finish }],
        })
    }
}

/// Text chunks, a last chunk with `finish_reason`, the usage chunk when asked, `[DONE]`.
fn sse(
    head: Head,
    rx: mpsc::UnboundedReceiver<Event>,
    include_usage: bool,
) -> Sse<impl futures_util::Stream<Item = Result<SseEvent, Infallible>>> {
    let stream =
        futures_util::stream::unfold((rx, Vec::<String>::new(), false), move |(mut rx, mut pending, mut ended)| {
            let head = head.clone();
            async move {
                loop {
                    if !pending.is_empty() {
                        let data = pending.remove(0);
                        return Some((Ok(SseEvent::default().data(data)), (rx, pending, ended)));
                    }
                    if ended {
                        return None;
                    }
                    match rx.recv().await {
                        Some(Event::Text(t)) => pending.push(head.chunk(&t, None).to_string()),
                        Some(Event::Done(o)) => {
                            pending.push(head.chunk("", Some(o.finish)).to_string());
                            if include_usage {
                                let mut u = head.chunk("", None);
                                u["choices"] = json!([]);
                                u["usage"] = usage(&o).json();
                                pending.push(u.to_string());
                            }
                            pending.push("[DONE]".into());
                            ended = true;
                        }
                        Some(Event::Failed(m)) => {
                            let e = ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", m);
                            pending.extend([e.body().to_string(), "[DONE]".into()]);
                            ended = true;
                        }
                        None => {
                            let e =
                                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", "the worker stopped");
                            pending.extend([e.body().to_string(), "[DONE]".into()]);
                            ended = true;
                        }
                    }
                }
            }
        });
    Sse::new(stream).keep_alive(KeepAlive::default())
}
