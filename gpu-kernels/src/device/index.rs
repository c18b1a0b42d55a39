//! Thread, block, lane and warp indices (`%tid`, `%ctaid`, `%ntid`, `%nctaid`, `%laneid`).

use core::arch::asm;
use core::arch::nvptx;

/// `threadIdx.x`.
#[inline(always)]
pub fn thread_x() -> u32 {
    unsafe { nvptx::_thread_idx_x() as u32 }
}
/// `threadIdx.y`.
#[inline(always)]
pub fn thread_y() -> u32 {
    unsafe { nvptx::_thread_idx_y() as u32 }
}
/// `blockIdx.x`.
#[inline(always)]
pub fn block_x() -> u32 {
    unsafe { nvptx::_block_idx_x() as u32 }
}
/// `blockIdx.y`.
#[inline(always)]
pub fn block_y() -> u32 {
    unsafe { nvptx::_block_idx_y() as u32 }
}
/// `blockIdx.z`.
#[inline(always)]
pub fn block_z() -> u32 {
    unsafe { nvptx::_block_idx_z() as u32 }
}
/// `blockDim.x`.
#[inline(always)]
pub fn block_dim_x() -> u32 {
    unsafe { nvptx::_block_dim_x() as u32 }
}
/// `gridDim.x`.
#[inline(always)]
pub fn grid_dim_x() -> u32 {
    unsafe { nvptx::_grid_dim_x() as u32 }
}
/// `gridDim.y`.
#[inline(always)]
pub fn grid_dim_y() -> u32 {
    unsafe { nvptx::_grid_dim_y() as u32 }
}
/// Lane index within the warp (`%laneid`, 0..32).
#[inline(always)]
pub fn lane_id() -> u32 {
    let r: u32;
    unsafe { asm!("mov.u32 {0}, %laneid;", out(reg32) r, options(pure, nomem, nostack)) };
    r
}
/// Warp index within a one-dimensional block (`threadIdx.x / 32`).
#[inline(always)]
pub fn warp_id() -> u32 {
    thread_x() / 32
}
