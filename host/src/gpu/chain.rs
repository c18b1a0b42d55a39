//! Chained kernel launches (programmatic dependent launch, sm_90+).
//!
//! A kernel launched through [`ChainedLaunch`] carries the
//! `CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION` attribute: it may be scheduled while the
//! previous kernel of the stream is still running (once every block of that kernel has executed
//! `griddepcontrol.launch_dependents`, or exited), and must itself execute `griddepcontrol.wait`
//! before it touches memory that the previous kernel writes or reads (`gpu-kernels`
//! `device::griddep`). So the next matmul's first weight loads and its launch latency overlap
//! the previous kernel's tail instead of following it. The order of results is unchanged: every
//! chained kernel still sees all writes of the kernels before it.
//!
//! Only kernels that contain the wait may be chained. `FLASHTREE_CHAIN=0` turns the attribute off
//! (an ordinary serialized launch of the same kernel), for A/B measurements.

use std::ffi::c_void;
use std::sync::OnceLock;

use cudarc::driver::sys::{self, CUlaunchAttributeID};
use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut, DeviceRepr, LaunchConfig};

use super::error::{DriverContext, GpuError};
use super::Gpu;

/// Whether chained launches are on (default; `FLASHTREE_CHAIN=0` turns them off).
pub fn chaining_enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("FLASHTREE_CHAIN").map(|v| v.trim() != "0").unwrap_or(true))
}

/// Most arguments a chained kernel takes.
const MAX_ARGS: usize = 16;
/// Bytes of one argument slot (8-byte aligned): a device pointer or a parameter struct of up to
/// 64 bytes (`GdnParams` is 48).
const SLOT_BYTES: usize = 64;
/// Bytes of the one wide slot, for a single larger parameter struct per launch (`SampleParams`
/// carries a position per row: 296 bytes).
const WIDE_BYTES: usize = 512;

/// One launch of a kernel with its arguments in order, held in fixed slots (no allocation per
/// launch: the pointers the driver reads are taken from the slots at launch time).
pub struct ChainedLaunch<'a> {
    gpu: &'a Gpu,
    name: &'static str,
    slots: [[u64; SLOT_BYTES / 8]; MAX_ARGS],
    /// The argument (its index) held in `wide` instead of its slot.
    wide_arg: Option<usize>,
    wide: [u64; WIDE_BYTES / 8],
    len: usize,
    /// Set when an argument did not fit (reported by [`Self::launch`]).
    overflow: Option<String>,
    /// What the launch log records beside the name and grid ([`Self::tag`]).
    tag: u32,
    /// Blocks per thread-block cluster along x (0: no cluster; [`Self::cluster`]).
    cluster: u32,
    /// Blocks per cluster along y ([`Self::cluster_y`]; 1 otherwise).
    cluster_y: u32,
}

/// A group of kernel arguments that several kernels take in the same order: its one definition
/// of that order, appended by [`ChainedLaunch::args`].
pub(crate) trait LaunchArgs {
    fn append(&self, launch: &mut ChainedLaunch<'_>);
}

impl<T: LaunchArgs + ?Sized> LaunchArgs for &T {
    fn append(&self, launch: &mut ChainedLaunch<'_>) {
        (**self).append(launch)
    }
}

impl<'a> ChainedLaunch<'a> {
    pub fn new(gpu: &'a Gpu, name: &'static str) -> Self {
        ChainedLaunch {
            gpu,
            name,
            slots: [[0; SLOT_BYTES / 8]; MAX_ARGS],
            wide_arg: None,
            wide: [0; WIDE_BYTES / 8],
            len: 0,
            overflow: None,
            tag: 0,
            cluster: 0,
            cluster_y: 1,
        }
    }

    fn push<T: Copy>(&mut self, v: T) -> &mut Self {
        let (size, align) = (std::mem::size_of::<T>(), std::mem::align_of::<T>());
        let wide = size > SLOT_BYTES && size <= WIDE_BYTES && self.wide_arg.is_none();
        if self.len == MAX_ARGS || (size > SLOT_BYTES && !wide) || align > 8 {
            self.overflow = Some(format!("argument {} ({size} bytes, align {align})", self.len));
            return self;
        }
        let dst = if wide {
            self.wide_arg = Some(self.len);
            self.wide.as_mut_ptr()
        } else {
            self.slots[self.len].as_mut_ptr()
        };
        // Safety: the slot is 8-byte aligned and at least `size` bytes long.
        unsafe { std::ptr::write(dst as *mut T, v) };
        self.len += 1;
        self
    }

    /// A device buffer the kernel only reads.
    pub fn buf<T>(&mut self, s: &CudaSlice<T>) -> &mut Self {
        let (ptr, _sync) = s.device_ptr(self.gpu.stream());
        self.push(ptr)
    }

    /// A device buffer the kernel writes.
    pub fn buf_mut<T>(&mut self, s: &mut CudaSlice<T>) -> &mut Self {
        let (ptr, _sync) = s.device_ptr_mut(self.gpu.stream());
        self.push(ptr)
    }

    /// A device buffer by address (read or written, as the kernel's signature says).
    pub fn span<T>(&mut self, s: super::DevSpan<T>) -> &mut Self {
        self.push(s.ptr())
    }

    /// A by-value argument (a `kernel-abi` parameter struct).
    pub fn value<T: DeviceRepr + Copy>(&mut self, v: T) -> &mut Self {
        self.push(v)
    }

    /// A number the launch log keeps with this launch (e.g. a matmul's `in_features`, which
    /// the grid does not show); nothing else reads it.
    pub fn tag(&mut self, tag: u32) -> &mut Self {
        self.tag = tag;
        self
    }

    /// Launches as a grid of thread-block clusters of `blocks` consecutive blocks along x
    /// (`CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION`; 0: none). The grid's x size must be a multiple,
    /// and sizes past 8 need [`Gpu::allow_cluster`].
    pub fn cluster(&mut self, blocks: u32) -> &mut Self {
        self.cluster = blocks;
        self
    }

    /// Launches as a grid of thread-block clusters of `blocks` consecutive blocks along y (one
    /// block along x): `blocks ≤ 8`, the portable cluster size.
    pub fn cluster_y(&mut self, blocks: u32) -> &mut Self {
        self.cluster = 1;
        self.cluster_y = blocks.max(1);
        self
    }

    /// Appends a group of arguments that several kernels take in the same order ([`LaunchArgs`]).
    pub(crate) fn args(&mut self, a: &impl LaunchArgs) -> &mut Self {
        a.append(self);
        self
    }

    /// Launches on the context's stream, chained to the previous kernel when
    /// [`chaining_enabled`].
    ///
    /// # Safety
    /// The arguments must match the kernel's signature, and the kernel must execute
    /// `griddepcontrol.wait` before any access to memory that other kernels write.
    pub unsafe fn launch(&mut self, cfg: LaunchConfig) -> Result<(), GpuError> {
        let name = self.name;
        if let Some(what) = &self.overflow {
            return Err(GpuError::shape(name, format!("{what} does not fit a chained launch's argument slots")));
        }
        let f = self.gpu.function(name)?;
        let mut args = [std::ptr::null_mut::<c_void>(); MAX_ARGS];
        for (i, (arg, slot)) in args.iter_mut().zip(self.slots.iter_mut()).take(self.len).enumerate() {
            *arg = if self.wide_arg == Some(i) { self.wide.as_mut_ptr() } else { slot.as_mut_ptr() } as *mut c_void;
        }
        if self.cluster > 0
            && (!cfg.grid_dim.0.is_multiple_of(self.cluster) || !cfg.grid_dim.1.is_multiple_of(self.cluster_y))
        {
            return Err(GpuError::shape(
                name,
                format!(
                    "grid of {} × {} blocks is not a whole number of clusters of {} × {}",
                    cfg.grid_dim.0, cfg.grid_dim.1, self.cluster, self.cluster_y
                ),
            ));
        }
        let mut attrs: [sys::CUlaunchAttribute; 2] = std::mem::zeroed();
        let mut count = 0;
        if chaining_enabled() {
            attrs[count].id = CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
            attrs[count].value.programmaticStreamSerializationAllowed = 1;
            count += 1;
        }
        if self.cluster > 0 {
            attrs[count].id = CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
            attrs[count].value.clusterDim.x = self.cluster;
            attrs[count].value.clusterDim.y = self.cluster_y;
            attrs[count].value.clusterDim.z = 1;
            count += 1;
        }
        let config = sys::CUlaunchConfig {
            gridDimX: cfg.grid_dim.0,
            gridDimY: cfg.grid_dim.1,
            gridDimZ: cfg.grid_dim.2,
            blockDimX: cfg.block_dim.0,
            blockDimY: cfg.block_dim.1,
            blockDimZ: cfg.block_dim.2,
            sharedMemBytes: cfg.shared_mem_bytes,
            hStream: self.gpu.stream().cu_stream(),
            attrs: attrs.as_mut_ptr(),
            numAttrs: count as u32,
        };
        sys::cuLaunchKernelEx(&config, f.cu_function(), args.as_mut_ptr(), std::ptr::null_mut())
            .result()
            .while_(|| format!("launching {name} (chained)"))?;
        self.gpu.log_launch(name, cfg.grid_dim, self.tag);
        Ok(())
    }
}
