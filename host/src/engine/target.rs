//! [`GpuTarget`]: the spec loop's [`Target`] on the GPU engine.
//!
//! `extend` (and so `prefill`) runs tokens in chains of ≤ 32 through the one forward; `verify`
//! is one forward over the round's [`VerifyBatch`]; `commit` keeps the accepted path. The only
//! host syncs of a round are reading the argmax tokens of the verify and writing the path.
//!
//! Draft features stay on the device: with [`GpuTarget::with_capture`] every forward copies the
//! outputs of the draft's target layers, and every commit appends the kept rows to the engine's
//! feature store; `extend` / `commit` return a [`DeviceFeatures`] row range. A host draft reads
//! the rows through [`GpuTarget::feature_source`] (`spec::HostDraft`); without capture the
//! ranges name rows that are not stored (AR needs none).

use super::clock::{Phase, PhaseClock};
use super::features::{DeviceFeatures, EngineFeatures};
use super::forward::Engine;
use crate::spec::{DecodingRule, PhaseTimes, SpecError, Target, VerifyBatch};

/// The GPU engine as a [`Target`].
pub struct GpuTarget<'e> {
    pub engine: &'e mut Engine,
    /// Device time of prefill / verify / commit ([`Target::device_times`]).
    clock: PhaseClock,
}

impl<'e> GpuTarget<'e> {
    /// The engine as it is (AR: no capture needed).
    pub fn new(engine: &'e mut Engine) -> Self {
        GpuTarget { engine, clock: PhaseClock::default() }
    }

    /// Captures the outputs of `layers` (the draft's target layers) into the engine's feature
    /// store from now on.
    pub fn with_capture(engine: &'e mut Engine, layers: &[usize]) -> Result<Self, SpecError> {
        engine.set_capture(layers).map_err(SpecError::backend)?;
        Ok(GpuTarget::new(engine))
    }

    /// The reader a host draft downloads its rows through (an error without capture).
    pub fn feature_source(&self) -> Result<EngineFeatures, SpecError> {
        self.engine.feature_source().ok_or_else(|| {
            SpecError::Config("the GPU target captures no layers for a draft (use GpuTarget::with_capture)".into())
        })
    }
}

impl Target for GpuTarget<'_> {
    type Features = DeviceFeatures;

    fn max_nodes(&self) -> usize {
        kernel_abi::MAX_NODES as usize
    }

    fn committed(&self) -> usize {
        self.engine.n_past()
    }

    fn reset(&mut self) -> Result<(), SpecError> {
        self.engine.reset().map_err(SpecError::backend)
    }

    /// Chains of at most 32 tokens through the one forward, each committed whole (which appends
    /// its feature rows to the store).
    fn extend(&mut self, tokens: &[u32], rule: DecodingRule) -> Result<(u32, DeviceFeatures), SpecError> {
        // The engine's only rule is the device argmax (no device sampler yet).
        if !rule.is_greedy() {
            return Err(SpecError::unsupported(rule, "the GPU engine"));
        }
        if tokens.is_empty() {
            return Err(SpecError::Config("extend: no tokens".into()));
        }
        let e = &mut *self.engine;
        let first_row = e.n_past();
        self.clock.start(&e.gpu, Phase::Prefill).map_err(SpecError::backend)?;
        let next = e.prefill(tokens).map_err(SpecError::backend)?;
        self.clock.stop(&e.gpu, Phase::Prefill).map_err(SpecError::backend)?;
        if next == u32::MAX {
            return Err(SpecError::Config("the target's logits after the last token are all NaN".into()));
        }
        Ok((next, DeviceFeatures { first_row, rows: tokens.len() }))
    }

    fn verify(&mut self, batch: &VerifyBatch, rule: DecodingRule) -> Result<Vec<u32>, SpecError> {
        if !rule.is_greedy() {
            return Err(SpecError::unsupported(rule, "the GPU engine"));
        }
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
        let b = super::batch::node_batch(e.n_past(), batch.tokens(), batch.parents(), e.cfg.vocab_size, e.ctx())
            .map_err(SpecError::backend)?;
        self.clock.start(&e.gpu, Phase::Verify).map_err(SpecError::backend)?;
        e.forward(&b).map_err(SpecError::backend)?;
        self.clock.stop(&e.gpu, Phase::Verify).map_err(SpecError::backend)?;
        // The round's sync: everything recorded before it has finished, so reading it is free.
        let out = e.argmax_tokens(batch.len()).map_err(SpecError::backend)?;
        self.clock.collect().map_err(SpecError::backend)?;
        if let Some(i) = out.iter().position(|&t| t == u32::MAX) {
            return Err(SpecError::Config(format!("node {i}: the target's logits are all NaN")));
        }
        Ok(out)
    }

    fn commit(&mut self, _batch: &VerifyBatch, path: &[usize]) -> Result<DeviceFeatures, SpecError> {
        let first_row = self.engine.n_past();
        self.clock.start(&self.engine.gpu, Phase::Commit).map_err(SpecError::backend)?;
        self.engine.commit(path).map_err(SpecError::backend)?;
        self.clock.stop(&self.engine.gpu, Phase::Commit).map_err(SpecError::backend)?;
        Ok(DeviceFeatures { first_row, rows: path.len() })
    }

    /// The device time since the last call (waits for the last commit's events).
    fn device_times(&mut self) -> Result<Option<PhaseTimes>, SpecError> {
        self.clock.take().map(Some).map_err(SpecError::backend)
    }
}
