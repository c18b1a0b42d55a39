//! The one generic loop (design.md §1): draft → build tree → verify → walk → commit → emit.
//! AR is the same loop with budget 0 (root-only tree, no draft call); a DFlash chain is the
//! tree with K = 1.

use std::time::{Duration, Instant};

use super::batch::VerifyBatch;
use super::ddtree::{self, Tree, TreeOptions};
use super::rule::DecodingRule;
use super::stats::Stats;
use super::traits::{Draft, Target};
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

/// Generates up to `cfg.max_tokens` tokens after `prompt`, calling `on_tokens` with each round's
/// newly final tokens. Returns the generated tokens (ending at the first EOS, if any) and stats.
/// At T = 0 the output equals greedy AR decoding of `target` whatever the draft proposes.
pub fn generate<T, D>(
    target: &mut T,
    mut draft: Option<&mut D>,
    prompt: &[u32],
    cfg: &GenerateConfig,
    mut on_tokens: impl FnMut(&[u32]),
) -> Result<(Vec<u32>, Stats), SpecError>
where
    T: Target,
    D: Draft<Features = T::Features>,
{
    let opts = cfg.tree_options();
    // A DDTree can reach `budget + 1` nodes; a chain is also bounded by the draft's depths,
    // which every round checks below.
    if matches!(cfg.mode, Mode::Tree | Mode::AnchorTree) && opts.budget >= target.max_nodes() {
        return Err(SpecError::Config(format!(
            "budget {} needs {} nodes per verify, the target takes at most {}",
            opts.budget,
            opts.budget + 1,
            target.max_nodes()
        )));
    }
    if opts.budget > 0 && draft.is_none() {
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
    let (mut bonus, mut features) = timed(&mut stats.time.prefill, || target.prefill(prompt, cfg.rule))?;
    // `emit` pushes one token and says whether generation is over.
    let emit = |out: &mut Vec<u32>, t: u32| {
        out.push(t);
        cfg.eos.contains(&t) || out.len() >= cfg.max_tokens
    };
    let mut done = emit(&mut out, bonus);
    on_tokens(&out);
    while !done {
        let tree = match draft.as_deref_mut() {
            Some(d) if opts.budget > 0 => {
                let k = opts.effective_k(usize::MAX);
                let topk = timed(&mut stats.time.draft, || d.propose(&features, bonus, k))?;
                timed(&mut stats.time.build, || ddtree::build(bonus, &topk, opts))
            }
            _ => Tree::root_only(bonus),
        };
        if tree.len() > target.max_nodes() {
            return Err(SpecError::Config(format!(
                "a tree of {} nodes: the target verifies at most {} (lower --budget)",
                tree.len(),
                target.max_nodes()
            )));
        }
        let batch = VerifyBatch::from_tree(&tree, target.committed())?;
        let posterior = timed(&mut stats.time.verify, || target.verify(&batch, cfg.rule))?;
        let w = timed(&mut stats.time.walk, || walk(&tree, &posterior))?;
        features = timed(&mut stats.time.commit, || target.commit(&batch, &w.path))?;
        let off_spine = w.path.iter().any(|&i| tree.ranks[i].iter().any(|&r| r > 0));
        stats.record_round(w.path.len(), off_spine);
        let first_new = out.len();
        for t in w.path[1..].iter().map(|&i| tree.tokens[i]).chain([w.bonus]) {
            done = emit(&mut out, t);
            if done {
                break;
            }
        }
        on_tokens(&out[first_new..]);
        bonus = w.bonus;
    }
    stats.generated = out.len();
    Ok((out, stats))
}
