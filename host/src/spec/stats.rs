//! Per-run statistics of the speculative loop.

use std::time::Duration;

/// Wall time per phase of the loop.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PhaseTimes {
    /// Target prefill.
    pub prefill: Duration,
    /// Draft forward + top-K.
    pub draft: Duration,
    /// DDTree build.
    pub build: Duration,
    /// Target verify forward.
    pub verify: Duration,
    /// Walk.
    pub walk: Duration,
    /// Target commit (compaction / state adoption).
    pub commit: Duration,
    /// The commits ran beside the draft steps (on another stream), so `commit` overlaps
    /// `draft` and includes the time the commit's work waited for the draft's.
    pub commit_beside_draft: bool,
}

impl PhaseTimes {
    /// The sum of `a` and `b` phase by phase (`None` when both are).
    pub fn merge(a: Option<PhaseTimes>, b: Option<PhaseTimes>) -> Option<PhaseTimes> {
        match (a, b) {
            (Some(a), Some(b)) => Some(PhaseTimes {
                prefill: a.prefill + b.prefill,
                draft: a.draft + b.draft,
                build: a.build + b.build,
                verify: a.verify + b.verify,
                walk: a.walk + b.walk,
                commit: a.commit + b.commit,
                commit_beside_draft: a.commit_beside_draft || b.commit_beside_draft,
            }),
            (a, b) => a.or(b),
        }
    }

    /// Sum of all phases.
    pub fn total(&self) -> Duration {
        self.prefill + self.draft + self.build + self.verify + self.walk + self.commit
    }
}

/// Why a generation ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum StopReason {
    /// `max_tokens` were generated (also for `max_tokens = 0`).
    #[default]
    MaxTokens,
    /// An EOS token was generated (it is the last output token).
    Eos,
    /// The caller's `on_tokens` answered `ControlFlow::Break` (after that round).
    Caller,
}

impl StopReason {
    /// For messages.
    pub fn name(self) -> &'static str {
        match self {
            StopReason::MaxTokens => "max tokens",
            StopReason::Eos => "end of sequence",
            StopReason::Caller => "stopped by the caller",
        }
    }
}

/// Counters of one generation.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Stats {
    /// Prompt length.
    pub prompt_tokens: usize,
    /// Prompt tokens already in the target's caches from the previous turn (not run again).
    pub reused_tokens: usize,
    /// Generated tokens (including a final EOS).
    pub generated: usize,
    /// Verify rounds.
    pub steps: usize,
    /// `accepted_depth[d]` = rounds whose walk accepted `d` draft nodes (`|path| = d + 1`).
    pub accepted_depth: Vec<u64>,
    /// Rounds whose accepted path left the rank-0 spine (took a non-first-ranked branch).
    pub off_spine_rounds: u64,
    /// Time per phase.
    pub time: PhaseTimes,
    /// Why generation ended.
    pub stop: StopReason,
    /// Device time per phase from the backends' device events (`None` on host-only backends);
    /// `time` is the host's wall time of the same phases.
    pub device: Option<PhaseTimes>,
}

impl Stats {
    /// Records one round's accepted path length `|path|` (≥ 1).
    pub fn record_round(&mut self, path_len: usize, off_spine: bool) {
        let d = path_len.saturating_sub(1);
        if self.accepted_depth.len() <= d {
            self.accepted_depth.resize(d + 1, 0);
        }
        self.accepted_depth[d] += 1;
        self.steps += 1;
        self.off_spine_rounds += off_spine as u64;
    }

    /// Mean acceptance length `τ = mean |path|` (accepted drafts + 1); 0 with no rounds.
    pub fn acceptance_length(&self) -> f64 {
        if self.steps == 0 {
            return 0.0;
        }
        let sum: u64 = self.accepted_depth.iter().enumerate().map(|(d, &n)| (d as u64 + 1) * n).sum();
        sum as f64 / self.steps as f64
    }

    /// Generated tokens per second of decode time (prefill excluded).
    pub fn decode_tokens_per_second(&self) -> f64 {
        let t = (self.time.total() - self.time.prefill).as_secs_f64();
        if t > 0.0 {
            self.generated.saturating_sub(1) as f64 / t
        } else {
            0.0
        }
    }

    /// A multi-line human summary: tokens, tok/s, AL, histogram, phase times.
    pub fn summary(&self) -> String {
        let mut s = format!(
            "tokens: {} generated ({} prompt, {} reused), {} rounds; stopped: {}\n\
             decode: {:.2} tok/s; acceptance length {:.3}\n\
             accepted depth histogram:",
            self.generated,
            self.prompt_tokens,
            self.reused_tokens,
            self.steps,
            self.stop.name(),
            self.decode_tokens_per_second(),
            self.acceptance_length()
        );
        for (d, n) in self.accepted_depth.iter().enumerate() {
            if *n > 0 {
                s.push_str(&format!(" {d}:{n}"));
            }
        }
        let t = &self.time;
        s.push_str(&format!(
            "\ntime: prefill {:.3}s draft {:.3}s build {:.3}s verify {:.3}s walk {:.3}s commit {:.3}s",
            t.prefill.as_secs_f64(),
            t.draft.as_secs_f64(),
            t.build.as_secs_f64(),
            t.verify.as_secs_f64(),
            t.walk.as_secs_f64(),
            t.commit.as_secs_f64()
        ));
        if let Some(d) = &self.device {
            let ms = |x: std::time::Duration| x.as_secs_f64() * 1e3;
            let per_round = |x| if self.steps > 0 { ms(x) / self.steps as f64 } else { 0.0 };
            s.push_str(&format!(
                "\ndevice time: prefill {:.3}s draft {:.3}s verify {:.3}s commit {:.3}s{} \
                 (per round: verify {:.3} ms, commit {:.3} ms; host: verify {:.3} ms, commit {:.3} ms)",
                d.prefill.as_secs_f64(),
                d.draft.as_secs_f64(),
                d.verify.as_secs_f64(),
                d.commit.as_secs_f64(),
                if d.commit_beside_draft { " (beside the draft)" } else { "" },
                per_round(d.verify),
                per_round(d.commit),
                per_round(t.verify),
                per_round(t.commit)
            ));
            if self.steps > 0 {
                s.push_str(&self.round_breakdown(d));
            }
        }
        s
    }

    /// One round's decode time split by the device events `d`: the device's busy phases (the
    /// commit not counted when it ran beside the draft, whose time it lengthens) and the rest,
    /// where the device waits for the host (syncs, launches, the tree build and the walk).
    fn round_breakdown(&self, d: &PhaseTimes) -> String {
        let per_round = |x: Duration| x.as_secs_f64() * 1e3 / self.steps as f64;
        let t = &self.time;
        let wall = per_round(t.total() - t.prefill);
        let commit = if d.commit_beside_draft { 0.0 } else { per_round(d.commit) };
        let busy = per_round(d.draft) + per_round(d.verify) + commit;
        let commit_text =
            if d.commit_beside_draft { "commit beside the draft".to_string() } else { format!("commit {commit:.3}") };
        format!(
            "\nround: {wall:.3} ms = device draft {:.3} + verify {:.3} + {commit_text} + {:.3} waiting for the host \
             (syncs, launches, tree build {:.3}, walk {:.3})",
            per_round(d.draft),
            per_round(d.verify),
            wall - busy,
            per_round(t.build),
            per_round(t.walk)
        )
    }
}
