//! Device time of the spec loop's target phases: CUDA events recorded around each prefill
//! (extend) and verify forward on the engine's main stream and around each commit's KV
//! compaction and DeltaNet replay on the stream they run on (the side stream, beside the draft
//! step, when a draft reads the feature store: `Engine::commit_timed`), read only after a host
//! sync the loop makes anyway (the verify's argmax download), so timing adds no sync to a round.

use crate::gpu::{Gpu, GpuError, GpuTimer};
use crate::spec::PhaseTimes;

/// A phase the target times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// `extend` / `prefill`: the chunked forwards and their commits.
    Prefill = 0,
    /// The verify forward (up to its argmax).
    Verify = 1,
    /// The commit of the accepted path: KV compaction and DeltaNet replay (the feature rows'
    /// copies, a few microseconds on the main stream, are not in it).
    Commit = 2,
}

/// One event pair per phase and the device time accumulated so far.
#[derive(Default)]
pub struct PhaseClock {
    timers: [Option<GpuTimer>; 3],
    /// The pair was recorded and not read yet.
    pending: [bool; 3],
    ms: [f64; 3],
}

impl PhaseClock {
    /// Records the start of `phase` (an unread earlier pair of the same phase is read first,
    /// which waits for it; the loop always syncs in between, so it does not wait there).
    pub fn start(&mut self, gpu: &Gpu, phase: Phase) -> Result<(), GpuError> {
        let p = phase as usize;
        if self.pending[p] {
            self.read(p)?;
        }
        let t = match &mut self.timers[p] {
            Some(t) => t,
            slot => slot.insert(GpuTimer::new(gpu)?),
        };
        t.start(gpu)
    }

    /// Records the end of `phase` (after its last launch).
    pub fn stop(&mut self, gpu: &Gpu, phase: Phase) -> Result<(), GpuError> {
        let p = phase as usize;
        if let Some(t) = &self.timers[p] {
            t.stop(gpu)?;
            self.pending[p] = true;
        }
        Ok(())
    }

    fn read(&mut self, p: usize) -> Result<(), GpuError> {
        if let Some(t) = &self.timers[p] {
            self.ms[p] += t.elapsed_ms()? as f64;
        }
        self.pending[p] = false;
        Ok(())
    }

    /// Reads every recorded pair: call right after a host sync (then nothing waits).
    pub fn collect(&mut self) -> Result<(), GpuError> {
        (0..3).try_for_each(|p| if self.pending[p] { self.read(p) } else { Ok(()) })
    }

    /// The time accumulated since the last call (waits for any unread pair), as the loop's phases.
    pub fn take(&mut self) -> Result<PhaseTimes, GpuError> {
        self.collect()?;
        let d = |ms: f64| std::time::Duration::from_secs_f64(ms.max(0.0) * 1e-3);
        let t =
            PhaseTimes { prefill: d(self.ms[0]), verify: d(self.ms[1]), commit: d(self.ms[2]), ..Default::default() };
        self.ms = [0.0; 3];
        Ok(t)
    }
}
