//! Shared-memory transaction barriers (`mbarrier`, sm_90) and the bulk copies that complete on
//! them (`cp.async.bulk`, the copy engine of Hopper's TMA unit, no tensor map).
//!
//! A barrier is 8 bytes of shared memory (8-byte aligned), addressed by its 32-bit
//! shared-state-space address. A phase completes when its expected arrivals (the count given to
//! [`init`]) have arrived and its transaction count is back to zero: [`arrive_expect_tx`] adds
//! bytes to wait for, each bulk copy subtracts its size when its data has landed. Waiters name the
//! phase by its parity (`0` for phases 0, 2, 4 …), and once it completes its copies' data is
//! visible to them and to the async proxy (`wgmma` operands).

use core::arch::asm;

/// `mbarrier.init.shared::cta.b64 [bar], count` (one thread, before any use).
#[inline(always)]
pub unsafe fn init(bar: u32, count: u32) {
    asm!("mbarrier.init.shared::cta.b64 [{0}], {1};", in(reg32) bar, in(reg32) count, options(nostack));
}

/// `fence.mbarrier_init.release.cluster`: makes this thread's [`init`]s visible to the async
/// proxy (the copy engine) and, after a barrier, to the other threads.
#[inline(always)]
pub fn fence_init() {
    unsafe { asm!("fence.mbarrier_init.release.cluster;", options(nostack)) }
}

/// `mbarrier.arrive.expect_tx.shared::cta.b64`: one arrival on the current phase of `bar`, which
/// now also waits for `bytes` more bytes of bulk copies.
#[inline(always)]
pub unsafe fn arrive_expect_tx(bar: u32, bytes: u32) {
    asm!("{{ .reg .b64 st; mbarrier.arrive.expect_tx.shared::cta.b64 st, [{0}], {1}; }}",
         in(reg32) bar, in(reg32) bytes, options(nostack));
}

/// Waits until the phase of `bar` with parity `parity` has completed
/// (`mbarrier.try_wait.parity`, which suspends the thread for a while before each retry).
#[inline(always)]
#[allow(named_asm_labels)]
pub unsafe fn wait_parity(bar: u32, parity: u32) {
    // The label is local to the `{ }` scope, so the statement may be inlined many times.
    asm!("{{ .reg .pred done; MBAR_WAIT: mbarrier.try_wait.parity.shared::cta.b64 done, [{0}], {1}; @!done bra MBAR_WAIT; }}",
         in(reg32) bar, in(reg32) parity, options(nostack));
}

/// `cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes`: copies `bytes` (a
/// multiple of 16) from global `src` to the shared-state-space address `dst` (both 16-byte
/// aligned) through L2, and counts them off `bar`'s transaction count when they have landed.
#[inline(always)]
pub unsafe fn bulk_copy_g2s(dst: u32, src: *const u8, bytes: u32, bar: u32) {
    asm!("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [{0}], [{1}], {2}, [{3}];",
         in(reg32) dst, in(reg64) src, in(reg32) bytes, in(reg32) bar, options(nostack));
}
