//! Floating-point error bounds used by the kernel tests.
//!
//! With unit roundoff `u = 2⁻²⁴` (f32, round to nearest), a sum of `n` products accumulated in
//! any fixed order with at most `n` roundings per path satisfies
//! `|ŝ − s| ≤ γ_n · Σ|terms|`, `γ_n = n·u / (1 − n·u)` (Higham, *Accuracy and Stability of
//! Numerical Algorithms*, §3.1). The tests compare against an f64 reference, whose own error is
//! negligible at these sizes.

/// Unit roundoff of f32.
pub const U32: f64 = 1.0 / (1u64 << 24) as f64;

/// `γ_n` for f32.
pub fn gamma(n: usize) -> f64 {
    let nu = n as f64 * U32;
    assert!(nu < 0.5, "γ_{n} is not a useful bound");
    nu / (1.0 - nu)
}
