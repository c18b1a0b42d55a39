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
//! Fused SwiGLU products (`qmm_*_swiglu_accum_*`) use a second set of pairs for their split
//! tail only: their unsplit row blocks store `y` and its row maxima as the reducing kernels do,
//! their split row blocks add gate and up sums here, and the down projection's prep
//! (`qmm_prep_swiglu_accum`) applies the SwiGLU to them — the same protocol, its own alternation.
//!
//! The sums are exact integer sums of the splits' rounded partials, so a column's result depends
//! on neither the order the blocks finish in nor `n` (the plan is the matrix's); they are not the
//! bits of [`super::QWeight::matmul`] (which adds f32 partials in split order), so one model runs
//! one path for every `n` — whether a matrix accumulates depends on its type and shape only.

use cudarc::driver::{CudaSlice, LaunchConfig};
use flashtree_quants::GgmlType;
use kernel_abi::{
    qmm_accum, qmm_grid_blocks, QmmParams, QmmPrepNormParams, QmmPrepParams, QmmSplitPlan, QmmSwigluTail, QMM_MAX_N,
    QMM_ROWS_PER_BLOCK, QMM_WARPS,
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

/// Whether products into a residual of `width` rows can accumulate: a positive multiple of 32
/// that `qmm_prep_norm_accum` takes (≤ `qmm_accum::MAX_IN`).
pub fn accumulator_width_fits(width: usize) -> bool {
    width > 0 && width <= qmm_accum::MAX_IN as usize && width.is_multiple_of(32)
}

/// Whether a fused SwiGLU product's split tail of `tail_rows` rows can accumulate: whole row
/// blocks, some, at most `qmm_accum::MAX_SWIGLU_TAIL_ROWS`.
pub fn swiglu_tail_fits(tail_rows: usize) -> bool {
    tail_rows > 0
        && tail_rows <= qmm_accum::MAX_SWIGLU_TAIL_ROWS as usize
        && tail_rows.is_multiple_of(QMM_ROWS_PER_BLOCK as usize)
}

/// How an accumulated product splits K (per matrix, never per `n`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AccumPlan {
    /// The matrix's own plan ([`QWeight::plan`], chosen for the reducing kernels by their cost
    /// model).
    Matrix,
    /// Every row block in `⌊slots / row blocks⌋` splits (at most the K blocks of a row and 16):
    /// as many as one wave of the one-tile kernel holds — accumulating splits never wait for each
    /// other, so the reduction cost that keeps the matrix's plan smaller does not apply. A fused
    /// SwiGLU product's split tail likewise ([`swiglu_tail_split`]).
    OneWave,
}

/// `FLASHTREE_QMM_ACCUM_PLAN=matrix|wave` (default `wave`): the engine's [`AccumPlan`].
pub(super) fn accum_plan_from_env() -> AccumPlan {
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
            let (slots, row_blocks, blocks_per_row) = wave_shape(gpu, w)?;
            Ok(QmmSplitPlan { full: 0, ksplit: (slots / row_blocks.max(1)).clamp(1, 16).min(blocks_per_row) })
        }
    }
}

/// What a one-wave plan of `w` is made from: the one-tile kernel's resident blocks on `gpu`, `w`'s
/// row blocks and its K blocks per row (at least 1).
fn wave_shape(gpu: &Gpu, w: &QWeight) -> Result<(u32, u32, u32), GpuError> {
    let family = family_for(w.ty(), w.out(), w.inp())?;
    let slots = gpu.resident_blocks(kernel_name_nt1(family.prefix)?, QMM_WARPS * 32)?;
    let row_blocks = to_u32(w.out(), "out")?.div_ceil(QMM_ROWS_PER_BLOCK);
    let blocks_per_row = to_u32(w.inp() / family.geometry.0 as usize, "in")?.max(1);
    Ok((slots, row_blocks, blocks_per_row))
}

/// The K split of an accumulated fused SwiGLU product of `w` under `rule`: its unsplit row blocks
/// as in the matrix's plan ([`QWeight::plan`]), the tail's row blocks in the matrix's splits
/// ([`AccumPlan::Matrix`]) or in as many as one wave of the one-tile kernel holds beside nothing
/// else — `⌊slots / tail row blocks⌋`, at most the K blocks of a row ([`AccumPlan::OneWave`]:
/// the tail runs after the unsplit blocks, and its splits never wait for each other). The 27B's
/// gate/up: 264 unsplit row blocks, then 8 in 20 splits of one super-block (10 of two in the
/// matrix's plan; nvidia-h200: AR step −0.06 ms, 23-node verify unchanged).
fn swiglu_tail_split(gpu: &Gpu, w: &QWeight, rule: AccumPlan) -> Result<QmmSplitPlan, GpuError> {
    let plan = w.plan();
    if rule == AccumPlan::Matrix || plan.ksplit <= 1 {
        return Ok(plan);
    }
    let (slots, row_blocks, blocks_per_row) = wave_shape(gpu, w)?;
    let tail = row_blocks.saturating_sub(plan.full).max(1);
    Ok(QmmSplitPlan { full: plan.full, ksplit: (slots / tail).clamp(plan.ksplit, blocks_per_row.max(plan.ksplit)) })
}

/// `FLASHTREE_QMM_ACCUM_SWIGLU=0`: fused SwiGLU products keep their in-kernel tail reduction
/// while the plain products still accumulate (an A/B switch, read once per process).
pub fn swiglu_accumulation_enabled() -> bool {
    static V: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *V.get_or_init(|| std::env::var("FLASHTREE_QMM_ACCUM_SWIGLU").map_or(true, |v| v.trim() != "0"))
}

/// The accumulating kernel of `ty` for `tiles` tiles of 8 columns (`kernel_abi::qmm_accum`):
/// plain, or (`swiglu`) the fused SwiGLU kernel whose split tail accumulates.
pub(super) fn accum_kernel_name(ty: GgmlType, tiles: usize, swiglu: bool) -> Option<&'static str> {
    // `([prefix_accum_nt1 …], [prefix_swiglu_accum_nt1 …])`: the names `gpu-kernels` exports.
    macro_rules! names {
        ($p:literal) => {
            (
                [
                    concat!($p, "_accum_nt1"),
                    concat!($p, "_accum_nt2"),
                    concat!($p, "_accum_nt3"),
                    concat!($p, "_accum_nt4"),
                ],
                [
                    concat!($p, "_swiglu_accum_nt1"),
                    concat!($p, "_swiglu_accum_nt2"),
                    concat!($p, "_swiglu_accum_nt3"),
                    concat!($p, "_swiglu_accum_nt4"),
                ],
            )
        };
    }
    let (plain, fused) = match ty {
        GgmlType::Q4_K if qmm_accum::Q4_K => names!("qmm_q4k"),
        GgmlType::Q6_K if qmm_accum::Q6_K => names!("qmm_q6k"),
        GgmlType::Q8_0 if qmm_accum::Q8_0 => names!("qmm_q8_0"),
        _ => return None,
    };
    (if swiglu { fused } else { plain }).get(tiles.checked_sub(1)?).copied()
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

/// An alternating pair of accumulator sets (the protocol of the module doc): i64 sums
/// `[columns][width]` and a scale word per column, each.
pub(super) struct Accumulators {
    sums: [CudaSlice<u64>; 2],
    words: [CudaSlice<u32>; 2],
    /// Rows per column (the widest product they take).
    width: usize,
    /// The pair the next product adds into.
    next: usize,
    /// Whether pair 0 may hold non-zero values (a product added into it and its zeroing —
    /// the next consumer's, or a memset — has not been enqueued yet).
    dirty0: bool,
    /// A product enqueued and not yet consumed.
    pending: bool,
}

impl Accumulators {
    fn new(gpu: &Gpu, cols: usize, width: usize) -> Result<Self, GpuError> {
        let len = cols.checked_mul(width).ok_or_else(|| GpuError::shape("qmm accumulators", "size overflows"))?;
        Ok(Accumulators {
            sums: [gpu.zeros(len)?, gpu.zeros(len)?],
            words: [gpu.zeros(cols)?, gpu.zeros(cols)?],
            width,
            next: 0,
            dirty0: false,
            pending: false,
        })
    }

    fn zero_pair0(&mut self, gpu: &Gpu) -> Result<(), GpuError> {
        gpu.fill_bytes(&mut self.sums[0], 0)?;
        gpu.fill_bytes(&mut self.words[0], 0)?;
        self.dirty0 = false;
        Ok(())
    }

    /// A forward starts: pair 0 clean again if a forward stopped before zeroing it.
    fn begin(&mut self, gpu: &Gpu) -> Result<(), GpuError> {
        if self.dirty0 {
            self.zero_pair0(gpu)?;
        }
        self.next = 0;
        self.pending = false;
        Ok(())
    }

    /// A forward ends: after an odd number of products pair 0 holds the last one's sums.
    fn end(&mut self, gpu: &Gpu) -> Result<(), GpuError> {
        if self.pending {
            return Err(GpuError::shape("qmm accumulators", "a forward ended with an unconsumed product"));
        }
        if self.next == 1 {
            self.zero_pair0(gpu)?;
            self.next = 0;
        }
        Ok(())
    }

    /// The pair a new product adds into (zero in the columns it uses), marked pending.
    fn acquire(&mut self, gpu: &Gpu, op: &'static str) -> Result<usize, GpuError> {
        if self.pending {
            return Err(GpuError::shape(op, "the previous accumulated product was not consumed"));
        }
        let pair = self.next;
        if pair == 0 {
            if self.dirty0 {
                self.zero_pair0(gpu)?;
            }
            self.dirty0 = true;
        }
        self.next = 1 - pair;
        self.pending = true;
        Ok(pair)
    }

    /// Pair `pair`'s product consumed (its consumer zeroed the other pair over its columns).
    fn release(&mut self, pair: usize) {
        if pair == 1 {
            self.dirty0 = false;
        }
        self.pending = false;
    }

    /// `(sums, words)` of pair `pair`.
    fn spans(&self, gpu: &Gpu, pair: usize) -> (DevSpan<u64>, DevSpan<u32>) {
        (DevSpan::of(gpu, &self.sums[pair]), DevSpan::of(gpu, &self.words[pair]))
    }
}

impl QmmWorkspace {
    /// Allocates the accumulator pairs for products of `width` rows (the residual stream's width,
    /// at most `qmm_accum::MAX_IN`) over up to this workspace's columns: `2 × columns × width × 8`
    /// bytes and a word per column.
    pub fn enable_accumulation(&mut self, gpu: &Gpu, width: usize) -> Result<(), GpuError> {
        if !accumulator_width_fits(width) {
            return Err(GpuError::shape(
                "qmm accumulators",
                format!("width {width}: a positive multiple of 32 up to {}", qmm_accum::MAX_IN),
            ));
        }
        self.accum = Some(Accumulators::new(gpu, self.max_columns(), width)?);
        Ok(())
    }

    /// Allocates the accumulator pairs of fused SwiGLU products' split tails of up to `tail_rows`
    /// rows (`qmm_accum::MAX_SWIGLU_TAIL_ROWS` at most; see [`Self::swiglu_accumulates`]).
    pub fn enable_swiglu_accumulation(&mut self, gpu: &Gpu, tail_rows: usize) -> Result<(), GpuError> {
        let max = qmm_accum::MAX_SWIGLU_TAIL_ROWS as usize;
        if !swiglu_tail_fits(tail_rows) {
            return Err(GpuError::shape(
                "qmm SwiGLU tail accumulators",
                format!("{tail_rows} rows: a positive multiple of {QMM_ROWS_PER_BLOCK} up to {max}"),
            ));
        }
        self.swiglu_tail = Some(Accumulators::new(gpu, self.max_columns(), tail_rows)?);
        Ok(())
    }

    /// Sets how accumulated products split K (default: `FLASHTREE_QMM_ACCUM_PLAN`). Results
    /// depend on it (the split points move), so one engine keeps one plan.
    pub fn set_accum_plan(&mut self, plan: AccumPlan) {
        self.accum_plan = plan;
    }

    /// The K split an accumulated product of `w` runs with here (`None` if `w` does not accumulate).
    pub fn accum_split(&self, gpu: &Gpu, w: &QWeight) -> Result<Option<QmmSplitPlan>, GpuError> {
        if !self.accumulates(w) {
            return Ok(None);
        }
        Ok(Some(accum_split(gpu, w, self.accum_plan)?))
    }

    /// The K split of an accumulated fused SwiGLU product of `w` here (`None` if `w`'s tail does
    /// not accumulate): see [`swiglu_tail_split`].
    pub fn swiglu_accum_split(&self, gpu: &Gpu, w: &QWeight) -> Result<Option<QmmSplitPlan>, GpuError> {
        if !self.swiglu_accumulates(w) {
            return Ok(None);
        }
        Ok(Some(swiglu_tail_split(gpu, w, self.accum_plan)?))
    }

    /// Whether products of `w` run accumulated: accumulation enabled here and by
    /// `FLASHTREE_QMM_ACCUM`, a format with accumulating kernels, a plain matrix of exactly the
    /// accumulators' width. Never depends on the number of tokens.
    pub fn accumulates(&self, w: &QWeight) -> bool {
        accumulation_enabled()
            && w.ff().is_none()
            && accum_kernel_name(w.ty(), 1, false).is_some()
            && self.accum.as_ref().is_some_and(|a| a.width == w.out())
    }

    /// Whether fused SwiGLU products of `w` accumulate their split tail
    /// ([`Self::swiglu_accum`]): tail accumulators enabled here, `FLASHTREE_QMM_ACCUM` and
    /// `FLASHTREE_SWIGLU_MAX` not `0` (nor `FLASHTREE_QMM_ACCUM_SWIGLU`), a format with such
    /// kernels, and a plan whose split row blocks exist and fit the accumulators. Never depends
    /// on the number of tokens.
    pub fn swiglu_accumulates(&self, w: &QWeight) -> bool {
        let tail = swiglu_tail_rows(w);
        accumulation_enabled()
            && swiglu_accumulation_enabled()
            && super::prep::swiglu_max_enabled()
            && w.ff().is_some()
            && accum_kernel_name(w.ty(), 1, true).is_some()
            && tail > 0
            && self.swiglu_tail.as_ref().is_some_and(|a| tail <= a.width)
    }

    /// Starts a forward's accumulations: pair 0 zeroed if a forward stopped before zeroing it.
    /// Call before every forward, outside any graph capture (a replay runs no host code).
    pub fn begin_accumulation(&mut self, gpu: &Gpu) -> Result<(), GpuError> {
        for a in [&mut self.accum, &mut self.swiglu_tail].into_iter().flatten() {
            a.begin(gpu)?;
        }
        Ok(())
    }

    /// Ends a forward's accumulations: after an odd number of products pair 0 still holds the
    /// last one's sums, so it is zeroed here (inside the forward: a captured forward replays it).
    /// Errors if a product was not consumed.
    pub fn end_accumulation(&mut self, gpu: &Gpu) -> Result<(), GpuError> {
        for a in [&mut self.accum, &mut self.swiglu_tail].into_iter().flatten() {
            a.end(gpu)?;
        }
        Ok(())
    }

    /// The checks every accumulating product makes (`op` names it): `n` within the workspace's
    /// columns, `w` within its scratch, the activations prepared for `w`.
    fn check_accumulating(&self, op: &'static str, w: &QWeight, n: usize) -> Result<(), GpuError> {
        if n == 0 || n > self.max_columns() {
            return Err(GpuError::shape(op, format!("{n} tokens: 1..={}", self.max_columns())));
        }
        self.check_fits(op, w.out(), w.inp())?;
        self.check_prepared(op, n, w.inp(), w.needs_pairs())
    }

    /// One launch per activation plane of the accumulating kernel of `w` (fused SwiGLU when
    /// `swiglu_ff > 0`) over `n` tokens with `plan` (no clusters, no spread: nothing waits);
    /// `outputs(launch, first, cols)` appends the kernel's last four buffers (`qmm_entry!`'s
    /// `partial`, `counters`, `y`, `ymax`) for columns `first .. first + cols`.
    #[allow(clippy::too_many_arguments)]
    fn launch_accumulating(
        &self,
        gpu: &Gpu,
        op: &'static str,
        w: &QWeight,
        n: usize,
        plan: QmmSplitPlan,
        swiglu_ff: usize,
        outputs: impl Fn(&mut ChainedLaunch, usize, usize) -> Result<(), GpuError>,
    ) -> Result<(), GpuError> {
        let (ty, rows, inp) = (w.ty(), w.out(), w.inp());
        let family = family_for(ty, rows, inp)?;
        let rows32 = to_u32(rows, "rows")?;
        for c in 0..n.div_ceil(QMM_MAX_N as usize) {
            let (first, cols) = chunk_cols(n, c);
            let pl = self.plane(gpu, c)?;
            let tiles = cols.div_ceil(8);
            let name = accum_kernel_name(ty, tiles, swiglu_ff > 0)
                .ok_or_else(|| GpuError::shape(op, format!("no kernel for {ty:?}")))?;
            let p = QmmParams {
                out_features: rows32,
                in_features: to_u32(inp, "in")?,
                n: cols as u32,
                ksplit: plan.ksplit,
                full_row_blocks: plan.full,
                cluster: 0,
                swiglu_ff: to_u32(swiglu_ff, "ff")?,
                reduce_spread: 0,
            };
            let smem = family.smem_bytes(tiles as u32);
            gpu.allow_dynamic_smem(name, smem)?;
            let cfg = LaunchConfig {
                grid_dim: (qmm_grid_blocks(rows32.div_ceil(QMM_ROWS_PER_BLOCK), p.full_row_blocks, p.ksplit), 1, 1),
                block_dim: (QMM_WARPS * 32, 1, 1),
                shared_mem_bytes: smem,
            };
            let mut launch = ChainedLaunch::new(gpu, name);
            launch.buf(w.buf()).args(&pl);
            outputs(&mut launch, first, cols)?;
            // Safety: the arguments match `qmm_entry!` (the caller's four outputs last).
            unsafe { launch.value(Param(p)).tag(p.in_features).launch(cfg)? };
        }
        Ok(())
    }

    /// `W · x` over the `n` tokens last prepared here, added into the next accumulator pair
    /// (`qmm_*_accum_*`, one launch per plane of ≤ 32 columns, the workspace's [`AccumPlan`],
    /// no clusters or waiting); consume it with [`Self::prepare_norm_accum`] before the next one.
    pub fn matmul_accum(&mut self, gpu: &Gpu, w: &QWeight, n: usize) -> Result<QmmAccumulated, GpuError> {
        const OP: &str = "qmm accumulated";
        let (ty, out, inp) = (w.ty(), w.out(), w.inp());
        if !self.accumulates(w) {
            return Err(GpuError::shape(OP, format!("W {ty:?} [{out}, {inp}] does not accumulate here")));
        }
        self.check_accumulating(OP, w, n)?;
        let plan = accum_split(gpu, w, self.accum_plan)?;
        let Some(a) = self.accum.as_mut() else { unreachable!("accumulates() checked it") };
        let pair = a.acquire(gpu, OP)?;
        let (sums, words) = a.spans(gpu, pair);
        // The partials and counters are never touched by these kernels; `y` = the chunk's i64
        // sums, `ymax` = its scale words.
        let (partial, counters) = (DevSpan::of(gpu, &self.partial), DevSpan::of(gpu, &self.counters));
        self.launch_accumulating(gpu, OP, w, n, plan, 0, |launch, first, cols| {
            launch
                .span(partial)
                .span(counters)
                .span(sums.sub(first * out, cols * out, "qmm accumulators")?)
                .span(words.sub(first, cols, "qmm accumulator words")?);
            Ok(())
        })?;
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
        super::prep::check_norm_site(K, h, w, Some(h_out), n, inp)?;
        if a.n != n || a.out != inp {
            return Err(GpuError::shape(
                K,
                format!("an accumulated product of {} tokens × {} rows for {n} tokens × {inp}", a.n, a.out),
            ));
        }
        let acc = self.accum.as_ref().ok_or_else(|| GpuError::shape(K, "no accumulators"))?;
        let ((sums, words), (zero, zero_words)) = (acc.spans(gpu, a.pair), acc.spans(gpu, 1 - a.pair));
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
                    .args(&pl)
                    .value(Param(pp))
                    .value(np)
                    .launch(cfg)
            }
        })?;
        self.accum.as_mut().expect("checked above").release(a.pair);
        Ok(())
    }

    /// The fused SwiGLU product of `w` over the `n` tokens last prepared here into `y [n, ff]`
    /// (as [`QWeight::swiglu`]) with its split tail accumulated instead of reduced
    /// (`qmm_*_swiglu_accum_*`, `w`'s own plan, no clusters or waiting): the unsplit row blocks
    /// store their features and row maxima; consume it with [`Self::prepare_swiglu_accum`]
    /// before the next one.
    pub fn swiglu_accum(
        &mut self,
        gpu: &Gpu,
        w: &QWeight,
        n: usize,
        y: DevSpan<f32>,
    ) -> Result<QmmSwigluAccumulated, GpuError> {
        const OP: &str = "qmm SwiGLU accumulated";
        let (ty, rows, inp) = (w.ty(), w.out(), w.inp());
        if !self.swiglu_accumulates(w) {
            return Err(GpuError::shape(
                OP,
                format!("W {ty:?} [{rows}, {inp}] does not accumulate its SwiGLU tail here"),
            ));
        }
        let ff = w.ff().expect("swiglu_accumulates checked it");
        if y.len() < n * ff {
            return Err(GpuError::shape(OP, format!("y {} values (has {})", n * ff, y.len())));
        }
        self.check_accumulating(OP, w, n)?;
        let plan = swiglu_tail_split(gpu, w, self.accum_plan)?;
        let tail_rows = swiglu_tail_rows(w);
        let parts = rows.div_ceil(QMM_ROWS_PER_BLOCK as usize);
        let ymax_all = self.ymax_span(gpu, 0, n, parts)?;
        let Some(a) = self.swiglu_tail.as_mut() else { unreachable!("swiglu_accumulates() checked it") };
        let pair = a.acquire(gpu, OP)?;
        let (sums, words) = a.spans(gpu, pair);
        // `partial` = the chunk's tail sums, `counters` = their scale words; `y` and `ymax` as
        // for `QWeight::swiglu`.
        self.launch_accumulating(gpu, OP, w, n, plan, ff, |launch, first, cols| {
            launch
                .span(sums.sub(first * tail_rows, cols * tail_rows, "qmm SwiGLU tail accumulators")?)
                .span(words.sub(first, cols, "qmm SwiGLU tail words")?)
                .span(y.sub(first * ff, cols * ff, "y")?)
                .span(ymax_all.sub(first * parts, cols * parts, "qmm ymax")?);
            Ok(())
        })?;
        self.ymax_of = None;
        Ok(QmmSwigluAccumulated { pair, n, ff, y: y.ptr(), parts, full: plan.full, tail_rows })
    }

    /// [`Self::prepare_swiglu`] of a product of [`Self::swiglu_accum`] into this `y` over these `n`
    /// tokens (`qmm_prep_swiglu_accum`): the tail's features computed from its accumulators
    /// (and stored to `y`, which then holds the whole SwiGLU output), the column maxima from the
    /// unsplit row groups' words and the tail; the other tail pair zeroed over the `n` columns.
    pub fn prepare_swiglu_accum(
        &mut self,
        gpu: &Gpu,
        y: DevSpan<f32>,
        a: QmmSwigluAccumulated,
        n: usize,
        ff: usize,
        pairs: bool,
    ) -> Result<(), GpuError> {
        const K: &str = "qmm_prep_swiglu_accum";
        if a.y != y.ptr() || a.n != n || a.ff != ff {
            return Err(GpuError::shape(
                K,
                format!(
                    "a SwiGLU product into {:#x} of {} tokens × {} features, not {:#x}, {n} × {ff}",
                    a.y,
                    a.n,
                    a.ff,
                    y.ptr()
                ),
            ));
        }
        y.need(n * ff, K, "y")?;
        let acc = self.swiglu_tail.as_ref().ok_or_else(|| GpuError::shape(K, "no tail accumulators"))?;
        let ((sums, words), (zero, zero_words)) = (acc.spans(gpu, a.pair), acc.spans(gpu, 1 - a.pair));
        let ymax = self.ymax_span(gpu, 0, n, a.parts)?;
        let tp = Param(QmmSwigluTail { full: a.full, tail_rows: to_u32(a.tail_rows, "tail rows")? });
        let parts = a.parts;
        let tail = a.tail_rows;
        self.prepare_planes(gpu, K, n, ff, pairs, |pl, first, cols, cfg, pp| {
            let pp = Param(QmmPrepParams { max_parts: to_u32(parts, "parts")?, ..pp });
            let wide = |s: DevSpan<u64>| s.sub(first * tail, cols * tail, "tail accumulators");
            // Safety: the arguments match `qmm_prep_swiglu_accum`, sizes checked by `sub`.
            unsafe {
                ChainedLaunch::new(gpu, K)
                    .span(y.sub(first * ff, cols * ff, "y")?)
                    .span(ymax.sub(first * parts, cols * parts, "qmm ymax")?)
                    .span(wide(sums)?)
                    .span(words.sub(first, cols, "tail words")?)
                    .span(wide(zero)?)
                    .span(zero_words.sub(first, cols, "tail words")?)
                    .args(&pl)
                    .value(pp)
                    .value(tp)
                    .launch(cfg)
            }
        })?;
        self.swiglu_tail.as_mut().expect("checked above").release(a.pair);
        Ok(())
    }
}

/// Rows of `w`'s split tail (gate/up interleaved): the row blocks its plan splits, whole (none
/// when the plan splits nothing: `ksplit = 1`).
pub fn swiglu_tail_rows(w: &QWeight) -> usize {
    let plan = w.plan();
    if plan.ksplit <= 1 {
        return 0;
    }
    let row_blocks = w.out().div_ceil(QMM_ROWS_PER_BLOCK as usize);
    row_blocks.saturating_sub(plan.full as usize) * QMM_ROWS_PER_BLOCK as usize
}

/// A fused SwiGLU product whose split tail waits in a tail accumulator pair
/// ([`QmmWorkspace::prepare_swiglu_accum`]); valid until then.
#[derive(Debug)]
#[must_use = "an accumulated SwiGLU product must be consumed by prepare_swiglu_accum"]
pub struct QmmSwigluAccumulated {
    pair: usize,
    n: usize,
    ff: usize,
    y: u64,
    parts: usize,
    full: u32,
    tail_rows: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every accumulating kernel the launcher can pick, and the consumer, are entry points of the
    /// embedded PTX; the formats without them have none.
    #[test]
    fn every_accumulating_kernel_is_in_the_ptx() {
        for ty in [GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q8_0] {
            for swiglu in [false, true] {
                for tiles in 1..=4 {
                    let name = accum_kernel_name(ty, tiles, swiglu).expect("an accumulating kernel");
                    assert!(crate::gpu::KERNELS_PTX.contains(&format!(".entry {name}(")), "{name} is not in the PTX");
                }
                assert!(accum_kernel_name(ty, 5, swiglu).is_none());
            }
        }
        for ty in [GgmlType::Q5_K, GgmlType::F16, GgmlType::BF16, GgmlType::F32] {
            assert!(accum_kernel_name(ty, 1, false).is_none() && accum_kernel_name(ty, 1, true).is_none(), "{ty:?}");
        }
        assert!(crate::gpu::KERNELS_PTX.contains(".entry qmm_prep_norm_accum("));
        assert!(crate::gpu::KERNELS_PTX.contains(".entry qmm_prep_swiglu_accum("));
    }
}
