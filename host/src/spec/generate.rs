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

/// A target and its draft across the turns of a conversation, with the tokens the target's
/// caches hold. [`Session::generate`] reuses them when the new prompt starts with them: only
/// the rest is run (`Target::extend`, reported as `Stats::reused_tokens`); any other prompt
/// resets both models first. After a turn the caches hold exactly the prompt and the output,
/// except the output's last token when it is the pending one (the target's pick after the
/// caches, not yet run): a round that stops inside its accepted path commits only the emitted
/// prefix. So a next prompt of `prompt + output + more` always reuses them.
pub struct Session<T: Target, D> {
    target: T,
    draft: Option<D>,
    /// The tokens in the target's caches (valid while `known`).
    committed: Vec<u32>,
    /// `committed` mirrors the target (false before the first turn and after a failed one).
    known: bool,
    /// Features of committed rows the draft has not read yet.
    unread: Option<T::Features>,
}

impl<T, D> Session<T, D>
where
    T: Target,
    D: Draft<Features = T::Features>,
{
    /// A session over `target` and `draft`; the first turn resets both.
    pub fn new(target: T, draft: Option<D>) -> Self {
        Self { target, draft, committed: Vec::new(), known: false, unread: None }
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

    /// Brings the caches to `prompt` and returns the pending token: extends them when they hold
    /// a proper prefix of it, else resets target and draft and prefills.
    fn start_turn(&mut self, prompt: &[u32], rule: DecodingRule, stats: &mut Stats) -> Result<u32, SpecError> {
        let reuse = self.known
            && self.target.committed() == self.committed.len()
            && prompt.len() > self.committed.len()
            && prompt.starts_with(&self.committed);
        self.known = false;
        let (bonus, features) = if reuse {
            stats.reused_tokens = self.committed.len();
            self.target.extend(&prompt[self.committed.len()..], rule)?
        } else {
            self.committed.clear();
            self.unread = None;
            if let Some(d) = &mut self.draft {
                d.reset()?;
            }
            self.target.prefill(prompt, rule)?
        };
        self.committed.extend_from_slice(&prompt[self.committed.len()..]);
        self.known = true;
        self.absorb(features)?;
        Ok(bonus)
    }

    /// Generates up to `cfg.max_tokens` tokens after `prompt` (see [`generate`]), reusing the
    /// caches when `prompt` continues the tokens they hold.
    pub fn generate(
        &mut self,
        prompt: &[u32],
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
        let mut stats = Stats { prompt_tokens: prompt.len(), ..Stats::default() };
        let mut out = Vec::new();
        if cfg.max_tokens == 0 {
            return Ok((out, stats));
        }
        // Device time left from an earlier turn (one that failed) is not this turn's.
        self.device_times()?;
        let t = Instant::now();
        let r = self.start_turn(prompt, cfg.rule, &mut stats);
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
                    let topk = timed(&mut stats.time.draft, || d.propose(&new, bonus, k))?;
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
