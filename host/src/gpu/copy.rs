//! Launcher of `copy_v4` (`gpu-kernels/src/copy.rs`): 16-byte-vector device copy.

use cudarc::driver::{CudaSlice, LaunchConfig, PushKernelArg};

use super::error::{DriverContext, GpuError};
use super::Gpu;

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
