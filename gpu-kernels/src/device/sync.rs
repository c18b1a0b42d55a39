//! Barriers.

use core::arch::asm;
use core::arch::nvptx;

/// `__syncthreads()`: `bar.sync 0` over the whole block (intrinsic, already convergent).
#[inline(always)]
pub fn sync_threads() {
    unsafe { nvptx::_syncthreads() }
}

/// `__syncwarp()`: `bar.warp.sync 0xffffffff`.
#[inline(always)]
pub fn sync_warp() {
    unsafe { asm!("bar.warp.sync 0xffffffff;", options(nostack)) }
}
