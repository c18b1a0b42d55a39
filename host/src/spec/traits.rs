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
}

impl<T> FeatureSpan for Vec<T> {
    fn append(&mut self, later: Self) -> Result<(), SpecError> {
        self.extend(later);
        Ok(())
    }

    fn rows(&self) -> usize {
        self.len()
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

    /// Device time of its passes since the last call (reported as the `draft` phase); `None`
    /// for a host draft.
    fn device_times(&mut self) -> Result<Option<PhaseTimes>, SpecError> {
        Ok(None)
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
    fn device_times(&mut self) -> Result<Option<PhaseTimes>, SpecError> {
        (**self).device_times()
    }
}
