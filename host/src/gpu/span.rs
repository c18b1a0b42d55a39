//! Typed views of device memory by address: a [`DevSpan`] is a pointer and a length, cheap to
//! copy, so the engine can carve one allocation into per-layer buffers and launchers can check
//! lengths without borrowing the owner. The owner ([`cudarc::driver::CudaSlice`]) must outlive
//! every launch that uses a span of it; the engine keeps its allocations for its whole life.

use std::marker::PhantomData;

use cudarc::driver::{CudaSlice, DevicePtr};

use super::error::GpuError;
use super::Gpu;

/// `len` values of `T` at device address `ptr`.
pub struct DevSpan<T> {
    ptr: u64,
    len: usize,
    _t: PhantomData<*const T>,
}

impl<T> Clone for DevSpan<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for DevSpan<T> {}

impl<T> std::fmt::Debug for DevSpan<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DevSpan<{}>({:#x}, {})", std::any::type_name::<T>(), self.ptr, self.len)
    }
}

// Safety: a span is an address and a length; it carries no host data.
unsafe impl<T> Send for DevSpan<T> {}
unsafe impl<T> Sync for DevSpan<T> {}

impl<T> DevSpan<T> {
    /// The whole of `s`.
    pub fn of(gpu: &Gpu, s: &CudaSlice<T>) -> Self {
        let (ptr, _sync) = s.device_ptr(gpu.stream());
        DevSpan { ptr, len: s.len(), _t: PhantomData }
    }

    /// A span from a raw address (the caller guarantees `len` values of `T` live there).
    ///
    /// # Safety
    /// `ptr` must address at least `len` values of `T` that outlive every use of the span.
    pub unsafe fn from_raw(ptr: u64, len: usize) -> Self {
        DevSpan { ptr, len, _t: PhantomData }
    }

    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Values `off..off + len`; an error names `what` if that is outside the span.
    pub fn sub(&self, off: usize, len: usize, what: &'static str) -> Result<Self, GpuError> {
        match off.checked_add(len) {
            Some(end) if end <= self.len => Ok(DevSpan {
                ptr: self.ptr + (off * std::mem::size_of::<T>()) as u64,
                len,
                _t: PhantomData,
            }),
            _ => Err(GpuError::shape(what, format!("view {off}..{off}+{len} outside a buffer of {}", self.len))),
        }
    }

    /// Checks that the span holds at least `need` values (an error names the kernel and `arg`).
    pub fn need(&self, need: usize, kernel: &'static str, arg: &str) -> Result<(), GpuError> {
        if self.len < need {
            return Err(GpuError::shape(kernel, format!("{arg} needs {need} values, has {}", self.len)));
        }
        Ok(())
    }
}
