//! Bulk asynchronous copies (the 1-D form of the sm_90 tensor memory accelerator) and the
//! shared-memory transaction barriers (`mbarrier`) that signal their completion.
//!
//! Protocol used by the `qmm_*` kernels: a barrier is initialised with an arrival count of `k`;
//! each of `k` lanes announces the bytes it is about to copy (`arrive_expect_tx`) and issues
//! one bulk copy that completes against the same barrier. A waiter polls the barrier's current
//! phase parity; the phase flips once all `k` arrivals happened and every announced byte landed.
//! All addresses of the shared state space are 32-bit (see [`super::shared::smem_addr`]).

use core::arch::asm;

/// `mbarrier.init.shared::cta.b64 [bar], count`.
#[inline(always)]
pub unsafe fn mbarrier_init(bar: u32, count: u32) {
    asm!("mbarrier.init.shared::cta.b64 [{0}], {1};", in(reg32) bar, in(reg32) count, options(nostack));
}

/// `fence.mbarrier_init.release.cluster`: makes barrier initialisation visible to the async
/// proxy (the copy engine) before the first copy that completes against it.
#[inline(always)]
pub fn fence_mbarrier_init() {
    unsafe { asm!("fence.mbarrier_init.release.cluster;", options(nostack)) }
}

/// `fence.proxy.async.shared::cta`: orders this thread's earlier generic-proxy shared-memory
/// accesses before later async-proxy ones (a bulk copy overwriting a slot that was just read).
#[inline(always)]
pub fn fence_proxy_async_shared() {
    unsafe { asm!("fence.proxy.async.shared::cta;", options(nostack)) }
}

/// `mbarrier.arrive.expect_tx.shared::cta.b64 _, [bar], bytes`: one arrival, and `bytes` more
/// to wait for in the current phase.
#[inline(always)]
pub unsafe fn mbarrier_arrive_expect_tx(bar: u32, bytes: u32) {
    asm!("mbarrier.arrive.expect_tx.shared::cta.b64 _, [{0}], {1};", in(reg32) bar, in(reg32) bytes,
         options(nostack));
}

/// `cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [dst], [src], bytes, [bar]`:
/// copies `bytes` (a multiple of 16; `dst` and `src` 16-byte aligned) from global to shared
/// memory and counts them against `bar`.
#[inline(always)]
pub unsafe fn bulk_copy_g2s(dst: u32, src: *const u8, bytes: u32, bar: u32) {
    asm!("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [{0}], [{1}], {2}, [{3}];",
         in(reg32) dst, in(reg64) src, in(reg32) bytes, in(reg32) bar, options(nostack));
}

/// Spins until the phase of `bar` with parity `parity` has completed
/// (`mbarrier.try_wait.parity.shared::cta.b64`, which itself waits a bounded time per try).
#[inline(always)]
pub unsafe fn mbarrier_wait_parity(bar: u32, parity: u32) {
    loop {
        let done: u32;
        asm!("{{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [{1}], {2}; selp.u32 {0}, 1, 0, p; }}",
             out(reg32) done, in(reg32) bar, in(reg32) parity, options(nostack));
        if done != 0 {
            break;
        }
    }
}
