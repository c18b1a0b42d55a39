//! Which `qmm_*` kernel runs a product and how: the kernel name for a family, tile count and
//! epilogue; the K split (from the shape and the one-tile kernel's residency, never from the
//! number of tokens); and the checked, chained launch of a [`QWeight`] product — one launch per
//! chunk of at most `QMM_MAX_N` columns.

use cudarc::driver::LaunchConfig;
use flashtree_quants::GgmlType;
use kernel_abi::{
    qmm_cluster_ksplit, qmm_cluster_plan, qmm_grid_blocks, qmm_ksplit, qmm_ksplit_pow2, qmm_split_plan,
    qmm_spread_reduction, QmmParams, QmmSplitPlan, MAX_NODES, QMM_MAX_CLUSTER, QMM_MAX_N, QMM_ROWS_PER_BLOCK,
    QMM_SPLIT_COST_Q4_K, QMM_SPLIT_COST_Q6_K, QMM_WARPS,
};

use super::format::{family_for, to_u32, QmmFamily};
use super::workspace::chunk_cols;
use super::{QWeight, QmmWorkspace};
use crate::gpu::{ChainedLaunch, DevSpan, Gpu, GpuError, Param};

/// `FLASHTREE_QMM_KSPLIT=<1..16>`: a fixed K split for every shape instead of
/// [`qmm_split_plan`]'s wave model (kernel tuning runs; results stay batch-invariant for a fixed value).
fn ksplit_override() -> Option<u32> {
    static V: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
    *V.get_or_init(|| std::env::var("FLASHTREE_QMM_KSPLIT").ok().and_then(|v| v.parse().ok()))
}

/// `FLASHTREE_QMM_FULL_WAVES=0`: the uniform split of [`qmm_ksplit`] for every shape (no leading
/// unsplit waves; an A/B switch, read once per process).
fn full_waves() -> bool {
    static V: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *V.get_or_init(|| std::env::var("FLASHTREE_QMM_FULL_WAVES").map_or(true, |v| v != "0"))
}

/// `FLASHTREE_QMM_CLUSTER=0`: split row blocks always reduce through global memory (an A/B
/// switch, read once per process); by default a plan whose row blocks are all split runs as
/// thread-block clusters ([`uses_cluster`]).
fn cluster_enabled() -> bool {
    static V: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *V.get_or_init(|| std::env::var("FLASHTREE_QMM_CLUSTER").map_or(true, |v| v != "0"))
}

/// Whether products of `ty` with `plan` run as clusters of `ksplit` blocks that add their
/// partials through distributed shared memory (`QmmParams::cluster`): the block formats' kernels
/// have that path (`gpu-kernels` `qmatmul::epilogue`), and the plan must split every row block
/// in `2..=QMM_MAX_CLUSTER` (`kernel_abi::qmm_cluster_plan`). Same sums in the same order as the
/// global-memory reduction, so the same bits either way.
pub(super) fn uses_cluster(ty: GgmlType, plan: QmmSplitPlan) -> bool {
    cluster_enabled()
        && matches!(ty, GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K | GgmlType::Q8_0)
        && qmm_cluster_plan(plan.full, plan.ksplit)
}

/// The K-split plan of every product of a `[out, inp]` matrix of `ty` on `gpu` (split in
/// `1..=16` and at most the K blocks of a row): the override (uniform), else `qmm_ksplit_pow2`
/// for the float types (uniform), else `qmm_split_plan` over the device's resident blocks of the
/// family's one-tile kernel — replaced, for Q4_K and Q6_K with clusters on, by the cluster plan
/// of `qmm_cluster_ksplit` where its time model says so (the device's cluster residency). For
/// every n: the plan must not depend on n, or a column's bits would.
pub(super) fn choose_plan(
    gpu: &Gpu,
    ty: GgmlType,
    family: &QmmFamily,
    out: usize,
    inp: usize,
) -> Result<QmmSplitPlan, GpuError> {
    let blocks_per_row = to_u32(inp / family.geometry.0 as usize, "in")?;
    let out32 = to_u32(out, "out")?;
    let uniform = |s: u32| QmmSplitPlan { full: 0, ksplit: s };
    let plan = match ksplit_override() {
        Some(v) => uniform(v),
        None if matches!(ty, GgmlType::F16 | GgmlType::BF16 | GgmlType::F32) => {
            uniform(qmm_ksplit_pow2(out32, blocks_per_row))
        }
        None => {
            let nt1 = kernel_name_nt1(family.prefix)?;
            let slots = gpu.resident_blocks(nt1, QMM_WARPS * 32)?;
            let plan = if full_waves() {
                qmm_split_plan(out32, blocks_per_row, slots)
            } else {
                uniform(qmm_ksplit(out32, blocks_per_row, slots))
            };
            let cost = match ty {
                GgmlType::Q4_K => Some(QMM_SPLIT_COST_Q4_K),
                GgmlType::Q6_K => Some(QMM_SPLIT_COST_Q6_K),
                _ => None,
            };
            match cost {
                Some(m) if cluster_enabled() && qmm_cluster_plan(plan.full, plan.ksplit) => {
                    let mut resident = [0u32; QMM_MAX_CLUSTER as usize + 1];
                    for (k, r) in resident.iter_mut().enumerate().skip(2) {
                        *r = gpu.resident_clusters(nt1, QMM_WARPS * 32, family.smem_bytes(1), k as u32)?;
                    }
                    let row_blocks = out32.div_ceil(QMM_ROWS_PER_BLOCK);
                    match qmm_cluster_ksplit(row_blocks, blocks_per_row, plan, slots, &resident, m) {
                        0 => plan,
                        k => uniform(k),
                    }
                }
                _ => plan,
            }
        }
    };
    Ok(QmmSplitPlan { full: plan.full, ksplit: plan.ksplit.clamp(1, 16).min(blocks_per_row.max(1)) })
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
pub(super) fn kernel_name_nt1(prefix: &str) -> Result<&'static str, GpuError> {
    kernel_name(prefix, 1, false).ok_or_else(|| GpuError::shape("qmm", format!("no kernel for {prefix}")))
}

/// For a matrix whose split row blocks may reduce in clusters: `(clusters resident at once,
/// row blocks)` for the kernel a product over `n ≤ QMM_MAX_N` tokens runs — a launch uses clusters
/// only when the first is at least the second ([`launch_clustered`]). `None` when the matrix does
/// not allow clusters.
pub(super) fn cluster_residency(
    gpu: &Gpu,
    w: &QWeight,
    n: usize,
    swiglu: bool,
) -> Result<Option<(u32, u32)>, GpuError> {
    if !w.cluster_reduction() {
        return Ok(None);
    }
    let family = family_for(w.ty(), w.out(), w.inp())?;
    let tiles = n.clamp(1, QMM_MAX_N as usize).div_ceil(8);
    let name = kernel_name(family.prefix, tiles, swiglu)
        .ok_or_else(|| GpuError::shape("qmm", format!("no kernel for {}", family.prefix)))?;
    let smem = family.smem_bytes(tiles as u32);
    let resident = gpu.resident_clusters(name, QMM_WARPS * 32, smem, w.plan().ksplit)?;
    Ok(Some((resident, to_u32(w.out(), "out")?.div_ceil(QMM_ROWS_PER_BLOCK))))
}

/// Whether a launch of kernel `name` (with `smem` bytes of dynamic shared memory, `tiles` tiles of
/// 8 columns) over `w`'s split row blocks reduces them spread over the splits
/// (`QmmParams::reduce_spread`: each split adds a share of the columns once all splits have
/// published) instead of by the last split to finish: block formats with split row blocks, past
/// one tile, when every split block fits the device at once — the spread splits wait for each
/// other, so none may wait for a slot another holds. Measured on nvidia-h200
/// (docs/perf/qmatmul.md, thirteenth engine session): at n = 22 the 27B's fused gate/up 43.7 →
/// 39.7 µs and Q6_K down 33.5 → 31.5 µs, but at n = 1 each 1.5 % slower (one column to add; the
/// splits' waiting costs more than the last block's short reduction), so one-tile launches keep
/// the last-block reduction. `FLASHTREE_QMM_SPREAD=0` keeps it everywhere (A/B checks: the same
/// bits either way, so the choice may depend on the tile count).
fn reduce_spread(gpu: &Gpu, w: &QWeight, name: &'static str, smem: u32, tiles: usize) -> Result<bool, GpuError> {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let on = w.spread_allowed() && *ON.get_or_init(|| std::env::var("FLASHTREE_QMM_SPREAD").map_or(true, |v| v != "0"));
    let plan = w.plan();
    let row_blocks = to_u32(w.out(), "out")?.div_ceil(QMM_ROWS_PER_BLOCK);
    let tiles = to_u32(tiles, "tiles")?;
    // The plan and the tile count first (any residency): the occupancy query only where they qualify.
    if !on
        || !matches!(w.ty(), GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K | GgmlType::Q8_0)
        || !qmm_spread_reduction(tiles, plan.ksplit, plan.full, row_blocks, u32::MAX)
    {
        return Ok(false);
    }
    let resident = gpu.resident_clusters(name, QMM_WARPS * 32, smem, 1)?;
    Ok(qmm_spread_reduction(tiles, plan.ksplit, plan.full, row_blocks, resident))
}

/// [`reduce_spread`] for a product over `n` tokens (`swiglu`: the fused kernel), as its launch
/// decides it (clusters first).
pub(super) fn spread_for(gpu: &Gpu, w: &QWeight, n: usize, swiglu: bool) -> Result<bool, GpuError> {
    let family = family_for(w.ty(), w.out(), w.inp())?;
    let tiles = n.clamp(1, QMM_MAX_N as usize).div_ceil(8);
    let name = kernel_name(family.prefix, tiles, swiglu)
        .ok_or_else(|| GpuError::shape("qmm", format!("no kernel for {}", family.prefix)))?;
    Ok(!launch_clustered(gpu, w, n, swiglu)? && reduce_spread(gpu, w, name, family.smem_bytes(tiles as u32), tiles)?)
}

/// Whether a product over `n ≤ QMM_MAX_N` tokens runs as clusters: only when one cluster per row
/// block fits the device at once ([`cluster_residency`]). Clusters that do not fit run in waves:
/// measured on nvidia-h200, clusters of 6 over the 27B's 40-row-block shapes took 1.4× the
/// global-memory reduction, while clusters of 2 over 129 row blocks were faster
/// (docs/perf/qmatmul.md, session 14). Either path gives the same bits, so the choice may depend
/// on the launch's kernel (its tile count) without breaking batch invariance.
fn launch_clustered(gpu: &Gpu, w: &QWeight, n: usize, swiglu: bool) -> Result<bool, GpuError> {
    Ok(cluster_residency(gpu, w, n, swiglu)?.is_some_and(|(resident, row_blocks)| resident >= row_blocks))
}

/// Checks and launches the `qmm_*` kernel over the rows of `w`; `swiglu`: the fused epilogue
/// (y `[n, ff]`), else y `[n, out]`. Grid `qmm_grid_blocks(⌈out/128⌉, full, ksplit)` (1-D, decoded
/// by `kernel_abi::qmm_block_work`), `QMM_WARPS` warps per block,
/// the staged x chunk as dynamic shared memory. Over `n > QMM_MAX_N` tokens: one launch per
/// activation plane (columns `32c .. min(32c + 32, n)`, the kernel of that chunk's width), each
/// streaming all of W — a product over 33..=64 tokens reads its weights twice. Column `j`'s
/// bits are those of the same column in a lone launch: a column's result depends on neither `n`
/// nor its place in the launch (`gpu-kernels/src/qmatmul/mod.rs`), and the K split is the
/// matrix's.
pub(super) fn launch(
    gpu: &Gpu,
    w: &QWeight,
    n: usize,
    y: DevSpan<f32>,
    swiglu: bool,
    ws: &mut QmmWorkspace,
) -> Result<(), GpuError> {
    let op = if swiglu { "qmm_swiglu" } else { "qmm" };
    let (ty, out, inp) = (w.ty(), w.out(), w.inp());
    let family = family_for(ty, out, inp)?;
    let prefix = family.prefix;
    if n == 0 || n > MAX_NODES as usize {
        return Err(GpuError::shape(op, format!("{n} tokens: 1..={MAX_NODES}")));
    }
    ws.check_fits(op, out, inp)?;
    ws.check_prepared(op, n, inp, w.needs_pairs())?;
    let ff = if swiglu { w.ff() } else { None };
    let y_cols = ff.unwrap_or(out);
    if y.len() < n * y_cols {
        return Err(GpuError::shape(op, format!("W {ty:?} [{out}, {inp}]: y {} values (has {})", n * y_cols, y.len())));
    }
    let out32 = to_u32(out, "out")?;
    // The fused SwiGLU epilogue publishes `max |y|` per column and row group (`ymax`, indexed by
    // the global column: each chunk's span starts at its first column, like its `y`).
    let parts = out.div_ceil(QMM_ROWS_PER_BLOCK as usize);
    ws.ymax_of = None;
    for c in 0..n.div_ceil(QMM_MAX_N as usize) {
        let (first, cols) = chunk_cols(n, c);
        let tiles = cols.div_ceil(8);
        let p = QmmParams {
            out_features: out32,
            in_features: to_u32(inp, "in")?,
            n: cols as u32,
            ksplit: w.plan().ksplit,
            full_row_blocks: w.plan().full,
            cluster: 0,
            swiglu_ff: to_u32(ff.unwrap_or(0), "ff")?,
            reduce_spread: 0,
        };
        let name =
            kernel_name(prefix, tiles, swiglu).ok_or_else(|| GpuError::shape(op, format!("no kernel for {prefix}")))?;
        // Multi-tile kernels that stage x keep x chunks in dynamic shared memory.
        let smem = family.smem_bytes(tiles as u32);
        gpu.allow_dynamic_smem(name, smem)?;
        let clustered = launch_clustered(gpu, w, cols, swiglu)?;
        let spread = !clustered && reduce_spread(gpu, w, name, smem, tiles)?;
        let p = QmmParams { cluster: clustered as u32, reduce_spread: spread as u32, ..p };
        let cfg = LaunchConfig {
            grid_dim: (qmm_grid_blocks(out32.div_ceil(QMM_ROWS_PER_BLOCK), p.full_row_blocks, p.ksplit), 1, 1),
            block_dim: (QMM_WARPS * 32, 1, 1),
            shared_mem_bytes: smem,
        };
        let pl = ws.plane(gpu, c)?;
        let ymax = if swiglu {
            ws.ymax_span(gpu, first, cols, parts)?
        } else {
            // Safety: never dereferenced (only the SwiGLU epilogue writes `ymax`).
            unsafe { DevSpan::from_raw(0, 0) }
        };
        let y_chunk = y.sub(first * y_cols, cols * y_cols, "y")?;
        // Chained: only the packed weights are read before the kernel's `griddepcontrol.wait`, so
        // its first weight loads overlap the previous kernel's tail (a chunk's partials and
        // counters are free again once the previous chunk's launch has finished).
        unsafe {
            ChainedLaunch::new(gpu, name)
                .buf(w.buf())
                .args(&pl)
                .buf_mut(&mut ws.partial)
                .buf_mut(&mut ws.counters)
                .span(y_chunk)
                .span(ymax)
                .value(Param(p))
                .tag(p.in_features)
                .cluster(if clustered { p.ksplit } else { 0 })
                .launch(cfg)?
        };
    }
    if swiglu {
        ws.ymax_of = Some((y.ptr(), n, y_cols, parts));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::qmatmul::format::qmm_format;
    use kernel_abi::qmm_is_wgmma;

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
}
