//! Each kernel's time *inside* the chained step, from the `chain-trace` experiment build.
//!
//! With `gpu-kernels`' `chain-trace` feature (`cargo xtask ptx --features chain-trace`, loaded
//! with `FLASHTREE_PTX=<file>`), thread 0 of every kernel's block `(0, 0, 0)` stamps
//! `%globaltimer` when it reaches `griddepcontrol.wait` ("arrive") and when the wait returns
//! ("ready": every earlier kernel of the chain has completed and its writes are visible), in the
//! chain's order (`gpu-kernels` `device::griddep`). So for consecutive kernels `k`, `k + 1`,
//! `ready[k+1] − ready[k]` is kernel `k`'s share of the step's critical path: its own run from
//! the moment its inputs were ready, its tail, and the hand-over to the next kernel (grid
//! completion, memory flush, the next block's start). The shares of a forward add up to its
//! chained time from the first kernel's ready stamp to the last's (the last kernel's own share is
//! not measured). `ready − arrive` > 0 means block 0 was resident before its inputs were: the
//! launch and prologue were hidden under the previous kernel.
//!
//! Labels come from the host's launch log ([`super::Gpu::start_launch_log`]), matched in order
//! and checked by grid: a kernel launched without `griddepcontrol.wait` in block 0 (none of the
//! engine's) would shift the labels and is reported as a mismatch, not silently mislabelled.
//! `%globaltimer`'s resolution is the driver's (32 ns to 1 µs); averages over many forwards are
//! what to read.

use cudarc::driver::{sys, DevicePtr};
use kernel_abi::{CHAIN_TRACE_CAP, CHAIN_TRACE_WORDS};

use super::error::{DriverContext, GpuError};
use super::Gpu;

/// One chained launch as the host issued it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchRecord {
    pub name: &'static str,
    pub grid: (u32, u32, u32),
    /// The launcher's [`super::ChainedLaunch::tag`] (a matmul's `in_features`), else 0.
    pub tag: u32,
}

/// One kernel's stamps as the device wrote them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceRecord {
    pub arrive_ns: u64,
    pub ready_ns: u64,
    pub grid: (u32, u32, u32),
}

/// The trace globals of the loaded module.
pub struct ChainTrace<'g> {
    gpu: &'g Gpu,
    count: sys::CUdeviceptr,
    records: sys::CUdeviceptr,
}

impl<'g> ChainTrace<'g> {
    /// The trace of the loaded PTX; an error naming what to build when it is not a
    /// `chain-trace` build.
    pub fn open(gpu: &'g Gpu) -> Result<Self, GpuError> {
        let missing = |e| {
            GpuError::NoDevice(format!(
                "the loaded kernels have no chain trace ({e}): build them with `cargo xtask ptx --features \
                 chain-trace` and run with FLASHTREE_PTX=target/ptx/gpu_kernels.sm_90a+chain-trace.ptx"
            ))
        };
        let ptr = |name: &str| -> Result<(sys::CUdeviceptr, usize), GpuError> {
            let v = gpu.module().get_global(name, gpu.stream()).map_err(missing)?;
            let (p, _sync) = v.device_ptr(gpu.stream());
            Ok((p, v.len()))
        };
        let (count, count_len) = ptr("FLASHTREE_TRACE_COUNT")?;
        let (records, len) = ptr("FLASHTREE_TRACE")?;
        let want = CHAIN_TRACE_CAP as usize * CHAIN_TRACE_WORDS * 8;
        if count_len != 4 || len != want {
            return Err(GpuError::NoDevice(format!(
                "chain trace globals of {count_len} and {len} bytes, expected 4 and {want} (kernels and host \
                 built from different kernel-abi versions)"
            )));
        }
        Ok(ChainTrace { gpu, count, records })
    }

    /// Clears the record count (ordered on the stream).
    pub fn reset(&self) -> Result<(), GpuError> {
        // Safety: `count` is the 4-byte module global found in `open`.
        unsafe { cudarc::driver::result::memset_d8_async(self.count, 0, 4, self.gpu.stream().cu_stream()) }
            .while_(|| "clearing the chain trace".into())
    }

    /// Waits for the stream and returns the records written since [`Self::reset`] (at most
    /// `CHAIN_TRACE_CAP`) with the total count the kernels tried to write.
    pub fn read(&self) -> Result<(Vec<TraceRecord>, usize), GpuError> {
        self.gpu.stream().synchronize().while_(|| "waiting for the traced forwards".into())?;
        let mut count = [0u32];
        // Safety: both globals were sized in `open`; the stream is idle.
        unsafe { cudarc::driver::result::memcpy_dtoh_sync(&mut count, self.count) }
            .while_(|| "reading the chain trace count".into())?;
        let n = (count[0] as usize).min(CHAIN_TRACE_CAP as usize);
        let mut words = vec![0u64; n * CHAIN_TRACE_WORDS];
        if n > 0 {
            unsafe { cudarc::driver::result::memcpy_dtoh_sync(&mut words, self.records) }
                .while_(|| "reading the chain trace".into())?;
        }
        let recs = words
            .chunks_exact(CHAIN_TRACE_WORDS)
            .map(|w| TraceRecord {
                arrive_ns: w[0],
                ready_ns: w[1],
                grid: (w[2] as u32, (w[2] >> 32) as u16 as u32, (w[2] >> 48) as u32),
            })
            .collect();
        Ok((recs, count[0] as usize))
    }
}

/// One kernel position of a forward, averaged over the traced forwards.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelShare {
    pub name: &'static str,
    pub grid: (u32, u32, u32),
    pub tag: u32,
    /// Mean `ready[k+1] − ready[k]` in ns (`None` for the last kernel).
    pub share_ns: Option<f64>,
    /// Mean `ready[k] − arrive[k]` in ns.
    pub lead_ns: f64,
}

/// Splits `records` into forwards of `log.len()` kernels each, checks every record's grid
/// against the log, and averages each position's share and lead over the forwards. Errors
/// (as text) when the counts or grids do not line up.
pub fn kernel_shares(log: &[LaunchRecord], records: &[TraceRecord]) -> Result<Vec<KernelShare>, String> {
    let l = log.len();
    if l == 0 || records.is_empty() || !records.len().is_multiple_of(l) {
        return Err(format!("{} trace records for forwards of {l} launches", records.len()));
    }
    let forwards = records.len() / l;
    for (f, fw) in records.chunks_exact(l).enumerate() {
        for (k, (r, launch)) in fw.iter().zip(log).enumerate() {
            if r.grid != launch.grid {
                return Err(format!(
                    "forward {f}, kernel {k} ({}): the trace's grid {:?} is not the launch's {:?}",
                    launch.name, r.grid, launch.grid
                ));
            }
        }
    }
    Ok((0..l)
        .map(|k| {
            let mean =
                |v: &dyn Fn(&[TraceRecord]) -> f64| records.chunks_exact(l).map(v).sum::<f64>() / forwards as f64;
            KernelShare {
                name: log[k].name,
                grid: log[k].grid,
                tag: log[k].tag,
                share_ns: (k + 1 < l).then(|| mean(&|fw| fw[k + 1].ready_ns.saturating_sub(fw[k].ready_ns) as f64)),
                lead_ns: mean(&|fw| fw[k].ready_ns.saturating_sub(fw[k].arrive_ns) as f64),
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(arrive: u64, ready: u64, x: u32) -> TraceRecord {
        TraceRecord { arrive_ns: arrive, ready_ns: ready, grid: (x, 1, 1) }
    }

    #[test]
    fn shares_are_the_gaps_between_ready_stamps_averaged_over_forwards() {
        let log = vec![
            LaunchRecord { name: "a", grid: (1, 1, 1), tag: 0 },
            LaunchRecord { name: "b", grid: (2, 1, 1), tag: 0 },
            LaunchRecord { name: "c", grid: (3, 1, 1), tag: 0 },
        ];
        let recs =
            vec![rec(0, 10, 1), rec(5, 40, 2), rec(40, 45, 3), rec(100, 100, 1), rec(100, 120, 2), rec(130, 150, 3)];
        let s = kernel_shares(&log, &recs).unwrap();
        assert_eq!(s[0].share_ns, Some((30.0 + 20.0) / 2.0));
        assert_eq!(s[1].share_ns, Some((5.0 + 30.0) / 2.0));
        assert_eq!(s[2].share_ns, None);
        assert_eq!(s[1].lead_ns, (35.0 + 20.0) / 2.0);
    }

    #[test]
    fn a_shifted_trace_is_reported_not_mislabelled() {
        let log = vec![
            LaunchRecord { name: "a", grid: (1, 1, 1), tag: 0 },
            LaunchRecord { name: "b", grid: (2, 1, 1), tag: 0 },
        ];
        let err = kernel_shares(&log, &[rec(0, 1, 2), rec(1, 2, 1)]).unwrap_err();
        assert!(err.contains("kernel 0 (a)"), "{err}");
        assert!(kernel_shares(&log, &[rec(0, 1, 1)]).unwrap_err().contains("1 trace records"));
    }
}
