//! Launchers of `copy_v4` (16-byte-vector device copy) and `copy_path_rows` (an accepted
//! path's captured rows into the feature store), `gpu-kernels/src/copy.rs`.

use cudarc::driver::{CudaSlice, LaunchConfig, PushKernelArg};
use kernel_abi::{CommitPath, MAX_NODES};

use super::error::{DriverContext, GpuError};
use super::{DevSpan, Gpu};

/// Vectors each thread moves (matches `COPY_UNROLL` in the kernel).
const UNROLL: u64 = 4;
const THREADS: u32 = 256;

/// `dst[..bytes] = src[..bytes]` with the `copy_v4` kernel; `bytes` must be a multiple of 16
/// and fit both buffers.
pub fn copy_v4(gpu: &Gpu, src: &CudaSlice<u8>, dst: &mut CudaSlice<u8>, bytes: usize) -> Result<(), GpuError> {
    if !bytes.is_multiple_of(16) || bytes > src.len() || bytes > dst.len() {
        return Err(GpuError::shape(
            "copy_v4",
            format!("{bytes} bytes must be a multiple of 16 within buffers of {} and {}", src.len(), dst.len()),
        ));
    }
    let n = (bytes / 16) as u64;
    if n == 0 {
        return Ok(());
    }
    let per_block = THREADS as u64 * UNROLL;
    let blocks = n.div_ceil(per_block);
    let blocks = u32::try_from(blocks).map_err(|_| GpuError::shape("copy_v4", "too many blocks"))?;
    let cfg = LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (THREADS, 1, 1), shared_mem_bytes: 0 };
    let f = gpu.function("copy_v4")?;
    let mut b = gpu.stream().launch_builder(&f);
    b.arg(src).arg(dst).arg(&n);
    unsafe { b.launch(cfg) }.while_(|| "launching copy_v4".into())?;
    Ok(())
}

/// Appends the rows of a committed path: for path position `p < len` and layer `c < layers`,
/// store row `n_past + p`'s layer-`c` part (`d` f32) = `src[c·nodes + path.nodes[p]]`, with
/// `path` the device [`CommitPath`] (its `len` and `n_past` as given here: the launch is sized
/// from them), `src` `[layers][nodes][d]` and `dst` `[rows][layers·d]` (one launch instead of a
/// strided copy per run of the path; `reference::copy::copy_path_rows`). `d` must be a multiple
/// of 4 and both buffers 16-byte aligned; every node of the path `< nodes` (the caller built
/// the path from a batch of at most `nodes` nodes).
#[allow(clippy::too_many_arguments)]
pub fn copy_path_rows(
    gpu: &Gpu,
    path: DevSpan<CommitPath>,
    len: usize,
    n_past: usize,
    src: DevSpan<f32>,
    dst: DevSpan<f32>,
    layers: usize,
    nodes: usize,
    d: usize,
) -> Result<(), GpuError> {
    const K: &str = "copy_path_rows";
    path.need(1, K, "path (one CommitPath)")?;
    if len > MAX_NODES as usize || nodes > MAX_NODES as usize {
        return Err(GpuError::shape(K, format!("a path of {len} of {nodes} nodes: at most {MAX_NODES}")));
    }
    if !d.is_multiple_of(4) || !src.ptr().is_multiple_of(16) || !dst.ptr().is_multiple_of(16) {
        return Err(GpuError::shape(K, format!("rows of {d} f32 must be whole 16-byte vectors, 16-byte aligned")));
    }
    if len == 0 || layers == 0 || d == 0 {
        return Ok(());
    }
    let too_big = || GpuError::shape(K, "sizes overflow");
    src.need(layers.checked_mul(nodes).and_then(|x| x.checked_mul(d)).ok_or_else(too_big)?, K, "captured rows")?;
    let rows = n_past.checked_add(len).ok_or_else(too_big)?;
    dst.need(rows.checked_mul(layers * d).ok_or_else(too_big)?, K, "feature store")?;
    let layers_u = u32::try_from(layers).ok().filter(|&l| l <= 65_535).ok_or_else(too_big)?;
    let (nodes_u, row_vecs) = (nodes as u32, u32::try_from(d / 4).map_err(|_| too_big())?);
    let cfg = LaunchConfig { grid_dim: (len as u32, layers_u, 1), block_dim: (THREADS, 1, 1), shared_mem_bytes: 0 };
    let f = gpu.function(K)?;
    let mut b = gpu.stream().launch_builder(&f);
    let (path_ptr, src_ptr, dst_ptr) = (path.ptr(), src.ptr(), dst.ptr());
    b.arg(&path_ptr).arg(&src_ptr).arg(&dst_ptr).arg(&layers_u).arg(&nodes_u).arg(&row_vecs);
    // Safety: the arguments match `copy_path_rows`; the rows it touches were checked above.
    unsafe { b.launch(cfg) }.while_(|| "launching copy_path_rows".into())?;
    Ok(())
}
