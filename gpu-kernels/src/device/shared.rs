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

/// `ld.shared.v4.u32` at the shared-state-space address `addr` (16-byte aligned). Not `pure`:
/// the data changes between barriers, so LLVM must not move or merge these loads across them.
#[inline(always)]
pub unsafe fn ld_shared_v4(addr: u32) -> [u32; 4] {
    let (a, b, c, d): (u32, u32, u32, u32);
    core::arch::asm!("ld.shared.v4.u32 {{{0},{1},{2},{3}}}, [{4}];",
                     out(reg32) a, out(reg32) b, out(reg32) c, out(reg32) d, in(reg32) addr,
                     options(readonly, nostack));
    [a, b, c, d]
}

/// `st.shared.v4.u32` at the shared-state-space address `addr` (16-byte aligned).
#[inline(always)]
pub unsafe fn st_shared_v4(addr: u32, v: [u32; 4]) {
    core::arch::asm!("st.shared.v4.u32 [{0}], {{{1},{2},{3},{4}}};",
                     in(reg32) addr, in(reg32) v[0], in(reg32) v[1], in(reg32) v[2], in(reg32) v[3],
                     options(nostack));
}
