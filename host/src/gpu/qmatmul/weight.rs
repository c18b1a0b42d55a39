//! [`QWeight`]: one weight matrix on the device in the `qmm` packed layout, with everything a
//! product needs to launch (type, shape, K split; the kernel family follows from the type), so
//! no caller passes a type and a shape next to a bare buffer. [`PackedWeight`] is the same
//! matrix packed on the host, not yet uploaded (the engine packs on every core and uploads from
//! one thread).

use cudarc::driver::CudaSlice;
use flashtree_quants::GgmlType;

use super::format::{family_for, qmm_needs_pairs, swiglu_rows, to_u32};
use super::kernels::{choose_plan, cluster_residency, launch, spread_for, uses_cluster};
use super::pack::{pack_gate_up, pack_weights};
use super::QmmWorkspace;
use crate::gpu::{DevSpan, Gpu, GpuError};
use kernel_abi::QmmSplitPlan;

/// What the packed rows are: a plain matrix, or gate and up interleaved by 8 rows for the fused
/// SwiGLU product of `ff` features.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Rows {
    Plain,
    GateUp { ff: u32 },
}

/// A matrix packed for the `qmm_*` kernels on the host ([`QWeight`] once uploaded).
pub struct PackedWeight {
    ty: GgmlType,
    /// Product rows: `out`, or [`super::qmm_swiglu_rows`]`(ff)` for gate/up.
    rows: u32,
    inp: u32,
    kind: Rows,
    bytes: Vec<u8>,
}

impl PackedWeight {
    /// Packs W `[out, inp]` of type `ty` (raw GGUF bytes, rows contiguous) into the lane layout
    /// (`pack.rs`). Errors name the type and shape: a type without a tensor-core kernel, `inp`
    /// not a multiple of its K block, a byte count that is not `out` whole rows, a packed matrix
    /// over 4 GiB.
    pub fn pack(ty: GgmlType, raw: &[u8], out: usize, inp: usize) -> Result<Self, GpuError> {
        let bytes = pack_weights(ty, raw, out, inp)?;
        Ok(PackedWeight { ty, rows: to_u32(out, "out")?, inp: to_u32(inp, "in")?, kind: Rows::Plain, bytes })
    }

    /// Interleaves gate and up `[ff, inp]` (raw GGUF bytes of one type `ty`) by 8 rows and packs
    /// the result: the W of [`QWeight::swiglu`] (`pack.rs`, `pack_gate_up`).
    pub fn pack_gate_up(ty: GgmlType, gate: &[u8], up: &[u8], ff: usize, inp: usize) -> Result<Self, GpuError> {
        let rows = to_u32(swiglu_rows(ff)?, "ff")?;
        let bytes = pack_gate_up(ty, gate, up, ff, inp)?;
        Ok(PackedWeight { ty, rows, inp: to_u32(inp, "in")?, kind: Rows::GateUp { ff: to_u32(ff, "ff")? }, bytes })
    }

    /// The packed bytes (what [`Self::upload`] copies to the device).
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Copies the packed matrix to the device and fixes its K-split plan for `gpu`
    /// (`kernels.rs`, `choose_plan`: from the shape and the one-tile kernel's residency, never
    /// from the number of tokens).
    pub fn upload(&self, gpu: &Gpu) -> Result<QWeight, GpuError> {
        let (rows, inp) = (self.rows as usize, self.inp as usize);
        let plan = choose_plan(gpu, self.ty, &family_for(self.ty, rows, inp)?, rows, inp)?;
        Ok(QWeight {
            ty: self.ty,
            rows: self.rows,
            inp: self.inp,
            kind: self.kind,
            plan,
            cluster: uses_cluster(self.ty, plan),
            spread: true,
            buf: gpu.upload(&self.bytes)?,
        })
    }
}

/// A matrix `[rows, inp]` on the device in its GGUF type, packed for the `qmm_*` kernels, with
/// its K split. A product reads the activations last prepared in a [`QmmWorkspace`] and writes
/// `y [n, rows]` ([`Self::matmul`]) or, for gate/up, `y [n, ff]` ([`Self::swiglu`]). Column `c`
/// of y is bitwise the same for every `n` (see `gpu-kernels/src/qmatmul/mod.rs`).
///
/// Shapes are held as `u32` (the kernels' parameters; checked when packed), so that a handle is
/// no larger than a bare buffer with a type and two `usize`s.
pub struct QWeight {
    ty: GgmlType,
    kind: Rows,
    rows: u32,
    inp: u32,
    plan: QmmSplitPlan,
    /// Whether its split row blocks reduce in thread-block clusters (`kernels.rs`,
    /// `uses_cluster`; fixed at upload, [`Self::set_cluster_reduction`] for A/B checks).
    cluster: bool,
    /// Whether its split row blocks may reduce spread over the splits where the launch allows it
    /// (`kernels.rs`, `reduce_spread`; [`Self::set_spread_reduction`] for A/B checks).
    spread: bool,
    buf: CudaSlice<u8>,
}

impl QWeight {
    /// [`PackedWeight::pack`] and [`PackedWeight::upload`]: W `[out, inp]` of type `ty`.
    pub fn upload(gpu: &Gpu, ty: GgmlType, raw: &[u8], out: usize, inp: usize) -> Result<Self, GpuError> {
        PackedWeight::pack(ty, raw, out, inp)?.upload(gpu)
    }

    /// [`PackedWeight::pack_gate_up`] and [`PackedWeight::upload`]: gate and up `[ff, inp]`.
    pub fn upload_gate_up(
        gpu: &Gpu,
        ty: GgmlType,
        gate: &[u8],
        up: &[u8],
        ff: usize,
        inp: usize,
    ) -> Result<Self, GpuError> {
        PackedWeight::pack_gate_up(ty, gate, up, ff, inp)?.upload(gpu)
    }

    /// The GGUF type of the weights.
    pub fn ty(&self) -> GgmlType {
        self.ty
    }

    /// Rows of [`Self::matmul`]'s product: `out`, or the interleaved `16·⌈ff/8⌉` of gate/up.
    pub fn out(&self) -> usize {
        self.rows as usize
    }

    /// Inputs (columns of W).
    pub fn inp(&self) -> usize {
        self.inp as usize
    }

    /// The SwiGLU features of a gate/up matrix, `None` for a plain one.
    pub fn ff(&self) -> Option<usize> {
        match self.kind {
            Rows::Plain => None,
            Rows::GateUp { ff } => Some(ff as usize),
        }
    }

    /// The K split of the split row blocks of every product of this matrix (fixed at upload).
    pub fn ksplit(&self) -> u32 {
        self.plan.ksplit
    }

    /// The K-split plan of every product of this matrix: the leading row blocks computed unsplit
    /// and the split of the others (`kernel_abi::qmm_split_plan`; fixed at upload).
    pub fn plan(&self) -> QmmSplitPlan {
        self.plan
    }

    /// Whether its split row blocks add their partials through thread-block clusters (distributed
    /// shared memory) instead of global memory and a per-row-block counter. Either way the sums
    /// are the same additions in the same order.
    pub fn cluster_reduction(&self) -> bool {
        self.cluster
    }

    /// `(clusters resident at once, row blocks)` of the kernel a product over `n` tokens runs
    /// (`swiglu`: the fused kernel), when this matrix allows the cluster reduction: a launch uses
    /// clusters only when every row block's cluster is resident at once (first ≥ second).
    pub fn cluster_residency(&self, gpu: &Gpu, n: usize, swiglu: bool) -> Result<Option<(u32, u32)>, GpuError> {
        cluster_residency(gpu, self, n, swiglu)
    }

    /// Turns the cluster reduction off, or back on where this matrix's type and plan allow it
    /// (the bitwise A/B test of the two reductions; `FLASHTREE_QMM_CLUSTER=0` for whole runs).
    pub fn set_cluster_reduction(&mut self, on: bool) {
        self.cluster = on && uses_cluster(self.ty, self.plan);
    }

    /// Whether a product over `n` tokens (`swiglu`: the fused kernel) reduces its split row
    /// blocks spread over the splits (`QmmParams::reduce_spread`) rather than by the last split to
    /// finish: global-memory reductions of the block formats whose split blocks all fit the device
    /// at once.
    pub fn spread_reduction(&self, gpu: &Gpu, n: usize, swiglu: bool) -> Result<bool, GpuError> {
        spread_for(gpu, self, n, swiglu)
    }

    /// Turns the spread reduction off, or back on (the bitwise A/B test of the two global-memory
    /// reductions; `FLASHTREE_QMM_SPREAD=0` for whole runs).
    pub fn set_spread_reduction(&mut self, on: bool) {
        self.spread = on;
    }

    pub(super) fn spread_allowed(&self) -> bool {
        self.spread
    }

    /// Device bytes of the packed matrix (what one product streams).
    pub fn device_bytes(&self) -> usize {
        self.buf.num_bytes()
    }

    /// Whether its products need the bf16 activation pair ([`super::qmm_needs_pairs`]).
    pub fn needs_pairs(&self) -> bool {
        qmm_needs_pairs(self.ty)
    }

    pub(super) fn buf(&self) -> &CudaSlice<u8> {
        &self.buf
    }

    /// [`QmmWorkspace::prepare`] of `x [n, inp]` with the activation pair when this matrix needs
    /// it: the input of the products that follow.
    pub fn prepare_x(&self, gpu: &Gpu, x: DevSpan<f32>, n: usize, ws: &mut QmmWorkspace) -> Result<(), GpuError> {
        ws.prepare(gpu, x, n, self.inp(), self.needs_pairs())
    }

    /// `y[c, o] = Σ_i W[o, i] · x[c, i]` for `c < n ≤ MAX_NODES`, `o <` [`Self::out`], on the
    /// activations last prepared in `ws` (same `n` and `inp`, with the pair if needed — checked);
    /// `y` holds at least `n · out` values. One launch per 32 columns (W is streamed once per
    /// launch: a product over more than 32 tokens reads it twice).
    pub fn matmul(&self, gpu: &Gpu, n: usize, y: DevSpan<f32>, ws: &mut QmmWorkspace) -> Result<(), GpuError> {
        launch(gpu, self, n, y, false, ws)
    }

    /// The fused SwiGLU product of an MLP (gate/up matrices only): `y[c, f] = silu(g_f) · u_f`
    /// with `g = gate · x[c]`, `u = up · x[c]`, for `f < ff`, `c < n ≤ MAX_NODES`; `y` holds at least
    /// `n · ff` values. The gate and up products are the ones [`Self::matmul`] computes (same
    /// arithmetic, batch-invariant the same way), and the activation is applied where they are
    /// produced, so neither is written to memory. The workspace needs `max_out ≥`
    /// [`super::qmm_swiglu_rows`]`(ff)`.
    pub fn swiglu(&self, gpu: &Gpu, n: usize, y: DevSpan<f32>, ws: &mut QmmWorkspace) -> Result<(), GpuError> {
        if self.ff().is_none() {
            return Err(GpuError::shape(
                "qmm_swiglu",
                format!(
                    "W {:?} [{}, {}] is a plain matrix, not gate/up (PackedWeight::pack_gate_up)",
                    self.ty, self.rows, self.inp
                ),
            ));
        }
        launch(gpu, self, n, y, true, ws)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A packed matrix records its product rows: `out` for a plain one, the interleaved
    /// `16·⌈ff/8⌉` for gate/up, whose bytes are `pack_gate_up`'s.
    #[test]
    fn packed_weight_records_its_rows() {
        let (ff, inp, row_bytes) = (19, 64, 2 * 34);
        let gate: Vec<u8> = (0..ff * row_bytes).map(|i| (i % 97) as u8).collect();
        let up: Vec<u8> = (0..ff * row_bytes).map(|i| (i % 89) as u8).collect();
        let p = PackedWeight::pack_gate_up(GgmlType::Q8_0, &gate, &up, ff, inp).unwrap();
        assert_eq!((p.rows, p.inp, p.kind), (48, 64, Rows::GateUp { ff: 19 }));
        assert_eq!(p.bytes(), &pack_gate_up(GgmlType::Q8_0, &gate, &up, ff, inp).unwrap()[..]);
        let p = PackedWeight::pack(GgmlType::Q8_0, &gate, ff, inp).unwrap();
        assert_eq!((p.rows, p.inp, p.kind), (19, 64, Rows::Plain));
    }
}
