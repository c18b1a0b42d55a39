//! Accumulated products (`kernel_abi::qmm_accum`): a plain product whose K-split reduction is
//! left, exactly, to its one consumer — the next norm site's residual add. The product's blocks
//! add their raw sums to i64 fixed-point accumulators (`qmm_*_accum_*`: no partial planes, no
//! counters, no split waiting for another), and `qmm_prep_norm_accum` converts them while it
//! adds them to the residual stream.
//!
//! Two accumulator pairs (i64 sums `[columns][width]` and a scale word per column) alternate:
//! product `k` of a forward adds into pair `k mod 2`, and the consumer of pair `p` zeroes pair
//! `1 − p` over its columns (it cannot zero what it reads: every block of a column reads the whole
//! column), so the next product finds it zero. Invariant: **at the start of every forward pair 0
//! is zero in every column** — [`QmmWorkspace::begin_accumulation`] restores it after a forward
//! that stopped early, [`QmmWorkspace::end_accumulation`] after an odd number of products; pair 1
//! is zeroed, over the columns a forward uses, by its first consumer. Both calls and every product
//! are ordered on the one stream, and a captured forward replays the same sequence.
//!
//! The sums are exact integer sums of the splits' rounded partials, so a column's result depends
//! on neither the order the blocks finish in nor `n` (the plan is the matrix's); they are not the
//! bits of [`super::QWeight::matmul`] (which adds f32 partials in split order), so one model runs
//! one path for every `n` — whether a matrix accumulates depends on its type and shape only.

use cudarc::driver::{CudaSlice, LaunchConfig};
use flashtree_quants::GgmlType;
use kernel_abi::{
    qmm_accum, qmm_grid_blocks, QmmParams, QmmPrepNormParams, QmmSplitPlan, QMM_MAX_N, QMM_ROWS_PER_BLOCK, QMM_WARPS,
};

use super::format::{family_for, to_u32};
use super::kernels::kernel_name_nt1;
use super::workspace::chunk_cols;
use super::{QWeight, QmmWorkspace};
use crate::gpu::{ChainedLaunch, DevSpan, Gpu, GpuError, Param};

/// `FLASHTREE_QMM_ACCUM=0`: no accumulated products (an A/B switch, read once per process; the
/// engine's outputs change bits with it, both ways batch-invariant).
pub fn accumulation_enabled() -> bool {
    static V: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *V.get_or_init(|| std::env::var("FLASHTREE_QMM_ACCUM").map_or(true, |v| v.trim() != "0"))
}

/// How an accumulated product splits K (per matrix, never per `n`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AccumPlan {
    /// The matrix's own plan ([`QWeight::plan`], chosen for the reducing kernels by their cost
    /// model).
    Matrix,
    /// Every row block in `⌊slots / row blocks⌋` splits (at most the K blocks of a row and 16):
    /// as many as one wave of the one-tile kernel holds — accumulating splits never wait for each
    /// other, so the reduction cost that keeps the matrix's plan smaller does not apply.
    OneWave,
}

/// `FLASHTREE_QMM_ACCUM_PLAN=matrix|wave` (default `wave`): the engine's [`AccumPlan`].
pub fn accum_plan_from_env() -> AccumPlan {
    match std::env::var("FLASHTREE_QMM_ACCUM_PLAN").as_deref().map(str::trim) {
        Ok("matrix") => AccumPlan::Matrix,
        _ => AccumPlan::OneWave,
    }
}

/// The K split of an accumulated product of `w` under `rule`.
fn accum_split(gpu: &Gpu, w: &QWeight, rule: AccumPlan) -> Result<QmmSplitPlan, GpuError> {
    match rule {
        AccumPlan::Matrix => Ok(w.plan()),
        AccumPlan::OneWave => {
            let family = family_for(w.ty(), w.out(), w.inp())?;
            let slots = gpu.resident_blocks(kernel_name_nt1(family.prefix)?, QMM_WARPS * 32)?;
            let row_blocks = to_u32(w.out(), "out")?.div_ceil(QMM_ROWS_PER_BLOCK).max(1);
            let blocks_per_row = to_u32(w.inp() / family.geometry.0 as usize, "in")?.max(1);
            Ok(QmmSplitPlan { full: 0, ksplit: (slots / row_blocks).clamp(1, 16).min(blocks_per_row) })
        }
    }
}

/// The accumulating kernel of `ty` for `tiles` tiles of 8 columns (`kernel_abi::qmm_accum`).
pub(super) fn accum_kernel_name(ty: GgmlType, tiles: usize) -> Option<&'static str> {
    const Q4K: [&str; 4] = ["qmm_q4k_accum_nt1", "qmm_q4k_accum_nt2", "qmm_q4k_accum_nt3", "qmm_q4k_accum_nt4"];
    const Q6K: [&str; 4] = ["qmm_q6k_accum_nt1", "qmm_q6k_accum_nt2", "qmm_q6k_accum_nt3", "qmm_q6k_accum_nt4"];
    const Q8: [&str; 4] = ["qmm_q8_0_accum_nt1", "qmm_q8_0_accum_nt2", "qmm_q8_0_accum_nt3", "qmm_q8_0_accum_nt4"];
    let names = match ty {
        GgmlType::Q4_K if qmm_accum::Q4_K => &Q4K,
        GgmlType::Q6_K if qmm_accum::Q6_K => &Q6K,
        GgmlType::Q8_0 if qmm_accum::Q8_0 => &Q8,
        _ => return None,
    };
    names.get(tiles.checked_sub(1)?).copied()
}

/// A product whose sums wait in an accumulator pair for their consumer
/// ([`QmmWorkspace::prepare_norm_accum`]); valid until then.
#[derive(Debug)]
#[must_use = "an accumulated product must be consumed by prepare_norm_accum"]
pub struct QmmAccumulated {
    pair: usize,
    n: usize,
    out: usize,
}

/// The workspace's accumulator pairs ([`QmmWorkspace::enable_accumulation`]).
pub(super) struct Accumulators {
    sums: [CudaSlice<u64>; 2],
    words: [CudaSlice<u32>; 2],
    /// Rows of the products they take (the consumer's width).
    width: usize,
    /// How their products split K.
    plan: AccumPlan,
    /// The pair the next product adds into.
    next: usize,
    /// Whether pair 0 may hold non-zero values (a product added into it and its zeroing —
    /// the next consumer's, or a memset — has not been enqueued yet).
    dirty0: bool,
    /// A product enqueued and not yet consumed.
    pending: bool,
}

impl QmmWorkspace {
    /// Allocates the accumulator pairs for products of `width` rows (the residual stream's width,
    /// at most `qmm_accum::MAX_IN`) over up to this workspace's columns: `2 × columns × width × 8`
    /// bytes and a word per column.
    pub fn enable_accumulation(&mut self, gpu: &Gpu, width: usize) -> Result<(), GpuError> {
        if width == 0 || width > qmm_accum::MAX_IN as usize || !width.is_multiple_of(32) {
            return Err(GpuError::shape(
                "qmm accumulators",
                format!("width {width}: a positive multiple of 32 up to {}", qmm_accum::MAX_IN),
            ));
        }
        let cols = self.max_columns();
        let len = cols.checked_mul(width).ok_or_else(|| GpuError::shape("qmm accumulators", "size overflows"))?;
        self.accum = Some(Accumulators {
            sums: [gpu.zeros(len)?, gpu.zeros(len)?],
            words: [gpu.zeros(cols)?, gpu.zeros(cols)?],
            width,
            plan: accum_plan_from_env(),
            next: 0,
            dirty0: false,
            pending: false,
        });
        Ok(())
    }

    /// Sets how accumulated products split K (default: `FLASHTREE_QMM_ACCUM_PLAN`). Results
    /// depend on it (the split points move), so one engine keeps one plan.
    pub fn set_accum_plan(&mut self, plan: AccumPlan) {
        if let Some(a) = &mut self.accum {
            a.plan = plan;
        }
    }

    /// The K split an accumulated product of `w` runs with here (`None` if `w` does not accumulate).
    pub fn accum_split(&self, gpu: &Gpu, w: &QWeight) -> Result<Option<QmmSplitPlan>, GpuError> {
        match &self.accum {
            Some(a) if self.accumulates(w) => Ok(Some(accum_split(gpu, w, a.plan)?)),
            _ => Ok(None),
        }
    }

    /// Device bytes of the accumulator pairs (0 before [`Self::enable_accumulation`]).
    pub fn accumulation_bytes(&self) -> usize {
        self.accum.as_ref().map_or(0, |a| 2 * (a.sums[0].len() * 8 + a.words[0].len() * 4))
    }

    /// Whether products of `w` run accumulated: accumulation enabled here and by
    /// `FLASHTREE_QMM_ACCUM`, a format with accumulating kernels, a plain matrix of exactly the
    /// accumulators' width. Never depends on the number of tokens.
    pub fn accumulates(&self, w: &QWeight) -> bool {
        accumulation_enabled()
            && w.ff().is_none()
            && accum_kernel_name(w.ty(), 1).is_some()
            && self.accum.as_ref().is_some_and(|a| a.width == w.out())
    }

    /// Starts a forward's accumulations: pair 0 zeroed if a forward stopped before zeroing it.
    /// Call before every forward, outside any graph capture (a replay runs no host code).
    pub fn begin_accumulation(&mut self, gpu: &Gpu) -> Result<(), GpuError> {
        if let Some(a) = &mut self.accum {
            if a.dirty0 {
                gpu.fill_bytes(&mut a.sums[0], 0)?;
                gpu.fill_bytes(&mut a.words[0], 0)?;
                a.dirty0 = false;
            }
            a.next = 0;
            a.pending = false;
        }
        Ok(())
    }

    /// Ends a forward's accumulations: after an odd number of products pair 0 still holds the
    /// last one's sums, so it is zeroed here (inside the forward: a captured forward replays it).
    /// Errors if a product was not consumed.
    pub fn end_accumulation(&mut self, gpu: &Gpu) -> Result<(), GpuError> {
        if let Some(a) = &mut self.accum {
            if a.pending {
                return Err(GpuError::shape("qmm accumulators", "a forward ended with an unconsumed product"));
            }
            if a.next == 1 {
                gpu.fill_bytes(&mut a.sums[0], 0)?;
                gpu.fill_bytes(&mut a.words[0], 0)?;
                a.dirty0 = false;
                a.next = 0;
            }
        }
        Ok(())
    }

    /// `W · x` over the `n` tokens last prepared here, added into the next accumulator pair
    /// (`qmm_*_accum_*`, one launch per plane of ≤ 32 columns, `w`'s own K-split plan without
    /// clusters or waiting); consume it with [`Self::prepare_norm_accum`] before the next one.
    pub fn matmul_accum(&mut self, gpu: &Gpu, w: &QWeight, n: usize) -> Result<QmmAccumulated, GpuError> {
        const OP: &str = "qmm accumulated";
        let (ty, out, inp) = (w.ty(), w.out(), w.inp());
        if !self.accumulates(w) {
            return Err(GpuError::shape(OP, format!("W {ty:?} [{out}, {inp}] does not accumulate here")));
        }
        if n == 0 || n > self.max_columns() {
            return Err(GpuError::shape(OP, format!("{n} tokens: 1..={}", self.max_columns())));
        }
        self.check_fits(OP, out, inp)?;
        self.check_prepared(OP, n, inp, w.needs_pairs())?;
        let family = family_for(ty, out, inp)?;
        let out32 = to_u32(out, "out")?;
        let rule = self.accum.as_ref().map_or(AccumPlan::Matrix, |a| a.plan);
        let plan = accum_split(gpu, w, rule)?;
        let planes: Vec<_> =
            (0..n.div_ceil(QMM_MAX_N as usize)).map(|c| self.plane(gpu, c)).collect::<Result<_, _>>()?;
        let Some(a) = self.accum.as_mut() else { unreachable!("accumulates() checked it") };
        if a.pending {
            return Err(GpuError::shape(OP, "the previous accumulated product was not consumed"));
        }
        let pair = a.next;
        if pair == 0 && a.dirty0 {
            gpu.fill_bytes(&mut a.sums[0], 0)?;
            gpu.fill_bytes(&mut a.words[0], 0)?;
        }
        let sums = DevSpan::of(gpu, &a.sums[pair]);
        let words = DevSpan::of(gpu, &a.words[pair]);
        for (c, pl) in planes.iter().enumerate() {
            let (first, cols) = chunk_cols(n, c);
            let tiles = cols.div_ceil(8);
            let name =
                accum_kernel_name(ty, tiles).ok_or_else(|| GpuError::shape(OP, format!("no kernel for {ty:?}")))?;
            let p = QmmParams {
                out_features: out32,
                in_features: to_u32(inp, "in")?,
                n: cols as u32,
                ksplit: plan.ksplit,
                full_row_blocks: plan.full,
                cluster: 0,
                swiglu_ff: 0,
                reduce_spread: 0,
            };
            let smem = family.smem_bytes(tiles as u32);
            gpu.allow_dynamic_smem(name, smem)?;
            let cfg = LaunchConfig {
                grid_dim: (qmm_grid_blocks(out32.div_ceil(QMM_ROWS_PER_BLOCK), p.full_row_blocks, p.ksplit), 1, 1),
                block_dim: (QMM_WARPS * 32, 1, 1),
                shared_mem_bytes: smem,
            };
            // Safety: the arguments match `qmm_entry!` (`y` = this chunk's i64 sums, `ymax` = its
            // scale words; the partials and counters are never touched by these kernels).
            unsafe {
                ChainedLaunch::new(gpu, name)
                    .buf(w.buf())
                    .span(pl.xh)
                    .span(pl.xb_hi)
                    .span(pl.xb_lo)
                    .span(pl.xcm)
                    .span(pl.xscale)
                    .span(pl.xsum)
                    .buf_mut(&mut self.partial)
                    .buf_mut(&mut self.counters)
                    .span(sums.sub(first * out, cols * out, "qmm accumulators")?)
                    .span(words.sub(first, cols, "qmm accumulator words")?)
                    .value(Param(p))
                    .tag(p.in_features)
                    .launch(cfg)?
            };
        }
        let a = self.accum.as_mut().expect("checked above");
        if pair == 0 {
            a.dirty0 = true;
        }
        a.next = 1 - pair;
        a.pending = true;
        self.ymax_of = None;
        Ok(QmmAccumulated { pair, n, out })
    }

    /// [`Self::prepare_norm`] with the residual addend the accumulated product `a` over these `n`
    /// tokens (`qmm_prep_norm_accum`): `v = h + a` to `h_out` (another buffer than `h`), the
    /// activations of `rmsnorm(v) ⊙ w` prepared, and the other accumulator pair zeroed over the
    /// `n` columns.
    #[allow(clippy::too_many_arguments)]
    pub fn prepare_norm_accum(
        &mut self,
        gpu: &Gpu,
        h: DevSpan<f32>,
        a: QmmAccumulated,
        h_out: DevSpan<f32>,
        w: DevSpan<f32>,
        n: usize,
        inp: usize,
        eps: f32,
        pairs: bool,
    ) -> Result<(), GpuError> {
        const K: &str = "qmm_prep_norm_accum";
        h.need(n * inp, K, "h")?;
        w.need(inp, K, "w")?;
        h_out.need(n * inp, K, "h_out")?;
        if h_out.ptr() == h.ptr() {
            return Err(GpuError::shape(K, "h_out must be another buffer than h"));
        }
        if a.n != n || a.out != inp {
            return Err(GpuError::shape(
                K,
                format!("an accumulated product of {} tokens × {} rows for {n} tokens × {inp}", a.n, a.out),
            ));
        }
        let acc = self.accum.as_ref().ok_or_else(|| GpuError::shape(K, "no accumulators"))?;
        let (sums, words) = (DevSpan::of(gpu, &acc.sums[a.pair]), DevSpan::of(gpu, &acc.words[a.pair]));
        let (zero, zero_words) = (DevSpan::of(gpu, &acc.sums[1 - a.pair]), DevSpan::of(gpu, &acc.words[1 - a.pair]));
        let np = Param(QmmPrepNormParams { eps, add: 1 });
        self.prepare_planes(gpu, K, n, inp, pairs, |pl, first, cols, cfg, pp| {
            let rows = |s: DevSpan<f32>, what| s.sub(first * inp, cols * inp, what);
            let wide = |s: DevSpan<u64>, what| s.sub(first * inp, cols * inp, what);
            // Safety: the arguments match `qmm_prep_norm_accum`, sizes checked by `sub`.
            unsafe {
                ChainedLaunch::new(gpu, K)
                    .span(rows(h, "h")?)
                    .span(wide(sums, "accumulators")?)
                    .span(words.sub(first, cols, "accumulator words")?)
                    .span(wide(zero, "accumulators")?)
                    .span(zero_words.sub(first, cols, "accumulator words")?)
                    .span(w)
                    .span(rows(h_out, "h_out")?)
                    .span(pl.xh)
                    .span(pl.xb_hi)
                    .span(pl.xb_lo)
                    .span(pl.xcm)
                    .span(pl.xscale)
                    .span(pl.xsum)
                    .value(Param(pp))
                    .value(np)
                    .launch(cfg)
            }
        })?;
        let acc = self.accum.as_mut().expect("checked above");
        if a.pair == 1 {
            acc.dirty0 = false;
        }
        acc.pending = false;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every accumulating kernel the launcher can pick, and the consumer, are entry points of the
    /// embedded PTX; the formats without them have none.
    #[test]
    fn every_accumulating_kernel_is_in_the_ptx() {
        for ty in [GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q8_0] {
            for tiles in 1..=4 {
                let name = accum_kernel_name(ty, tiles).expect("an accumulating kernel");
                assert!(crate::gpu::KERNELS_PTX.contains(&format!(".entry {name}(")), "{name} is not in the PTX");
            }
            assert!(accum_kernel_name(ty, 5).is_none());
        }
        for ty in [GgmlType::Q5_K, GgmlType::F16, GgmlType::BF16, GgmlType::F32] {
            assert!(accum_kernel_name(ty, 1).is_none(), "{ty:?}");
        }
        assert!(crate::gpu::KERNELS_PTX.contains(".entry qmm_prep_norm_accum("));
    }
}
