//! Draft features on the host, and the adapter that feeds a host draft from a target that keeps
//! its features elsewhere (the GPU engine's device store).
//!
//! A target's `Features` is whatever it can hand over cheaply: the CPU target returns
//! [`FeatureRows`]; the GPU target returns a row range of its device store. A draft that wants
//! host rows is wrapped in [`HostDraft`], whose [`FeatureSource`] makes the download explicit,
//! so a device draft (issue 23) can read the store directly with no change to the loop.

use super::ddtree::DraftTopK;
use super::stats::PhaseTimes;
use super::traits::Draft;
use super::SpecError;

/// One feature row per token: `concat_l h_l` over the draft's target layers, `[k·H]`.
pub type FeatureRows = Vec<Vec<f32>>;

/// Turns a target's feature handle into host rows (a device-to-host copy for a GPU target).
pub trait FeatureSource {
    /// The target's `Features`.
    type Handle;

    /// The rows `handle` names, in position order.
    fn host_rows(&self, handle: &Self::Handle) -> Result<FeatureRows, SpecError>;
}

/// A host draft (`Features = FeatureRows`) driven by a target whose features are handles: each
/// `propose` downloads the new rows through `source` first (timed as part of the draft phase).
pub struct HostDraft<D, S> {
    /// The host draft.
    pub draft: D,
    /// Where its rows come from.
    pub source: S,
}

impl<D, S> HostDraft<D, S> {
    /// `draft` fed through `source`.
    pub fn new(draft: D, source: S) -> Self {
        Self { draft, source }
    }
}

impl<D, S> Draft for HostDraft<D, S>
where
    D: Draft<Features = FeatureRows>,
    S: FeatureSource,
{
    type Features = S::Handle;

    fn depths(&self) -> usize {
        self.draft.depths()
    }

    fn reset(&mut self) -> Result<(), SpecError> {
        self.draft.reset()
    }

    fn propose(&mut self, new_context: &S::Handle, bonus: u32, k: usize) -> Result<DraftTopK, SpecError> {
        let rows = self.source.host_rows(new_context)?;
        self.draft.propose(&rows, bonus, k)
    }

    fn extend_context(&mut self, new_context: &S::Handle) -> Result<bool, SpecError> {
        let rows = self.source.host_rows(new_context)?;
        self.draft.extend_context(&rows)
    }

    fn device_times(&mut self) -> Result<Option<PhaseTimes>, SpecError> {
        self.draft.device_times()
    }

    fn supports_truncation(&self) -> bool {
        self.draft.supports_truncation()
    }

    fn truncate_context(&mut self, rows: usize) -> Result<(), SpecError> {
        self.draft.truncate_context(rows)
    }
}
