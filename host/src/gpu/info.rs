//! What GPU this is: name, SMs, memory, L2, driver and CUDA versions.

use cudarc::driver::sys::CUdevice_attribute as A;

use super::error::{DriverContext, GpuError};
use super::Gpu;

#[derive(Debug, Clone)]
pub struct DeviceInfo {
    pub name: String,
    pub compute_capability: (i32, i32),
    pub sms: i32,
    pub total_memory: usize,
    pub l2_bytes: i32,
    /// Driver API version as reported by `cuDriverGetVersion` (e.g. 13000 → CUDA 13.0).
    pub driver_cuda_version: i32,
    /// Kernel-module version from `/proc/driver/nvidia/version` (e.g. `580.159.04`), if readable.
    pub driver_version: Option<String>,
}

/// The NVIDIA kernel module's version from `/proc/driver/nvidia/version` (Linux), if present.
pub fn nvidia_driver_version() -> Option<String> {
    let text = std::fs::read_to_string("/proc/driver/nvidia/version").ok()?;
    parse_driver_version(&text)
}

/// `NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Tue …` → `580.159.04`.
fn parse_driver_version(text: &str) -> Option<String> {
    let line = text.lines().find(|l| l.starts_with("NVRM version"))?;
    let after = line.split("Kernel Module").nth(1).unwrap_or(line);
    after
        .split_whitespace()
        .find(|w| {
            w.split('.').count() >= 2 && w.split('.').all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        })
        .map(str::to_string)
}

impl DeviceInfo {
    pub fn query(gpu: &Gpu) -> Result<Self, GpuError> {
        let ctx = gpu.context();
        let attr = |a: A| ctx.attribute(a).while_(|| format!("reading {a:?}"));
        let mut v = 0i32;
        unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut v) }
            .result()
            .while_(|| "reading the driver version".into())?;
        Ok(DeviceInfo {
            name: ctx.name().while_(|| "reading the device name".into())?,
            compute_capability: ctx.compute_capability().while_(|| "reading compute capability".into())?,
            sms: attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
            total_memory: ctx.total_mem().while_(|| "reading total memory".into())?,
            l2_bytes: attr(A::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)?,
            driver_cuda_version: v,
            driver_version: nvidia_driver_version(),
        })
    }
}

impl std::fmt::Display for DeviceInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "GPU:            {}", self.name)?;
        writeln!(f, "compute cap.:   sm_{}{}", self.compute_capability.0, self.compute_capability.1)?;
        writeln!(f, "SMs:            {}", self.sms)?;
        writeln!(f, "memory:         {:.1} GiB", self.total_memory as f64 / (1u64 << 30) as f64)?;
        writeln!(f, "L2 cache:       {:.1} MiB", self.l2_bytes as f64 / (1u64 << 20) as f64)?;
        write!(
            f,
            "driver:         {} (CUDA {}.{})",
            self.driver_version.as_deref().unwrap_or("version unknown"),
            self.driver_cuda_version / 1000,
            (self.driver_cuda_version % 1000) / 10
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_kernel_module_version_line() {
        let t = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Tue Oct  7 10:00:00 UTC 2026\nGCC version:  gcc 12\n";
        assert_eq!(parse_driver_version(t).as_deref(), Some("580.159.04"));
        assert_eq!(parse_driver_version("nothing here"), None);
    }
}
