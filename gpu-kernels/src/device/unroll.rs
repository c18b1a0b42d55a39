//! Fully unrolled loops: `f(i)` with each `i` a compile-time constant at its call, so arrays
//! indexed by `i` stay in registers (a runtime index would put them in local memory).

/// Calls `f(0) .. f(n − 1)` for `n ≤ 32` (`n` a constant after inlining: the untaken calls
/// fold away). Indices from 32 on are never called: keep `n` within the bound.
#[inline(always)]
pub fn unroll_below(n: usize, mut f: impl FnMut(usize)) {
    macro_rules! calls {
        ($($i:literal)*) => { $(if $i < n { f($i); })* };
    }
    calls!(0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31);
}
