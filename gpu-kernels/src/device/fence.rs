//! Memory fences.

use core::arch::asm;

/// `fence.acq_rel.gpu` (`__threadfence()`): orders this thread's global accesses before and
/// after, as seen by every thread of the GPU.
#[inline(always)]
pub fn fence_gpu() {
    unsafe { asm!("fence.acq_rel.gpu;", options(nostack)) }
}
