//! [`GpuDraft`]: the spec loop's [`Draft`] on the GPU ([`DraftEngine`]), reading its context rows
//! straight from the target engine's feature store.
//!
//! Each round: the accepted path's rows (a [`DeviceFeatures`] range of the store, written by the
//! target's commit) go through the draft's context pass on the device, then the block forward
//! and the top-K; the `(B−1)·K` top-K entries are the round's only download.

use super::draft::DraftEngine;
use super::features::{DeviceFeatures, EngineFeatures};
use crate::gpu::GpuTimer;
use crate::spec::{Draft, DraftTopK, PhaseTimes, SpecError};

/// The GPU draft as a [`Draft`] of a GPU target (features = rows of its store).
pub struct GpuDraft {
    pub engine: DraftEngine,
    store: EngineFeatures,
    /// Device ms of [`Draft::extend_context`] since the last [`Draft::device_times`].
    context_ms: f64,
}

impl GpuDraft {
    /// A draft with an empty context reading `store` (from [`super::GpuTarget::feature_source`]:
    /// the target must capture the draft's `target_layer_ids`, in order).
    pub fn new(mut engine: DraftEngine, store: EngineFeatures) -> Result<Self, SpecError> {
        if store.0.width() != engine.feature_len() {
            return Err(SpecError::Config(format!(
                "the target's feature rows hold {} values, the draft takes {} (capture its target_layer_ids)",
                store.0.width(),
                engine.feature_len()
            )));
        }
        engine.reset();
        Ok(GpuDraft { engine, store, context_ms: 0.0 })
    }

    /// Enqueues the context pass over the store rows `new` (which must follow the rows held).
    fn append(&mut self, new: &DeviceFeatures) -> Result<(), SpecError> {
        if new.rows > 0 && new.first_row != self.engine.context_len() {
            return Err(SpecError::Config(format!(
                "feature rows {}..+{}: the draft holds {} context rows (rows must follow them)",
                new.first_row,
                new.rows,
                self.engine.context_len()
            )));
        }
        let w = self.store.0.width();
        let gpu = self.engine.gpu();
        let rows =
            self.store.0.span(&gpu).sub(new.first_row * w, new.rows * w, "feature rows").map_err(SpecError::backend)?;
        self.engine.extend_context_device(rows, new.rows).map_err(SpecError::backend)
    }
}

impl Draft for GpuDraft {
    type Features = DeviceFeatures;

    fn depths(&self) -> usize {
        self.engine.cfg.block_size - 1
    }

    fn reset(&mut self) -> Result<(), SpecError> {
        self.engine.reset();
        Ok(())
    }

    fn supports_truncation(&self) -> bool {
        true
    }

    /// A position reset: the context K/V rows are append-only.
    fn truncate_context(&mut self, rows: usize) -> Result<(), SpecError> {
        self.engine.truncate_context(rows).map_err(SpecError::backend)
    }

    fn propose(&mut self, new: &DeviceFeatures, bonus: u32, k: usize) -> Result<DraftTopK, SpecError> {
        self.engine.start_timing().map_err(SpecError::backend)?;
        self.append(new)?;
        let k = k.clamp(1, super::DRAFT_MAX_K);
        let (tokens, logprobs) = self.engine.propose(bonus, k).map_err(SpecError::backend)?;
        DraftTopK::new(self.depths(), k, tokens, logprobs)
    }

    /// Appends the rows and waits for them (once per prompt: the sync reads their device time).
    fn extend_context(&mut self, new: &DeviceFeatures) -> Result<bool, SpecError> {
        let gpu = self.engine.gpu();
        let timer = GpuTimer::new(&gpu).map_err(SpecError::backend)?;
        timer.start(&gpu).map_err(SpecError::backend)?;
        self.append(new)?;
        timer.stop(&gpu).map_err(SpecError::backend)?;
        self.context_ms += timer.elapsed_ms().map_err(SpecError::backend)? as f64;
        Ok(true)
    }

    /// Device time of the draft's context passes, block passes and top-K in the rounds
    /// (`draft`; CUDA events read after each propose's own sync) and of the prompts' context
    /// passes ([`Draft::extend_context`], `prefill`).
    fn device_times(&mut self) -> Result<Option<PhaseTimes>, SpecError> {
        let ms = |ms: f64| std::time::Duration::from_secs_f64(ms * 1e-3);
        let draft = ms(self.engine.take_device_ms());
        let prefill = ms(std::mem::take(&mut self.context_ms));
        Ok(Some(PhaseTimes { draft, prefill, ..Default::default() }))
    }
}
