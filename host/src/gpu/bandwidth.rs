//! The memory-bandwidth ceiling every bench is reported against: a large device-to-device copy
//! (bytes read + bytes written), measured with the driver's copy engine path (`cuMemcpyDtoD`)
//! and with our `copy_v4` kernel; the ceiling is the faster of the two.

use super::error::{DriverContext, GpuError};
use super::{copy, Gpu, GpuTimer};

/// Result of [`measure_copy`], in GB/s (10⁹ bytes per second, read + written).
#[derive(Debug, Clone, Copy)]
pub struct CopyBandwidth {
    pub bytes_each_way: usize,
    pub driver_gbps: f64,
    pub kernel_gbps: f64,
}

impl CopyBandwidth {
    /// The ceiling: the faster of the two copies.
    pub fn ceiling_gbps(&self) -> f64 {
        self.driver_gbps.max(self.kernel_gbps)
    }
}

/// Copies `bytes` → `bytes` (e.g. 4 GiB), `reps` times after a warm-up, both ways.
pub fn measure_copy(gpu: &Gpu, bytes: usize, reps: usize) -> Result<CopyBandwidth, GpuError> {
    let bytes = bytes / 16 * 16;
    let mut src = gpu.zeros::<u8>(bytes)?;
    let mut dst = gpu.zeros::<u8>(bytes)?;
    gpu.fill_bytes(&mut src, 0x5a)?;
    let moved = 2.0 * bytes as f64;
    let driver = GpuTimer::time_per_run(gpu, 2, reps, || {
        gpu.stream().memcpy_dtod(&src, &mut dst).while_(|| "device-to-device copy".into())
    })?;
    let kernel = GpuTimer::time_per_run(gpu, 2, reps, || copy::copy_v4(gpu, &src, &mut dst, bytes))?;
    gpu.synchronize()?;
    Ok(CopyBandwidth { bytes_each_way: bytes, driver_gbps: moved / driver / 1e9, kernel_gbps: moved / kernel / 1e9 })
}
