//! [`OracleDraft`]: a draft with a controlled acceptance length, for measuring the speculative
//! loop's speed at a chosen acceptance (issue "GPU speculative decoding": the projection from
//! measured round times checked by a run).
//!
//! It wraps a real draft, runs it every round (so a round costs what it would with that draft)
//! and then replaces its proposals: at each of the first `cap` depths the rank-0 token becomes
//! the token a recorded greedy run of the target put at that position (log-prob −0.001, the
//! draft's own tokens after it); deeper depths keep the draft's proposals. With greedy
//! verification and a recorded continuation of the same target, every round then accepts
//! `min(cap, depths, budget)` drafted tokens plus the bonus — unless the draft's own top ranks
//! happen to continue the run further. The output is still the target's (the loop is lossless
//! whatever a draft proposes).

use super::ddtree::DraftTopK;
use super::stats::PhaseTimes;
use super::traits::{Draft, FeatureSpan};
use super::SpecError;

/// A draft proposing a recorded continuation at its first `cap` depths.
pub struct OracleDraft<D> {
    /// The draft run every round (its cost is the round's draft cost).
    pub inner: D,
    /// The prompt followed by the target's recorded greedy continuation.
    seq: Vec<u32>,
    cap: usize,
    /// Committed tokens so far (the position of the next bonus token).
    pos: usize,
}

impl<D> OracleDraft<D> {
    /// `seq` = the prompt followed by the target's greedy continuation of it; `cap` = how many
    /// depths per round follow `seq`.
    pub fn new(inner: D, seq: Vec<u32>, cap: usize) -> Self {
        OracleDraft { inner, seq, cap, pos: 0 }
    }
}

impl<D: Draft> Draft for OracleDraft<D>
where
    D::Features: FeatureSpan,
{
    type Features = D::Features;

    fn depths(&self) -> usize {
        self.inner.depths()
    }

    fn reset(&mut self) -> Result<(), SpecError> {
        self.pos = 0;
        self.inner.reset()
    }

    fn propose(&mut self, new_context: &D::Features, bonus: u32, k: usize) -> Result<DraftTopK, SpecError> {
        self.pos += new_context.rows();
        let real = self.inner.propose(new_context, bonus, k)?;
        let (depths, k) = (real.depths(), real.k());
        let mut tokens = Vec::with_capacity(depths * k);
        let mut logprobs = Vec::with_capacity(depths * k);
        for d in 0..depths {
            // Depth `d` (0-based) drafts the token at position `pos + 1 + d`.
            let oracle = (d < self.cap).then(|| self.seq.get(self.pos + 1 + d).copied()).flatten();
            match oracle {
                Some(t) => {
                    tokens.push(t);
                    logprobs.push(-1e-3);
                    let others =
                        (0..k).map(|r| (real.token(d + 1, r), real.logprob(d + 1, r))).filter(|&(x, _)| x != t);
                    for (i, (x, _)) in others.take(k - 1).enumerate() {
                        tokens.push(x);
                        logprobs.push(-20.0 - i as f32);
                    }
                    // A row the draft filled with `t` and duplicates only: pad with −inf.
                    while tokens.len() < (d + 1) * k {
                        tokens.push(t);
                        logprobs.push(f32::NEG_INFINITY);
                    }
                }
                None => {
                    for r in 0..k {
                        tokens.push(real.token(d + 1, r));
                        logprobs.push(real.logprob(d + 1, r));
                    }
                }
            }
        }
        DraftTopK::new(depths, k, tokens, logprobs)
    }

    fn extend_context(&mut self, new_context: &D::Features) -> Result<bool, SpecError> {
        let appended = self.inner.extend_context(new_context)?;
        if appended {
            self.pos += new_context.rows();
        }
        Ok(appended)
    }

    fn device_times(&mut self) -> Result<Option<PhaseTimes>, SpecError> {
        self.inner.device_times()
    }

    fn supports_truncation(&self) -> bool {
        self.inner.supports_truncation()
    }

    fn truncate_context(&mut self, rows: usize) -> Result<(), SpecError> {
        self.inner.truncate_context(rows)?;
        self.pos = rows;
        Ok(())
    }
}
