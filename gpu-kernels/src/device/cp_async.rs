//! Asynchronous global→shared copies (`cp.async`, sm_80+).

use core::arch::asm;

/// `cp.async.cg.shared.global [smem], [gptr], 16`: 16 bytes, bypassing L1.
/// `smem` is a shared-state-space address (see [`super::shared::smem_addr`]).
#[inline(always)]
pub unsafe fn cp_async_16(smem: u32, gptr: *const u8) {
    asm!("cp.async.cg.shared.global [{0}], [{1}], 16;", in(reg32) smem, in(reg64) gptr, options(nostack));
}

/// `cp.async.commit_group`.
#[inline(always)]
pub fn cp_async_commit() {
    unsafe { asm!("cp.async.commit_group;", options(nostack)) }
}

/// `cp.async.wait_group N`: wait until at most `N` committed groups are pending.
#[inline(always)]
pub fn cp_async_wait<const N: u32>() {
    unsafe { asm!("cp.async.wait_group {n};", n = const N, options(nostack)) }
}
