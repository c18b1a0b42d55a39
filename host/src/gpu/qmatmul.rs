//! Launchers of `qmatmul` (`gpu-kernels/src/qmatmul.rs`): `y = W · x` with W in its storage type.
//! This version: one token (GEMV) with F32 or BF16 weights.

use cudarc::driver::{CudaSlice, LaunchConfig, PushKernelArg};
use kernel_abi::{gemv_split, GemvParams, GEMV_BLOCK_THREADS, GEMV_WARPS_PER_BLOCK};

use super::error::{DriverContext, GpuError};
use super::{ChainedLaunch, DevSpan, Gpu, Param};

fn params<W>(
    kernel: &'static str,
    w: &CudaSlice<W>,
    x: &CudaSlice<f32>,
    y: &CudaSlice<f32>,
    out: usize,
    inp: usize,
) -> Result<GemvParams, GpuError> {
    if out == 0 || inp == 0 {
        return Err(GpuError::shape(kernel, format!("empty matrix [{out}, {inp}]")));
    }
    let need = out.checked_mul(inp).ok_or_else(|| GpuError::shape(kernel, "out × in overflows"))?;
    if w.len() < need || x.len() < inp || y.len() < out {
        return Err(GpuError::shape(
            kernel,
            format!(
                "W [{out}, {inp}] needs {need} values (has {}), x {inp} (has {}), y {out} (has {})",
                w.len(),
                x.len(),
                y.len()
            ),
        ));
    }
    let out_features = u32::try_from(out).map_err(|_| GpuError::shape(kernel, "out too large"))?;
    let in_features = u32::try_from(inp).map_err(|_| GpuError::shape(kernel, "in too large"))?;
    Ok(GemvParams { out_features, in_features, split: gemv_split(out_features, in_features) })
}

fn cfg(p: &GemvParams) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (p.out_features.div_ceil(GEMV_WARPS_PER_BLOCK / p.split), 1, 1),
        block_dim: (GEMV_BLOCK_THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// `y[o] = Σ_i W[o, i] · x[i]`, W BF16 (raw bits) `[out, in]` row-major.
pub fn gemv_bf16(
    gpu: &Gpu,
    w: &CudaSlice<u16>,
    x: &CudaSlice<f32>,
    y: &mut CudaSlice<f32>,
    out: usize,
    inp: usize,
) -> Result<(), GpuError> {
    let p = params("gemv_bf16", w, x, y, out, inp)?;
    let f = gpu.function("gemv_bf16")?;
    let mut b = gpu.stream().launch_builder(&f);
    let pp = Param(p);
    b.arg(w).arg(x).arg(y).arg(&pp);
    unsafe { b.launch(cfg(&p)) }.while_(|| "launching gemv_bf16".into())?;
    Ok(())
}

/// `y[o] = Σ_i W[o, i] · x[i]`, W F32 `[out, in]` row-major.
pub fn gemv_f32(
    gpu: &Gpu,
    w: &CudaSlice<f32>,
    x: &CudaSlice<f32>,
    y: &mut CudaSlice<f32>,
    out: usize,
    inp: usize,
) -> Result<(), GpuError> {
    let p = params("gemv_f32", w, x, y, out, inp)?;
    let f = gpu.function("gemv_f32")?;
    let mut b = gpu.stream().launch_builder(&f);
    let pp = Param(p);
    b.arg(w).arg(x).arg(y).arg(&pp);
    unsafe { b.launch(cfg(&p)) }.while_(|| "launching gemv_f32".into())?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Tensor-core path: 1…32 tokens, every weight type (`qmm_*` kernels).

use flashtree_quants::GgmlType;
use kernel_abi::{
    qmm_block_bytes, qmm_is_wgmma, qmm_ksplit, qmm_ksplit_pow2, qmm_lanes, qmm_row_scaled, qmm_xs_smem_bytes,
    QmmParams, QmmPrepNormParams, QmmPrepParams, QMM_MAX_N, QMM_PREP_CHUNK, QMM_ROWS_PER_BLOCK, QMM_WARPS,
};

/// The tensor-core kernel family of a weight type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QmmFamily {
    /// Kernel name prefix (`qmm_q4k` → `qmm_q4k_nt1` … `_nt4`).
    pub prefix: &'static str,
    /// `(elements, bytes, blocks per stage)` of one weight block (`kernel_abi::qmm_format`).
    pub geometry: (u32, u32, u32),
    /// Whether its multi-tile `mma.sync` kernels stage x in shared memory
    /// (`kernel_abi::qmm_stages_x`).
    pub stages_x: bool,
    /// Which of its multi-tile kernels are warpgroup kernels (`kernel_abi::qmm_wgmma`; they always
    /// stage x).
    pub wgmma: u32,
}

impl QmmFamily {
    /// Dynamic shared memory of its kernel of `tiles` tiles (the staged x chunk, or 0).
    pub fn smem_bytes(&self, tiles: u32) -> u32 {
        qmm_xs_smem_bytes(tiles, self.stages_x || qmm_is_wgmma(self.wgmma, tiles))
    }
}

/// The tensor-core kernel family of `ty`, or `None` if it has none.
pub fn qmm_format(ty: GgmlType) -> Option<QmmFamily> {
    use kernel_abi::{qmm_format as f, qmm_stages_x as s, qmm_wgmma as w};
    let (prefix, geometry, stages_x, wgmma) = match ty {
        GgmlType::Q4_K => ("qmm_q4k", f::Q4_K, s::Q4_K, w::Q4_K),
        GgmlType::Q5_K => ("qmm_q5k", f::Q5_K, s::Q5_K, w::Q5_K),
        GgmlType::Q6_K => ("qmm_q6k", f::Q6_K, s::Q6_K, w::Q6_K),
        GgmlType::Q8_0 => ("qmm_q8_0", f::Q8_0, s::Q8_0, w::Q8_0),
        GgmlType::F16 => ("qmm_f16", f::F16, s::F16, w::F16),
        GgmlType::BF16 => ("qmm_bf16", f::BF16, s::BF16, w::BF16),
        GgmlType::F32 => ("qmm_f32", f::F32, s::F32, w::F32),
        _ => return None,
    };
    Some(QmmFamily { prefix, geometry, stages_x, wgmma })
}

/// Whether `ty` is packed as f16 values with one power-of-two scale per row
/// (`kernel_abi::qmm_row_scaled`; see [`qmm_pack_weights`]).
pub fn qmm_is_row_scaled(ty: GgmlType) -> bool {
    ty == GgmlType::BF16 && qmm_row_scaled::BF16
}

/// Bytes of W `[out, in]` of type `ty` in the packed layout of the `qmm_*` kernels
/// ([`qmm_pack_weights`]): `⌈out/128⌉·128` rows, the rows past `out` zero, and for row-scaled
/// types one f32 scale per packed row after them. Every warp of a kernel block loads its 16 rows
/// unconditionally (a bounds check costs the tightest kernels a register), so the last block's
/// rows must exist.
pub fn qmm_packed_bytes(ty: GgmlType, out: usize, inp: usize) -> Result<usize, GpuError> {
    let (elems, bytes, _) = qmm_shape(ty, out, inp)?.geometry;
    let rows = QMM_ROWS_PER_BLOCK as usize;
    let scales = if qmm_is_row_scaled(ty) { 4 } else { 0 };
    out.div_ceil(rows)
        .checked_mul(rows * bytes as usize)
        .and_then(|v| v.checked_mul(inp / elems as usize))
        .and_then(|v| v.checked_add(out.div_ceil(rows) * rows * scales))
        .ok_or_else(|| GpuError::shape("qmm", format!("W {ty:?} [{out}, {inp}] size overflows")))
}

/// BF16 rows `[out, in]` (raw little-endian bytes) as f16 rows `ŵ = w / s_r` (raw bytes, the
/// F16 storage layout) and the row scales `s_r`: `s_r = 2^(e_r − 14)` with `e_r` the exponent of
/// the row's largest finite `|w|` (1.0 for a row of zeros), so `max_r |ŵ| ∈ [2^14, 2^15)`.
///
/// Exact for every `|ŵ| ≥ 2^-17` (a bf16 significand has 8 bits, f16 holds 11 in its normal
/// range and ≥ 8 in subnormals down to 2^-17); smaller values are rounded to nearest on the
/// f16 subnormal grid, `|ŵ − w/s_r| ≤ 2^-25`, which is `≤ 2^-39·max_r |w|` per weight. ±Inf and
/// NaN stay ±Inf and NaN. `s_r ≥ 2^-147` (the smallest bf16 exponent is −133) is an f32.
pub fn bf16_rows_to_scaled_f16(raw: &[u8], out: usize, inp: usize) -> (Vec<u8>, Vec<f32>) {
    let bf16 = |b: &[u8]| f32::from_bits((u16::from_le_bytes([b[0], b[1]]) as u32) << 16);
    let mut f16 = vec![0u8; raw.len()];
    let mut scales = Vec::with_capacity(out);
    for (src, dst) in raw.chunks_exact(2 * inp).zip(f16.chunks_exact_mut(2 * inp)).take(out) {
        let max = src.chunks_exact(2).map(bf16).filter(|v| v.is_finite()).fold(0f32, |m, v| m.max(v.abs()));
        let scale = if max == 0.0 {
            1.0
        } else {
            // `max = m·2^e` with `m ∈ [1, 2)`: f64 holds every f32 (subnormals too) as a normal.
            let e = ((max as f64).to_bits() >> 52) as i32 - 1023;
            2f64.powi(e - 14)
        };
        scales.push(scale as f32);
        for (s, d) in src.chunks_exact(2).zip(dst.chunks_exact_mut(2)) {
            let v = half::f16::from_f64(bf16(s) as f64 / scale);
            d.copy_from_slice(&v.to_le_bytes());
        }
    }
    (f16, scales)
}

/// The lane layout of `ty` (see [`kernel_abi::qmm_lanes`]).
fn lane_layout(ty: GgmlType) -> Option<(&'static [qmm_lanes::Piece], &'static [qmm_lanes::Field])> {
    Some(match ty {
        GgmlType::Q4_K => qmm_lanes::Q4_K,
        GgmlType::Q5_K => qmm_lanes::Q5_K,
        GgmlType::Q6_K => qmm_lanes::Q6_K,
        GgmlType::Q8_0 => qmm_lanes::Q8_0,
        GgmlType::F16 | GgmlType::BF16 => qmm_lanes::HALF,
        GgmlType::F32 => qmm_lanes::F32,
        _ => return None,
    })
}

/// For each byte of one packed 16-row block of `ty` (`16·BYTES` of them, in packed order),
/// the byte of the 16 raw blocks it holds: `r·BYTES + e` for byte `e` of row `r`.
fn packed_sources(ty: GgmlType, bytes: usize) -> Result<Vec<usize>, GpuError> {
    let layout =
        lane_layout(ty).ok_or_else(|| GpuError::shape("qmm", format!("weight type {ty:?} has no lane layout")))?;
    let private = qmm_lanes::private_bytes(layout) as usize;
    let mut src = vec![usize::MAX; 16 * bytes];
    for lane in 0..32 {
        let (g, t) = (lane / 4, lane % 4);
        let mut i = 0;
        for &(row, off, len, stride) in layout.0 {
            let r = g + 8 * row as usize;
            for k in 0..len as usize {
                src[(i / 16) * 512 + 16 * lane + i % 16] = r * bytes + off as usize + t * stride as usize + k;
                i += 1;
            }
        }
        debug_assert_eq!(i, private);
    }
    for (f, &(off, len)) in layout.1.iter().enumerate() {
        let base = qmm_lanes::field_offset(layout, f) as usize;
        for r in 0..16 {
            for k in 0..len as usize {
                src[base + r * len as usize + k] = r * bytes + off as usize + k;
            }
        }
    }
    Ok(src)
}

/// Repacks W `[out, in]` (raw GGUF bytes, rows contiguous) into the layout the `qmm_*` kernels
/// stream: for each group of 16 rows and each K block `b`, the 16 rows' block `b` in the lane
/// order of [`kernel_abi::qmm_lanes`] (each lane's private bytes as 16-byte chunks, chunk `j`
/// of all 32 lanes contiguous; then the per-row fields a quad shares),
///
/// `packed[(group·blocks + b)·16·BYTES + p] = W[16·group + r][b·BYTES + e]` with `(r, e)` the
/// source of packed position `p`,
///
/// with zero rows up to a whole 128-row kernel block ([`qmm_packed_bytes`]; a zero block is a
/// zero weight in every format). Bytes are moved, never changed (the layout is a permutation of
/// each group's block), so the product is the one of the raw matrix — except for row-scaled
/// types (BF16), whose rows are first rewritten as f16 values times a power-of-two row scale
/// ([`bf16_rows_to_scaled_f16`]: exact for all but the values below `2^-31` of the row's
/// largest) and packed as F16, with the `⌈out/128⌉·128` scales after the blocks (f32, 1.0 for
/// the padding rows).
pub fn qmm_pack_weights(ty: GgmlType, raw: &[u8], out: usize, inp: usize) -> Result<Vec<u8>, GpuError> {
    let (elems, bytes, _) = qmm_shape(ty, out, inp)?.geometry;
    let (elems, bytes) = (elems as usize, bytes as usize);
    let blocks = inp / elems;
    let row_bytes = blocks * bytes;
    if raw.len() != out * row_bytes {
        return Err(GpuError::shape(
            "qmm",
            format!("W {ty:?} [{out}, {inp}] is {} bytes, not {} ({row_bytes} per row)", raw.len(), out * row_bytes),
        ));
    }
    let src = packed_sources(ty, bytes)?;
    let mut packed = vec![0u8; qmm_packed_bytes(ty, out, inp)?];
    let block_bytes = qmm_block_bytes(out as u32, inp as u32, elems as u32, bytes as u32) as usize;
    let (blocks_part, scales_part) = packed.split_at_mut(block_bytes);
    let scaled;
    let raw = if qmm_is_row_scaled(ty) {
        let (f16, scales) = bf16_rows_to_scaled_f16(raw, out, inp);
        for (r, d) in scales_part.chunks_exact_mut(4).enumerate() {
            d.copy_from_slice(&scales.get(r).copied().unwrap_or(1.0).to_le_bytes());
        }
        scaled = f16;
        &scaled[..]
    } else {
        raw
    };
    for (group, dst_group) in blocks_part.chunks_exact_mut(blocks * 16 * bytes).enumerate() {
        let rows = out.saturating_sub(16 * group).min(16);
        for (b, dst) in dst_group.chunks_exact_mut(16 * bytes).enumerate() {
            for (d, &s) in dst.iter_mut().zip(&src) {
                let (r, e) = (s / bytes, s % bytes);
                if r < rows {
                    *d = raw[(16 * group + r) * row_bytes + b * bytes + e];
                }
            }
        }
    }
    Ok(packed)
}

/// [`qmm_pack_weights`] and upload: the device buffer [`qmm`] takes.
pub fn qmm_upload_weights(
    gpu: &Gpu,
    ty: GgmlType,
    raw: &[u8],
    out: usize,
    inp: usize,
) -> Result<CudaSlice<u8>, GpuError> {
    gpu.upload(&qmm_pack_weights(ty, raw, out, inp)?)
}

/// Reusable scratch of [`qmm`] sized for at most `max_n` tokens, `max_in` inputs and `max_out`
/// outputs.
pub struct QmmWorkspace {
    xh: CudaSlice<u16>,
    xb_hi: CudaSlice<u16>,
    xb_lo: CudaSlice<u16>,
    /// The same f16 values as `xh` in the warpgroup kernels' core-matrix plane, all
    /// `QMM_MAX_N` columns (zero until written; padding columns are read but never stored).
    xcm: CudaSlice<u16>,
    xscale: CudaSlice<f32>,
    xsum: CudaSlice<f32>,
    partial: CudaSlice<f32>,
    counters: CudaSlice<u32>,
    max_in: usize,
    max_out: usize,
    /// What the activation buffers hold now: `(n, in, with bf16 pairs)`.
    prepared: Option<(usize, usize, bool)>,
    /// Whether a caller preparing activations for several matrices must write the bf16 pair
    /// (some matrix is F32); the engine sets it once from its weights.
    pub pairs_needed: bool,
}

impl QmmWorkspace {
    pub fn new(gpu: &Gpu, max_in: usize, max_out: usize) -> Result<Self, GpuError> {
        let n_pad = QMM_MAX_N as usize;
        let x = n_pad.checked_mul(max_in).ok_or_else(|| GpuError::shape("qmm", "workspace size overflows"))?;
        let partial = 16usize
            .checked_mul(n_pad)
            .and_then(|v| v.checked_mul(max_out))
            .ok_or_else(|| GpuError::shape("qmm", "workspace size overflows"))?;
        Ok(QmmWorkspace {
            xh: gpu.zeros(x)?,
            xb_hi: gpu.zeros(x)?,
            xb_lo: gpu.zeros(x)?,
            xcm: gpu.zeros(x)?,
            xscale: gpu.zeros(n_pad)?,
            // Unit sums: `units × QMM_MAX_N` f32, then the f16 hi/lo group sums (16 halves per
            // group of 8 units and column = 8 f32 slots).
            xsum: gpu.zeros(n_pad * (max_in.div_ceil(32) + 8 * max_in.div_ceil(256)).max(1))?,
            partial: gpu.zeros(partial)?,
            counters: gpu.zeros(max_out.div_ceil(QMM_ROWS_PER_BLOCK as usize).max(1))?,
            max_in,
            max_out,
            prepared: None,
            pairs_needed: false,
        })
    }
}

/// Whether weights of `ty` need the bf16 hi + lo activation pair (F32 weights; BF16 weights
/// also did before they were packed as row-scaled f16): the `pairs` argument of [`qmm_prepare`].
pub fn qmm_needs_pairs(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::F32) || (ty == GgmlType::BF16 && !qmm_is_row_scaled(ty))
}

/// The kernel family and block geometry of `ty` for a `[out, in]` matrix, or why there is none.
fn qmm_shape(ty: GgmlType, out: usize, inp: usize) -> Result<QmmFamily, GpuError> {
    let family = qmm_format(ty)
        .ok_or_else(|| GpuError::shape("qmm", format!("weight type {ty:?} has no tensor-core kernel")))?;
    let elems = family.geometry.0 as usize;
    if out == 0 || inp == 0 || !inp.is_multiple_of(elems) {
        return Err(GpuError::shape(
            "qmm",
            format!("[{out}, {inp}]: in must be a positive multiple of {elems} for {ty:?}"),
        ));
    }
    Ok(family)
}

fn to_u32(v: usize, what: &str) -> Result<u32, GpuError> {
    u32::try_from(v).map_err(|_| GpuError::shape("qmm", format!("{what} too large")))
}

/// `y[c, o] = Σ_i W[o, i] · x[c, i]` for `c < n ≤ 32`, W `[out, in]` of type `ty` (GGUF blocks
/// in the packed layout of [`qmm_pack_weights`]), x `[n, in]` f32, y `[n, out]` f32. Column `c` of y is bitwise the
/// same for every `n` (see `gpu-kernels/src/qmatmul/mod.rs`). Equivalent to
/// [`qmm_prepare`] then [`qmm_prepared`].
#[allow(clippy::too_many_arguments)]
pub fn qmm(
    gpu: &Gpu,
    ty: GgmlType,
    w: &CudaSlice<u8>,
    out: usize,
    inp: usize,
    x: &CudaSlice<f32>,
    n: usize,
    y: &mut CudaSlice<f32>,
    ws: &mut QmmWorkspace,
) -> Result<(), GpuError> {
    qmm_shape(ty, out, inp)?;
    qmm_prepare(gpu, x, n, inp, qmm_needs_pairs(ty), ws)?;
    qmm_prepared(gpu, ty, w, out, inp, n, y, ws)
}

/// `FLASHTREE_QMM_KSPLIT=<1..16>`: a fixed K split for every shape instead of
/// [`qmm_ksplit`]'s wave model (kernel tuning runs; results stay batch-invariant for a fixed value).
fn ksplit_override() -> Option<u32> {
    static V: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
    *V.get_or_init(|| std::env::var("FLASHTREE_QMM_KSPLIT").ok().and_then(|v| v.parse().ok()))
}

/// Converts `x [n, in]` into the workspace's activation format (`qmm_prep_x`), once for any
/// number of [`qmm_prepared`] products with the same input. `pairs`: also the bf16 hi + lo
/// pair that F32 weights need ([`qmm_needs_pairs`]).
pub fn qmm_prepare(
    gpu: &Gpu,
    x: &CudaSlice<f32>,
    n: usize,
    inp: usize,
    pairs: bool,
    ws: &mut QmmWorkspace,
) -> Result<(), GpuError> {
    qmm_prepare_span(gpu, DevSpan::of(gpu, x), n, inp, pairs, ws)
}

/// [`qmm_prepare`] reading x from a view.
pub fn qmm_prepare_span(
    gpu: &Gpu,
    x: DevSpan<f32>,
    n: usize,
    inp: usize,
    pairs: bool,
    ws: &mut QmmWorkspace,
) -> Result<(), GpuError> {
    if n == 0 || n > QMM_MAX_N as usize {
        return Err(GpuError::shape("qmm", format!("{n} tokens: 1..={QMM_MAX_N} per launch")));
    }
    if inp == 0 || !inp.is_multiple_of(32) || inp > ws.max_in {
        return Err(GpuError::shape(
            "qmm",
            format!("in = {inp}: must be a positive multiple of 32 within the workspace ({})", ws.max_in),
        ));
    }
    if x.len() < n * inp {
        return Err(GpuError::shape("qmm", format!("x needs {} values (has {})", n * inp, x.len())));
    }
    ws.prepared = None;
    let pp = Param(QmmPrepParams { n: n as u32, in_features: to_u32(inp, "in")?, pairs: pairs as u32 });
    let chunks = to_u32(inp.div_ceil(QMM_PREP_CHUNK as usize), "in")?;
    let cfg = LaunchConfig { grid_dim: (n as u32, chunks, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
    // Chained: the kernel waits for its predecessor before touching memory (`device::griddep`).
    unsafe {
        ChainedLaunch::new(gpu, "qmm_prep_x")
            .span(x)
            .buf_mut(&mut ws.xh)
            .buf_mut(&mut ws.xb_hi)
            .buf_mut(&mut ws.xb_lo)
            .buf_mut(&mut ws.xcm)
            .buf_mut(&mut ws.xscale)
            .buf_mut(&mut ws.xsum)
            .value(pp)
            .launch(cfg)?
    };
    ws.prepared = Some((n, inp, pairs));
    Ok(())
}

/// The residual add, RMSNorm and [`qmm_prepare_span`] in one launch (`qmm_prep_norm`): with
/// `add = Some((a, h_out))`, `v = h + a` is stored to `h_out` (a different buffer: every block
/// reads `h` whole), else `v = h`; the activations prepared are those of `rmsnorm(v) ⊙ w`,
/// bitwise the same as `add_rms_norm` / `rms_norm_rows_span` followed by [`qmm_prepare_span`].
/// `h`, `a`, `h_out` hold `[n, inp]`, `w` holds `inp` values.
#[allow(clippy::too_many_arguments)]
pub fn qmm_prepare_norm_span(
    gpu: &Gpu,
    h: DevSpan<f32>,
    add: Option<(DevSpan<f32>, DevSpan<f32>)>,
    w: DevSpan<f32>,
    n: usize,
    inp: usize,
    eps: f32,
    pairs: bool,
    ws: &mut QmmWorkspace,
) -> Result<(), GpuError> {
    const K: &str = "qmm_prep_norm";
    if n == 0 || n > QMM_MAX_N as usize {
        return Err(GpuError::shape(K, format!("{n} tokens: 1..={QMM_MAX_N} per launch")));
    }
    if inp == 0 || !inp.is_multiple_of(32) || inp > ws.max_in {
        return Err(GpuError::shape(
            K,
            format!("in = {inp}: must be a positive multiple of 32 within the workspace ({})", ws.max_in),
        ));
    }
    h.need(n * inp, K, "h")?;
    w.need(inp, K, "w")?;
    let (a, h_out) = match add {
        Some((a, o)) => {
            a.need(n * inp, K, "a")?;
            o.need(n * inp, K, "h_out")?;
            if o.ptr() == h.ptr() {
                return Err(GpuError::shape(K, "h_out must be another buffer than h"));
            }
            (a, o)
        }
        // Safety: never dereferenced (the kernel reads `a` and writes `h_out` only with `add`).
        None => unsafe { (DevSpan::from_raw(0, 0), DevSpan::from_raw(0, 0)) },
    };
    ws.prepared = None;
    let pp = Param(QmmPrepParams { n: n as u32, in_features: to_u32(inp, "in")?, pairs: pairs as u32 });
    let np = Param(QmmPrepNormParams { eps, add: add.is_some() as u32 });
    let chunks = to_u32(inp.div_ceil(QMM_PREP_CHUNK as usize), "in")?;
    let cfg = LaunchConfig { grid_dim: (n as u32, chunks, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
    unsafe {
        ChainedLaunch::new(gpu, K)
            .span(h)
            .span(a)
            .span(w)
            .span(h_out)
            .buf_mut(&mut ws.xh)
            .buf_mut(&mut ws.xb_hi)
            .buf_mut(&mut ws.xb_lo)
            .buf_mut(&mut ws.xcm)
            .buf_mut(&mut ws.xscale)
            .buf_mut(&mut ws.xsum)
            .value(pp)
            .value(np)
            .launch(cfg)?
    };
    ws.prepared = Some((n, inp, pairs));
    Ok(())
}

/// `y = W · x` for the activations last converted by [`qmm_prepare`] (same `n` and `in`, and
/// with the bf16 pair for F32 weights — checked).
#[allow(clippy::too_many_arguments)]
pub fn qmm_prepared(
    gpu: &Gpu,
    ty: GgmlType,
    w: &CudaSlice<u8>,
    out: usize,
    inp: usize,
    n: usize,
    y: &mut CudaSlice<f32>,
    ws: &mut QmmWorkspace,
) -> Result<(), GpuError> {
    launch(gpu, ty, w, out, inp, n, DevSpan::of(gpu, y), None, ws)
}

/// [`qmm_prepared`] writing into a view (`y` holds at least `n · out` values).
#[allow(clippy::too_many_arguments)]
pub fn qmm_prepared_span(
    gpu: &Gpu,
    ty: GgmlType,
    w: &CudaSlice<u8>,
    out: usize,
    inp: usize,
    n: usize,
    y: DevSpan<f32>,
    ws: &mut QmmWorkspace,
) -> Result<(), GpuError> {
    launch(gpu, ty, w, out, inp, n, y, None, ws)
}

/// Rows of the interleaved gate/up matrix of `ff` features ([`qmm_pack_gate_up`]):
/// `16·⌈ff/8⌉`.
pub fn qmm_swiglu_rows(ff: usize) -> usize {
    16 * ff.div_ceil(8)
}

/// Interleaves gate and up `[ff, in]` (raw GGUF bytes of type `ty`, rows contiguous) by 8 rows —
/// rows `16b + j` = gate row `8b + j`, rows `16b + 8 + j` = up row `8b + j` (`j < 8`; rows past
/// `ff` zero) — and packs the result like [`qmm_pack_weights`]: the W of [`qmm_swiglu`]. In the
/// kernels' `m16` tile, rows `g` and `g + 8` are the gate and up rows of one feature, so the lane
/// that holds one result holds the other.
pub fn qmm_pack_gate_up(ty: GgmlType, gate: &[u8], up: &[u8], ff: usize, inp: usize) -> Result<Vec<u8>, GpuError> {
    let rows = swiglu_rows(ff)?;
    let (elems, bytes, _) = qmm_shape(ty, rows, inp)?.geometry;
    let row_bytes = inp / elems as usize * bytes as usize;
    for (name, m) in [("gate", gate), ("up", up)] {
        if m.len() != ff * row_bytes {
            return Err(GpuError::shape(
                "qmm_swiglu",
                format!(
                    "{name} {ty:?} [{ff}, {inp}] is {} bytes, not {} ({row_bytes} per row)",
                    m.len(),
                    ff * row_bytes
                ),
            ));
        }
    }
    let mut inter = vec![0u8; rows * row_bytes];
    for f in 0..ff {
        let (b, j) = (f / 8, f % 8);
        let src = f * row_bytes..(f + 1) * row_bytes;
        let g_at = (16 * b + j) * row_bytes;
        let u_at = (16 * b + 8 + j) * row_bytes;
        inter[g_at..g_at + row_bytes].copy_from_slice(&gate[src.clone()]);
        inter[u_at..u_at + row_bytes].copy_from_slice(&up[src]);
    }
    qmm_pack_weights(ty, &inter, rows, inp)
}

/// [`qmm_pack_gate_up`] and upload: the device buffer [`qmm_swiglu`] takes.
pub fn qmm_upload_gate_up(
    gpu: &Gpu,
    ty: GgmlType,
    gate: &[u8],
    up: &[u8],
    ff: usize,
    inp: usize,
) -> Result<CudaSlice<u8>, GpuError> {
    gpu.upload(&qmm_pack_gate_up(ty, gate, up, ff, inp)?)
}

/// The fused SwiGLU product of an MLP: `y[c, f] = silu(g_f) · u_f` with `g = gate · x[c]`,
/// `u = up · x[c]`, for `f < ff`, `c < n ≤ 32`; W from [`qmm_pack_gate_up`], x `[n, in]` f32,
/// y `[n, ff]` f32. The gate and up products are the ones [`qmm`] computes (same arithmetic,
/// batch-invariant the same way), and the activation is applied where they are produced, so
/// neither is written to memory. The workspace needs `max_out ≥` [`qmm_swiglu_rows`]`(ff)`.
#[allow(clippy::too_many_arguments)]
pub fn qmm_swiglu(
    gpu: &Gpu,
    ty: GgmlType,
    w: &CudaSlice<u8>,
    ff: usize,
    inp: usize,
    x: &CudaSlice<f32>,
    n: usize,
    y: &mut CudaSlice<f32>,
    ws: &mut QmmWorkspace,
) -> Result<(), GpuError> {
    qmm_shape(ty, swiglu_rows(ff)?, inp)?;
    qmm_prepare(gpu, x, n, inp, qmm_needs_pairs(ty), ws)?;
    qmm_swiglu_prepared(gpu, ty, w, ff, inp, n, y, ws)
}

/// [`qmm_swiglu`] on the activations last converted by [`qmm_prepare`].
#[allow(clippy::too_many_arguments)]
pub fn qmm_swiglu_prepared(
    gpu: &Gpu,
    ty: GgmlType,
    w: &CudaSlice<u8>,
    ff: usize,
    inp: usize,
    n: usize,
    y: &mut CudaSlice<f32>,
    ws: &mut QmmWorkspace,
) -> Result<(), GpuError> {
    launch(gpu, ty, w, swiglu_rows(ff)?, inp, n, DevSpan::of(gpu, y), Some(ff), ws)
}

/// [`qmm_swiglu_prepared`] writing into a view (`y` holds at least `n · ff` values).
#[allow(clippy::too_many_arguments)]
pub fn qmm_swiglu_prepared_span(
    gpu: &Gpu,
    ty: GgmlType,
    w: &CudaSlice<u8>,
    ff: usize,
    inp: usize,
    n: usize,
    y: DevSpan<f32>,
    ws: &mut QmmWorkspace,
) -> Result<(), GpuError> {
    launch(gpu, ty, w, swiglu_rows(ff)?, inp, n, y, Some(ff), ws)
}

fn swiglu_rows(ff: usize) -> Result<usize, GpuError> {
    if ff == 0 || ff > u32::MAX as usize / 4 {
        return Err(GpuError::shape("qmm_swiglu", format!("ff = {ff} features: must be 1..2^30")));
    }
    Ok(qmm_swiglu_rows(ff))
}

/// The `qmm_*` kernel of a family for `tiles` tiles of 8 columns, plain or fused SwiGLU.
fn kernel_name(prefix: &str, tiles: usize, swiglu: bool) -> Option<&'static str> {
    // `(prefix, [prefix_nt1 …], [prefix_swiglu_nt1 …])`: the names `gpu-kernels` exports.
    macro_rules! family {
        ($p:literal) => {
            (
                $p,
                [concat!($p, "_nt1"), concat!($p, "_nt2"), concat!($p, "_nt3"), concat!($p, "_nt4")],
                [
                    concat!($p, "_swiglu_nt1"),
                    concat!($p, "_swiglu_nt2"),
                    concat!($p, "_swiglu_nt3"),
                    concat!($p, "_swiglu_nt4"),
                ],
            )
        };
    }
    const NAMES: [(&str, [&str; 4], [&str; 4]); 7] = [
        family!("qmm_q4k"),
        family!("qmm_q5k"),
        family!("qmm_q6k"),
        family!("qmm_q8_0"),
        family!("qmm_f16"),
        family!("qmm_bf16"),
        family!("qmm_f32"),
    ];
    let (_, plain, fused) = NAMES.iter().find(|(p, _, _)| *p == prefix)?;
    let i = tiles.clamp(1, 4) - 1;
    Some(if swiglu { fused[i] } else { plain[i] })
}

/// The plain one-tile kernel of a family (whose residency sets the K split for every n).
fn kernel_name_nt1(prefix: &str) -> Result<&'static str, GpuError> {
    kernel_name(prefix, 1, false).ok_or_else(|| GpuError::shape("qmm", format!("no kernel for {prefix}")))
}

/// Checks and launches one `qmm_*` kernel over `out` rows of packed W; `swiglu = Some(ff)`:
/// the fused epilogue (`out` = [`qmm_swiglu_rows`]`(ff)`, y `[n, ff]`).
#[allow(clippy::too_many_arguments)]
fn launch(
    gpu: &Gpu,
    ty: GgmlType,
    w: &CudaSlice<u8>,
    out: usize,
    inp: usize,
    n: usize,
    y: DevSpan<f32>,
    swiglu: Option<usize>,
    ws: &mut QmmWorkspace,
) -> Result<(), GpuError> {
    let op = if swiglu.is_some() { "qmm_swiglu" } else { "qmm" };
    let family = qmm_shape(ty, out, inp)?;
    let (prefix, elems) = (family.prefix, family.geometry.0);
    if n == 0 || n > QMM_MAX_N as usize {
        return Err(GpuError::shape(op, format!("{n} tokens: 1..={QMM_MAX_N} per launch")));
    }
    if inp > ws.max_in || out > ws.max_out {
        return Err(GpuError::shape(
            op,
            format!("[{out}, {inp}] (rows, in) exceeds the workspace ([{}, {}])", ws.max_out, ws.max_in),
        ));
    }
    match ws.prepared {
        Some((pn, pin, pairs)) if pn == n && pin == inp && (pairs || !qmm_needs_pairs(ty)) => {}
        other => {
            return Err(GpuError::shape(
                op,
                format!(
                    "the workspace holds activations {other:?} (n, in, pairs), not n = {n}, in = {inp}{}",
                    if qmm_needs_pairs(ty) { " with pairs" } else { "" }
                ),
            ))
        }
    }
    let need_w = qmm_packed_bytes(ty, out, inp)?;
    if need_w > u32::MAX as usize {
        return Err(GpuError::shape(
            op,
            format!("W {ty:?} [{out}, {inp}] is {need_w} bytes packed: the kernels address at most 4 GiB per matrix"),
        ));
    }
    let y_cols = swiglu.unwrap_or(out);
    let packer = if swiglu.is_some() { "qmm_pack_gate_up" } else { "qmm_pack_weights" };
    if w.len() < need_w || y.len() < n * y_cols {
        return Err(GpuError::shape(
            op,
            format!(
                "W {ty:?} [{out}, {inp}] needs {need_w} bytes packed by {packer} (has {}), y {} values (has {})",
                w.len(),
                n * y_cols,
                y.len()
            ),
        ));
    }
    let tiles = n.div_ceil(8);
    let blocks_per_row = to_u32(inp / elems as usize, "in")?;
    let out32 = to_u32(out, "out")?;
    let p = QmmParams {
        out_features: out32,
        in_features: to_u32(inp, "in")?,
        n: n as u32,
        ksplit: match ksplit_override() {
            Some(v) => v,
            None if matches!(ty, GgmlType::F16 | GgmlType::BF16 | GgmlType::F32) => {
                qmm_ksplit_pow2(out32, blocks_per_row)
            }
            // The one-tile kernel's residency for every n: the split must not depend on n.
            None => qmm_ksplit(out32, blocks_per_row, gpu.resident_blocks(kernel_name_nt1(prefix)?, QMM_WARPS * 32)?),
        }
        .clamp(1, 16)
        .min(blocks_per_row),
        swiglu_ff: to_u32(swiglu.unwrap_or(0), "ff")?,
    };
    let name = kernel_name(prefix, tiles, swiglu.is_some())
        .ok_or_else(|| GpuError::shape(op, format!("no kernel for {prefix}")))?;
    // Multi-tile kernels that stage x keep x chunks in dynamic shared memory.
    let smem = family.smem_bytes(tiles as u32);
    gpu.allow_dynamic_smem(name, smem)?;
    let cfg = LaunchConfig {
        grid_dim: (out32.div_ceil(QMM_ROWS_PER_BLOCK), p.ksplit, 1),
        block_dim: (QMM_WARPS * 32, 1, 1),
        shared_mem_bytes: smem,
    };
    // Chained: only the packed weights are read before the kernel's `griddepcontrol.wait`, so its
    // first weight loads overlap the previous kernel's tail.
    unsafe {
        ChainedLaunch::new(gpu, name)
            .buf(w)
            .buf(&ws.xh)
            .buf(&ws.xb_hi)
            .buf(&ws.xb_lo)
            .buf(&ws.xcm)
            .buf(&ws.xscale)
            .buf(&ws.xsum)
            .buf_mut(&mut ws.partial)
            .buf_mut(&mut ws.counters)
            .span(y)
            .value(Param(p))
            .launch(cfg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lane layout of every format is a permutation of a 16-row group's block: every raw
    /// byte is placed exactly once.
    #[test]
    fn lane_layout_is_a_permutation_of_each_group_block() {
        for ty in [GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q8_0, GgmlType::F16, GgmlType::F32] {
            let (_, bytes, _) = qmm_shape(ty, 16, 256).unwrap().geometry;
            let mut src = packed_sources(ty, bytes as usize).unwrap();
            src.sort_unstable();
            assert!(src.iter().copied().eq(0..16 * bytes as usize), "{ty:?}");
        }
    }

    /// Lane `l = 4g + t` finds its pieces at chunk positions `512·j + 16·l`, and the last group's
    /// padding rows are zero.
    #[test]
    fn pack_places_lane_pieces_and_zero_pads() {
        for (ty, inp, out) in [(GgmlType::Q6_K, 512, 19), (GgmlType::Q8_0, 96, 33), (GgmlType::Q4_K, 256, 16)] {
            let (elems, bytes, _) = qmm_shape(ty, out, inp).unwrap().geometry;
            let (blocks, bytes) = (inp / elems as usize, bytes as usize);
            let row_bytes = blocks * bytes;
            let raw: Vec<u8> = (0..out * row_bytes).map(|i| (i * 7 % 251 + 1) as u8).collect();
            let packed = qmm_pack_weights(ty, &raw, out, inp).unwrap();
            assert_eq!(packed.len(), out.div_ceil(128) * 128 * row_bytes);
            assert_eq!(packed.len(), qmm_packed_bytes(ty, out, inp).unwrap());
            let (pieces, _) = lane_layout(ty).unwrap();
            let (row, off, len, stride) = pieces[1];
            for group in 0..out.div_ceil(128) * 8 {
                for b in 0..blocks {
                    let base = (group * blocks + b) * 16 * bytes;
                    // Lane 4·3 + 2 (g = 3, t = 2): its second piece follows its first.
                    let lane = 14usize;
                    let first = pieces[0].2 as usize;
                    for k in 0..len as usize {
                        let i = first + k;
                        let at = base + (i / 16) * 512 + 16 * lane + i % 16;
                        let o = 16 * group + 3 + 8 * row as usize;
                        let want = if o < out {
                            raw[o * row_bytes + b * bytes + off as usize + 2 * stride as usize + k]
                        } else {
                            0
                        };
                        assert_eq!(packed[at], want, "{ty:?} group {group} block {b} byte {k}");
                    }
                }
            }
        }
    }

    /// Every weight type with a tensor-core kernel family.
    const QMM_TYPES: [GgmlType; 7] =
        [GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q8_0, GgmlType::F16, GgmlType::BF16, GgmlType::F32];

    /// Every kernel name the launcher can pick is an entry point of the embedded PTX.
    #[test]
    fn every_kernel_name_is_in_the_ptx() {
        for ty in QMM_TYPES {
            let prefix = qmm_format(ty).unwrap().prefix;
            for tiles in 1..=4 {
                for swiglu in [false, true] {
                    let name = kernel_name(prefix, tiles, swiglu).unwrap();
                    let entry = format!(".entry {name}(");
                    assert!(crate::gpu::KERNELS_PTX.contains(&entry), "{name} is not in the PTX");
                }
            }
        }
    }

    /// The host sizes a kernel's shared memory from `kernel_abi::qmm_wgmma`; the PTX must agree:
    /// a kernel issues `wgmma` exactly when the mask says it is a warpgroup kernel.
    #[test]
    fn wgmma_masks_match_the_kernels_in_the_ptx() {
        let ptx = crate::gpu::KERNELS_PTX;
        for ty in QMM_TYPES {
            let family = qmm_format(ty).unwrap();
            for tiles in 1..=4 {
                for swiglu in [false, true] {
                    let name = kernel_name(family.prefix, tiles, swiglu).unwrap();
                    let start = ptx.find(&format!(".entry {name}(")).unwrap();
                    let body = &ptx[start..];
                    let body = &body[..body.find("\n}").unwrap()];
                    let expected = qmm_is_wgmma(family.wgmma, tiles as u32);
                    assert_eq!(body.contains("wgmma.mma_async"), expected, "{name}: warpgroup kernel = {expected}");
                }
            }
        }
    }

    /// BF16 → row-scaled f16: every value at or above `2^-17` of the scaled range is exact,
    /// smaller ones are within half the f16 subnormal spacing, the largest lands in
    /// `[2^14, 2^15)`, zero rows get scale 1, and non-finite values stay non-finite.
    #[test]
    fn bf16_rows_become_exact_row_scaled_f16() {
        let bf16 = |v: f32| ((v.to_bits() + 0x7fff + ((v.to_bits() >> 16) & 1)) >> 16) as u16;
        let inp = 64;
        let mut rows: Vec<Vec<f32>> = Vec::new();
        // A wide row: 0.75 down to 2^-40 of it, both signs, and bf16 subnormals in a tiny row.
        rows.push(
            (0..inp)
                .map(|i| 0.75 * 2f32.powi(-(i as i32 * 40 / inp as i32)) * if i % 3 == 0 { -1.0 } else { 1.0 })
                .collect(),
        );
        rows.push(vec![0.0; inp]);
        rows.push((0..inp).map(|i| f32::from_bits(((i as u32 % 127) + 1) << 16)).collect());
        rows.push(
            (0..inp)
                .map(|i| {
                    if i == 5 {
                        f32::INFINITY
                    } else if i == 6 {
                        f32::NAN
                    } else {
                        3e30 * (i as f32 - 30.0)
                    }
                })
                .collect(),
        );
        let raw: Vec<u8> = rows.iter().flatten().flat_map(|&v| bf16(v).to_le_bytes()).collect();
        let (f16, scales) = bf16_rows_to_scaled_f16(&raw, rows.len(), inp);
        assert_eq!(scales[1], 1.0);
        for (r, row) in raw.chunks_exact(2 * inp).enumerate() {
            let s = scales[r] as f64;
            assert_eq!(s.log2().fract(), 0.0, "row {r}: scale {s} is a power of two");
            let mut max = 0f64;
            for i in 0..inp {
                let w = f32::from_bits((u16::from_le_bytes([row[2 * i], row[2 * i + 1]]) as u32) << 16) as f64;
                let h = half::f16::from_le_bytes([f16[2 * (r * inp + i)], f16[2 * (r * inp + i) + 1]]).to_f64();
                if !w.is_finite() {
                    assert_eq!(h.is_nan(), w.is_nan(), "row {r} elem {i}");
                    assert_eq!(h.is_infinite(), w.is_infinite(), "row {r} elem {i}");
                    continue;
                }
                max = max.max(h.abs());
                let want = w / s;
                if want.abs() >= 2f64.powi(-17) {
                    assert_eq!(h, want, "row {r} elem {i}: exact");
                } else {
                    assert!((h - want).abs() <= 2f64.powi(-25), "row {r} elem {i}: {h} vs {want}");
                }
            }
            if r != 1 {
                assert!((2f64.powi(14)..2f64.powi(15)).contains(&max), "row {r}: max {max}");
            }
        }
        assert!(
            (0..inp).any(|i| {
                let h = half::f16::from_le_bytes([f16[2 * i], f16[2 * i + 1]]).to_f64();
                h != 0.0 && h.abs() < 2f64.powi(-14)
            }),
            "the wide row reaches the f16 subnormals"
        );
    }

    /// Packed BF16 is the F16 packing of the scaled rows followed by the padded rows' scales.
    #[test]
    fn bf16_packs_as_f16_blocks_then_row_scales() {
        let (out, inp) = (19, 96);
        let raw: Vec<u8> = (0..out * inp).flat_map(|i| (0x3c00u16 + (i * 37 % 4000) as u16).to_le_bytes()).collect();
        let packed = qmm_pack_weights(GgmlType::BF16, &raw, out, inp).unwrap();
        assert_eq!(packed.len(), qmm_packed_bytes(GgmlType::BF16, out, inp).unwrap());
        let (f16, scales) = bf16_rows_to_scaled_f16(&raw, out, inp);
        let as_f16 = qmm_pack_weights(GgmlType::F16, &f16, out, inp).unwrap();
        assert_eq!(&packed[..as_f16.len()], &as_f16[..]);
        let tail: Vec<f32> =
            packed[as_f16.len()..].chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
        assert_eq!(tail.len(), 128);
        assert_eq!(&tail[..out], &scales[..]);
        assert!(tail[out..].iter().all(|&v| v == 1.0));
    }

    #[test]
    fn pack_rejects_a_wrong_length_naming_it() {
        let e = qmm_pack_weights(GgmlType::Q4_K, &[0u8; 100], 2, 256).unwrap_err().to_string();
        assert!(e.contains("100 bytes, not 288"), "{e}");
        let e = qmm_pack_weights(GgmlType::Q4_0, &[0u8; 18], 1, 32).unwrap_err().to_string();
        assert!(e.contains("Q4_0"), "{e}");
    }

    /// Gate and up interleave by 8 rows, the rows past `ff` are zero, and the result is the
    /// plain packing of that interleaved matrix.
    #[test]
    fn gate_up_interleave_by_eight_rows() {
        let (ty, ff, inp) = (GgmlType::Q8_0, 19, 64);
        let row_bytes = 2 * 34;
        let gate: Vec<u8> = (0..ff * row_bytes).map(|i| (i % 97 + 1) as u8).collect();
        let up: Vec<u8> = (0..ff * row_bytes).map(|i| (i % 89 + 100) as u8).collect();
        let rows = qmm_swiglu_rows(ff);
        assert_eq!(rows, 48);
        let mut inter = vec![0u8; rows * row_bytes];
        for r in 0..rows {
            let (b, j) = (r / 16, r % 16);
            let f = 8 * b + j % 8;
            if f < ff {
                let src = if j < 8 { &gate } else { &up };
                inter[r * row_bytes..(r + 1) * row_bytes].copy_from_slice(&src[f * row_bytes..(f + 1) * row_bytes]);
            }
        }
        let want = qmm_pack_weights(ty, &inter, rows, inp).unwrap();
        assert_eq!(qmm_pack_gate_up(ty, &gate, &up, ff, inp).unwrap(), want);
        let e = qmm_pack_gate_up(ty, &gate[1..], &up, ff, inp).unwrap_err().to_string();
        assert!(e.contains("gate Q8_0 [19, 64]") && e.contains("not 1292"), "{e}");
    }
}
