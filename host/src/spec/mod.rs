//! Speculative decoding: the DDTree builder, the greedy walk, the `Target`/`Draft` traits and one
//! generic loop that runs AR (budget 0), DFlash chain (K = 1) and DDTree (design.md §1).

pub mod batch;
pub mod cpu;
pub mod ddtree;
pub mod features;
pub mod generate;
pub mod oracle;
pub mod rule;
pub mod sample;
pub mod stats;
pub mod traits;
pub mod walk;

pub use batch::VerifyBatch;
pub use ddtree::{build, topk_logprobs, DraftTopK, Tree, TreeOptions, Visibility};
pub use features::{FeatureRows, FeatureSource, HostDraft};
pub use generate::{generate, GenerateConfig, Mode, Session};
pub use oracle::OracleDraft;
pub use rule::DecodingRule;
pub use stats::{PhaseTimes, Stats, StopReason};
pub use traits::{Draft, FeatureSpan, Target};
pub use walk::{walk, Walk};

/// Errors of the speculative loop and its pieces.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    /// A top-K table that is not `[depths, k]` or not sorted.
    #[error("draft top-K: {what}")]
    TopKShape {
        /// What was wrong.
        what: &'static str,
    },
    /// The target returned the wrong number of posterior tokens.
    #[error("target returned {got} posterior tokens for a tree of {want} nodes")]
    PosteriorLength {
        /// Received.
        got: usize,
        /// Tree nodes including the root.
        want: usize,
    },
    /// A mode that needs a draft was run without one.
    #[error("mode {mode} needs a draft model")]
    MissingDraft {
        /// The mode's name.
        mode: &'static str,
    },
    /// A decoding rule the backend does not implement.
    #[error("{backend} does not implement the {rule} decoding rule")]
    Unsupported {
        /// The rule's name ([`DecodingRule::name`]).
        rule: &'static str,
        /// The backend that refused it.
        backend: &'static str,
    },
    /// A bad configuration value.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// An error raised by a backend (target or draft implementation).
    #[error("{0}")]
    Backend(Box<dyn std::error::Error + Send + Sync>),
}

impl SpecError {
    /// `backend` does not implement `rule`.
    pub fn unsupported(rule: DecodingRule, backend: &'static str) -> Self {
        Self::Unsupported { rule: rule.name(), backend }
    }

    /// Wraps any backend error.
    pub fn backend(e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self::Backend(e.into())
    }
}
