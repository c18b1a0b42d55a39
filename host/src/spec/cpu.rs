//! The CPU backend of the loop: [`Target`] and [`Draft`] on the reference models
//! (`flashtree_reference::model`). Plain and slow; the oracle the GPU engine is compared with and
//! the backend for tiny models.
//!
//! Commit/rollback as a real engine does it, on the reference's explicit state: the verify
//! forward computes every node from its parent (KV rows at `n_past + depth`, DeltaNet state and
//! conv window continued from the parent's), leaving the committed state untouched; `commit`
//! appends the KV rows of the accepted path in path order (the compaction), adopts the DeltaNet
//! state and conv window of the path's last node (the window was gathered along its ancestors),
//! and hands the path's feature rows (target layers `target_layer_ids`, concatenated) to the draft.
//!
//! Snapshots: the target clones every DeltaNet layer's conv window and state at the committed
//! position; a restore copies them back and truncates the attention layers' KV rows to it. The
//! draft truncates its per-row context K/V.

use flashtree_reference::model::dflash::{ContextKv, DFlashWeights};
use flashtree_reference::model::state::LayerState;
use flashtree_reference::model::tensor::Matrix;
use flashtree_reference::model::{ForwardOptions, Qwen35State, Qwen35Weights, TreeOutput};

use super::batch::VerifyBatch;
use super::ddtree::{topk_logprobs, DraftTopK};
use super::rule::DecodingRule;
use super::traits::{Draft, Target};
use super::SpecError;

pub use super::features::FeatureRows;

/// Checks that `draft` can run on `target`: same hidden size, target layers in range, mask
/// token inside the vocabulary, a block of at least 2 slots. Names both sides in the error.
pub fn check_pair(target: &Qwen35Weights, draft: &DFlashWeights) -> Result<(), SpecError> {
    let t = &target.hparams;
    check_pair_shape(t.n_embd, t.n_layer(), t.n_vocab, draft)
}

/// [`check_pair`] against a target given by its hidden size, layer count and vocabulary (a
/// target that is not loaded on the host, e.g. the GPU engine's).
pub fn check_pair_shape(n_embd: usize, n_layer: usize, n_vocab: usize, draft: &DFlashWeights) -> Result<(), SpecError> {
    let d = &draft.hparams;
    let bad = |m: String| Err(SpecError::Config(m));
    if d.n_embd != n_embd {
        return bad(format!("draft hidden size {} differs from the target's {n_embd}", d.n_embd));
    }
    if let Some(&l) = d.target_layer_ids.iter().find(|&&l| l >= n_layer) {
        return bad(format!("draft target layer {l} is out of range: the target has {n_layer} layers"));
    }
    if d.mask_token_id as usize >= n_vocab {
        return bad(format!("draft mask token {} is outside the target vocabulary of {n_vocab}", d.mask_token_id));
    }
    if d.block_size < 2 {
        return bad(format!("draft block size {} < 2", d.block_size));
    }
    draft.validate().map_err(|e| SpecError::Config(format!("draft: {e}")))
}

/// The reference target with its committed state.
pub struct CpuTarget<'w> {
    w: &'w Qwen35Weights,
    state: Qwen35State,
    capture: Vec<usize>,
    last: Option<TreeOutput>,
    /// The saved position and, per DeltaNet layer in layer order, its conv window and state.
    snapshot: Option<RecurrentSnapshot>,
}

/// The recurrent part of a [`Qwen35State`] at position `at`.
struct RecurrentSnapshot {
    at: usize,
    /// `(conv, s)` of each DeltaNet layer, in layer order.
    layers: Vec<(Vec<f32>, Vec<f32>)>,
}

impl<'w> CpuTarget<'w> {
    /// Empty state; `capture` = the target layers whose outputs feed the draft.
    pub fn new(w: &'w Qwen35Weights, capture: Vec<usize>) -> Self {
        Self { w, state: Qwen35State::new(&w.hparams), capture, last: None, snapshot: None }
    }

    fn rows(&self, captured: &[Vec<Vec<f32>>], nodes: impl Iterator<Item = usize>) -> FeatureRows {
        nodes.map(|i| captured.iter().flat_map(|c| c[i].iter().copied()).collect()).collect()
    }
}

impl Target for CpuTarget<'_> {
    type Features = FeatureRows;

    fn committed(&self) -> usize {
        self.state.n_past
    }

    fn reset(&mut self) -> Result<(), SpecError> {
        self.state = Qwen35State::new(&self.w.hparams);
        self.last = None;
        self.snapshot = None;
        Ok(())
    }

    /// One chain forward over `tokens` (the reference's default, chunked DeltaNet form, as a
    /// prompt has always run), appended to the committed state.
    fn extend(&mut self, tokens: &[u32], rule: DecodingRule) -> Result<(u32, FeatureRows), SpecError> {
        self.last = None;
        let opts = ForwardOptions { capture_layers: self.capture.clone(), ..Default::default() };
        let out = self.w.forward(&mut self.state, tokens, &opts).map_err(SpecError::backend)?;
        let last = out.logits.last().ok_or_else(|| SpecError::Config("extend: no tokens".into()))?;
        // The pick occupies the position after the last new token.
        Ok((rule.pick(last, self.state.n_past)?, self.rows(&out.captured, 0..tokens.len())))
    }

    fn verify(&mut self, batch: &VerifyBatch, rule: DecodingRule) -> Result<Vec<u32>, SpecError> {
        if batch.committed() != self.state.n_past {
            return Err(SpecError::Config(format!(
                "verify batch on {} committed tokens, the target holds {}",
                batch.committed(),
                self.state.n_past
            )));
        }
        let out = self
            .w
            .forward_tree(&self.state, batch.tokens(), batch.parents(), &self.capture)
            .map_err(SpecError::backend)?;
        // The exact tree rule (rule.rs): each node's pick from its own logits, with the stream of
        // the position after the node.
        let posterior = out.logits.iter().zip(batch.positions()).map(|(l, &p)| rule.pick(l, p + 1)).collect();
        self.last = Some(out);
        posterior
    }

    fn commit(&mut self, _batch: &VerifyBatch, path: &[usize]) -> Result<FeatureRows, SpecError> {
        let out = self.last.take().ok_or_else(|| SpecError::Config("commit without a verify".into()))?;
        self.state.commit_path(&out, path).map_err(SpecError::backend)?;
        Ok(self.rows(&out.captured, path.iter().copied()))
    }

    fn supports_snapshots(&self) -> bool {
        true
    }

    fn save_snapshot(&mut self) -> Result<(), SpecError> {
        let layers = self
            .state
            .layers
            .iter()
            .filter_map(|l| match l {
                LayerState::DeltaNet { conv, s } => Some((conv.clone(), s.clone())),
                LayerState::Attention { .. } => None,
            })
            .collect();
        self.snapshot = Some(RecurrentSnapshot { at: self.state.n_past, layers });
        Ok(())
    }

    fn restore_snapshot(&mut self) -> Result<usize, SpecError> {
        let snap = self.snapshot.as_ref().ok_or_else(|| SpecError::Config("restore: no snapshot saved".into()))?;
        let at = snap.at;
        if at > self.state.n_past {
            return Err(SpecError::Config(format!(
                "restore: the snapshot at position {at} lies past the {} committed tokens",
                self.state.n_past
            )));
        }
        let mut saved = snap.layers.iter();
        for layer in &mut self.state.layers {
            match layer {
                LayerState::Attention { k, v } => {
                    k.truncate(at);
                    v.truncate(at);
                }
                LayerState::DeltaNet { conv, s } => {
                    let (c, st) = saved.next().ok_or_else(|| {
                        SpecError::Config("restore: the snapshot holds fewer DeltaNet layers than the model".into())
                    })?;
                    conv.clone_from(c);
                    s.clone_from(st);
                }
            }
        }
        self.state.n_past = at;
        self.last = None;
        Ok(at)
    }
}

/// The reference DFlash draft, using the target's embedding and LM head. Incremental: each
/// committed token's context K/V (every layer) is computed once, when its feature row arrives
/// ([`DFlashWeights::context_kv`]); a round runs only the block ([`DFlashWeights::forward_cached`]),
/// bitwise what [`DFlashWeights::forward`] gives over the whole context.
pub struct CpuDraft<'w> {
    d: &'w DFlashWeights,
    /// The target's `[n_vocab, H]` token embedding and LM head.
    embd: &'w Matrix,
    head: &'w Matrix,
    /// Every layer's K/V of each committed token's context row, computed once when the row
    /// arrives (position order from 0).
    ctx: Vec<ContextKv>,
    /// At most this many most recent context rows are attended by every layer (sliding layers
    /// further keep their own window). Default: all of them, as the z-lab drafts' full layers
    /// were trained and as the GPU draft attends; a smaller value is z-lab's opt-in runtime
    /// window, an approximation the draft was not trained with.
    pub window: usize,
}

impl<'w> CpuDraft<'w> {
    /// A draft with an empty context. Call [`check_pair`] first.
    pub fn new(d: &'w DFlashWeights, target: &'w Qwen35Weights) -> Self {
        Self::with_target_matrices(d, &target.token_embd, target.lm_head())
    }

    /// A draft with an empty context over the target's token embedding and LM head alone (both
    /// `[n_vocab, H]`; the draft checks their shapes on every pass). Call [`check_pair_shape`]
    /// first.
    pub fn with_target_matrices(d: &'w DFlashWeights, embd: &'w Matrix, head: &'w Matrix) -> Self {
        Self { d, embd, head, ctx: Vec::new(), window: usize::MAX }
    }
}

impl Draft for CpuDraft<'_> {
    type Features = FeatureRows;

    fn depths(&self) -> usize {
        self.d.hparams.block_size - 1
    }

    fn reset(&mut self) -> Result<(), SpecError> {
        self.ctx.clear();
        Ok(())
    }

    fn supports_truncation(&self) -> bool {
        true
    }

    fn truncate_context(&mut self, rows: usize) -> Result<(), SpecError> {
        if rows > self.ctx.len() {
            return Err(SpecError::Config(format!(
                "truncate: the draft holds {} context rows, not {rows}",
                self.ctx.len()
            )));
        }
        self.ctx.truncate(rows);
        Ok(())
    }

    fn extend_context(&mut self, new: &FeatureRows) -> Result<bool, SpecError> {
        let kv = self.d.context_kv_rows(new, self.ctx.len()).map_err(SpecError::backend)?;
        self.ctx.extend(kv);
        Ok(true)
    }

    fn propose(&mut self, new: &FeatureRows, bonus: u32, k: usize) -> Result<DraftTopK, SpecError> {
        self.extend_context(new)?;
        let hp = &self.d.hparams;
        let start = self.ctx.len();
        let from = start.saturating_sub(self.window);
        let mut block = vec![hp.mask_token_id; hp.block_size];
        block[0] = bonus;
        let out = self
            .d
            .forward_cached(self.embd, self.head, &self.ctx[from..], from, &block, start)
            .map_err(SpecError::backend)?;
        let vocab = self.head.rows;
        let flat: Vec<f32> = out.logits.concat();
        topk_logprobs(&flat, vocab, k)
    }
}
