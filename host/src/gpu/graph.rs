//! CUDA graph capture and replay: record a sequence of launches once, replay it with one call
//! (removes per-launch CPU overhead from decode steps).

use cudarc::driver::{sys, CudaGraph};

use super::error::{DriverContext, GpuError};
use super::Gpu;

/// A captured, instantiated graph bound to the GPU's stream.
pub struct Graph {
    graph: CudaGraph,
}

impl Graph {
    /// Captures everything `record` launches on the GPU's stream (nothing runs during capture).
    pub fn capture(gpu: &Gpu, record: impl FnOnce() -> Result<(), GpuError>) -> Result<Self, GpuError> {
        gpu.stream()
            .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .while_(|| "beginning graph capture".into())?;
        let recorded = record();
        let ended = gpu.stream().end_capture(sys::CUgraphInstantiate_flags(0)).while_(|| "ending graph capture".into());
        recorded?;
        let graph = ended?.ok_or_else(|| GpuError::shape("graph", "capture recorded no work"))?;
        Ok(Graph { graph })
    }

    /// Starts capturing the GPU's stream: launches until [`Graph::end_capture`] are recorded,
    /// not run. For callers whose recording needs `&mut` access that a closure cannot borrow.
    pub fn begin_capture(gpu: &Gpu) -> Result<(), GpuError> {
        gpu.stream()
            .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .while_(|| "beginning graph capture".into())
    }

    /// Ends a capture begun by [`Graph::begin_capture`] and instantiates the graph. Call it even
    /// when recording failed (it leaves the stream usable).
    pub fn end_capture(gpu: &Gpu) -> Result<Self, GpuError> {
        let graph = gpu
            .stream()
            .end_capture(sys::CUgraphInstantiate_flags(0))
            .while_(|| "ending graph capture".into())?
            .ok_or_else(|| GpuError::shape("graph", "capture recorded no work"))?;
        Ok(Graph { graph })
    }

    /// Replays the graph on the stream (asynchronous).
    pub fn replay(&self) -> Result<(), GpuError> {
        self.graph.launch().while_(|| "launching a graph".into())
    }
}
