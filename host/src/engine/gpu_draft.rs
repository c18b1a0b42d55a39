//! [`GpuDraft`]: the spec loop's [`Draft`] on the GPU ([`DraftEngine`]).
//!
//! Features arrive as host rows (what [`super::GpuTarget::with_capture`] returns today: one
//! upload per round of the accepted path's rows); the context pass, the block forward and the
//! top-K run on the device, and the `(B−1)·K` top-K entries are the round's only download.

use super::draft::DraftEngine;
use crate::spec::cpu::FeatureRows;
use crate::spec::{Draft, DraftTopK, SpecError};

/// The GPU draft as a [`Draft`].
pub struct GpuDraft {
    pub engine: DraftEngine,
}

impl GpuDraft {
    /// A draft with an empty context.
    pub fn new(mut engine: DraftEngine) -> Self {
        engine.reset();
        GpuDraft { engine }
    }
}

impl Draft for GpuDraft {
    type Features = FeatureRows;

    fn depths(&self) -> usize {
        self.engine.cfg.block_size - 1
    }

    fn propose(&mut self, new_context: &FeatureRows, bonus: u32, k: usize) -> Result<DraftTopK, SpecError> {
        let fl = self.engine.feature_len();
        if let Some((i, r)) = new_context.iter().enumerate().find(|(_, r)| r.len() != fl) {
            return Err(SpecError::Config(format!(
                "feature row {i} has {} values, the draft takes {fl} (the target's layer taps)",
                r.len()
            )));
        }
        let flat: Vec<f32> = new_context.concat();
        self.engine.extend_context(&flat).map_err(SpecError::backend)?;
        let k = k.clamp(1, super::DRAFT_MAX_K);
        let (tokens, logprobs) = self.engine.propose(bonus, k).map_err(SpecError::backend)?;
        DraftTopK::new(self.depths(), k, tokens, logprobs)
    }
}
