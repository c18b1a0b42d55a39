//! Programmatic dependent launch (sm_90, PTX `griddepcontrol`).
//!
//! A kernel launched with the programmatic-stream-serialization attribute
//! (`host::gpu::launch::launch_chained`) may start while the previous kernel in the stream is still
//! running. It must call [`grid_dependency_wait`] before it reads anything the previous kernel
//! writes and before it writes anything the previous kernel reads; everything before that point may
//! only touch memory no kernel of the chain writes (the packed weights). Without the attribute both
//! instructions are no-ops, so a chained kernel is also correct when launched the ordinary way.

use core::arch::asm;

/// `griddepcontrol.wait`: blocks until every prerequisite grid has completed and its memory
/// operations are visible to this thread.
#[inline(always)]
pub fn grid_dependency_wait() {
    unsafe { asm!("griddepcontrol.wait;", options(nostack)) }
}

/// `griddepcontrol.launch_dependents`: allows the next chained kernel to be scheduled once every
/// block of this grid has issued it (or exited). The next kernel still waits for this grid's
/// completion in its own [`grid_dependency_wait`], so this only moves its launch and prologue
/// (its weight loads) under this grid's tail.
#[inline(always)]
pub fn launch_dependents() {
    unsafe { asm!("griddepcontrol.launch_dependents;", options(nostack)) }
}
