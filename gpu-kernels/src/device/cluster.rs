//! Thread-block clusters (sm_90): the cluster barrier and loads from a peer block's shared
//! memory (distributed shared memory).
//!
//! A launch with a cluster dimension (`CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION`) places the
//! blocks of one cluster on one GPC at the same time, so they can wait for each other and read
//! each other's shared memory. A block must not exit while a peer may still read its shared
//! memory: end with [`cluster_sync`] after the last remote read.

use core::arch::asm;

/// `barrier.cluster.arrive.release` + `barrier.cluster.wait.acquire` (both `.aligned`): every
/// thread of every block of the cluster arrives, then waits for all of them. Writes to shared
/// memory before it are visible to the cluster's remote loads after it.
#[inline(always)]
pub fn cluster_sync() {
    cluster_arrive();
    cluster_wait();
}

/// The first half of [`cluster_sync`]: `barrier.cluster.arrive.release.aligned` (this thread's
/// earlier shared-memory writes become visible to the cluster); pair it with [`cluster_wait`].
#[inline(always)]
pub fn cluster_arrive() {
    unsafe { asm!("barrier.cluster.arrive.release.aligned;", options(nostack)) }
}

/// The second half of [`cluster_sync`]: `barrier.cluster.wait.acquire.aligned` (waits until every
/// thread of the cluster has arrived).
#[inline(always)]
pub fn cluster_wait() {
    unsafe { asm!("barrier.cluster.wait.acquire.aligned;", options(nostack)) }
}

/// The shared::cluster address of the variable at shared-state-space address `addr` (this
/// block's, from `smem_addr`) in the cluster's block `rank` (`mapa.shared::cluster.u32`).
#[inline(always)]
pub fn map_to_rank(addr: u32, rank: u32) -> u32 {
    let r: u32;
    unsafe {
        asm!("mapa.shared::cluster.u32 {0}, {1}, {2};", out(reg32) r, in(reg32) addr, in(reg32) rank,
             options(pure, nomem, nostack))
    };
    r
}

/// `ld.shared::cluster.f32` at a shared::cluster address ([`map_to_rank`]). Not `pure`: the
/// data changes between cluster barriers.
#[inline(always)]
pub unsafe fn ld_cluster_f32(addr: u32) -> f32 {
    let v: f32;
    asm!("ld.shared::cluster.f32 {0}, [{1}];", out(reg32) v, in(reg32) addr, options(readonly, nostack));
    v
}

/// `ld.shared::cluster.u32` at a shared::cluster address ([`map_to_rank`]).
#[inline(always)]
pub unsafe fn ld_cluster_u32(addr: u32) -> u32 {
    let v: u32;
    asm!("ld.shared::cluster.u32 {0}, [{1}];", out(reg32) v, in(reg32) addr, options(readonly, nostack));
    v
}
