//! Global atomics.

use core::arch::asm;
use core::sync::atomic::{AtomicU32, Ordering};

/// `atom.add.u32` (relaxed) on a global or shared address (generic pointers to shared memory
/// become `atom.shared` after address-space inference); returns the old value.
#[inline(always)]
pub unsafe fn atomic_add_u32(p: *mut u32, v: u32) -> u32 {
    AtomicU32::from_ptr(p).fetch_add(v, Ordering::Relaxed)
}

/// `red.global.add.f32`: fire-and-forget float add (order-dependent: never use where results
/// must be bitwise reproducible).
#[inline(always)]
pub unsafe fn red_add_f32(p: *mut f32, v: f32) {
    asm!("red.global.add.f32 [{0}], {1};", in(reg64) p, in(reg32) v, options(nostack));
}

/// `atom.add.u64` (relaxed) on a global or shared address; returns the old value. Integer adds
/// commute, so a sum built from them is the same whatever order the adds land in.
#[inline(always)]
pub unsafe fn atomic_add_u64(p: *mut u64, v: u64) -> u64 {
    core::sync::atomic::AtomicU64::from_ptr(p).fetch_add(v, Ordering::Relaxed)
}

/// `atom.max.u32` (relaxed) on a global or shared address; returns the old value. An integer
/// max is order-independent: the final value does not depend on the order the maxes land in.
#[inline(always)]
pub unsafe fn atomic_max_u32(p: *mut u32, v: u32) -> u32 {
    AtomicU32::from_ptr(p).fetch_max(v, Ordering::Relaxed)
}

/// `ld.acquire.gpu.global.u32`: a load that orders every later memory access of this thread after
/// it (with a barrier after it, of the whole block: the acquire side of a split-K hand-off).
#[inline(always)]
pub unsafe fn ld_acquire_gpu_u32(p: *const u32) -> u32 {
    let v: u32;
    asm!("ld.acquire.gpu.global.u32 {0}, [{1}];", out(reg32) v, in(reg64) p, options(nostack, readonly));
    v
}

/// `nanosleep.u32`: suspends the warp for about `ns` nanoseconds (a spin-wait's back-off).
#[inline(always)]
pub fn nanosleep(ns: u32) {
    unsafe { asm!("nanosleep.u32 {0};", in(reg32) ns, options(nostack, nomem)) }
}

/// `trap`: aborts the kernel (the launch fails with an illegal-instruction error, which the host
/// reports instead of waiting forever).
#[inline(always)]
pub fn trap() -> ! {
    unsafe { asm!("trap;", options(nostack, nomem, noreturn)) }
}

/// `red.global.add.u64`: fire-and-forget 64-bit integer add. Integer adds commute, so a sum
/// built from them is the same whatever order the adds land in (two's complement: signed
/// values add as unsigned).
#[inline(always)]
pub unsafe fn red_add_u64(p: *mut u64, v: u64) {
    asm!("red.global.add.u64 [{0}], {1};", in(reg64) p, in(reg64) v, options(nostack));
}

/// `red.global.max.u32`: fire-and-forget integer max (order-independent).
#[inline(always)]
pub unsafe fn red_max_u32(p: *mut u32, v: u32) {
    asm!("red.global.max.u32 [{0}], {1};", in(reg64) p, in(reg32) v, options(nostack));
}
