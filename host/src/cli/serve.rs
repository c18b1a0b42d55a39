//! `flashtree serve`: arguments, then the model pair loaded once and an OpenAI-compatible HTTP
//! server on `--host:--port` (see `crate::serve`).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

use super::pair_args::PairArgs;

/// `flashtree serve` arguments.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Target, draft, mode, budget and backend.
    #[command(flatten)]
    pub pair: PairArgs,
    /// Address to listen on (only this machine by default).
    #[arg(long, default_value_t = IpAddr::V4(Ipv4Addr::LOCALHOST))]
    pub host: IpAddr,
    /// Port (0 = any free one; the address is printed).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Require this key (`Authorization: Bearer KEY` or `x-api-key: KEY`) on every route but
    /// `/health`.
    #[arg(long)]
    pub api_key: Option<String>,
    /// Context in tokens (prompt + generated); at most the model's trained context. Default: the
    /// trained context on the CPU, min(trained, 8192) on the GPU (its KV cache is allocated whole).
    #[arg(long)]
    pub ctx: Option<usize>,
    /// Requests that may wait while one runs; more are answered 429 with `Retry-After`.
    #[arg(long, default_value_t = 16)]
    pub queue: usize,
    /// Largest request body accepted (bytes); larger ones are answered 413.
    #[arg(long, default_value_t = 8 << 20)]
    pub max_body_bytes: usize,
    /// Chat template instead of the model's `tokenizer.chat_template`: a Jinja file, or
    /// `qwen35` for the built-in Qwen3.5 format (tools, thinking).
    #[arg(long)]
    pub chat_template: Option<PathBuf>,
    /// Tests only (CPU backend): scripted replies, a JSON list of `{"when", "reply"}` — a turn
    /// whose new text contains `when` is answered `reply` (see `serve::script`).
    #[arg(long, hide = true)]
    pub script: Option<PathBuf>,
}

/// Loads the model, binds, prints the address and serves until Ctrl+C.
pub fn run(args: &ServeArgs) -> anyhow::Result<()> {
    let app = crate::serve::app(args)?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting the runtime")?;
    rt.block_on(async move {
        let addr = SocketAddr::new(args.host, args.port);
        let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| format!("binding {addr}"))?;
        let local = listener.local_addr().context("reading the bound address")?;
        eprintln!("serving {} on http://{local}", args.pair.model.display());
        let shutdown = async {
            let _ = tokio::signal::ctrl_c().await;
        };
        crate::serve::serve(listener, app, shutdown).await.context("serving")
    })
}
