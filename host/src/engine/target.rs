//! [`GpuTarget`]: the spec loop's [`Target`] on the GPU engine.
//!
//! `prefill` runs the prompt in chains of ≤ 32 through the one forward; `verify` is one forward
//! over the flattened tree; `commit` keeps the accepted path. The only host syncs of a round are
//! reading the argmax tokens of the verify and writing the path.
//!
//! Draft features: with [`GpuTarget::with_capture`] the engine copies the outputs of the draft's
//! target layers on the device every forward, and `prefill` / `commit` return the rows of the
//! committed tokens (one host copy per round; the draft still runs on the CPU, so the CLI keeps
//! speculative modes on the CPU backend until the draft runs on the GPU). Without capture the
//! rows are empty (AR).

use super::batch::{chain_batch, node_batch};
use super::forward::Engine;
use crate::spec::cpu::FeatureRows;
use crate::spec::{DecodingRule, SpecError, Target, VerifyBatch};

/// The GPU engine as a [`Target`].
pub struct GpuTarget<'e> {
    pub engine: &'e mut Engine,
}

impl<'e> GpuTarget<'e> {
    /// AR only: no features.
    pub fn new(engine: &'e mut Engine) -> Self {
        GpuTarget { engine }
    }

    /// Returns as features the concatenated outputs of `layers` (the draft's target layers).
    pub fn with_capture(engine: &'e mut Engine, layers: &[usize]) -> Result<Self, SpecError> {
        engine.set_capture(layers).map_err(SpecError::backend)?;
        Ok(GpuTarget { engine })
    }

    /// Feature rows of nodes `rows` of the last forward: `concat_c captured[c][i]`.
    fn rows(&self, n: usize, rows: impl Iterator<Item = usize>) -> Result<FeatureRows, SpecError> {
        if self.engine.capture_len() == 0 {
            return Ok(Vec::new());
        }
        let d = self.engine.cfg.embedding_length;
        let cap = self.engine.captured(n).map_err(SpecError::backend)?;
        Ok(rows.map(|i| cap.iter().flat_map(|c| c[i * d..(i + 1) * d].iter().copied()).collect()).collect())
    }
}

impl Target for GpuTarget<'_> {
    type Features = FeatureRows;

    fn max_nodes(&self) -> usize {
        kernel_abi::MAX_NODES as usize
    }

    fn committed(&self) -> usize {
        self.engine.n_past()
    }

    fn reset(&mut self) -> Result<(), SpecError> {
        self.engine.reset().map_err(SpecError::backend)
    }

    /// Chains of at most 32 tokens through the one forward, each committed whole.
    fn extend(&mut self, tokens: &[u32], rule: DecodingRule) -> Result<(u32, FeatureRows), SpecError> {
        // The engine's only rule is the device argmax.
        let DecodingRule::Greedy = rule;
        if tokens.is_empty() {
            return Err(SpecError::Config("extend: no tokens".into()));
        }
        // Keeping each chunk's feature rows before its commit.
        let mut features = Vec::with_capacity(tokens.len());
        let mut first = None;
        let chunks = tokens.len().div_ceil(32);
        for (c, chunk) in tokens.chunks(32).enumerate() {
            let e = &mut *self.engine;
            let b = chain_batch(e.n_past(), chunk, e.cfg.vocab_size, e.ctx()).map_err(SpecError::backend)?;
            e.forward(&b).map_err(SpecError::backend)?;
            if c + 1 == chunks {
                first = e.argmax_tokens(chunk.len()).map_err(SpecError::backend)?.last().copied();
            }
            features.extend(self.rows(chunk.len(), 0..chunk.len())?);
            let path: Vec<usize> = (0..chunk.len()).collect();
            self.engine.commit(&path).map_err(SpecError::backend)?;
        }
        let t = first.ok_or_else(|| SpecError::Config("extend: no tokens".into()))?;
        Ok((t, features))
    }

    fn verify(&mut self, batch: &VerifyBatch, rule: DecodingRule) -> Result<Vec<u32>, SpecError> {
        let DecodingRule::Greedy = rule;
        let e = &mut *self.engine;
        if batch.committed() != e.n_past() {
            return Err(SpecError::Config(format!(
                "verify batch on {} committed tokens, the engine holds {}",
                batch.committed(),
                e.n_past()
            )));
        }
        // The engine's `NodeBatch` (≤ 32 nodes, 32-bit masks) recomputes depths and masks from
        // the parents and checks them against its limits and the context.
        let b = node_batch(e.n_past(), batch.tokens(), batch.parents(), e.cfg.vocab_size, e.ctx())
            .map_err(SpecError::backend)?;
        e.forward(&b).map_err(SpecError::backend)?;
        let out = e.argmax_tokens(batch.len()).map_err(SpecError::backend)?;
        if let Some(i) = out.iter().position(|&t| t == u32::MAX) {
            return Err(SpecError::Config(format!("node {i}: the target's logits are all NaN")));
        }
        Ok(out)
    }

    fn commit(&mut self, batch: &VerifyBatch, path: &[usize]) -> Result<FeatureRows, SpecError> {
        let rows = self.rows(batch.len(), path.iter().copied())?;
        self.engine.commit(path).map_err(SpecError::backend)?;
        Ok(rows)
    }
}
