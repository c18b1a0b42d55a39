//! `copy`: device-to-device copy with 16-byte vectors — the bandwidth ceiling kernel.
//!
//! Math: `dst[i] = src[i]` for `i < n` (16-byte vectors). Memory traffic: `16·n` bytes read and
//! `16·n` written. Launch: `ceil(n / (256·4))` blocks of 256 threads; each thread moves 4
//! vectors, all loads issued before the stores (4 in flight), consecutive threads on consecutive
//! vectors (coalesced).

use crate::device::load::U32x4;
use crate::device::*;

/// Vectors per thread.
pub const COPY_UNROLL: u32 = 4;

#[no_mangle]
#[link_section = "nvvm:maxntid=256;minctasm=1"]
pub unsafe extern "ptx-kernel" fn copy_v4(src: *const U32x4, dst: *mut U32x4, n: u64) {
    let base = block_x() as u64 * (block_dim_x() * COPY_UNROLL) as u64 + thread_x() as u64;
    let stride = block_dim_x() as u64;
    let mut v = [U32x4::default(); COPY_UNROLL as usize];
    let mut k = 0;
    while k < COPY_UNROLL as usize {
        let i = base + k as u64 * stride;
        if i < n {
            v[k] = src.add(i as usize).read();
        }
        k += 1;
    }
    let mut k = 0;
    while k < COPY_UNROLL as usize {
        let i = base + k as u64 * stride;
        if i < n {
            dst.add(i as usize).write(v[k]);
        }
        k += 1;
    }
}
