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
