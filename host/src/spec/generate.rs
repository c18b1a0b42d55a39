//! The one generic loop (design.md §1): draft → build tree → verify → walk → commit → emit.
//! AR is the same loop with budget 0 (root-only tree, no draft call); a DFlash chain is the
//! tree with K = 1. [`Session`] runs it turn after turn over the same caches; [`generate`] is
//! one turn from empty caches.

use std::ops::ControlFlow;
use std::time::{Duration, Instant};

use super::batch::VerifyBatch;
use super::ddtree::{self, Tree, TreeOptions};
use super::rule::DecodingRule;
use super::stats::{Stats, StopReason};
use super::traits::{Draft, FeatureSpan, Target};
use super::walk::walk;
use super::SpecError;

/// Which tree each round verifies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Autoregressive: the root only (budget 0), one token per round.
    Ar,
    /// DFlash chain: the top-1 chain of `min(budget, L)` nodes.
    Chain,
    /// DDTree: the best `budget` prefixes (Algorithm 1).
    Tree,
    /// The anchor's DDTree variant (chain seeded, K ≤ 8), for comparison.
    AnchorTree,
}

impl Mode {
    /// The mode's name for messages.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Ar => "ar",
            Mode::Chain => "chain",
            Mode::Tree => "tree",
            Mode::AnchorTree => "anchor-tree",
        }
    }
}

/// What to generate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenerateConfig {
    /// Tree shape.
    pub mode: Mode,
    /// `B`: non-root nodes per round (ignored by AR).
    pub budget: usize,
    /// Stop after this many generated tokens.
    pub max_tokens: usize,
    /// Generation stops after emitting any of these.
    pub eos: Vec<u32>,
    /// How the target picks each token (the walk follows its picks).
    pub rule: DecodingRule,
}

impl GenerateConfig {
    /// The tree options of this configuration.
    pub fn tree_options(&self) -> TreeOptions {
        match self.mode {
            Mode::Ar => TreeOptions::ddtree(0),
            Mode::Chain => TreeOptions::chain(self.budget),
            Mode::Tree => TreeOptions::ddtree(self.budget),
            Mode::AnchorTree => TreeOptions::anchor(self.budget),
        }
    }
}

fn timed<R>(acc: &mut Duration, f: impl FnOnce() -> R) -> R {
    let t = Instant::now();
    let r = f();
    *acc += t.elapsed();
    r
}

/// Generates up to `cfg.max_tokens` tokens after `prompt` from empty caches, calling
/// `on_tokens` with each round's newly final tokens; `ControlFlow::Break` from it ends
/// generation after that round (the round's tokens stay emitted and committed). Returns the
/// generated tokens (ending at the first EOS, if any) and stats, which say why it stopped. At
/// T = 0 the output equals greedy AR decoding of `target` whatever the draft proposes. A
/// conversation that continues uses a [`Session`].
pub fn generate<T, D>(
    target: &mut T,
    draft: Option<&mut D>,
    prompt: &[u32],
    cfg: &GenerateConfig,
    on_tokens: impl FnMut(&[u32]) -> ControlFlow<()>,
) -> Result<(Vec<u32>, Stats), SpecError>
where
    T: Target,
    D: Draft<Features = T::Features>,
{
    Session::new(target, draft).generate(prompt, cfg, on_tokens)
}

/// How a turn starts from the caches ([`Session::reusable`]).
enum Reuse {
    /// The prompt continues the cached tokens.
    Extend,
    /// The prompt shares the tokens before the snapshot at this position, not all the rest.
    Snapshot(usize),
    /// Empty caches.
    Cold,
}

/// A target and its draft across the turns of a conversation, with the tokens the target's
/// caches hold. [`Session::generate`] reuses them when the new prompt starts with them: only
/// the rest is run (`Target::extend`, reported as `Stats::reused_tokens`); any other prompt
/// resets both models first. After a turn the caches hold exactly the prompt and the output,
/// except the output's last token when it is the pending one (the target's pick after the
/// caches, not yet run): a round that stops inside its accepted path commits only the emitted
/// prefix. So a next prompt of `prompt + output + more` always reuses them.
///
/// A turn may also name a snapshot position `s` ([`Session::generate_with_snapshot`]): its
/// prompt runs up to `s`, the target saves its recurrent state there
/// ([`Target::save_snapshot`]), and the rest follows. A later prompt that does not extend the
/// cached tokens but starts with their first `s` goes back to `s` instead of starting over:
/// the target restores the snapshot, the draft forgets its context rows from `s` on, and only
/// `prompt[s..]` runs (`Stats::reused_tokens = s`). That is how a conversation whose template
/// re-renders the last reply differently (a thinking model's `<think>` block dropped) reuses
/// everything before the reply: `s` = the start of the generation prompt. The tokens are the
/// ones a cold run of the prompt gives (a node's result does not depend on how the prompt was
/// split into forwards).
pub struct Session<T: Target, D> {
    target: T,
    draft: Option<D>,
    /// The tokens in the target's caches (valid while `known`).
    committed: Vec<u32>,
    /// `committed` mirrors the target (false before the first turn and after a failed one).
    known: bool,
    /// Features of committed rows the draft has not read yet: the draft holds the context rows
    /// of the first `committed.len() − unread.rows()` tokens.
    unread: Option<T::Features>,
    /// The position of the target's snapshot (`≤ committed.len()`; valid while `known`).
    snapshot: Option<usize>,
}

impl<T, D> Session<T, D>
where
    T: Target,
    D: Draft<Features = T::Features>,
{
    /// A session over `target` and `draft`; the first turn resets both.
    pub fn new(target: T, draft: Option<D>) -> Self {
        Self { target, draft, committed: Vec::new(), known: false, unread: None, snapshot: None }
    }

    /// The position of the snapshot the next turn can go back to (`None`: none saved).
    pub fn snapshot_position(&self) -> Option<usize> {
        self.snapshot.filter(|_| self.known)
    }

    /// Whether the pair can go back to a snapshot: the target saves one and the draft (if any)
    /// truncates its context.
    pub fn supports_snapshots(&self) -> bool {
        self.target.supports_snapshots() && self.draft.as_ref().is_none_or(|d| d.supports_truncation())
    }

    /// The tokens in the target's caches after the last turn (empty before the first).
    pub fn committed_tokens(&self) -> &[u32] {
        if self.known {
            &self.committed
        } else {
            &[]
        }
    }

    /// The target.
    pub fn target(&mut self) -> &mut T {
        &mut self.target
    }

    /// Empties the caches of target and draft (a new conversation).
    pub fn reset(&mut self) -> Result<(), SpecError> {
        self.known = false;
        self.committed.clear();
        self.unread = None;
        self.snapshot = None;
        self.target.reset()?;
        if let Some(d) = &mut self.draft {
            d.reset()?;
        }
        self.known = true;
        Ok(())
    }

    /// The target and the draft back.
    pub fn into_parts(self) -> (T, Option<D>) {
        (self.target, self.draft)
    }

    /// The target's and the draft's device time since the last call.
    fn device_times(&mut self) -> Result<Option<super::stats::PhaseTimes>, SpecError> {
        let t = self.target.device_times()?;
        let d = match &mut self.draft {
            Some(d) => d.device_times()?,
            None => None,
        };
        Ok(super::stats::PhaseTimes::merge(t, d))
    }

    /// Keeps `f` for the draft's next `propose` (dropped when there is no draft).
    fn absorb(&mut self, f: T::Features) -> Result<(), SpecError> {
        if self.draft.is_none() {
            return Ok(());
        }
        match &mut self.unread {
            Some(u) => u.append(f),
            None => {
                self.unread = Some(f);
                Ok(())
            }
        }
    }

    /// Hands the unread feature rows to the draft's context ([`Draft::extend_context`]) when it
    /// takes them outside a propose.
    fn draft_reads_unread(&mut self) -> Result<(), SpecError> {
        if let (Some(d), Some(u)) = (self.draft.as_mut(), self.unread.as_mut()) {
            // A failed append may have read part of the rows: the next turn starts over.
            self.known = false;
            if d.extend_context(u)? {
                // Read: the first propose gets no rows, then the rows its round commits.
                u.truncate(0);
            }
            self.known = true;
        }
        Ok(())
    }

    /// Brings the caches to `prompt` and returns the pending token: extends them when they hold
    /// a proper prefix of it; else goes back to the snapshot when the prompt starts with the
    /// tokens before it and extends from there; else resets target and draft and runs it all.
    /// Saves a snapshot at `snapshot_at` on the way when that lies in the part that runs.
    fn start_turn(
        &mut self,
        prompt: &[u32],
        snapshot_at: Option<usize>,
        rule: DecodingRule,
        stats: &mut Stats,
    ) -> Result<u32, SpecError> {
        let reuse = self.reuse(prompt);
        self.known = false;
        match reuse {
            Reuse::Extend => stats.reused_tokens = self.committed.len(),
            Reuse::Snapshot(s) => {
                self.rewind_to_snapshot(s)?;
                stats.reused_tokens = s;
            }
            Reuse::Cold => {
                self.committed.clear();
                self.unread = None;
                self.snapshot = None;
                if let Some(d) = &mut self.draft {
                    d.reset()?;
                }
                self.target.reset()?;
            }
        }
        let start = self.committed.len();
        let save_at = snapshot_at.filter(|&s| s > 0 && s >= start && self.supports_snapshots());
        let mut bonus = None;
        if let Some(s) = save_at {
            if s > start {
                let (b, features) = self.target.extend(&prompt[start..s], rule)?;
                self.absorb(features)?;
                bonus = Some(b);
            }
            self.target.save_snapshot()?;
            self.snapshot = Some(s);
        }
        let from = save_at.unwrap_or(start);
        if from < prompt.len() {
            let (b, features) = self.target.extend(&prompt[from..], rule)?;
            self.absorb(features)?;
            bonus = Some(b);
        }
        let bonus = bonus.ok_or_else(|| SpecError::Config("the prompt adds no tokens to the caches".into()))?;
        self.committed.extend_from_slice(&prompt[start..]);
        self.known = true;
        Ok(bonus)
    }

    /// How a turn on `prompt` would start: extending the cached tokens when it continues them,
    /// going back to the snapshot when it shares the tokens before it (and has more), else cold.
    fn reuse(&self, prompt: &[u32]) -> Reuse {
        let held = self.known && self.target.committed() == self.committed.len();
        if held && prompt.len() > self.committed.len() && prompt.starts_with(&self.committed) {
            return Reuse::Extend;
        }
        match self.snapshot {
            Some(s) if held && s <= self.committed.len() && prompt.len() > s && prompt[..s] == self.committed[..s] => {
                Reuse::Snapshot(s)
            }
            _ => Reuse::Cold,
        }
    }

    /// The number of cached tokens a turn on `prompt` would reuse (0: it would start cold).
    pub fn reusable(&self, prompt: &[u32]) -> usize {
        match self.reuse(prompt) {
            Reuse::Extend => self.committed.len(),
            Reuse::Snapshot(s) => s,
            Reuse::Cold => 0,
        }
    }

    /// Returns target and draft to the snapshot at `s` (`≤ committed.len()`): the target
    /// restores it; a draft that read rows past `s` forgets them, one that did not keeps the
    /// unread features of the rows before `s` only.
    fn rewind_to_snapshot(&mut self, s: usize) -> Result<(), SpecError> {
        let at = self.target.restore_snapshot()?;
        if at != s {
            return Err(SpecError::Config(format!("the target restored position {at}, the session saved {s}")));
        }
        if let Some(d) = &mut self.draft {
            let unread = self.unread.as_ref().map_or(0, |u| u.rows());
            let read = self.committed.len().checked_sub(unread).ok_or_else(|| {
                SpecError::Config(format!("{unread} unread feature rows for {} tokens", self.committed.len()))
            })?;
            if read > s {
                d.truncate_context(s)?;
                self.unread = None;
            } else if let Some(u) = &mut self.unread {
                u.truncate(s - read);
            }
        }
        self.committed.truncate(s);
        Ok(())
    }

    /// Generates up to `cfg.max_tokens` tokens after `prompt` (see [`generate`]), reusing the
    /// caches when `prompt` continues the tokens they hold (or starts with those before the
    /// snapshot).
    pub fn generate(
        &mut self,
        prompt: &[u32],
        cfg: &GenerateConfig,
        on_tokens: impl FnMut(&[u32]) -> ControlFlow<()>,
    ) -> Result<(Vec<u32>, Stats), SpecError> {
        self.generate_with_snapshot(prompt, None, cfg, on_tokens)
    }

    /// [`Session::generate`], saving a snapshot at position `snapshot_at` (`≤ prompt.len()`) of
    /// the prompt when the turn runs that position (a position inside the reused prefix keeps
    /// the snapshot held before; a target or draft without snapshots saves none).
    pub fn generate_with_snapshot(
        &mut self,
        prompt: &[u32],
        snapshot_at: Option<usize>,
        cfg: &GenerateConfig,
        mut on_tokens: impl FnMut(&[u32]) -> ControlFlow<()>,
    ) -> Result<(Vec<u32>, Stats), SpecError> {
        cfg.rule.validate()?;
        let opts = cfg.tree_options();
        // A DDTree can reach `budget + 1` nodes; a chain is also bounded by the draft's depths,
        // which every round checks below.
        if matches!(cfg.mode, Mode::Tree | Mode::AnchorTree) && opts.budget >= self.target.max_nodes() {
            return Err(SpecError::Config(format!(
                "budget {} needs {} nodes per verify, the target takes at most {}",
                opts.budget,
                opts.budget + 1,
                self.target.max_nodes()
            )));
        }
        if opts.budget > 0 && self.draft.is_none() {
            return Err(SpecError::MissingDraft { mode: cfg.mode.name() });
        }
        if prompt.is_empty() {
            return Err(SpecError::Config("the prompt has no tokens".into()));
        }
        if let Some(s) = snapshot_at.filter(|&s| s > prompt.len()) {
            return Err(SpecError::Config(format!(
                "snapshot position {s} lies past the prompt's {} tokens",
                prompt.len()
            )));
        }
        let mut stats = Stats { prompt_tokens: prompt.len(), ..Stats::default() };
        let mut out = Vec::new();
        if cfg.max_tokens == 0 {
            return Ok((out, stats));
        }
        // Device time left from an earlier turn (one that failed) is not this turn's.
        self.device_times()?;
        let t = Instant::now();
        // The prompt's rows go into the draft's context now: part of the prompt's cost (time to
        // first token), not of the first round's.
        let r = self.start_turn(prompt, snapshot_at, cfg.rule, &mut stats).and_then(|b| {
            if opts.budget > 0 {
                self.draft_reads_unread()?;
            }
            Ok(b)
        });
        stats.time.prefill += t.elapsed();
        let mut bonus = r?;
        // `emit` pushes one token and says why generation ends there, if it does.
        let emit = |out: &mut Vec<u32>, t: u32| {
            out.push(t);
            if cfg.eos.contains(&t) {
                Some(StopReason::Eos)
            } else if out.len() >= cfg.max_tokens {
                Some(StopReason::MaxTokens)
            } else {
                None
            }
        };
        // The caller's answer counts only when the tokens did not end generation already.
        let asked = |flow: ControlFlow<()>, stop: Option<StopReason>| match flow {
            ControlFlow::Break(()) => stop.or(Some(StopReason::Caller)),
            ControlFlow::Continue(()) => stop,
        };
        let mut stop = emit(&mut out, bonus);
        stop = asked(on_tokens(&out), stop);
        while stop.is_none() {
            let tree = match self.draft.as_mut() {
                Some(d) if opts.budget > 0 => {
                    let k = opts.effective_k(usize::MAX);
                    let new =
                        self.unread.take().ok_or_else(|| SpecError::Config("no features for the draft".into()))?;
                    // A failed propose may have read part of the rows: the next turn starts over.
                    self.known = false;
                    let topk = timed(&mut stats.time.draft, || d.propose(&new, bonus, k))?;
                    self.known = true;
                    timed(&mut stats.time.build, || ddtree::build(bonus, &topk, opts))
                }
                _ => Tree::root_only(bonus),
            };
            if tree.len() > self.target.max_nodes() {
                return Err(SpecError::Config(format!(
                    "a tree of {} nodes: the target verifies at most {} (lower --budget)",
                    tree.len(),
                    self.target.max_nodes()
                )));
            }
            let batch = VerifyBatch::from_tree(&tree, self.target.committed())?;
            self.known = false;
            let posterior = timed(&mut stats.time.verify, || self.target.verify(&batch, cfg.rule))?;
            let w = timed(&mut stats.time.walk, || walk(&tree, &posterior))?;
            let off_spine = w.path.iter().any(|&i| tree.ranks[i].iter().any(|&r| r > 0));
            stats.record_round(w.path.len(), off_spine);
            // Emit the path's draft tokens, then the bonus, up to a stop; commit the root and
            // the path tokens emitted (a stop inside the path leaves the rest uncommitted).
            let first_new = out.len();
            let mut emitted = 0;
            for t in w.path[1..].iter().map(|&i| tree.tokens[i]).chain([w.bonus]) {
                emitted += 1;
                stop = emit(&mut out, t);
                if stop.is_some() {
                    break;
                }
            }
            let keep = &w.path[..(emitted + 1).min(w.path.len())];
            let features = timed(&mut stats.time.commit, || self.target.commit(&batch, keep))?;
            self.committed.extend(keep.iter().map(|&i| tree.tokens[i]));
            self.known = true;
            self.absorb(features)?;
            stop = asked(on_tokens(&out[first_new..]), stop);
            bonus = w.bonus;
        }
        stats.stop = stop.unwrap_or_default();
        stats.device = self.device_times()?;
        stats.generated = out.len();
        Ok((out, stats))
    }
}
