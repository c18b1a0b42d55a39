//! Fully unrolled loops: `f(i)` with each `i` a compile-time constant at its call, so arrays
//! indexed by `i` stay in registers (a runtime index would put them in local memory).

/// Calls `f(0) .. f(n − 1)` for `n ≤ 16` (`n` a constant after inlining: the untaken calls
/// fold away).
#[inline(always)]
pub fn unroll_below(n: usize, mut f: impl FnMut(usize)) {
    macro_rules! calls {
        ($($i:literal)*) => { $(if $i < n { f($i); })* };
    }
    calls!(0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15);
}
