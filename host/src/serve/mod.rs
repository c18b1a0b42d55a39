//! `flashtree serve`: an OpenAI- and Anthropic-compatible HTTP server over one model pair
//! (serving.md).
//!
//! One worker thread ([`worker`]) owns the pair and a [`crate::spec::Session`], so a request
//! that extends the previous conversation prefills only its new suffix (the conversation's
//! tokens as generated are kept with their text: [`history`]); requests wait in a
//! bounded FIFO queue (full → 429 with `Retry-After`). The HTTP side ([`routes`], axum on tokio)
//! parses and checks requests ([`openai`], [`completions`], [`anthropic`] + [`messages`]),
//! tokenises them, queues them and relays the worker's text as JSON or server-sent events,
//! split into reasoning, text and tool calls ([`reply`], [`thinking`], [`tools`]); errors use
//! each API's shape ([`error`]).

pub mod anthropic;
pub mod budget;
pub mod completions;
pub mod error;
pub mod history;
pub mod json_prefix;
pub mod load;
pub mod messages;
pub mod metrics;
pub mod openai;
pub mod openapi;
pub mod reply;
pub mod routes;
pub mod script;
pub mod stop;
pub mod thinking;
pub mod tool_stream;
pub mod tools;
pub mod worker;

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

pub use load::{load, Loaded};

use crate::cli::serve::ServeArgs;

/// Checks the pair flags ([`crate::cli::pair_args::PairArgs::resolved`]: the demo draft for the
/// demo target), loads the pair (blocking until the worker is ready) and returns the router.
pub fn app(args: &ServeArgs) -> anyhow::Result<axum::Router> {
    let args = &ServeArgs { pair: args.pair.resolved()?, ..args.clone() };
    let mode = args.pair.mode.mode();
    let model = load(args, mode)?;
    let state = routes::AppState {
        model,
        mode,
        budget: args.pair.budget,
        api_key: args.api_key.clone(),
        served: AtomicU64::new(0),
    };
    Ok(routes::router(Arc::new(state), args.max_body_bytes))
}

/// Serves `app` on `listener` until `shutdown` completes.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, app).with_graceful_shutdown(shutdown).await
}
