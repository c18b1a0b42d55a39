//! GPU runtime over `cudarc` (the driver API, loaded at run time: nothing CUDA-specific is
//! needed to build, and a machine without the driver gets [`GpuError::NoDriver`], not a panic).
//!
//! One context, one stream, one module made from the embedded PTX. Typed launchers, one module per
//! kernel family (`norm`, `qmatmul/`, `sample`, `copy`, `embed`, …), check shapes and pick the grid.

mod chain;
mod context;
mod error;
mod span;
mod timer;

pub mod attention;
pub mod bandwidth;
pub mod copy;
pub mod deltanet;
pub mod embed;
pub mod graph;
pub mod info;
pub mod norm;
pub mod qmatmul;
pub mod sample;
pub mod trace;

pub use chain::{chaining_enabled, ChainedLaunch};
pub use context::{Gpu, KERNELS_PTX};
pub use cudarc::driver::{CudaSlice, CudaView, CudaViewMut};
pub use error::GpuError;
pub use span::DevSpan;
pub use timer::GpuTimer;

/// A `#[repr(C)]` launch-parameter struct from `kernel-abi`, passed by value to a kernel.
#[repr(transparent)]
#[derive(Clone, Copy, Debug)]
pub struct Param<T: Copy>(pub T);

// Safety: `T` is a `#[repr(C)]` plain-data struct of `kernel-abi` whose layout the kernel shares.
unsafe impl<T: Copy> cudarc::driver::DeviceRepr for Param<T> {}
