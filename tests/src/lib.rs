//! Shared helpers of the integration tests.

pub mod gpu;
pub mod tolerance;
pub mod toy;
