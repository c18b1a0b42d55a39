//! The activation preparation of [`QmmWorkspace`]: `qmm_prep_x` converts `x [n, in]` once for
//! every product that reads it (f16 after a power-of-two scale per column, the warpgroup
//! kernels' core-matrix plane, the unit sums of the K-quant mins steps, and the bf16 hi + lo pair
//! F32 weights need);
//! `qmm_prep_norm` does the same after a residual add and RMSNorm, in one launch. Over more than
//! `QMM_MAX_N` tokens, one launch per activation plane (`workspace.rs`): every column is
//! converted on its own (a block per column), so a token's activations are the same bits in
//! whichever plane and at whichever column it lands.

use cudarc::driver::LaunchConfig;
use kernel_abi::{QmmPrepNormParams, QmmPrepParams, QMM_MAX_N, QMM_PREP_CHUNK};

use super::format::to_u32;
use super::workspace::{chunk_cols, XPlane};
use super::QmmWorkspace;
use crate::gpu::{ChainedLaunch, DevSpan, Gpu, GpuError, Param};

impl QmmWorkspace {
    /// Converts `x [n, inp]` into the workspace's activation format (`qmm_prep_x`), once for any
    /// number of products ([`super::QWeight::matmul`], [`super::QWeight::swiglu`]) with the same
    /// input. `pairs`: also the bf16 hi + lo pair that F32 weights need
    /// ([`super::qmm_needs_pairs`]).
    pub fn prepare(&mut self, gpu: &Gpu, x: DevSpan<f32>, n: usize, inp: usize, pairs: bool) -> Result<(), GpuError> {
        self.prepare_x(gpu, x, n, inp, pairs, 0)
    }

    /// [`Self::prepare`] of the output `y [n, ff]` of the last product, a fused SwiGLU
    /// ([`super::QWeight::swiglu`]) into this `y` over the same `n` (checked: the workspace records
    /// it; no product may have run since, and nothing else may have written `y`): the column
    /// maxima come from the row-group maxima that product's epilogue published instead of a scan
    /// of `y` — bitwise the same prepared activations, one read of `y` instead of `⌈ff/1024⌉`.
    /// `FLASHTREE_SWIGLU_MAX=0` scans instead (A/B runs; same checks, same bits).
    pub fn prepare_swiglu(
        &mut self,
        gpu: &Gpu,
        y: DevSpan<f32>,
        n: usize,
        ff: usize,
        pairs: bool,
    ) -> Result<(), GpuError> {
        match self.ymax_of {
            Some((ptr, yn, yff, parts)) if ptr == y.ptr() && yn == n && yff == ff => {
                self.prepare_x(gpu, y, n, ff, pairs, if swiglu_max_enabled() { parts } else { 0 })
            }
            other => Err(GpuError::shape(
                "qmm_prep_x",
                format!(
                    "no row maxima for y at {:#x}, n = {n}, ff = {ff}: the workspace holds {other:?} \
                     (y address, n, ff, parts) — run QWeight::swiglu into this y first, with no product after it",
                    y.ptr()
                ),
            )),
        }
    }

    /// `qmm_prep_x` per activation plane; `max_parts > 0`: from the SwiGLU row maxima
    /// (`QmmPrepParams::max_parts`), else scanning.
    fn prepare_x(
        &mut self,
        gpu: &Gpu,
        x: DevSpan<f32>,
        n: usize,
        inp: usize,
        pairs: bool,
        max_parts: usize,
    ) -> Result<(), GpuError> {
        if x.len() < n * inp {
            return Err(GpuError::shape("qmm", format!("x needs {} values (has {})", n * inp, x.len())));
        }
        // All `n` columns' row-group maxima; each plane takes its columns' words.
        let ymax = if max_parts > 0 {
            self.ymax_span(gpu, 0, n, max_parts)?
        } else {
            // Safety: never dereferenced (the kernel reads `ymax` only with `max_parts > 0`).
            unsafe { DevSpan::from_raw(0, 0) }
        };
        let max_parts = to_u32(max_parts, "max_parts")?;
        self.prepare_planes(gpu, "qmm", n, inp, pairs, |pl, first, cols, cfg, pp| {
            let x = x.sub(first * inp, cols * inp, "x")?;
            let ymax = if max_parts > 0 {
                ymax.sub(first * max_parts as usize, cols * max_parts as usize, "qmm ymax")?
            } else {
                ymax
            };
            let pp = Param(QmmPrepParams { max_parts, ..pp });
            // Chained: the kernel waits for its predecessor before touching memory (`device::griddep`).
            unsafe { ChainedLaunch::new(gpu, "qmm_prep_x").span(x).span(ymax).args(&pl).value(pp).launch(cfg) }
        })
    }

    /// The residual add, RMSNorm and [`Self::prepare`] in one launch (`qmm_prep_norm`): with
    /// `add = Some((a, h_out))`, `v = h + a` is stored to `h_out` (a different buffer: every block
    /// reads `h` whole), else `v = h`; the activations prepared are those of `rmsnorm(v) ⊙ w`,
    /// bitwise the same as `add_rms_norm` / `rms_norm_rows_span` followed by [`Self::prepare`].
    /// `h`, `a`, `h_out` hold `[n, inp]`, `w` holds `inp` values. The kernel reads `w` before it
    /// waits on the previous kernel of a chained launch, so `w` must be data no kernel writes
    /// (the norm weights).
    #[allow(clippy::too_many_arguments)]
    pub fn prepare_norm(
        &mut self,
        gpu: &Gpu,
        h: DevSpan<f32>,
        add: Option<(DevSpan<f32>, DevSpan<f32>)>,
        w: DevSpan<f32>,
        n: usize,
        inp: usize,
        eps: f32,
        pairs: bool,
    ) -> Result<(), GpuError> {
        const K: &str = "qmm_prep_norm";
        check_norm_site(K, h, w, add.map(|(_, o)| o), n, inp)?;
        let (a, h_out) = match add {
            Some((a, o)) => {
                a.need(n * inp, K, "a")?;
                (a, o)
            }
            // Safety: never dereferenced (the kernel reads `a` and writes `h_out` only with `add`).
            None => unsafe { (DevSpan::from_raw(0, 0), DevSpan::from_raw(0, 0)) },
        };
        let np = Param(QmmPrepNormParams { eps, add: add.is_some() as u32 });
        self.prepare_planes(gpu, K, n, inp, pairs, |pl, first, cols, cfg, pp| {
            let rows = |s: DevSpan<f32>, what| -> Result<DevSpan<f32>, GpuError> {
                if add.is_some() {
                    s.sub(first * inp, cols * inp, what)
                } else {
                    Ok(s) // the null placeholders
                }
            };
            let h = h.sub(first * inp, cols * inp, "h")?;
            let (a, h_out) = (rows(a, "a")?, rows(h_out, "h_out")?);
            unsafe {
                ChainedLaunch::new(gpu, K)
                    .span(h)
                    .span(a)
                    .span(w)
                    .span(h_out)
                    .args(&pl)
                    .value(Param(pp))
                    .value(np)
                    .launch(cfg)
            }
        })
    }

    /// The plane loop of every prep kernel (`qmm_prep_x`, `qmm_prep_norm`, and `gdn_norm_prep`
    /// in `gpu::deltanet`): checks `n` and `inp`, calls `launch(plane, first,
    /// cols, config, params)` once per activation plane (columns `first .. first + cols`, the
    /// grid and block of `qmm_prep_x`), then records what the workspace holds. The kernel must
    /// write exactly what `qmm_prep_x` writes for the plane's columns.
    pub(crate) fn prepare_planes(
        &mut self,
        gpu: &Gpu,
        op: &'static str,
        n: usize,
        inp: usize,
        pairs: bool,
        mut launch: impl FnMut(&XPlane, usize, usize, LaunchConfig, QmmPrepParams) -> Result<(), GpuError>,
    ) -> Result<(), GpuError> {
        if n == 0 || n > self.max_columns() {
            return Err(GpuError::shape(op, format!("{n} tokens: 1..={} (the workspace)", self.max_columns())));
        }
        if inp == 0 || !inp.is_multiple_of(32) || inp > self.max_in {
            return Err(GpuError::shape(
                op,
                format!("in = {inp}: must be a positive multiple of 32 within the workspace ({})", self.max_in),
            ));
        }
        self.prepared = None;
        let chunks = to_u32(inp.div_ceil(QMM_PREP_CHUNK as usize), "in")?;
        for c in 0..n.div_ceil(QMM_MAX_N as usize) {
            let (first, cols) = chunk_cols(n, c);
            let pl = self.plane(gpu, c)?;
            let pp =
                QmmPrepParams { n: cols as u32, in_features: to_u32(inp, "in")?, pairs: pairs as u32, max_parts: 0 };
            let cfg = LaunchConfig { grid_dim: (cols as u32, chunks, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
            launch(&pl, first, cols, cfg, pp)?;
        }
        self.prepared = Some((n, inp, pairs));
        Ok(())
    }
}

/// The checks of a norm site's launch (`k` names the kernel): `h [n, inp]`, `w [inp]`, and with a
/// residual add `h_out [n, inp]` in another buffer than `h` (every block reads `h` whole).
pub(super) fn check_norm_site(
    k: &'static str,
    h: DevSpan<f32>,
    w: DevSpan<f32>,
    h_out: Option<DevSpan<f32>>,
    n: usize,
    inp: usize,
) -> Result<(), GpuError> {
    h.need(n * inp, k, "h")?;
    w.need(inp, k, "w")?;
    if let Some(o) = h_out {
        o.need(n * inp, k, "h_out")?;
        if o.ptr() == h.ptr() {
            return Err(GpuError::shape(k, "h_out must be another buffer than h"));
        }
    }
    Ok(())
}

/// Whether [`QmmWorkspace::prepare_swiglu`] takes the column maxima from the SwiGLU epilogue
/// (default) or scans `y` (`FLASHTREE_SWIGLU_MAX=0`, for A/B runs). The two give the same bits
/// (GPU test `qmm_swiglu_prep::prep_from_swiglu_maxima_equals_the_scanning_prep_bitwise`).
pub(super) fn swiglu_max_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("FLASHTREE_SWIGLU_MAX").map(|v| v.trim() != "0").unwrap_or(true))
}
