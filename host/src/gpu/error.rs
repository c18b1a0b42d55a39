//! Errors of the GPU runtime.

use cudarc::driver::DriverError;

#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    /// libcuda could not be loaded: this machine has no NVIDIA driver.
    #[error("no CUDA driver found (libcuda.so could not be loaded): CPU only")]
    NoDriver,
    /// The driver loaded but reported no usable device.
    #[error("CUDA driver present but no usable GPU: {0}")]
    NoDevice(String),
    /// A driver call failed.
    #[error("CUDA error while {what}: {source}")]
    Driver {
        what: String,
        #[source]
        source: DriverError,
    },
    /// A launcher was called with arguments that do not fit the kernel.
    #[error("{kernel}: {message}")]
    Shape { kernel: &'static str, message: String },
}

impl GpuError {
    /// A failed driver call, with what was being done.
    pub fn from_driver(what: &str, source: DriverError) -> Self {
        GpuError::Driver { what: what.to_string(), source }
    }

    pub(crate) fn shape(kernel: &'static str, message: impl Into<String>) -> Self {
        GpuError::Shape { kernel, message: message.into() }
    }
}

/// Adds "while …" context to driver results.
pub(crate) trait DriverContext<T> {
    fn while_(self, what: impl FnOnce() -> String) -> Result<T, GpuError>;
}

impl<T> DriverContext<T> for Result<T, DriverError> {
    fn while_(self, what: impl FnOnce() -> String) -> Result<T, GpuError> {
        self.map_err(|source| GpuError::Driver { what: what(), source })
    }
}
