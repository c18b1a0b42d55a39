//! What the loop needs from a target and a draft. A backend (CPU reference, GPU engine) owns its
//! caches; the loop only moves token ids, verify batches and opaque feature handles between them.
//!
//! Cache protocol: at the start of a round the target holds exactly the committed tokens
//! (`committed` of them, positions `0..committed`); the pending root `b` is not in its caches.
//! `verify` processes the flat [`VerifyBatch`] of the round's tree (`N+1` nodes at positions
//! `committed + depth`, ancestor masks); `commit` keeps the rows/state of the accepted path only
//! (KV rows compacted in path order to slots `committed..committed+|path|`, recurrent state of
//! the last path node, conv window along the path), so afterwards the target holds
//! `committed + |path|` tokens. `extend` appends tokens the caller supplies (a prompt, the next
//! turn of a conversation) the same way; `reset` empties the caches.
//!
//! Snapshots (prefix reuse when a conversation is re-rendered differently after some point): the
//! KV rows, the feature rows and the draft's context rows of positions `0..s` are never changed
//! by what is appended after `s`, so going back to `s` needs no copy of them — only the recurrent
//! part (DeltaNet states and conv windows), which every token overwrites. A target keeps one
//! snapshot of that part ([`Target::save_snapshot`] at the committed position,
//! [`Target::restore_snapshot`] back to it, dropped by `reset`); a draft only forgets context
//! rows ([`Draft::truncate_context`]).

use super::batch::VerifyBatch;
use super::ddtree::DraftTopK;
use super::rule::DecodingRule;
use super::stats::PhaseTimes;
use super::SpecError;

/// Features of consecutive committed tokens that the loop can join: rows the draft has not
/// read yet (after an AR round, at the end of a turn) are handed to it together with the next
/// ones. `later` must start right after `self`'s last row.
pub trait FeatureSpan: Sized {
    /// Appends `later` to `self`.
    fn append(&mut self, later: Self) -> Result<(), SpecError>;

    /// Rows (tokens) held.
    fn rows(&self) -> usize;

    /// Keeps the first `rows` rows (all of them when it holds fewer).
    fn truncate(&mut self, rows: usize);
}

impl<T> FeatureSpan for Vec<T> {
    fn append(&mut self, later: Self) -> Result<(), SpecError> {
        self.extend(later);
        Ok(())
    }

    fn rows(&self) -> usize {
        self.len()
    }

    fn truncate(&mut self, rows: usize) {
        Vec::truncate(self, rows);
    }
}

/// The model whose output is reproduced exactly.
pub trait Target {
    /// Feature rows captured for the draft (per token, in position order), or a handle to them.
    type Features: FeatureSpan;

    /// The most nodes one `verify` (and one `extend` chunk) takes, the root included; the loop
    /// refuses a budget that would exceed it before any work. Unlimited unless the backend says
    /// otherwise.
    fn max_nodes(&self) -> usize {
        usize::MAX
    }

    /// Tokens in the caches (the positions `0..committed`).
    fn committed(&self) -> usize;

    /// Empties the caches (`committed()` becomes 0).
    fn reset(&mut self) -> Result<(), SpecError>;

    /// Appends `tokens` (non-empty) to the committed caches at positions
    /// `committed..committed + tokens.len()` (a backend with a node limit runs them in chunks of
    /// at most [`Target::max_nodes`]). Returns the token `rule` picks after the last one
    /// (pending, not in the caches) and the features of the new rows.
    fn extend(&mut self, tokens: &[u32], rule: DecodingRule) -> Result<(u32, Self::Features), SpecError>;

    /// Runs `prompt` (non-empty) into empty caches: [`Target::reset`] then [`Target::extend`].
    fn prefill(&mut self, prompt: &[u32], rule: DecodingRule) -> Result<(u32, Self::Features), SpecError> {
        self.reset()?;
        self.extend(prompt, rule)
    }

    /// One forward over `batch` (node 0 = the pending token; `batch.committed()` equals
    /// [`Target::committed`]). Returns the decoding-rule token after each node (`batch.len()`
    /// entries), picked by `rule` ([`SpecError::Unsupported`] for a rule the backend lacks).
    /// The committed caches are not modified.
    fn verify(&mut self, batch: &VerifyBatch, rule: DecodingRule) -> Result<Vec<u32>, SpecError>;

    /// Keeps the state of the nodes `path` of the last verify's `batch` (root first, each the
    /// parent of the next, as returned by the walk — or a prefix of that) and drops every other
    /// node. Returns the features of the path rows, in path order.
    fn commit(&mut self, batch: &VerifyBatch, path: &[usize]) -> Result<Self::Features, SpecError>;

    /// Device time of the phases since the last call, taken from device events (prefill,
    /// verify, commit); `None` for a backend without a device. May wait for the device: the
    /// loop calls it at the start and the end of a turn, never per round.
    fn device_times(&mut self) -> Result<Option<PhaseTimes>, SpecError> {
        Ok(None)
    }

    /// Whether [`Target::save_snapshot`] / [`Target::restore_snapshot`] work (a
    /// [`super::Session`] saves none otherwise).
    fn supports_snapshots(&self) -> bool {
        false
    }

    /// Saves the recurrent part of the committed state (every DeltaNet layer's state and conv
    /// window) at position `s = committed()`, replacing any earlier snapshot. It stays valid
    /// while the tokens at positions `0..s` stay in the caches: [`Target::reset`] drops it.
    fn save_snapshot(&mut self) -> Result<(), SpecError> {
        Err(SpecError::Config("this target keeps no snapshots".into()))
    }

    /// Returns the caches to the saved position `s` and returns it: afterwards `committed() ==
    /// s`, the recurrent state and conv windows are the saved ones bit for bit, and the KV and
    /// feature rows of positions `0..s` are the ones they were (rows from `s` on are overwritten
    /// by what is appended next). The snapshot stays (it may be restored again). An error, with
    /// the caches unchanged, when there is no snapshot or it lies past `committed()`.
    fn restore_snapshot(&mut self) -> Result<usize, SpecError> {
        Err(SpecError::Config("this target keeps no snapshots".into()))
    }
}

/// The block drafter: one pass over `[b, MASK × (S−1)]` gives `L = S − 1` distributions.
pub trait Draft {
    /// Feature rows it conditions on (the target's), or a handle to them.
    type Features;

    /// `L`: the number of drafted positions per round.
    fn depths(&self) -> usize;

    /// Drops the context (the next `propose` starts from position 0).
    fn reset(&mut self) -> Result<(), SpecError>;

    /// Appends `new_context` (the features of the tokens committed since the last call) to the
    /// draft's context, then drafts the block rooted at `bonus`. Returns the top-`k` log-probs
    /// per position (`k` is clamped to the vocabulary).
    fn propose(&mut self, new_context: &Self::Features, bonus: u32, k: usize) -> Result<DraftTopK, SpecError>;

    /// Appends `new_context` to the draft's context without drafting (what `propose` does
    /// first): the loop hands it a prompt's rows right after the target's prefill, so their
    /// cost is the prompt's, not the first round's. Returns `false`, having done nothing, when
    /// the draft appends rows only inside `propose` (the rows then go with the next one).
    fn extend_context(&mut self, new_context: &Self::Features) -> Result<bool, SpecError> {
        let _ = new_context;
        Ok(false)
    }

    /// Device time of its passes since the last call (block passes as the `draft` phase,
    /// [`Draft::extend_context`]'s as `prefill`); `None` for a host draft.
    fn device_times(&mut self) -> Result<Option<PhaseTimes>, SpecError> {
        Ok(None)
    }

    /// Whether [`Draft::truncate_context`] works.
    fn supports_truncation(&self) -> bool {
        false
    }

    /// Keeps the first `rows` context rows (positions `0..rows`) and forgets the rest, so the
    /// next `propose` appends from position `rows` (the rows are append-only: nothing else
    /// changes). An error when it holds fewer than `rows`.
    fn truncate_context(&mut self, rows: usize) -> Result<(), SpecError> {
        let _ = rows;
        Err(SpecError::Config("this draft cannot truncate its context".into()))
    }
}

/// A borrowed target is a target (so a [`super::Session`] can hold `&mut T`).
impl<T: Target + ?Sized> Target for &mut T {
    type Features = T::Features;
    fn max_nodes(&self) -> usize {
        (**self).max_nodes()
    }
    fn committed(&self) -> usize {
        (**self).committed()
    }
    fn reset(&mut self) -> Result<(), SpecError> {
        (**self).reset()
    }
    fn extend(&mut self, tokens: &[u32], rule: DecodingRule) -> Result<(u32, Self::Features), SpecError> {
        (**self).extend(tokens, rule)
    }
    fn prefill(&mut self, prompt: &[u32], rule: DecodingRule) -> Result<(u32, Self::Features), SpecError> {
        (**self).prefill(prompt, rule)
    }
    fn verify(&mut self, batch: &VerifyBatch, rule: DecodingRule) -> Result<Vec<u32>, SpecError> {
        (**self).verify(batch, rule)
    }
    fn commit(&mut self, batch: &VerifyBatch, path: &[usize]) -> Result<Self::Features, SpecError> {
        (**self).commit(batch, path)
    }
    fn device_times(&mut self) -> Result<Option<PhaseTimes>, SpecError> {
        (**self).device_times()
    }
    fn supports_snapshots(&self) -> bool {
        (**self).supports_snapshots()
    }
    fn save_snapshot(&mut self) -> Result<(), SpecError> {
        (**self).save_snapshot()
    }
    fn restore_snapshot(&mut self) -> Result<usize, SpecError> {
        (**self).restore_snapshot()
    }
}

/// A borrowed draft is a draft.
impl<D: Draft + ?Sized> Draft for &mut D {
    type Features = D::Features;
    fn depths(&self) -> usize {
        (**self).depths()
    }
    fn reset(&mut self) -> Result<(), SpecError> {
        (**self).reset()
    }
    fn propose(&mut self, new_context: &Self::Features, bonus: u32, k: usize) -> Result<DraftTopK, SpecError> {
        (**self).propose(new_context, bonus, k)
    }
    fn extend_context(&mut self, new_context: &Self::Features) -> Result<bool, SpecError> {
        (**self).extend_context(new_context)
    }
    fn device_times(&mut self) -> Result<Option<PhaseTimes>, SpecError> {
        (**self).device_times()
    }
    fn supports_truncation(&self) -> bool {
        (**self).supports_truncation()
    }
    fn truncate_context(&mut self, rows: usize) -> Result<(), SpecError> {
        (**self).truncate_context(rows)
    }
}
