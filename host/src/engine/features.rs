//! The device feature store: the draft's inputs (the outputs of its target layers) for every
//! committed token, kept on the GPU.
//!
//! Layout: `[ctx][layers·d]` f32, row `r` = `concat_c h_{capture[c]}` of the committed token at
//! position `r` — the row-major `[rows, k·H]` a draft's context projection reads. Every forward
//! copies the captured layer outputs of its nodes into a per-forward scratch `[layers][MAX_NODES][d]`
//! (inside the step's graph); [`super::Engine::commit`] appends the accepted path's rows to the
//! store with strided device-to-device copies planned by [`feature_copies`] (no host copy).
//! Memory traffic per commit: `|path| · layers · d · 4` bytes read and written.
//!
//! The spec loop sees a [`DeviceFeatures`] handle (a row range); a host draft reads the rows
//! through [`EngineFeatures`], a [`FeatureSource`] that downloads them (the explicit copy a CPU
//! draft needs until the draft runs on the GPU, issue 23).

use std::sync::Arc;

use cudarc::driver::{sys, CudaSlice};

use super::EngineError;
use crate::gpu::{DevSpan, Gpu, GpuError};
use crate::spec::features::{FeatureRows, FeatureSource};
use crate::spec::{FeatureSpan, SpecError};

/// The features of committed tokens `first_row..first_row + rows`, held in the engine's store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceFeatures {
    /// Position of the first row.
    pub first_row: usize,
    /// Rows (tokens).
    pub rows: usize,
}

impl FeatureSpan for DeviceFeatures {
    fn append(&mut self, later: Self) -> Result<(), SpecError> {
        if later.rows == 0 {
            return Ok(());
        }
        if self.rows == 0 {
            *self = later;
            return Ok(());
        }
        if later.first_row != self.first_row + self.rows {
            return Err(SpecError::Config(format!(
                "feature rows {}..{} do not follow rows {}..{}",
                later.first_row,
                later.first_row + later.rows,
                self.first_row,
                self.first_row + self.rows
            )));
        }
        self.rows += later.rows;
        Ok(())
    }

    fn rows(&self) -> usize {
        self.rows
    }

    fn truncate(&mut self, rows: usize) {
        self.rows = self.rows.min(rows);
    }
}

/// The store's device buffer and shape (shared with the [`EngineFeatures`] readers; the engine
/// writes it through device addresses on its stream, readers download on the same stream).
pub struct FeatureStore {
    buf: CudaSlice<f32>,
    /// Captured layers `k`.
    layers: usize,
    /// Hidden size `d`.
    d: usize,
    /// Rows (the engine's context).
    rows: usize,
}

impl FeatureStore {
    /// A zeroed store of `rows` rows of `layers · d` f32.
    pub fn new(gpu: &Gpu, rows: usize, layers: usize, d: usize) -> Result<Self, EngineError> {
        let len = rows
            .checked_mul(layers)
            .and_then(|x| x.checked_mul(d))
            .ok_or_else(|| EngineError::Plan("feature store size overflows".into()))?;
        Ok(FeatureStore { buf: gpu.zeros::<f32>(len.max(1))?, layers, d, rows })
    }

    /// f32 per row: `layers · d`.
    pub fn width(&self) -> usize {
        self.layers * self.d
    }

    /// The whole store as a device span (`rows · width` f32).
    pub fn span(&self, gpu: &Gpu) -> DevSpan<f32> {
        DevSpan::of(gpu, &self.buf)
    }

    /// Downloads rows `h.first_row..+h.rows` (waits for the stream: the copies of the commits
    /// that wrote them come first on it).
    pub fn host_rows(&self, h: &DeviceFeatures) -> Result<FeatureRows, EngineError> {
        let end = h.first_row.checked_add(h.rows).filter(|&e| e <= self.rows).ok_or_else(|| {
            EngineError::Batch(format!(
                "feature rows {}..+{} outside the store of {} rows",
                h.first_row, h.rows, self.rows
            ))
        })?;
        if h.rows == 0 || self.width() == 0 {
            return Ok(vec![Vec::new(); h.rows]);
        }
        let w = self.width();
        let view = self.buf.slice(h.first_row * w..end * w);
        let flat =
            self.buf.stream().clone_dtoh(&view).map_err(|e| GpuError::from_driver("downloading feature rows", e))?;
        Ok(flat.chunks(w).map(<[f32]>::to_vec).collect())
    }
}

/// A reader of an engine's feature store: the [`FeatureSource`] of a host draft driven by the
/// GPU target ([`crate::spec::features::HostDraft`]).
#[derive(Clone)]
pub struct EngineFeatures(pub(super) Arc<FeatureStore>);

impl FeatureSource for EngineFeatures {
    type Handle = DeviceFeatures;

    fn host_rows(&self, h: &DeviceFeatures) -> Result<FeatureRows, SpecError> {
        self.0.host_rows(h).map_err(SpecError::backend)
    }
}

/// One strided copy, in f32 units: `height` rows of `width` values from `src` (row pitch
/// `src_pitch`) to `dst` (row pitch `dst_pitch`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowCopy {
    pub src: usize,
    pub src_pitch: usize,
    pub dst: usize,
    pub dst_pitch: usize,
    pub width: usize,
    pub height: usize,
}

/// The copies that append the captured rows of `path` (node indices of the last forward, in
/// path order) to store rows `first_row..first_row + path.len()`, from the scratch
/// `[layers][nodes][d]` (`nodes` = its rows per layer) into the store `[rows][layers·d]`.
/// Each run of consecutive node indices is copied per layer (height = the run) when it is at
/// least as long as `layers`, else per node (height = `layers`): `min(run, layers)` copies.
pub fn feature_copies(path: &[usize], first_row: usize, layers: usize, nodes: usize, d: usize) -> Vec<RowCopy> {
    let w = layers * d;
    let mut out = Vec::new();
    let mut p = 0;
    while p < path.len() {
        let mut len = 1;
        while p + len < path.len() && path[p + len] == path[p] + len {
            len += 1;
        }
        let (node, row) = (path[p], first_row + p);
        if len >= layers {
            for c in 0..layers {
                let src = (c * nodes + node) * d;
                out.push(RowCopy { src, src_pitch: d, dst: row * w + c * d, dst_pitch: w, width: d, height: len });
            }
        } else {
            for k in 0..len {
                let src = (node + k) * d;
                let dst = (row + k) * w;
                out.push(RowCopy { src, src_pitch: nodes * d, dst, dst_pitch: d, width: d, height: layers });
            }
        }
        p += len;
    }
    out
}

/// Enqueues `c` on the stream: `src` and `dst` hold the values it addresses.
pub fn enqueue_copy(gpu: &Gpu, c: &RowCopy, src: DevSpan<f32>, dst: DevSpan<f32>) -> Result<(), GpuError> {
    let last = |off: usize, pitch: usize| off + (c.height.max(1) - 1) * pitch + c.width;
    src.need(last(c.src, c.src_pitch), "feature copy", "source")?;
    dst.need(last(c.dst, c.dst_pitch), "feature copy", "destination")?;
    if c.width == 0 || c.height == 0 {
        return Ok(());
    }
    let desc = sys::CUDA_MEMCPY2D {
        srcXInBytes: 0,
        srcY: 0,
        srcMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
        srcHost: std::ptr::null(),
        srcDevice: src.ptr() + 4 * c.src as u64,
        srcArray: std::ptr::null_mut(),
        srcPitch: 4 * c.src_pitch,
        dstXInBytes: 0,
        dstY: 0,
        dstMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
        dstHost: std::ptr::null_mut(),
        dstDevice: dst.ptr() + 4 * c.dst as u64,
        dstArray: std::ptr::null_mut(),
        dstPitch: 4 * c.dst_pitch,
        WidthInBytes: 4 * c.width,
        Height: c.height,
    };
    gpu.context().bind_to_thread().map_err(|e| GpuError::from_driver("binding the context", e))?;
    // Safety: both ranges were checked against their spans above; the copy is ordered on the
    // engine's stream after the forward that wrote the source.
    unsafe { sys::cuMemcpy2DAsync_v2(&desc, gpu.stream().cu_stream()) }
        .result()
        .map_err(|e| GpuError::from_driver("copying feature rows", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Applies the copies on host arrays and checks every store row against the scratch.
    fn check(path: &[usize], first_row: usize, layers: usize) -> usize {
        let (nodes, d, rows) = (32, 3, 80);
        let scratch: Vec<f32> = (0..layers * nodes * d).map(|i| i as f32).collect();
        let mut store = vec![-1f32; rows * layers * d];
        // The reference of `copy_path_rows` (one launch for the whole path) writes the same store.
        let mut gathered = store.clone();
        flashtree_reference::copy::copy_path_rows(path, first_row, &scratch, layers, nodes, d, &mut gathered);
        let copies = feature_copies(path, first_row, layers, nodes, d);
        for c in &copies {
            for r in 0..c.height {
                for x in 0..c.width {
                    store[c.dst + r * c.dst_pitch + x] = scratch[c.src + r * c.src_pitch + x];
                }
            }
        }
        assert_eq!(store, gathered, "the strided copies and the gather reference differ on {path:?}");
        let w = layers * d;
        for row in 0..rows {
            let got = &store[row * w..(row + 1) * w];
            match row.checked_sub(first_row).and_then(|p| path.get(p)) {
                Some(&node) => {
                    let want: Vec<f32> =
                        (0..layers).flat_map(|c| scratch[(c * nodes + node) * d..][..d].iter().copied()).collect();
                    assert_eq!(got, &want[..], "row {row} (node {node}) of path {path:?}");
                }
                None => assert!(got.iter().all(|&v| v == -1.0), "row {row} written outside the path"),
            }
        }
        copies.len()
    }

    #[test]
    fn copies_append_exactly_the_path_rows_in_path_order() {
        assert_eq!(check(&(0..32).collect::<Vec<_>>(), 5, 3), 3, "a chain is one copy per layer");
        assert_eq!(check(&[0], 40, 5), 1, "an AR row is one copy");
        check(&[0, 2, 3, 7, 8, 9, 10, 11, 12, 20], 11, 2);
        check(&[0, 1, 4, 5, 6, 13], 0, 4);
        assert_eq!(check(&[], 3, 2), 0);
    }

    #[test]
    fn handles_join_only_adjacent_ranges() {
        let mut h = DeviceFeatures { first_row: 0, rows: 0 };
        h.append(DeviceFeatures { first_row: 7, rows: 3 }).unwrap();
        h.append(DeviceFeatures { first_row: 10, rows: 1 }).unwrap();
        h.append(DeviceFeatures { first_row: 99, rows: 0 }).unwrap();
        assert_eq!(h, DeviceFeatures { first_row: 7, rows: 4 });
        assert!(h.append(DeviceFeatures { first_row: 12, rows: 1 }).is_err());
    }
}
