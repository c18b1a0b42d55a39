//! `--backend auto|cpu|gpu` and opening the GPU engine for a command: the memory plan printed
//! before anything is allocated, a progress bar while the weights load.

use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Context};
use clap::ValueEnum;

use crate::engine::Engine;
use crate::gguf::Gguf;
use crate::gpu::{Gpu, GpuError};
use crate::model::Qwen35Config;

/// Where the target runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BackendArg {
    /// The GPU when one is present, else the CPU reference.
    Auto,
    /// The CPU reference (slow; tiny models).
    Cpu,
    /// The GPU engine (an error without a GPU).
    Gpu,
}

/// The GPU to run on, or `None` for the CPU: `auto` picks the GPU when the driver is present.
pub fn resolve(b: BackendArg) -> anyhow::Result<Option<Gpu>> {
    match b {
        BackendArg::Cpu => Ok(None),
        BackendArg::Auto => match Gpu::try_new() {
            Ok(g) => Ok(Some(g)),
            Err(GpuError::NoDriver) => Ok(None),
            Err(e) => {
                Err(e).context("--backend auto found a CUDA driver but could not open the GPU (use --backend cpu)")
            }
        },
        BackendArg::Gpu => match Gpu::try_new() {
            Ok(g) => Ok(Some(g)),
            Err(GpuError::NoDriver) => bail!("--backend gpu: this machine has no CUDA driver (use --backend cpu)"),
            Err(e) => Err(e).context("--backend gpu"),
        },
    }
}

/// Opens `model` on `gpu` with context `ctx` (default: min(model's context, 8192)), capturing
/// the outputs of layers `capture` for a draft (none: empty), printing the memory plan and the
/// load time to stderr unless `quiet`; a progress bar of the weights loaded is shown whenever
/// stderr is a terminal.
pub fn open_engine(
    gpu: Gpu,
    model: &Path,
    ctx: Option<usize>,
    capture: &[usize],
    quiet: bool,
) -> anyhow::Result<(Engine, f64)> {
    let g = Gguf::open(model).with_context(|| format!("opening {}", model.display()))?;
    let cfg = Qwen35Config::from_gguf(&g).with_context(|| format!("reading {}", model.display()))?;
    cfg.validate(&g)?;
    let ctx = ctx.unwrap_or(cfg.context_length.min(8192));
    let plan = Engine::plan_with_capture(&cfg, &g, ctx, capture.len())
        .with_context(|| format!("planning {}", model.display()))?;
    if !quiet {
        eprintln!("memory plan: {plan}");
    }
    // Drawn on stderr when it is a terminal (indicatif hides a bar whose terminal is not one).
    let bar = indicatif::ProgressBar::new(plan.weights);
    bar.set_style(
        indicatif::ProgressStyle::with_template("loading weights {bar:40} {bytes}/{total_bytes} {elapsed}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let t = Instant::now();
    let e = Engine::load_with_capture(gpu, &g, cfg, ctx, capture, |done, _| bar.set_position(done))
        .with_context(|| format!("loading {} onto the GPU", model.display()))?;
    bar.finish_and_clear();
    let secs = t.elapsed().as_secs_f64();
    if !quiet {
        eprintln!("loaded in {secs:.1} s");
    }
    Ok((e, secs))
}
