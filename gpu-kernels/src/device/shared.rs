//! Static and dynamic shared memory.
//!
//! A `#[link_section = ".shared"] static X: Shared<T> = Shared::uninit();` is moved to
//! `addrspace(3)` by the xtask linker; plain pointer code on it then compiles to
//! `ld.shared`/`st.shared`. `dynamic_smem()` is CUDA's `extern __shared__` (size set at launch).

use core::cell::UnsafeCell;
use core::mem::MaybeUninit;

/// A shared-memory static. Never initialised (shared memory cannot be).
#[repr(C, align(16))]
pub struct Shared<T>(UnsafeCell<MaybeUninit<T>>);

// Safety: shared memory is per block; synchronisation is the kernel's job (barriers).
unsafe impl<T> Sync for Shared<T> {}

impl<T> Shared<T> {
    pub const fn uninit() -> Self {
        Shared(UnsafeCell::new(MaybeUninit::uninit()))
    }
    /// Generic pointer to the storage.
    #[inline(always)]
    pub fn as_mut_ptr(&self) -> *mut T {
        self.0.get() as *mut T
    }
}

unsafe extern "C" {
    static mut __dynamic_smem: [u8; 0];
}

/// Start of the dynamic shared memory of this launch (16-byte aligned).
#[inline(always)]
pub fn dynamic_smem() -> *mut u8 {
    core::ptr::addr_of_mut!(__dynamic_smem) as *mut u8
}

/// 32-bit shared-state-space address of a generic pointer into shared memory
/// (`cvta.to.shared.u64` + truncation), as `cp.async` and `ldmatrix` want.
#[inline(always)]
pub fn smem_addr<T>(p: *const T) -> u32 {
    let r: u64;
    unsafe {
        core::arch::asm!("cvta.to.shared.u64 {0}, {1};", out(reg64) r, in(reg64) p as u64,
                         options(pure, nomem, nostack))
    };
    r as u32
}
