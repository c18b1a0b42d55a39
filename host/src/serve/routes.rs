//! The HTTP routes: `/health`, `/v1/models`, `/v1/chat/completions` (JSON or SSE), the API-key
//! check, the body limit, and errors in OpenAI's shape for everything else (Anthropic's under
//! `/v1/messages`); the helpers every generation route shares (sampling rule, tokenising, context
//! check, queueing). `/v1/completions` and `/v1/messages` live in their own files.

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::error::ApiError;
use super::openai::{Answer, ChatRequest, Usage};
use super::reply::{self, ReplySplitter};
use super::worker::{Event, Job, Outcome};
use super::Loaded;
use crate::chat::RenderOptions;
use crate::spec::{DecodingRule, GenerateConfig, Mode};

/// Seconds a client is told to wait when the queue is full.
pub const RETRY_AFTER_S: u64 = 1;

/// Shared by all handlers.
pub struct AppState {
    /// The model, tokenizer and queue.
    pub model: Loaded,
    /// Tree shape.
    pub mode: Mode,
    /// Tree budget.
    pub budget: usize,
    /// Required key (`Authorization: Bearer K` or `x-api-key: K`) for all but `/health`.
    pub api_key: Option<String>,
    /// Answers so far (for ids).
    pub served: AtomicU64,
}

/// The router over `state`, with bodies limited to `max_body` bytes.
pub fn router(state: Arc<AppState>, max_body: usize) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/v1/models", get(models))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/completions", post(super::completions::handler))
        .route("/v1/messages", post(super::messages::handler))
        .route("/v1/messages/count_tokens", post(super::messages::count_tokens))
        .route("/metrics", get(super::metrics::handler))
        .route("/openapi.json", get(super::openapi::handler))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(state.clone(), auth))
        .layer(middleware::from_fn_with_state(state.model.metrics.clone(), super::metrics::count))
        .layer(DefaultBodyLimit::max(max_body))
        .with_state(state)
}

async fn health() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}

/// A known path with the wrong method: 405 in the path's API shape (axum's own has no body).
async fn method_not_allowed(req: Request) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "invalid_request_error",
        format!("{} is not allowed on {}", req.method(), req.uri().path()),
    )
    .shaped_for(req.uri().path())
}

async fn not_found(req: Request) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "invalid_request_error",
        format!("no route {} {}", req.method(), req.uri().path()),
    )
    .shaped_for(req.uri().path())
}

/// Everything but `/health` needs the key when one is set.
async fn auth(State(st): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    if let Some(key) = &st.api_key {
        if req.uri().path() != "/health" {
            let h = req.headers();
            let bearer = h
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .map(str::trim);
            let x = h.get("x-api-key").and_then(|v| v.to_str().ok()).map(str::trim);
            let ok = |k: Option<&str>| k.is_some_and(|k| same_key(k.as_bytes(), key.as_bytes()));
            if !ok(bearer) && !ok(x) {
                return ApiError::new(
                    StatusCode::UNAUTHORIZED,
                    "authentication_error",
                    "a valid API key is needed: `Authorization: Bearer KEY` or `x-api-key: KEY`",
                )
                .with_code("invalid_api_key")
                .shaped_for(req.uri().path())
                .into_response();
            }
        }
    }
    next.run(req).await
}

/// Key comparison whose time does not depend on where the keys differ (only on their lengths).
fn same_key(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Unix seconds.
pub(super) fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

async fn models(State(st): State<Arc<AppState>>) -> Json<Value> {
    Json(json!({
        "object": "list",
        "data": [{ "id": st.model.id, "object": "model", "created": now(), "owned_by": "flashtree" }],
    }))
}

/// The body as bytes: too large → 413, unreadable → 400, both in OpenAI's shape.
pub(super) fn body(b: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    b.map_err(|e| {
        ApiError::new(e.status(), "invalid_request_error", format!("reading the request body: {}", e.body_text()))
    })
}

/// A request's sampling parameters (the same names in both APIs).
#[derive(Debug, Clone, Copy, Default)]
pub struct Sampling {
    /// 0 (or absent) = greedy.
    pub temperature: Option<f32>,
    /// Nucleus mass in (0, 1].
    pub top_p: Option<f32>,
    /// Keep the K most likely tokens (0 = no limit).
    pub top_k: Option<usize>,
    /// Drop tokens below this fraction of the most likely one.
    pub min_p: Option<f32>,
    /// Sampling seed.
    pub seed: Option<u64>,
}

/// The decoding rule of a request: greedy unless `temperature` > 0 (then seeded sampling, on
/// either backend; a random seed unless the request gives one).
pub(super) fn rule(req: &Sampling) -> Result<DecodingRule, ApiError> {
    let t = req.temperature.unwrap_or(0.0);
    let (top_k, top_p, min_p) = (req.top_k.unwrap_or(0), req.top_p.unwrap_or(1.0), req.min_p.unwrap_or(0.0));
    let check = |t, seed| {
        DecodingRule::sample(t, top_k, top_p, min_p, seed).map_err(|e| {
            let m = e.to_string();
            ApiError::bad_request(m.strip_prefix("invalid configuration: ").unwrap_or(&m).to_string())
        })
    };
    if t == 0.0 {
        check(0.0, 0)?;
        return Ok(DecodingRule::Greedy);
    }
    let seed = req.seed.unwrap_or_else(|| now() ^ 0x9E37_79B9_7F4A_7C15);
    check(t, seed)
}

/// Tokenises a rendered prompt (its byte length checked against the context first, so a huge
/// text is refused before the tokenizer runs).
pub(super) fn tokenize(st: &AppState, text: &str) -> Result<Vec<u32>, ApiError> {
    let ctx = st.model.ctx;
    if text.len() > crate::cli::limits::max_prompt_bytes(ctx, st.model.longest_token) {
        return Err(overflow(format!(
            "the rendered prompt is {} bytes, more than the context of {ctx} tokens can hold",
            text.len()
        )));
    }
    st.model.tk.tokenizer.encode(text).map_err(|e| ApiError::bad_request(format!("tokenising the prompt: {e}")))
}

fn overflow(what: String) -> ApiError {
    ApiError::bad_request(what).with_code("context_length_exceeded")
}

/// Checks `prompt` against the context and builds the job's configuration: `requested` most
/// tokens clamped to what the context leaves (a client's large default must not fail).
pub(super) fn config(
    st: &AppState,
    prompt: &[u32],
    requested: Option<usize>,
    rule: DecodingRule,
    ignore_eos: bool,
) -> Result<GenerateConfig, ApiError> {
    let (ctx, reserve) = (st.model.ctx, st.model.reserve);
    if prompt.is_empty() {
        return Err(ApiError::bad_request("the prompt is empty"));
    }
    if prompt.len().saturating_add(reserve) >= ctx {
        return Err(overflow(format!(
            "the prompt has {} tokens; the context is {ctx} tokens{}, which leaves no room to generate",
            prompt.len(),
            if reserve > 0 { format!(" ({reserve} kept for the verify batch)") } else { String::new() }
        )));
    }
    let room = ctx - prompt.len() - reserve;
    let max_tokens = requested.map_or(room, |n| n.min(room));
    let budget = if st.mode == Mode::Ar { 0 } else { st.budget };
    let eos = if ignore_eos { Vec::new() } else { st.model.tk.stop_ids.clone() };
    Ok(GenerateConfig { mode: st.mode, budget, max_tokens, eos, rule })
}

/// A checked job's parts, and whether its prompt leaves a think block open.
pub(super) struct Planned {
    /// The rendered prompt.
    pub text: String,
    /// `text` tokenised whole (the cold prefill; see [`super::history`]).
    pub prompt: Vec<u32>,
    pub cfg: GenerateConfig,
    /// The most tokens asked for (`None`: all the context leaves).
    pub requested: Option<usize>,
    pub stops: Vec<String>,
    /// The reply starts inside a think block ([`super::thinking::prompt_opens_think`]).
    pub thinking: bool,
    /// Where the generation prompt starts in `text` (bytes): the session's snapshot
    /// ([`super::history`]); `None` for a raw prompt.
    pub snapshot_bytes: Option<usize>,
    /// The thinking budget (Anthropic requests only).
    pub think_budget: Option<super::budget::ThinkBudget>,
}

/// Tokenises a rendered prompt whole and checks it against the context (the worker may run it
/// as the session's history followed by the rest instead: [`super::history`]).
pub(super) fn prepare(
    st: &AppState,
    text: String,
    requested: Option<usize>,
    rule: DecodingRule,
    ignore_eos: bool,
    stops: Vec<String>,
) -> Result<Planned, ApiError> {
    let prompt = tokenize(st, &text)?;
    let cfg = config(st, &prompt, requested, rule, ignore_eos)?;
    let thinking = super::thinking::prompt_opens_think(&text);
    Ok(Planned { text, prompt, cfg, requested, stops, thinking, snapshot_bytes: None, think_budget: None })
}

/// Renders, tokenises and checks a chat request.
fn plan(st: &AppState, req: &ChatRequest) -> Result<Planned, ApiError> {
    let messages = req.messages()?;
    let tools = req.tools()?;
    let stops = req.stops()?;
    let rule = rule(&req.sampling())?;
    let requested = req.max_tokens()?;
    let opts = RenderOptions { add_generation_prompt: true, enable_thinking: req.thinking() };
    let template = &st.model.template;
    let text = template
        .render_with_tools(&messages, &tools, opts)
        .map_err(|e| ApiError::bad_request(format!("messages: the chat template failed: {e}")))?;
    // Where the generation prompt starts: the session's snapshot (`super::history`).
    let base = template.render_with_tools(&messages, &tools, RenderOptions { add_generation_prompt: false, ..opts });
    let start = base.ok().and_then(|base| super::history::generation_prompt_start(&base, &text));
    Ok(Planned { snapshot_bytes: start, ..prepare(st, text, requested, rule, req.ignore_eos == Some(true), stops)? })
}

/// Queues a job; returns where its events arrive. Full queue → 429 with `Retry-After`.
pub(super) fn submit(st: &AppState, p: Planned) -> Result<mpsc::UnboundedReceiver<Event>, ApiError> {
    let (tx, rx) = mpsc::unbounded_channel();
    let room = st.model.ctx.saturating_sub(st.model.reserve);
    let job = Job {
        text: p.text,
        prompt: p.prompt,
        snapshot_bytes: p.snapshot_bytes,
        cfg: p.cfg,
        requested: p.requested,
        room,
        stops: p.stops,
        think_budget: p.think_budget,
        events: tx,
    };
    st.model.jobs.try_send(job).map_err(|e| match e {
        mpsc::error::TrySendError::Full(_) => ApiError {
            retry_after: Some(RETRY_AFTER_S),
            ..ApiError::new(StatusCode::TOO_MANY_REQUESTS, "rate_limit_error", "the request queue is full; retry later")
        },
        mpsc::error::TrySendError::Closed(_) => {
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "server_error", "the generation worker has stopped")
        }
    })?;
    Ok(rx)
}

/// Runs blocking preparation (rendering, tokenising) off the async threads.
pub(super) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f).await.map_err(|e| {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", format!("preparing the prompt: {e}"))
    })?
}

/// The whole text of a job (non-streamed answers).
pub(super) async fn collect(mut rx: mpsc::UnboundedReceiver<Event>) -> Result<(String, Outcome), ApiError> {
    let mut text = String::new();
    loop {
        match rx.recv().await {
            Some(Event::Text(t)) => text.push_str(&t),
            Some(Event::Done(o)) => return Ok((text, o)),
            Some(Event::Failed(m)) => return Err(ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", m)),
            None => return Err(ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", "the worker stopped")),
        }
    }
}

async fn chat_completions(State(st): State<Arc<AppState>>, b: Result<Bytes, BytesRejection>) -> Response {
    match chat(st, b).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn chat(st: Arc<AppState>, b: Result<Bytes, BytesRejection>) -> Result<Response, ApiError> {
    let req = Arc::new(ChatRequest::parse(&body(b)?)?);
    let (st2, req2) = (st.clone(), req.clone());
    let p = blocking(move || plan(&st2, &req2)).await?;
    let thinking = p.thinking;
    let rx = submit(&st, p)?;
    let n = st.served.fetch_add(1, Ordering::Relaxed);
    let answer = Answer {
        id: format!("chatcmpl-{n}-{}", now()),
        created: now(),
        model: req.model.clone().unwrap_or_else(|| st.model.id.clone()),
    };
    let splitter = ReplySplitter::new(thinking, req.parsed_tools());
    let (stream, include_usage) = req.streaming();
    if stream {
        return Ok(sse(answer, rx, splitter, include_usage).into_response());
    }
    let (text, o) = collect(rx).await?;
    let (reasoning, content, calls) = reply::split_all(&text, thinking, req.parsed_tools());
    let finish = if calls.is_empty() { o.finish } else { "tool_calls" };
    Ok(Json(answer.completion(&content, &reasoning, &calls, finish, usage(&o))).into_response())
}

/// OpenAI's usage of a job.
pub(super) fn usage(o: &Outcome) -> Usage {
    Usage { prompt: o.prompt_tokens, reused: o.reused_tokens, completion: o.completion_tokens }
}

/// The SSE answer: a role chunk, reasoning, content and tool-call chunks as the reply streams
/// (a call's first chunk carries its id and name, the next ones its arguments as the model
/// writes them: [`Answer::delta`]), a chunk with `finish_reason`, the usage chunk when asked,
/// then `[DONE]`. A failure mid-stream is sent as an `error` object before `[DONE]`.
/// Dropping the stream (client gone) closes `rx`, which stops the worker after its round.
fn sse(
    answer: Answer,
    rx: mpsc::UnboundedReceiver<Event>,
    splitter: ReplySplitter,
    include_usage: bool,
) -> Sse<impl futures_util::Stream<Item = Result<SseEvent, Infallible>>> {
    let first = answer.chunk(json!({ "role": "assistant", "content": "" }), None, include_usage).to_string();
    let state = (rx, vec![first], false, splitter);
    let stream = futures_util::stream::unfold(state, move |(mut rx, mut pending, mut ended, mut splitter)| {
        let answer = answer.clone();
        async move {
            loop {
                if !pending.is_empty() {
                    let data = pending.remove(0);
                    return Some((Ok(SseEvent::default().data(data)), (rx, pending, ended, splitter)));
                }
                if ended {
                    return None;
                }
                match rx.recv().await {
                    Some(Event::Text(t)) => {
                        for d in splitter.push(&t).into_iter().filter_map(|d| answer.delta(d)) {
                            pending.push(answer.chunk(d, None, include_usage).to_string());
                        }
                    }
                    Some(Event::Done(o)) => {
                        for d in splitter.finish().into_iter().filter_map(|d| answer.delta(d)) {
                            pending.push(answer.chunk(d, None, include_usage).to_string());
                        }
                        let finish = if splitter.calls().is_empty() { o.finish } else { "tool_calls" };
                        pending.push(answer.chunk(json!({}), Some(finish), include_usage).to_string());
                        if include_usage {
                            pending.push(answer.usage_chunk(usage(&o)).to_string());
                        }
                        pending.push("[DONE]".into());
                        ended = true;
                    }
                    Some(Event::Failed(m)) => {
                        pending.push(
                            ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", m).body().to_string(),
                        );
                        pending.push("[DONE]".into());
                        ended = true;
                    }
                    None => {
                        let e = ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", "the worker stopped");
                        pending.push(e.body().to_string());
                        pending.push("[DONE]".into());
                        ended = true;
                    }
                }
            }
        }
    });
    Sse::new(stream).keep_alive(KeepAlive::default())
}
