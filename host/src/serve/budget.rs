//! Anthropic's thinking budget (`thinking: {"type": "enabled", "budget_tokens": N}`): after N
//! generated tokens without `</think>`, the server closes the think block itself — it appends
//! the tokens of the template's thinking end (Qwen3.5: `\n</think>\n\n`, as the model writes it)
//! as if generated, and the model answers after them in the same turn.
//!
//! One turn is two or three [`Session::generate`] calls over the same caches:
//! 1. thinking, at most N tokens, stopped after the round in which `</think>` appears;
//! 2. if the block is still open after N tokens (and `max_tokens` leaves room for the end and
//!    one more token), the closing tokens are sent on and appended to the sequence;
//! 3. the answer, continuing `prompt + output`: the session holds all of it but the pending
//!    last token (or all of it when N fell inside a round's accepted path), so only the closing
//!    tokens and that token are prefilled — nothing is run again. (When `</think>` and the N-th
//!    token fall in the same round and the round stopped inside its path, the caches hold the
//!    whole sequence and the session prefills it again: correct, rare, slower.)
//!
//! `max_tokens` bounds the whole output (thinking, closing tokens and answer). Output and stats
//! are those of one turn: the tokens of all calls, the rounds and times added, the stop reason of
//! the last call.

use std::ops::ControlFlow;

use crate::spec::{Draft, GenerateConfig, Session, SpecError, Stats, StopReason, Target};

use super::thinking::CLOSE;

/// A request's thinking budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThinkBudget {
    /// Most thinking tokens (`budget_tokens`).
    pub tokens: usize,
    /// The template's thinking end, tokenised ([`super::thinking::template_close`]).
    pub close: Vec<u32>,
}

/// Generates one turn after `prompt` (see [`Session::generate`]) with the thinking closed after
/// `budget.tokens` tokens when the model has not closed it (`token_bytes` gives an id's bytes,
/// where `</think>` is looked for); `on_tokens` sees every token of the output, the closing ones
/// included. Without a budget (or one `max_tokens` reaches first) it is one `Session::generate`.
pub fn generate<'t, T, D>(
    session: &mut Session<T, D>,
    prompt: &[u32],
    snapshot_at: Option<usize>,
    cfg: &GenerateConfig,
    budget: Option<&ThinkBudget>,
    token_bytes: impl Fn(u32) -> &'t [u8],
    mut on_tokens: impl FnMut(&[u32]) -> ControlFlow<()>,
) -> Result<(Vec<u32>, Stats), SpecError>
where
    T: Target,
    D: Draft<Features = T::Features>,
{
    let Some(b) = budget.filter(|b| b.tokens > 0 && b.tokens < cfg.max_tokens) else {
        return session.generate_with_snapshot(prompt, snapshot_at, cfg, on_tokens);
    };
    // 1. Thinking: the last bytes seen are kept to find `</think>` across rounds.
    let (mut tail, mut closed, mut caller) = (Vec::<u8>::new(), false, false);
    let thinking = GenerateConfig { max_tokens: b.tokens, ..cfg.clone() };
    let (mut out, mut stats) = session.generate_with_snapshot(prompt, snapshot_at, &thinking, |ids| {
        let flow = on_tokens(ids);
        caller |= flow.is_break();
        for &id in ids {
            tail.extend_from_slice(token_bytes(id));
        }
        closed |= tail.windows(CLOSE.len()).any(|w| w == CLOSE.as_bytes());
        tail.drain(..tail.len().saturating_sub(CLOSE.len() - 1));
        if closed {
            ControlFlow::Break(())
        } else {
            flow
        }
    })?;
    if caller || stats.stop == StopReason::Eos || (stats.stop == StopReason::Caller && !closed) {
        return Ok((out, stats));
    }
    let mut next = prompt.to_vec();
    next.extend_from_slice(&out);
    // 2. The budget is spent inside the block: close it, if an answer token still fits.
    if !closed {
        if cfg.max_tokens - out.len() <= b.close.len() {
            return Ok((out, stats)); // stopped at max_tokens
        }
        out.extend_from_slice(&b.close);
        next.extend_from_slice(&b.close);
        stats.generated = out.len();
        if on_tokens(&b.close).is_break() {
            stats.stop = StopReason::Caller;
            return Ok((out, stats));
        }
    }
    let left = cfg.max_tokens - out.len();
    if left == 0 {
        stats.stop = StopReason::MaxTokens;
        return Ok((out, stats));
    }
    // 3. The answer.
    let answer = GenerateConfig { max_tokens: left, ..cfg.clone() };
    let (more, s) = session.generate(&next, &answer, on_tokens)?;
    out.extend_from_slice(&more);
    add(&mut stats, &s);
    stats.generated = out.len();
    Ok((out, stats))
}

/// Adds a later call's rounds, times and stop to `stats` (prompt counts stay the first call's).
fn add(stats: &mut Stats, s: &Stats) {
    stats.steps += s.steps;
    if stats.accepted_depth.len() < s.accepted_depth.len() {
        stats.accepted_depth.resize(s.accepted_depth.len(), 0);
    }
    for (a, b) in stats.accepted_depth.iter_mut().zip(&s.accepted_depth) {
        *a += b;
    }
    stats.off_spine_rounds += s.off_spine_rounds;
    stats.time = crate::spec::PhaseTimes::merge(Some(stats.time), Some(s.time)).unwrap_or_default();
    stats.device = crate::spec::PhaseTimes::merge(stats.device, s.device);
    stats.stop = s.stop;
}
