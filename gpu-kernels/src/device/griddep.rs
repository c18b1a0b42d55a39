//! Programmatic dependent launch (sm_90, PTX `griddepcontrol`).
//!
//! A kernel launched with the programmatic-stream-serialization attribute
//! (`host::gpu::launch::launch_chained`) may start while the previous kernel in the stream is still
//! running. It must call [`grid_dependency_wait`] before it reads anything the previous kernel
//! writes and before it writes anything the previous kernel reads; everything before that point may
//! only touch memory no kernel of the chain writes: model weights (packed matrices, norm and conv
//! weights) and, in the engine's forward, what only host copies or the commit write — the node
//! batch, the committed DeltaNet state and conv window. Every forward starts behind the upload
//! of its node batch, a copy the stream orders after all earlier kernels (the commit included). Without the attribute both
//! instructions are no-ops, so a chained kernel is also correct when launched the ordinary way.
//!
//! With the `chain-trace` feature (an experiment build, never shipped) thread 0 of block
//! `(0, 0, 0)` also stamps `%globaltimer` before and after the wait into `FLASHTREE_TRACE`
//! (`kernel_abi::CHAIN_TRACE_CAP` records): the time between two consecutive kernels' "wait
//! returned" stamps is the first kernel's share of the chain's critical path.

use core::arch::asm;

/// `griddepcontrol.wait`: blocks until every prerequisite grid has completed and its memory
/// operations are visible to this thread.
#[inline(always)]
pub fn grid_dependency_wait() {
    #[cfg(feature = "chain-trace")]
    trace::wait_traced();
    #[cfg(not(feature = "chain-trace"))]
    unsafe {
        asm!("griddepcontrol.wait;", options(nostack))
    }
}

/// `griddepcontrol.launch_dependents`: allows the next chained kernel to be scheduled once every
/// block of this grid has issued it (or exited). The next kernel still waits for this grid's
/// completion in its own [`grid_dependency_wait`], so this only moves its launch and prologue
/// (its weight loads) under this grid's tail.
#[inline(always)]
pub fn launch_dependents() {
    unsafe { asm!("griddepcontrol.launch_dependents;", options(nostack)) }
}

#[cfg(feature = "chain-trace")]
mod trace {
    use core::arch::asm;
    use core::arch::nvptx;
    use kernel_abi::{CHAIN_TRACE_CAP, CHAIN_TRACE_WORDS};

    /// Records written so far (keeps counting past the capacity).
    #[no_mangle]
    pub static mut FLASHTREE_TRACE_COUNT: u32 = 0;

    /// `CHAIN_TRACE_CAP` records of `CHAIN_TRACE_WORDS` u64.
    #[no_mangle]
    pub static mut FLASHTREE_TRACE: [u64; CHAIN_TRACE_CAP as usize * CHAIN_TRACE_WORDS] =
        [0; CHAIN_TRACE_CAP as usize * CHAIN_TRACE_WORDS];

    #[inline(always)]
    fn globaltimer() -> u64 {
        let t: u64;
        unsafe { asm!("mov.u64 {0}, %globaltimer;", out(reg64) t, options(nostack)) };
        t
    }

    #[inline(always)]
    pub fn wait_traced() {
        let first = unsafe {
            (nvptx::_thread_idx_x() | nvptx::_thread_idx_y() | nvptx::_thread_idx_z())
                | (nvptx::_block_idx_x() | nvptx::_block_idx_y() | nvptx::_block_idx_z())
        } == 0;
        let arrive = if first { globaltimer() } else { 0 };
        unsafe { asm!("griddepcontrol.wait;", options(nostack)) };
        if first {
            let ready = globaltimer();
            unsafe {
                let i = crate::device::atomic::atomic_add_u32(core::ptr::addr_of_mut!(FLASHTREE_TRACE_COUNT), 1);
                if i < CHAIN_TRACE_CAP {
                    let r = core::ptr::addr_of_mut!(FLASHTREE_TRACE) as *mut u64;
                    let r = r.add(i as usize * CHAIN_TRACE_WORDS);
                    let grid = nvptx::_grid_dim_x() as u64
                        | (nvptx::_grid_dim_y() as u64) << 32
                        | (nvptx::_grid_dim_z() as u64) << 48;
                    *r = arrive;
                    *r.add(1) = ready;
                    *r.add(2) = grid;
                }
            }
        }
    }
}
