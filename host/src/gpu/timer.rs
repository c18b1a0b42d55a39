//! Timing with CUDA events (device time between two points of the stream).

use cudarc::driver::{sys, CudaEvent};

use super::error::{DriverContext, GpuError};
use super::Gpu;

/// A pair of timing events on the GPU's stream.
pub struct GpuTimer {
    start: CudaEvent,
    stop: CudaEvent,
}

impl GpuTimer {
    pub fn new(gpu: &Gpu) -> Result<Self, GpuError> {
        let flags = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
        let start = gpu.context().new_event(flags).while_(|| "creating an event".into())?;
        let stop = gpu.context().new_event(flags).while_(|| "creating an event".into())?;
        Ok(GpuTimer { start, stop })
    }

    pub fn start(&self, gpu: &Gpu) -> Result<(), GpuError> {
        self.start.record(gpu.stream()).while_(|| "recording an event".into())
    }

    pub fn stop(&self, gpu: &Gpu) -> Result<(), GpuError> {
        self.stop.record(gpu.stream()).while_(|| "recording an event".into())
    }

    /// Milliseconds between `start` and `stop` (waits for `stop`).
    pub fn elapsed_ms(&self) -> Result<f32, GpuError> {
        self.stop.synchronize().while_(|| "waiting for an event".into())?;
        self.start.elapsed_ms(&self.stop).while_(|| "reading event time".into())
    }

    /// Device time of `reps` runs of `work` after `warmup` runs, per run, in seconds.
    pub fn time_per_run(
        gpu: &Gpu,
        warmup: usize,
        reps: usize,
        mut work: impl FnMut() -> Result<(), GpuError>,
    ) -> Result<f64, GpuError> {
        for _ in 0..warmup {
            work()?;
        }
        let t = GpuTimer::new(gpu)?;
        t.start(gpu)?;
        for _ in 0..reps.max(1) {
            work()?;
        }
        t.stop(gpu)?;
        Ok(t.elapsed_ms()? as f64 * 1e-3 / reps.max(1) as f64)
    }
}
