//! What the loop needs from a target and a draft. A backend (CPU reference, GPU engine) owns its
//! caches; the loop only moves token ids, trees and opaque feature rows between them.
//!
//! Cache protocol: at the start of a round the target holds exactly the committed tokens
//! (`committed` of them, positions `0..committed`); the pending root `b` is not in its caches.
//! `verify` processes the flat [`VerifyBatch`] of the round's tree (`N+1` nodes at positions
//! `committed + depth`, ancestor masks); `commit` keeps the
//! rows/state of the accepted path only (KV rows compacted in path order to slots
//! `committed..committed+|path|`, recurrent state of the last path node, conv window along the
//! path), so afterwards the target holds `committed + |path|` tokens.

use super::batch::VerifyBatch;
use super::ddtree::DraftTopK;
use super::rule::DecodingRule;
use super::SpecError;

/// The model whose output is reproduced exactly.
pub trait Target {
    /// Feature rows captured for the draft (per token, in position order).
    type Features;

    /// The most nodes one `verify` takes (the root included); the loop refuses a budget that
    /// would exceed it before any work. Unlimited unless the backend says otherwise.
    fn max_nodes(&self) -> usize {
        usize::MAX
    }

    /// Tokens in the caches (the positions `0..committed`).
    fn committed(&self) -> usize;

    /// Runs `prompt` (non-empty) into empty caches. Returns the first generated token (picked by
    /// `rule`; pending, not in the caches) and the features of the prompt rows.
    fn prefill(&mut self, prompt: &[u32], rule: DecodingRule) -> Result<(u32, Self::Features), SpecError>;

    /// One forward over `batch` (node 0 = the pending token; `batch.committed()` equals
    /// [`Target::committed`]). Returns the decoding-rule token after each node (`batch.len()`
    /// entries), picked by `rule` ([`SpecError::Unsupported`] for a rule the backend lacks).
    /// The committed caches are not modified.
    fn verify(&mut self, batch: &VerifyBatch, rule: DecodingRule) -> Result<Vec<u32>, SpecError>;

    /// Keeps the state of the nodes `path` of the last verify's `batch` (root first, each the
    /// parent of the next, as returned by the walk — or a prefix of that) and drops every other
    /// node. Returns the features of the path rows, in path order.
    fn commit(&mut self, batch: &VerifyBatch, path: &[usize]) -> Result<Self::Features, SpecError>;
}

/// The block drafter: one pass over `[b, MASK × (S−1)]` gives `L = S − 1` distributions.
pub trait Draft {
    /// Feature rows it conditions on (the target's).
    type Features;

    /// `L`: the number of drafted positions per round.
    fn depths(&self) -> usize;

    /// Appends `new_context` (the features of the tokens committed since the last call) to the
    /// draft's context, then drafts the block rooted at `bonus`. Returns the top-`k` log-probs
    /// per position (`k` is clamped to the vocabulary).
    fn propose(&mut self, new_context: &Self::Features, bonus: u32, k: usize) -> Result<DraftTopK, SpecError>;
}
