//! The GPU handle: context, stream, module and kernel lookup.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use cudarc::driver::{
    sys, CudaContext, CudaEvent, CudaFunction, CudaModule, CudaSlice, CudaStream, DeviceRepr, ValidAsZeroBits,
};
use cudarc::nvrtc::Ptx;

use super::error::{DriverContext, GpuError};

/// The kernels' PTX (sm_90a: Hopper, PTX ISA 8.0), embedded at build time by `host/build.rs`.
/// `FLASHTREE_PTX=<file>` at run time loads another build instead (for A/B runs of kernel
/// variants with the same test and bench binaries).
pub const KERNELS_PTX: &str = include_str!(env!("FLASHTREE_KERNELS_PTX"));

/// One GPU: a context, its main stream and the kernel module. All work is ordered on the main
/// stream, except what [`Gpu::on_side_stream`] enqueues on the side stream (work the next
/// kernels on the main stream do not need, run beside them).
pub struct Gpu {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    /// The second stream ([`Gpu::on_side_stream`]).
    side: Arc<CudaStream>,
    /// [`Gpu::stream`] is the side stream (only inside [`Gpu::on_side_stream`]).
    on_side: AtomicBool,
    module: Arc<CudaModule>,
    functions: Mutex<HashMap<&'static str, CudaFunction>>,
    /// Dynamic shared memory each kernel has been allowed beyond the default 48 KiB.
    smem_allowed: Mutex<HashMap<&'static str, u32>>,
    /// Kernels allowed clusters past 8 blocks ([`Gpu::allow_cluster`]).
    cluster_allowed: Mutex<std::collections::HashSet<&'static str>>,
    /// Clusters resident at once, per kernel, dynamic shared memory and cluster size (cached).
    resident_clusters: Mutex<HashMap<(&'static str, u32, u32), u32>>,
    /// Blocks resident at once on the whole device, per kernel and block size (cached).
    resident: Mutex<HashMap<(&'static str, u32), u32>>,
    /// The device's SM count ([`Gpu::sm_count`], read once).
    sms: std::sync::OnceLock<u32>,
    /// Chained launches in order while a launch log is on ([`Gpu::start_launch_log`]).
    launch_log: Mutex<Option<Vec<super::trace::LaunchRecord>>>,
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpu").field("ordinal", &self.ctx.ordinal()).finish()
    }
}

/// Whether the main stream has the device's highest priority and the side stream its lowest
/// (default; `FLASHTREE_STREAM_PRIORITY=0`: both at the default priority).
fn main_stream_first() -> bool {
    std::env::var("FLASHTREE_STREAM_PRIORITY").map(|v| v.trim() != "0").unwrap_or(true)
}

/// Whether libcuda can be loaded at all (never panics).
pub fn driver_present() -> bool {
    std::panic::catch_unwind(|| unsafe { sys::is_culib_present() }).unwrap_or(false)
}

impl Gpu {
    /// Opens GPU 0. Returns [`GpuError::NoDriver`] on a machine without the NVIDIA driver.
    pub fn try_new() -> Result<Self, GpuError> {
        Self::try_new_on(0)
    }

    /// Opens GPU `ordinal`, loads the embedded PTX and creates one stream.
    pub fn try_new_on(ordinal: usize) -> Result<Self, GpuError> {
        if !driver_present() {
            return Err(GpuError::NoDriver);
        }
        let ctx = std::panic::catch_unwind(|| CudaContext::new(ordinal))
            .map_err(|_| GpuError::NoDriver)?
            .map_err(|e| GpuError::NoDevice(format!("opening device {ordinal}: {e}")))?;
        // One stream: cudarc's cross-stream event tracking would only add work per launch.
        unsafe { ctx.disable_event_tracking() };
        let (stream, side) = if main_stream_first() {
            // The block scheduler places the main stream's pending blocks before the side
            // stream's: side work fills what the main stream leaves idle.
            let (least, greatest) = cudarc::driver::result::stream::get_priority_range()
                .while_(|| "reading the stream priority range".into())?;
            (
                ctx.new_stream_with_priority(greatest).while_(|| "creating a stream".into())?,
                ctx.new_stream_with_priority(least).while_(|| "creating the side stream".into())?,
            )
        } else {
            (
                ctx.new_stream().while_(|| "creating a stream".into())?,
                ctx.new_stream().while_(|| "creating the side stream".into())?,
            )
        };
        let module = match std::env::var_os("FLASHTREE_PTX") {
            // Kernel development: run the same binary against another build of the kernels.
            Some(path) => {
                let src = std::fs::read_to_string(&path).map_err(|e| {
                    GpuError::NoDevice(format!("FLASHTREE_PTX={}: {e}", std::path::Path::new(&path).display()))
                })?;
                ctx.load_module(Ptx::from_src(src))
                    .while_(|| format!("loading FLASHTREE_PTX={}", std::path::Path::new(&path).display()))?
            }
            None => {
                ctx.load_module(Ptx::from_src(KERNELS_PTX)).while_(|| "loading the kernels' PTX (driver JIT)".into())?
            }
        };
        Ok(Gpu {
            ctx,
            stream,
            side,
            on_side: AtomicBool::new(false),
            module,
            functions: Mutex::new(HashMap::new()),
            smem_allowed: Mutex::new(HashMap::new()),
            cluster_allowed: Mutex::new(std::collections::HashSet::new()),
            resident_clusters: Mutex::new(HashMap::new()),
            resident: Mutex::new(HashMap::new()),
            sms: std::sync::OnceLock::new(),
            launch_log: Mutex::new(None),
        })
    }

    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// The stream launches and copies go to: the main stream, or the side stream inside
    /// [`Gpu::on_side_stream`].
    pub fn stream(&self) -> &Arc<CudaStream> {
        if self.on_side.load(Ordering::Relaxed) {
            &self.side
        } else {
            &self.stream
        }
    }

    /// Enqueues `f`'s launches and copies (everything it sends through [`Gpu::stream`]) on the
    /// side stream, after all the work enqueued on the main stream so far (`start` is recorded
    /// there and waited for), and records `done` on the side stream after them. The main stream
    /// keeps going: whatever it enqueues next runs beside `f`'s work, so it must neither read
    /// nor write what `f`'s work writes, nor write what it reads, until it has waited for `done`
    /// ([`Gpu::wait_on_main`]). Not reentrant; one thread enqueues at a time (as on the main
    /// stream).
    pub fn on_side_stream<R, E: From<GpuError>>(
        &self,
        start: &CudaEvent,
        done: &CudaEvent,
        f: impl FnOnce() -> Result<R, E>,
    ) -> Result<R, E> {
        start.record(&self.stream).while_(|| "recording the side stream's start".into())?;
        self.side.wait(start).while_(|| "ordering the side stream after the main stream".into())?;
        self.on_side.store(true, Ordering::Relaxed);
        let r = f();
        self.on_side.store(false, Ordering::Relaxed);
        // Recorded on failure too: what `f` enqueued before failing is still waited for.
        let recorded = done.record(&self.side).while_(|| "recording the side stream's end".into());
        let r = r?;
        recorded?;
        Ok(r)
    }

    /// Makes the main stream's later work wait for `event` (a [`Gpu::on_side_stream`] end).
    pub fn wait_on_main(&self, event: &CudaEvent) -> Result<(), GpuError> {
        self.stream.wait(event).while_(|| "waiting for the side stream".into())
    }

    /// A reusable event without timing (for [`Gpu::on_side_stream`]).
    pub fn new_sync_event(&self) -> Result<CudaEvent, GpuError> {
        self.ctx.new_event(None).while_(|| "creating an event".into())
    }

    pub(crate) fn module(&self) -> &Arc<CudaModule> {
        &self.module
    }

    /// Starts recording every chained launch (kernel name and grid) in order, dropping any log
    /// in progress; [`Gpu::take_launch_log`] ends it. A graph replay launches nothing from the
    /// host, so record while a forward is enqueued (its first run, or with graphs off).
    pub fn start_launch_log(&self) {
        *self.launch_log.lock().unwrap_or_else(|p| p.into_inner()) = Some(Vec::new());
    }

    /// Ends the launch log and returns it (empty when none was on).
    pub fn take_launch_log(&self) -> Vec<super::trace::LaunchRecord> {
        self.launch_log.lock().unwrap_or_else(|p| p.into_inner()).take().unwrap_or_default()
    }

    pub(crate) fn log_launch(&self, name: &'static str, grid: (u32, u32, u32), tag: u32) {
        if let Some(log) = self.launch_log.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
            log.push(super::trace::LaunchRecord { name, grid, tag });
        }
    }

    /// The kernel named `name` (cached after the first lookup).
    pub fn function(&self, name: &'static str) -> Result<CudaFunction, GpuError> {
        let mut map = self.functions.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(f) = map.get(name) {
            return Ok(f.clone());
        }
        let f = self.module.load_function(name).while_(|| format!("looking up kernel `{name}` in the PTX"))?;
        map.insert(name, f.clone());
        Ok(f)
    }

    /// How many blocks of `threads` threads (no dynamic shared memory) of kernel `name` the whole
    /// device keeps resident at once: SMs × the driver's occupancy for it (cached).
    pub fn resident_blocks(&self, name: &'static str, threads: u32) -> Result<u32, GpuError> {
        let mut map = self.resident.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(&v) = map.get(&(name, threads)) {
            return Ok(v);
        }
        let f = self.function(name)?;
        // The occupancy query runs on the calling thread's current context, which a thread that
        // has not launched anything yet (a loader, a test thread) does not have.
        self.ctx.bind_to_thread().while_(|| "binding the context".into())?;
        let per_sm = f
            .occupancy_max_active_blocks_per_multiprocessor(threads, 0, None)
            .while_(|| format!("reading the occupancy of `{name}`"))?;
        let sms = self
            .ctx
            .attribute(cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .while_(|| "reading the SM count".into())?;
        let v = per_sm.max(1) * (sms.max(1) as u32);
        map.insert((name, threads), v);
        Ok(v)
    }

    /// The device's number of SMs (read once).
    pub fn sm_count(&self) -> Result<u32, GpuError> {
        if let Some(&v) = self.sms.get() {
            return Ok(v);
        }
        self.ctx.bind_to_thread().while_(|| "binding the context".into())?;
        let sms = self
            .ctx
            .attribute(cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .while_(|| "reading the SM count".into())?;
        Ok(*self.sms.get_or_init(|| sms.max(1) as u32))
    }

    /// Lets kernel `name` launch with `bytes` of dynamic shared memory (the driver refuses more
    /// than 48 KiB unless the function is opted in; done once per kernel and size).
    pub fn allow_dynamic_smem(&self, name: &'static str, bytes: u32) -> Result<(), GpuError> {
        // Any dynamic size gets the attribute: the 48 KiB default also covers the kernel's static
        // shared memory, so exactly 48 KiB of dynamic memory plus a static flag already fails.
        if bytes == 0 {
            return Ok(());
        }
        let mut map = self.smem_allowed.lock().unwrap_or_else(|p| p.into_inner());
        if map.get(name).is_some_and(|&b| b >= bytes) {
            return Ok(());
        }
        let f = self.function(name)?;
        f.set_attribute(
            cudarc::driver::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            bytes as i32,
        )
        .while_(|| format!("allowing `{name}` {bytes} bytes of dynamic shared memory"))?;
        map.insert(name, bytes);
        Ok(())
    }

    /// Lets `name` run in thread-block clusters of `blocks` blocks: sizes past the portable 8 need
    /// `CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED` (sm_90 allows 16). Set once per kernel.
    pub fn allow_cluster(&self, name: &'static str, blocks: u32) -> Result<(), GpuError> {
        if blocks <= 8 {
            return Ok(());
        }
        let mut set = self.cluster_allowed.lock().unwrap_or_else(|p| p.into_inner());
        if set.contains(name) {
            return Ok(());
        }
        let f = self.function(name)?;
        f.set_attribute(
            cudarc::driver::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED,
            1,
        )
        .while_(|| format!("allowing `{name}` clusters of {blocks} blocks"))?;
        set.insert(name);
        Ok(())
    }

    /// Clusters of `cluster` blocks of `threads` threads (with `smem` bytes of dynamic shared
    /// memory) of kernel `name` the device keeps resident at once
    /// (`cuOccupancyMaxActiveClusters`; cached). A cluster's blocks must fit one GPC together, so
    /// this can be well below `resident_blocks / cluster`.
    pub fn resident_clusters(
        &self,
        name: &'static str,
        threads: u32,
        smem: u32,
        cluster: u32,
    ) -> Result<u32, GpuError> {
        if let Some(&v) = self.resident_clusters.lock().unwrap_or_else(|p| p.into_inner()).get(&(name, smem, cluster)) {
            return Ok(v);
        }
        self.allow_cluster(name, cluster)?;
        self.allow_dynamic_smem(name, smem)?;
        let f = self.function(name)?;
        self.ctx.bind_to_thread().while_(|| "binding the context".into())?;
        let mut n: std::ffi::c_int = 0;
        // Safety: the config and attribute outlive the call; the function belongs to this context.
        unsafe {
            let mut attr: sys::CUlaunchAttribute = std::mem::zeroed();
            attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
            attr.value.clusterDim.x = cluster;
            attr.value.clusterDim.y = 1;
            attr.value.clusterDim.z = 1;
            let config = sys::CUlaunchConfig {
                gridDimX: cluster,
                gridDimY: 1,
                gridDimZ: 1,
                blockDimX: threads,
                blockDimY: 1,
                blockDimZ: 1,
                sharedMemBytes: smem,
                hStream: std::ptr::null_mut(),
                attrs: &mut attr,
                numAttrs: 1,
            };
            sys::cuOccupancyMaxActiveClusters(&mut n, f.cu_function(), &config)
                .result()
                .while_(|| format!("reading how many clusters of {cluster} `{name}` blocks fit"))?;
        }
        let v = n.max(0) as u32;
        self.resident_clusters.lock().unwrap_or_else(|p| p.into_inner()).insert((name, smem, cluster), v);
        Ok(v)
    }

    /// Zero-filled device buffer of `n` elements.
    pub fn zeros<T: DeviceRepr + ValidAsZeroBits>(&self, n: usize) -> Result<CudaSlice<T>, GpuError> {
        self.stream.alloc_zeros(n).while_(|| format!("allocating {n} × {} bytes", std::mem::size_of::<T>()))
    }

    /// Device copy of `data`.
    pub fn upload<T: DeviceRepr>(&self, data: &[T]) -> Result<CudaSlice<T>, GpuError> {
        self.stream.clone_htod(data).while_(|| format!("uploading {} bytes", std::mem::size_of_val(data)))
    }

    /// Copies `src` back to the host (waits for the stream).
    pub fn download<T: DeviceRepr + Default + Clone>(&self, src: &CudaSlice<T>) -> Result<Vec<T>, GpuError> {
        self.stream.clone_dtoh(src).while_(|| format!("downloading {} elements", src.len()))
    }

    /// Overwrites `dst` with `data` (`data.len() == dst.len()`).
    pub fn write<T: DeviceRepr>(&self, data: &[T], dst: &mut CudaSlice<T>) -> Result<(), GpuError> {
        if data.len() != dst.len() {
            return Err(GpuError::shape("write", format!("{} values into a buffer of {}", data.len(), dst.len())));
        }
        self.stream.memcpy_htod(data, dst).while_(|| "copying to the device".into())
    }

    /// Overwrites the first `data.len()` elements of `dst` (`data.len() ≤ dst.len()`).
    pub fn write_prefix<T: DeviceRepr>(&self, data: &[T], dst: &mut CudaSlice<T>) -> Result<(), GpuError> {
        if data.len() > dst.len() {
            return Err(GpuError::shape("write", format!("{} values into a buffer of {}", data.len(), dst.len())));
        }
        let mut view = dst.slice_mut(0..data.len());
        self.stream.memcpy_htod(data, &mut view).while_(|| "copying to the device".into())
    }

    /// Fills a buffer with a byte pattern (used to poison outputs in tests).
    pub fn fill_bytes<T>(&self, dst: &mut CudaSlice<T>, byte: u8) -> Result<(), GpuError> {
        use cudarc::driver::DevicePtrMut;
        let bytes = dst.num_bytes();
        let (ptr, _guard) = dst.device_ptr_mut(&self.stream);
        unsafe { cudarc::driver::result::memset_d8_async(ptr, byte, bytes, self.stream.cu_stream()) }
            .while_(|| "memset".into())
    }

    /// Waits for all work on both streams and reports any asynchronous error.
    pub fn synchronize(&self) -> Result<(), GpuError> {
        self.side.synchronize().while_(|| "synchronizing the side stream".into())?;
        self.stream.synchronize().while_(|| "synchronizing the stream".into())
    }
}

impl Gpu {
    /// Free and total device memory in bytes.
    pub fn memory_info(&self) -> Result<(u64, u64), GpuError> {
        self.ctx.bind_to_thread().while_(|| "binding the context".into())?;
        let (free, total) = cudarc::driver::result::mem_get_info().while_(|| "reading free device memory".into())?;
        Ok((free as u64, total as u64))
    }
}
