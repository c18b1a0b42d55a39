//! The worker: one thread owns the model pair and a [`Session`] and runs queued jobs one at a
//! time, streaming each job's text back over a channel. A job whose receiver is gone (the
//! client disconnected) stops after the round in progress; one still queued is skipped.
//! When a job starts, its prompt's tokens are chosen against the session's [`History`] (the
//! prefix-reuse rule and why it is decided here, not on the HTTP side: [`super::history`]), and
//! the session saves its recurrent state where the job's generation prompt starts.

use std::ops::ControlFlow;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use tokio::sync::mpsc;

use super::budget::{self, ThinkBudget};
use super::history::History;
use super::stop::StopMatcher;
use crate::spec::{Draft, GenerateConfig, Session, Stats, StopReason, Target};
use crate::tokenizer::gguf::GgufTokenizer;
use crate::tokenizer::StreamDecoder;

/// One generation request, tokenised and checked against the context.
#[derive(Debug)]
pub struct Job {
    /// The rendered prompt (matched against the session's history when the job starts).
    pub text: String,
    /// `text` tokenised whole: what the request prefills cold (`count_tokens`), and runs when it
    /// does not continue the history.
    pub prompt: Vec<u32>,
    /// Where the generation prompt starts in `text` (bytes; `None` for a raw completion): the
    /// session saves its snapshot there ([`super::history`]).
    pub snapshot_bytes: Option<usize>,
    /// Mode, budget, most tokens (for `prompt`), EOS ids, decoding rule.
    pub cfg: GenerateConfig,
    /// The most tokens the request asked for (`None`: all the context leaves).
    pub requested: Option<usize>,
    /// Prompt + generated tokens the context holds (the context less the verify reserve).
    pub room: usize,
    /// Stop strings (the text ends before the first found).
    pub stops: Vec<String>,
    /// The thinking budget (Anthropic `budget_tokens`; [`super::budget`]).
    pub think_budget: Option<ThinkBudget>,
    /// Where the text goes; closed = the client left.
    pub events: mpsc::UnboundedSender<Event>,
}

/// What the worker sends back for a job: text pieces, then one `Done` or `Failed`.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// Newly final text (never the start of a stop string, never the EOS token's text).
    Text(String),
    /// Generation ended.
    Done(Outcome),
    /// Generation failed; the message says why.
    Failed(String),
}

/// How a job ended.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Outcome {
    /// OpenAI's `finish_reason`: `stop` (EOS or a stop string) or `length`.
    pub finish: &'static str,
    /// The index (in the job's `stops`) of the stop string that ended the text.
    pub stop_string: Option<usize>,
    /// Prompt tokens.
    pub prompt_tokens: usize,
    /// Of them, kept in the caches from the previous job.
    pub reused_tokens: usize,
    /// Generated tokens (up to and including a stop; EOS included).
    pub completion_tokens: usize,
    /// Decode tokens per second.
    pub tokens_per_second: f64,
    /// Mean accepted tokens per round.
    pub acceptance_length: f64,
    /// Verify rounds.
    pub rounds: usize,
    /// Decode seconds (prefill excluded).
    pub decode_seconds: f64,
}

/// Runs `jobs` on `session` until every sender is gone, recording each generation in `metrics`.
pub fn run_jobs<T, D>(
    mut session: Session<T, D>,
    mut jobs: mpsc::Receiver<Job>,
    tk: Arc<GgufTokenizer>,
    metrics: Arc<super::metrics::Metrics>,
) where
    T: Target,
    D: Draft<Features = T::Features>,
{
    let mut history = History::new();
    while let Some(job) = jobs.blocking_recv() {
        if job.events.is_closed() {
            continue;
        }
        metrics.set_busy(true);
        let r = catch_unwind(AssertUnwindSafe(|| run_one(&mut session, &mut history, &job, &tk)));
        metrics.set_busy(false);
        let event = match r {
            Ok(Ok(o)) => Event::Done(o),
            Ok(Err(e)) => {
                // The session resets its caches on the next turn; so does the history.
                history.clear();
                Event::Failed(e)
            }
            Err(_) => {
                // The caches are in an unknown state: the next job starts from empty ones.
                history.clear();
                let reset = session.reset();
                Event::Failed(format!("internal error: generation panicked (caches reset: {reset:?})"))
            }
        };
        match &event {
            Event::Done(o) => metrics.record(Some(o)),
            Event::Failed(msg) => {
                metrics.record(None);
                eprintln!("serve: request failed: {msg}");
            }
            Event::Text(_) => {}
        }
        let _ = job.events.send(event);
    }
}

/// The prompt and configuration a job runs: the history's tokens followed by the rest of its
/// text tokenised, when its text continues the history (or its part before the snapshot), the
/// session will reuse them (its caches hold their start, or the snapshot) and they leave room
/// to generate; else the job's cold tokens and configuration.
fn choose_prompt<T, D>(
    session: &Session<T, D>,
    history: &History,
    job: &Job,
    tk: &GgufTokenizer,
) -> (Vec<u32>, GenerateConfig)
where
    T: Target,
    D: Draft<Features = T::Features>,
{
    let ids = match history.continuation(&tk.tokenizer, &job.text) {
        Ok(Some(ids)) => ids,
        Ok(None) => return (job.prompt.clone(), job.cfg.clone()),
        Err(e) => {
            eprintln!("serve: tokenising the prompt after the history failed ({e}); tokenising it whole");
            return (job.prompt.clone(), job.cfg.clone());
        }
    };
    if session.reusable(&ids) == 0 || ids.len() >= job.room {
        return (job.prompt.clone(), job.cfg.clone());
    }
    let left = job.room - ids.len();
    let cfg = GenerateConfig { max_tokens: job.requested.map_or(left, |n| n.min(left)), ..job.cfg.clone() };
    (ids, cfg)
}

/// Generates one job's text, sending it as it is committed, and records the turn in `history`.
fn run_one<T, D>(
    session: &mut Session<T, D>,
    history: &mut History,
    job: &Job,
    tk: &GgufTokenizer,
) -> Result<Outcome, String>
where
    T: Target,
    D: Draft<Features = T::Features>,
{
    let (prompt, cfg) = choose_prompt(session, history, job, tk);
    let snapshot = job.snapshot_bytes.and_then(|b| super::history::token_boundary(&tk.tokenizer, &prompt, b));
    let mut dec = StreamDecoder::new();
    let mut stop = StopMatcher::new(job.stops.clone());
    let send = |text: String| {
        if !text.is_empty() {
            let _ = job.events.send(Event::Text(text));
        }
    };
    let bytes = |id| tk.tokenizer.token_bytes(id).unwrap_or(b"");
    let (output, stats) = budget::generate(session, &prompt, snapshot, &cfg, job.think_budget.as_ref(), bytes, |ids| {
        let mut text = String::new();
        for &id in ids.iter().filter(|id| !cfg.eos.contains(id)) {
            text.push_str(&dec.push(tk.tokenizer.token_bytes(id).unwrap_or(b"\xEF\xBF\xBD")));
        }
        send(stop.push(&text));
        if stop.hit() || job.events.is_closed() {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    })
    .map_err(|e| e.to_string())?;
    if !output.is_empty() {
        // (Empty only when nothing ran: the caches and the history are as they were.)
        history.record(&tk.tokenizer, &prompt, &output, session.snapshot_position());
    }
    if !stop.hit() {
        let tail = dec.finish();
        let mut text = stop.push(&tail);
        if !stop.hit() {
            text.push_str(&stop.finish());
        }
        send(text);
    }
    log(&stats, job.events.is_closed());
    let finish = match stats.stop {
        StopReason::MaxTokens if !stop.hit() => "length",
        _ => "stop",
    };
    Ok(Outcome {
        finish,
        stop_string: stop.which(),
        prompt_tokens: stats.prompt_tokens,
        reused_tokens: stats.reused_tokens,
        completion_tokens: stats.generated,
        tokens_per_second: stats.decode_tokens_per_second(),
        acceptance_length: stats.acceptance_length(),
        rounds: stats.steps,
        decode_seconds: (stats.time.total() - stats.time.prefill).as_secs_f64(),
    })
}

/// One line per request on stderr: tokens, reuse, speed, acceptance.
fn log(stats: &Stats, client_gone: bool) {
    eprintln!(
        "serve: {} prompt tokens ({} reused, {} prefilled), {} generated, {:.1} tok/s, acceptance {:.2}, stop {}{}",
        stats.prompt_tokens,
        stats.reused_tokens,
        stats.prompt_tokens - stats.reused_tokens.min(stats.prompt_tokens),
        stats.generated,
        stats.decode_tokens_per_second(),
        stats.acceptance_length(),
        stats.stop.name(),
        if client_gone { " (client disconnected)" } else { "" }
    );
}
