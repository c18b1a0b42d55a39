//! `flashtree serve`: arguments, then the model pair loaded once and an OpenAI-compatible HTTP
//! server on `--host:--port` (see `crate::serve`).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

use super::generate::{ModeArg, MAX_BUDGET};

/// `flashtree serve` arguments.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Target model (qwen35 GGUF); default: the demo target in `models/`.
    #[arg(long, default_value_os_t = super::default_model::target())]
    pub model: PathBuf,
    /// DFlash draft (z-lab folder or `dflash` GGUF); the demo target's draft is taken for the
    /// demo target. Not needed with `--mode ar`.
    #[arg(long)]
    pub draft: Option<PathBuf>,
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
    /// Where the target runs: `auto` = the GPU when one is present, `gpu` = the GPU or an error,
    /// `cpu` = the CPU reference. Sampling (temperature > 0) runs on either.
    #[arg(long, value_enum, default_value_t = super::backend::BackendArg::Auto)]
    pub backend: super::backend::BackendArg,
    /// Decoding mode of every request.
    #[arg(long, value_enum, default_value_t = ModeArg::Tree)]
    pub mode: ModeArg,
    /// Tree budget: non-root nodes verified per round.
    /// On the GPU a verify of up to 32 nodes (budget ≤ 31) streams each weight matrix once;
    /// budget 32 and above (33+ nodes) stream it twice (nvidia-h200, 27B: a 33-node verify costs
    /// 2.7 AR steps, a 23-node one 1.4).
    #[arg(long, default_value_t = 22)]
    pub budget: usize,
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
    let args = with_demo_draft(args)?;
    let app = crate::serve::app(&args)?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting the runtime")?;
    rt.block_on(async move {
        let addr = SocketAddr::new(args.host, args.port);
        let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| format!("binding {addr}"))?;
        let local = listener.local_addr().context("reading the bound address")?;
        eprintln!("serving {} on http://{local}", args.model.display());
        let shutdown = async {
            let _ = tokio::signal::ctrl_c().await;
        };
        crate::serve::serve(listener, app, shutdown).await.context("serving")
    })
}

/// Checks the flags and fills in the demo draft for the demo target.
pub fn with_demo_draft(args: &ServeArgs) -> anyhow::Result<ServeArgs> {
    if args.budget > MAX_BUDGET {
        anyhow::bail!("--budget {} is larger than the maximum {MAX_BUDGET}", args.budget);
    }
    let mut a = args.clone();
    if a.draft.is_none() && a.mode != ModeArg::Ar {
        a.draft = super::default_model::draft_for(&a.model);
    }
    Ok(a)
}
