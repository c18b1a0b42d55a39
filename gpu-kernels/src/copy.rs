//! `copy`: device-to-device copies with 16-byte vectors — the bandwidth ceiling kernel
//! (`copy_v4`), and the gather of an accepted path's captured rows (`copy_path_rows`).
//!
//! `copy_v4` math: `dst[i] = src[i]` for `i < n` (16-byte vectors). Memory traffic: `16·n` bytes
//! read and `16·n` written. Launch: `ceil(n / (256·4))` blocks of 256 threads; each thread moves 4
//! vectors, all loads issued before the stores (4 in flight), consecutive threads on consecutive
//! vectors (coalesced).

use kernel_abi::{CommitPath, MAX_NODES};

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

/// The rows of a committed path, gathered: for path position `p < path.len` and layer `c <
/// layers`, `dst[(path.n_past + p)·layers + c][..] = src[c·nodes + path.nodes[p]][..]`, rows of
/// `row_vecs` 16-byte vectors — a forward's captured rows (`[layers][nodes][d]`) appended to the
/// feature store (`[rows][layers·d]`) in path order. Memory traffic: `32·len·layers·row_vecs`
/// bytes (each row read and written once). Launch: grid `(len, layers)`, 256 threads; block
/// `(p, c)` moves one row, consecutive threads on consecutive vectors. The launcher checks the
/// bounds (`host/src/gpu/copy.rs`); the kernel trusts `len ≤ MAX_NODES` and the path's nodes
/// `< nodes`. It reads only what the forward wrote before it on the stream (no chaining).
#[no_mangle]
#[link_section = "nvvm:maxntid=256;minctasm=1"]
pub unsafe extern "ptx-kernel" fn copy_path_rows(
    path: *const CommitPath,
    src: *const U32x4,
    dst: *mut U32x4,
    layers: u32,
    nodes: u32,
    row_vecs: u32,
) {
    let (p, c) = (block_x(), block_y());
    if p >= (*path).len.min(MAX_NODES) {
        return;
    }
    let node = *(*path).nodes.as_ptr().add(p as usize) as usize;
    let row = row_vecs as usize;
    let from = src.add((c as usize * nodes as usize + node) * row);
    let to = dst.add((((*path).n_past + p) as usize * layers as usize + c as usize) * row);
    let mut i = thread_x() as usize;
    while i < row {
        to.add(i).write(from.add(i).read());
        i += block_dim_x() as usize;
    }
}
