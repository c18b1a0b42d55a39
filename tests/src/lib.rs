//! Shared helpers of the integration tests.

pub mod gpu;
pub mod markov;
pub mod serve;
pub mod stats;
pub mod tiny;
pub mod tolerance;
pub mod toy;
