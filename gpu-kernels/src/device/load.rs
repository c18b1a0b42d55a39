//! Vector and cache-hinted global loads/stores.

use core::arch::asm;

/// 16 bytes, 16-byte aligned.
#[repr(C, align(16))]
#[derive(Clone, Copy, Default)]
pub struct U32x4(pub [u32; 4]);

/// `ld.global.nc.v4.u32` (read-only data cache, `__ldg`). `p` must be 16-byte aligned and the
/// data must not be written during the kernel.
#[inline(always)]
pub unsafe fn ld_nc_v4(p: *const U32x4) -> U32x4 {
    let (a, b, c, d): (u32, u32, u32, u32);
    asm!("ld.global.nc.v4.u32 {{{0},{1},{2},{3}}}, [{4}];",
         out(reg32) a, out(reg32) b, out(reg32) c, out(reg32) d, in(reg64) p,
         options(pure, readonly, nostack));
    U32x4([a, b, c, d])
}

/// `ld.global.v4.u32` (coherent, cached in L1), 16-byte aligned: for data the previous kernel
/// of a programmatic-dependent-launch chain wrote, read after `griddepcontrol.wait` (the
/// read-only `.nc` path is only defined for data that no kernel writes while this one runs).
#[inline(always)]
pub unsafe fn ld_v4(p: *const U32x4) -> U32x4 {
    let (a, b, c, d): (u32, u32, u32, u32);
    asm!("ld.global.v4.u32 {{{0},{1},{2},{3}}}, [{4}];",
         out(reg32) a, out(reg32) b, out(reg32) c, out(reg32) d, in(reg64) p,
         options(pure, readonly, nostack));
    U32x4([a, b, c, d])
}

/// `ld.global.v2.f32` (coherent, cached in L1), 8-byte aligned; see [`ld_v4`].
#[inline(always)]
pub unsafe fn ld_v2_f32(p: *const f32) -> [f32; 2] {
    let (a, b): (f32, f32);
    asm!("ld.global.v2.f32 {{{0},{1}}}, [{2}];", out(reg32) a, out(reg32) b, in(reg64) p,
         options(pure, readonly, nostack));
    [a, b]
}

/// `ld.global.u32` (coherent, cached in L1), 4-byte aligned; see [`ld_v4`].
#[inline(always)]
pub unsafe fn ld_u32(p: *const u32) -> u32 {
    let a: u32;
    asm!("ld.global.u32 {0}, [{1}];", out(reg32) a, in(reg64) p, options(pure, readonly, nostack));
    a
}

/// `ld.global.nc.L1::no_allocate.v4.u32`: streaming read that does not pollute L1
/// (for weights read once per launch).
#[inline(always)]
pub unsafe fn ld_stream_v4(p: *const U32x4) -> U32x4 {
    let (a, b, c, d): (u32, u32, u32, u32);
    asm!("ld.global.nc.L1::no_allocate.v4.u32 {{{0},{1},{2},{3}}}, [{4}];",
         out(reg32) a, out(reg32) b, out(reg32) c, out(reg32) d, in(reg64) p,
         options(pure, readonly, nostack));
    U32x4([a, b, c, d])
}

/// `ld.global.nc.f32` (read-only path, scalar).
#[inline(always)]
pub unsafe fn ld_nc_f32(p: *const f32) -> f32 {
    let r: f32;
    asm!("ld.global.nc.f32 {0}, [{1}];", out(reg32) r, in(reg64) p, options(pure, readonly, nostack));
    r
}

/// `ld.global.nc.u16` (read-only path, scalar).
#[inline(always)]
pub unsafe fn ld_nc_u16(p: *const u16) -> u16 {
    let r: u16;
    asm!("ld.global.nc.u16 {0}, [{1}];", out(reg16) r, in(reg64) p, options(pure, readonly, nostack));
    r
}

/// `ld.global.nc.u16` with L1 allocation (for 2-byte-aligned block formats whose sectors are
/// read by several instructions in a row).
#[inline(always)]
pub unsafe fn ld_nc_u16_cached(p: *const u8) -> u32 {
    let r: u16;
    asm!("ld.global.nc.u16 {0}, [{1}];", out(reg16) r, in(reg64) p, options(pure, readonly, nostack));
    r as u32
}

/// `ld.global.cg.f32`: read through L2 only (data written by other blocks of this launch,
/// after a fence; L1 is not coherent).
#[inline(always)]
pub unsafe fn ld_cg_f32(p: *const f32) -> f32 {
    let r: f32;
    asm!("ld.global.cg.f32 {0}, [{1}];", out(reg32) r, in(reg64) p, options(readonly, nostack));
    r
}

/// `cp.async.cg.shared.global [dst], [src], 16`: an asynchronous 16-byte copy from global
/// memory (through L2, so it sees what an earlier kernel of the chain wrote) into shared
/// memory, with no register destination; complete after [`cp_async_wait_all`].
#[inline(always)]
pub unsafe fn cp_async_16(dst: u32, src: *const u8) {
    asm!("cp.async.cg.shared.global [{0}], [{1}], 16;", in(reg32) dst, in(reg64) src, options(nostack));
}

/// `cp.async.commit_group`: closes the group of this thread's [`cp_async_16`] copies issued
/// since the last commit.
#[inline(always)]
pub fn cp_async_commit() {
    unsafe { asm!("cp.async.commit_group;", options(nostack)) }
}

/// `cp.async.wait_group 1`: every committed group of this thread but the newest has landed.
#[inline(always)]
pub fn cp_async_wait_all_but_one() {
    unsafe { asm!("cp.async.wait_group 1;", options(nostack)) }
}

/// `cp.async.wait_all`: this thread's [`cp_async_16`] copies have landed (other threads see
/// them after a barrier).
#[inline(always)]
pub fn cp_async_wait_all() {
    unsafe { asm!("cp.async.wait_all;", options(nostack)) }
}
