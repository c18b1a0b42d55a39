//! The device feature store: the draft's inputs (the outputs of its target layers) for every
//! committed token, kept on the GPU.
//!
//! Layout: `[ctx][layers·d]` f32, row `r` = `concat_c h_{capture[c]}` of the committed token at
//! position `r` — the row-major `[rows, k·H]` a draft's context projection reads. Every forward
//! copies the captured layer outputs of its nodes into a per-forward scratch `[layers][MAX_NODES][d]`
//! (inside the step's graph); [`super::Engine::commit`] appends the accepted path's rows to the
//! store with one `copy_path_rows` launch that reads the path from the device
//! (`crate::gpu::copy::copy_path_rows`; no host copy). Memory traffic per commit:
//! `|path| · layers · d · 4` bytes read and written.
//!
//! The spec loop sees a [`DeviceFeatures`] handle (a row range); a host draft reads the rows
//! through [`EngineFeatures`], a [`FeatureSource`] that downloads them (the explicit copy a CPU
//! draft needs until the draft runs on the GPU, issue 23).

use std::sync::Arc;

use cudarc::driver::CudaSlice;

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

#[cfg(test)]
mod tests {
    use super::*;

    /// The commit's gather (`reference::copy::copy_path_rows`, what `copy_path_rows` computes
    /// on the device) writes each path row from its node's captured rows, layer after layer, and
    /// no other row.
    fn check(path: &[usize], first_row: usize, layers: usize) {
        let (nodes, d, rows) = (32, 3, 80);
        let scratch: Vec<f32> = (0..layers * nodes * d).map(|i| i as f32).collect();
        let mut store = vec![-1f32; rows * layers * d];
        flashtree_reference::copy::copy_path_rows(path, first_row, &scratch, layers, nodes, d, &mut store);
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
    }

    #[test]
    fn the_gather_appends_exactly_the_path_rows_in_path_order() {
        check(&(0..32).collect::<Vec<_>>(), 5, 3);
        check(&[0], 40, 5);
        check(&[0, 2, 3, 7, 8, 9, 10, 11, 12, 20], 11, 2);
        check(&[0, 1, 4, 5, 6, 13], 0, 4);
        check(&[], 3, 2);
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
