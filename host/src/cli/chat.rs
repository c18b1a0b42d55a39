//! `flashtree chat`: a multi-turn REPL over one model pair (rustyline: line editing, history).
//!
//! Each turn renders the whole conversation with the model's chat template, tokenises it and
//! runs it through one [`Session`], so a turn that extends the previous one (prompt + reply +
//! the new user turn) prefills only its new tokens, as the server does. The reply is streamed as
//! its tokens are committed; Ctrl+C during a reply stops it after the round in progress and keeps
//! what was written as the assistant's turn; Ctrl+C at the prompt clears the line; Ctrl+D exits.
//! After each reply one line: tokens, decode tok/s, acceptance length, prompt tokens prefilled.
//! Commands: `/reset`, `/system TEXT`, `/stats`, `/max N`, `/help`.

use std::io::Write;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::{bail, Context};
use clap::Args;
use rustyline::error::ReadlineError;

use super::pair::{with_pair, PairInfo, PairRunner, PairSpec};
use super::pair_args::PairArgs;
use super::sampling::SamplingArgs;
use crate::chat::{Message, RenderOptions};
use crate::serve::history::{generation_prompt_start, token_boundary, History};
use crate::spec::{DecodingRule, Draft, GenerateConfig, Mode, Session, Stats, StopReason, Target};
use crate::tokenizer::StreamDecoder;

/// `flashtree chat` arguments.
#[derive(Debug, Clone, Args)]
pub struct ChatArgs {
    /// Target, draft, mode, budget and backend.
    #[command(flatten)]
    pub pair: PairArgs,
    /// Most tokens per reply (also clamped to what the context leaves); `/max N` changes it.
    #[arg(long, default_value_t = 1024)]
    pub max_tokens: usize,
    /// System prompt (`/system TEXT` changes it).
    #[arg(long)]
    pub system: Option<String>,
    /// Disable thinking in the chat template.
    #[arg(long)]
    pub no_think: bool,
    /// Context in tokens (the whole conversation); default: the model's trained context on the
    /// CPU, min(trained, 8192) on the GPU.
    #[arg(long)]
    pub ctx: Option<usize>,
    /// Print each load step also when stderr is not a terminal.
    #[arg(long)]
    pub verbose: bool,
    /// Decoding: greedy unless `--temperature` > 0.
    #[command(flatten)]
    pub sampling: SamplingArgs,
}

/// One line typed at the prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// A user turn.
    Turn(String),
    /// `/reset`: forget the conversation.
    Reset,
    /// `/system [TEXT]`: set (or with no text, clear) the system prompt.
    System(Option<String>),
    /// `/stats`: the last reply's full statistics and the session's totals.
    Stats,
    /// `/max N`: most tokens per reply.
    Max(usize),
    /// `/help`.
    Help,
    /// Nothing to do (a blank line).
    Empty,
    /// A command that is not one of the above, or a bad argument; the text says which.
    Invalid(String),
}

/// The REPL's help text.
pub const HELP: &str = "commands: /reset (new conversation), /system TEXT (set the system prompt; no text clears it), \
/stats (last reply and totals), /max N (tokens per reply), /help; Ctrl+C stops a reply, Ctrl+D exits";

/// Parses one typed line. A line starting with `/` is a command (`//text` sends `/text`).
pub fn parse_input(line: &str) -> Input {
    let trimmed = line.trim();
    if trimmed.is_empty() {
        return Input::Empty;
    }
    let Some(cmd) = trimmed.strip_prefix('/') else { return Input::Turn(line.trim_end().to_string()) };
    if cmd.starts_with('/') {
        return Input::Turn(cmd.to_string());
    }
    let (name, rest) = cmd.split_once(char::is_whitespace).map_or((cmd, ""), |(n, r)| (n, r.trim()));
    match name {
        "reset" | "clear" => Input::Reset,
        "system" => Input::System((!rest.is_empty()).then(|| rest.to_string())),
        "stats" => Input::Stats,
        "help" | "?" => Input::Help,
        "max" => match rest.parse::<usize>() {
            Ok(n) if n > 0 => Input::Max(n),
            _ => Input::Invalid(format!("/max takes a positive number of tokens, not {rest:?}")),
        },
        _ => Input::Invalid(format!("unknown command /{name} ({HELP})")),
    }
}

/// Totals over the session's replies.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Totals {
    /// Replies (interrupted ones included).
    pub replies: usize,
    /// Prompt tokens run through prefill (reused ones not counted).
    pub prefilled: usize,
    /// Prompt tokens reused from the caches.
    pub reused: usize,
    /// Generated tokens.
    pub generated: usize,
    /// Verify rounds.
    pub rounds: usize,
    /// Decode seconds (prefill excluded).
    pub decode_s: f64,
}

impl Totals {
    /// Adds one reply's stats.
    pub fn add(&mut self, s: &Stats) {
        self.replies += 1;
        self.prefilled += s.prompt_tokens.saturating_sub(s.reused_tokens);
        self.reused += s.reused_tokens;
        self.generated += s.generated;
        self.rounds += s.steps;
        self.decode_s += (s.time.total() - s.time.prefill).as_secs_f64();
    }

    /// Mean generated tokens per verify round.
    pub fn acceptance_length(&self) -> f64 {
        if self.rounds == 0 {
            0.0
        } else {
            // Each reply's first token comes from prefill, not from a round.
            self.generated.saturating_sub(self.replies) as f64 / self.rounds as f64
        }
    }
}

/// The line printed after a reply.
pub fn reply_line(s: &Stats) -> String {
    let why = match s.stop {
        StopReason::Caller => ", interrupted",
        StopReason::MaxTokens => ", token limit",
        StopReason::Eos => "",
    };
    format!(
        "[{} tokens, {:.1} tok/s, acceptance length {:.2}; prompt {} tokens, {} reused{why}]",
        s.generated,
        s.decode_tokens_per_second(),
        s.acceptance_length(),
        s.prompt_tokens,
        s.reused_tokens
    )
}

/// Runs the REPL on the terminal.
pub fn run(args: &ChatArgs) -> anyhow::Result<()> {
    let (rule, _) = args.sampling.rule()?;
    let pair = args.pair.resolved()?;
    let mode = pair.mode.mode();
    let spec = PairSpec {
        model: pair.model,
        draft: pair.draft,
        backend: pair.backend,
        ctx: args.ctx,
        budget: pair.budget,
        verbose: args.verbose,
    };
    with_pair(&spec, Repl { args, rule, mode })
}

/// The REPL over a loaded pair.
struct Repl<'a> {
    args: &'a ChatArgs,
    rule: DecodingRule,
    mode: Mode,
}

/// The conversation and its settings.
struct Conversation {
    system: Option<String>,
    messages: Vec<Message>,
    /// The last turn's prompt and reply tokens as generated, and their exact text: the next
    /// turn's rendered text that continues it keeps those tokens (the server's rule,
    /// [`crate::serve::history`]), so the session reuses its caches.
    history: History,
    max_tokens: usize,
    last: Option<Stats>,
    totals: Totals,
}

impl PairRunner for Repl<'_> {
    type Output = ();

    fn run<T, D>(self, mut session: Session<T, D>, info: &PairInfo) -> anyhow::Result<()>
    where
        T: Target,
        D: Draft<Features = T::Features>,
    {
        // Ctrl+C while a reply runs (the terminal is in cooked mode then, so it is a SIGINT)
        // stops the reply; at the prompt rustyline reads it as a key.
        let interrupted = Arc::new(AtomicBool::new(false));
        let flag = interrupted.clone();
        ctrlc::set_handler(move || flag.store(true, Ordering::SeqCst)).context("installing the Ctrl+C handler")?;
        let mut editor = rustyline::DefaultEditor::new().context("opening the line editor")?;
        let mut conv = Conversation {
            system: self.args.system.clone(),
            messages: Vec::new(),
            history: History::new(),
            max_tokens: self.args.max_tokens,
            last: None,
            totals: Totals::default(),
        };
        let budget = if self.mode == Mode::Ar { 0 } else { self.args.pair.budget };
        let mut out = std::io::stdout();
        writeln!(
            out,
            "flashtree chat: {} ({} {}, context {} tokens); /help for commands, Ctrl+D exits",
            self.args.pair.model.display(),
            if info.gpu { "gpu" } else { "cpu" },
            if budget == 0 { "ar".to_string() } else { format!("{} budget {budget}", self.mode.name()) },
            info.ctx
        )?;
        loop {
            let line = match editor.readline(">>> ") {
                Ok(l) => l,
                Err(ReadlineError::Interrupted) => continue,
                Err(ReadlineError::Eof) => break,
                Err(e) => return Err(e).context("reading a line"),
            };
            if !line.trim().is_empty() {
                let _ = editor.add_history_entry(line.as_str());
            }
            match parse_input(&line) {
                Input::Empty => {}
                Input::Help => writeln!(out, "{HELP}")?,
                Input::Invalid(m) => writeln!(out, "{m}")?,
                Input::Max(n) => {
                    conv.max_tokens = n;
                    writeln!(out, "replies stop after {n} tokens")?;
                }
                Input::Reset => {
                    conv.messages.clear();
                    conv.history.clear();
                    session.reset().map_err(|e| anyhow::anyhow!(e))?;
                    writeln!(out, "new conversation")?;
                }
                Input::System(s) => {
                    writeln!(out, "{}", if s.is_some() { "system prompt set" } else { "system prompt cleared" })?;
                    conv.system = s;
                }
                Input::Stats => {
                    match &conv.last {
                        Some(s) => writeln!(out, "last reply:\n{}", s.summary())?,
                        None => writeln!(out, "no reply yet")?,
                    }
                    let t = &conv.totals;
                    writeln!(
                        out,
                        "session: {} replies, {} tokens generated in {:.2} s of decode ({:.1} tok/s), acceptance \
                         length {:.2}; prompt tokens {} prefilled, {} reused; {} tokens in the conversation",
                        t.replies,
                        t.generated,
                        t.decode_s,
                        if t.decode_s > 0.0 { t.generated.saturating_sub(t.replies) as f64 / t.decode_s } else { 0.0 },
                        t.acceptance_length(),
                        t.prefilled,
                        t.reused,
                        session.committed_tokens().len()
                    )?;
                }
                Input::Turn(text) => {
                    conv.messages.push(Message::new("user", &text));
                    interrupted.store(false, Ordering::SeqCst);
                    match self.reply(&mut session, info, &mut conv, budget, &interrupted, &mut out) {
                        Ok((reply, stats)) => {
                            writeln!(out, "{}", reply_line(&stats))?;
                            conv.messages.push(Message::new("assistant", &reply));
                            conv.totals.add(&stats);
                            conv.last = Some(stats);
                        }
                        Err(e) => {
                            conv.messages.pop();
                            writeln!(out, "error: {}", super::error_message(&e))?;
                        }
                    }
                }
            }
        }
        writeln!(out)?;
        Ok(())
    }
}

impl Repl<'_> {
    /// Renders the conversation, generates the reply (streamed to `out`) and returns its text
    /// (EOS not included), the conversation's text and tokens after it, and the stats.
    fn reply<T, D>(
        &self,
        session: &mut Session<T, D>,
        info: &PairInfo,
        conv: &mut Conversation,
        budget: usize,
        interrupted: &AtomicBool,
        out: &mut dyn Write,
    ) -> anyhow::Result<(String, Stats)>
    where
        T: Target,
        D: Draft<Features = T::Features>,
    {
        let mut msgs = Vec::with_capacity(conv.messages.len() + 1);
        if let Some(s) = &conv.system {
            msgs.push(Message::new("system", s));
        }
        msgs.extend(conv.messages.iter().cloned());
        let opts = RenderOptions { add_generation_prompt: true, enable_thinking: !self.args.no_think };
        let text = info.template.render(&msgs, opts).context("the chat template")?;
        // Where the generation prompt starts: the session's snapshot (the server's rule).
        let base = info.template.render(&msgs, RenderOptions { add_generation_prompt: false, ..opts });
        let start = base.ok().and_then(|base| generation_prompt_start(&base, &text));
        let tk = &info.tk.tokenizer;
        let prompt = match conv.history.continuation(tk, &text).context("tokenising the conversation")? {
            Some(ids) if session.reusable(&ids) > 0 => ids,
            _ => tk.encode(&text).context("tokenising the conversation")?,
        };
        let snapshot = start.and_then(|b| token_boundary(tk, &prompt, b));
        let room = info.room(prompt.len());
        if room == 0 {
            bail!(
                "the conversation has {} tokens and the context is {} tokens: no room for a reply (/reset starts \
                 a new one)",
                prompt.len(),
                info.ctx
            );
        }
        let eos = info.tk.stop_ids.clone();
        let cfg =
            GenerateConfig { mode: self.mode, budget, max_tokens: conv.max_tokens.min(room), eos, rule: self.rule };
        let mut dec = StreamDecoder::new();
        let mut reply = String::new();
        let mut io_err = None;
        let (ids, stats) = session
            .generate_with_snapshot(&prompt, snapshot, &cfg, |ids| {
                let mut piece = String::new();
                for &id in ids.iter().filter(|id| !cfg.eos.contains(id)) {
                    piece.push_str(&dec.push(info.tk.tokenizer.token_bytes(id).unwrap_or(b"\xEF\xBF\xBD")));
                }
                reply.push_str(&piece);
                if let Err(e) = out.write_all(piece.as_bytes()).and_then(|_| out.flush()) {
                    io_err.get_or_insert(e);
                }
                if io_err.is_some() || interrupted.load(Ordering::SeqCst) {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            })
            .map_err(|e| anyhow::anyhow!(e))?;
        if let Some(e) = io_err {
            return Err(e).context("writing the reply");
        }
        let tail = dec.finish();
        reply.push_str(&tail);
        write!(out, "{tail}")?;
        writeln!(out)?;
        conv.history.record(tk, &prompt, &ids, session.snapshot_position());
        Ok((reply, stats))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_parsed_and_text_is_a_turn() {
        assert_eq!(parse_input("  "), Input::Empty);
        assert_eq!(parse_input("hello there  "), Input::Turn("hello there".into()));
        assert_eq!(parse_input("/reset"), Input::Reset);
        assert_eq!(parse_input("/system  Be brief. "), Input::System(Some("Be brief.".into())));
        assert_eq!(parse_input("/system"), Input::System(None));
        assert_eq!(parse_input("/stats"), Input::Stats);
        assert_eq!(parse_input("/max 12"), Input::Max(12));
        assert!(matches!(parse_input("/max 0"), Input::Invalid(_)));
        assert!(matches!(parse_input("/max x"), Input::Invalid(_)));
        assert!(matches!(parse_input("/nope"), Input::Invalid(m) if m.contains("/nope")));
        assert_eq!(parse_input("//etc/passwd"), Input::Turn("/etc/passwd".into()));
    }

    #[test]
    fn totals_count_prefilled_and_reused_tokens_and_acceptance() {
        let mut t = Totals::default();
        let mut s = Stats { prompt_tokens: 10, reused_tokens: 0, generated: 5, ..Stats::default() };
        s.record_round(2, false);
        s.record_round(2, false);
        t.add(&s);
        let mut s2 = Stats { prompt_tokens: 20, reused_tokens: 15, generated: 4, ..Stats::default() };
        s2.record_round(3, false);
        t.add(&s2);
        assert_eq!((t.replies, t.prefilled, t.reused, t.generated, t.rounds), (2, 15, 15, 9, 3));
        // (5 - 1) + (4 - 1) tokens from 3 rounds
        assert!((t.acceptance_length() - 7.0 / 3.0).abs() < 1e-9);
        let line = reply_line(&s2);
        assert!(line.contains("4 tokens") && line.contains("acceptance length 3.00") && line.contains("15 reused"));
    }
}
