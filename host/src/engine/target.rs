//! [`GpuTarget`]: the spec loop's [`Target`] on the GPU engine.
//!
//! `extend` (and so `prefill`) runs tokens in chains of ≤ 32 through the one forward; `verify`
//! is one forward over the round's [`VerifyBatch`]; `commit` keeps the accepted path. The only
//! host syncs of a round are reading the verify's tokens and writing the path. The tokens are
//! the device argmax (greedy) or, for [`DecodingRule::Sample`] at T > 0, one `sample_rows` draw
//! per node on the device (`Engine::sample_nodes`: the definition the CPU backend uses, so a
//! seed gives the same tokens on both up to the backends' logits).
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
use kernel_abi::sampling::SampleRule;

/// Why a node got no token (the argmax's and the sampler's `u32::MAX`).
const NOTHING_TO_PICK: &str = "no entry to pick (all NaN, or all NaN / −∞ when sampling)";

/// The device's form of a rule: `None` for the argmax (greedy, or sampling at T = 0: the
/// engine's argmax is the same pick), the checked parameters of `sample_rows` otherwise.
fn device_rule(rule: DecodingRule) -> Result<Option<SampleRule>, SpecError> {
    if rule.is_greedy() {
        return Ok(None);
    }
    rule.validate()?;
    match rule {
        DecodingRule::Sample { temperature, top_k, top_p, min_p, seed } => {
            Ok(Some(SampleRule { temperature, top_k, top_p, min_p, seed }))
        }
        _ => Err(SpecError::unsupported(rule, "the GPU engine")),
    }
}

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

    /// Chains of at most 32 tokens (one matmul launch wide) through the one forward, each
    /// committed whole (which appends its feature rows to the store).
    fn extend(&mut self, tokens: &[u32], rule: DecodingRule) -> Result<(u32, DeviceFeatures), SpecError> {
        let sampling = device_rule(rule)?;
        if tokens.is_empty() {
            return Err(SpecError::Config("extend: no tokens".into()));
        }
        let e = &mut *self.engine;
        let first_row = e.n_past();
        self.clock.start(&e.gpu, Phase::Prefill).map_err(SpecError::backend)?;
        let next = e.prefill_with(tokens, sampling.as_ref()).map_err(SpecError::backend)?;
        self.clock.stop(&e.gpu, Phase::Prefill).map_err(SpecError::backend)?;
        if next == u32::MAX {
            return Err(SpecError::Config(format!("the target's logits after the last token: {NOTHING_TO_PICK}")));
        }
        Ok((next, DeviceFeatures { first_row, rows: tokens.len() }))
    }

    fn verify(&mut self, batch: &VerifyBatch, rule: DecodingRule) -> Result<Vec<u32>, SpecError> {
        let sampling = device_rule(rule)?;
        let e = &mut *self.engine;
        if batch.committed() != e.n_past() {
            return Err(SpecError::Config(format!(
                "verify batch on {} committed tokens, the engine holds {}",
                batch.committed(),
                e.n_past()
            )));
        }
        // The engine's `NodeBatch` (≤ MAX_NODES nodes, 64-bit masks) recomputes depths and masks from
        // the parents and checks them against its limits and the context.
        let b = super::batch::node_batch(e.n_past(), batch.tokens(), batch.parents(), e.cfg.vocab_size, e.ctx())
            .map_err(SpecError::backend)?;
        self.clock.start(&e.gpu, Phase::Verify).map_err(SpecError::backend)?;
        e.forward(&b).map_err(SpecError::backend)?;
        if let Some(r) = &sampling {
            e.sample_nodes(r).map_err(SpecError::backend)?;
        }
        self.clock.stop(&e.gpu, Phase::Verify).map_err(SpecError::backend)?;
        // The round's sync: everything recorded before it has finished, so reading it is free.
        let out = e.argmax_tokens(batch.len()).map_err(SpecError::backend)?;
        self.clock.collect().map_err(SpecError::backend)?;
        if let Some(i) = out.iter().position(|&t| t == u32::MAX) {
            return Err(SpecError::Config(format!("node {i}: the target's logits: {NOTHING_TO_PICK}")));
        }
        Ok(out)
    }

    fn commit(&mut self, _batch: &VerifyBatch, path: &[usize]) -> Result<DeviceFeatures, SpecError> {
        let first_row = self.engine.n_past();
        self.engine.commit_timed(path, Some(&mut self.clock)).map_err(SpecError::backend)?;
        Ok(DeviceFeatures { first_row, rows: path.len() })
    }

    /// The device time since the last call (waits for the last commit's events).
    fn device_times(&mut self) -> Result<Option<PhaseTimes>, SpecError> {
        let mut t = self.clock.take().map_err(SpecError::backend)?;
        t.commit_beside_draft = self.engine.commits_on_side_stream();
        Ok(Some(t))
    }

    fn supports_snapshots(&self) -> bool {
        true
    }

    /// [`Engine::save_snapshot`]: every DeltaNet state and conv window copied on the device.
    fn save_snapshot(&mut self) -> Result<(), SpecError> {
        self.engine.save_snapshot().map_err(SpecError::backend)
    }

    /// [`Engine::restore_snapshot`]: the copies back and `n_past = s`; the KV cache and the
    /// feature store keep their rows before `s`.
    fn restore_snapshot(&mut self) -> Result<usize, SpecError> {
        self.engine.restore_snapshot().map_err(SpecError::backend)
    }
}
