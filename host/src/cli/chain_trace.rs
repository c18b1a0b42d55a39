//! `flashtree bench --chain-trace`: each kernel's share of the chained forward, by family and
//! by (kernel, grid), from the `chain-trace` kernel build (`crate::gpu::trace`).

use std::collections::BTreeMap;

use kernel_abi::{NodeBatch, CHAIN_TRACE_CAP};

use crate::engine::{DraftEngine, Engine};
use crate::gpu::trace::{kernel_shares, ChainTrace, KernelShare};
use crate::gpu::{DevSpan, Gpu};

/// Forwards averaged per report (at most what the trace buffer holds).
const FORWARDS: usize = 10;

/// The engine's family of a kernel (the names of the event profile where they exist).
fn family(name: &str) -> &'static str {
    match name {
        "qmm_prep_norm" => "norm+prep",
        "qmm_prep_x" => "prep",
        "gdn_prep" | "gdn_prep_pairs" => "dn prep",
        n if n.starts_with("gdn_recur") => "dn recur",
        n if n.starts_with("gdn_") => "dn norm",
        n if n.starts_with("qmm_") || n.starts_with("gemv_") => "qmm",
        n if n.starts_with("attn_") || n.starts_with("kv_") => "attention",
        n if n.starts_with("embed") => "embed",
        n if n.contains("norm") => "norm",
        n if n.starts_with("argmax") || n.starts_with("sample") || n.starts_with("topk") => "argmax",
        _ => "other",
    }
}

/// Total share (ns), kernels, total lead (ns).
type Sum = (f64, usize, f64);

/// A kernel, its grid and its launch tag (a matmul's `in_features`).
type Group<'a> = (&'a str, (u32, u32, u32), u32);

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Traces `FORWARDS` graph replays of `batch` on `e` and prints the shares. `host_s`: the
/// forward's host-timed seconds (from the bench); `step_bytes`: the weight bytes one forward
/// streams; `ceiling`: the copy bandwidth in GB/s.
pub fn report(
    e: &mut Engine,
    label: &str,
    batch: &NodeBatch,
    host_s: f64,
    step_bytes: f64,
    ceiling: f64,
) -> anyhow::Result<()> {
    let gpu = e.gpu.clone();
    let what = format!("{label} forward ({} nodes", batch.n);
    // The eager run goes through the profile path, which launches from the host.
    let mut step = |eager: bool| -> anyhow::Result<()> {
        if eager {
            e.set_profile(true)?;
        }
        let r = e.forward(batch);
        if eager {
            e.set_profile(false)?;
        }
        Ok(r?)
    };
    report_runs(&gpu, &what, &mut step, host_s, step_bytes, ceiling)
}

/// Traces one draft step of `d` (the `rows` feature rows at `features` appended as context, then
/// the block pass and its top-`k`), as the bench times it, and prints the shares. Afterwards the
/// draft's context is no longer than on entry (shortened first if the runs need the room).
#[allow(clippy::too_many_arguments)]
pub fn report_draft(
    d: &mut DraftEngine,
    features: DevSpan<f32>,
    rows: usize,
    bonus: u32,
    k: usize,
    host_s: f64,
    step_bytes: f64,
    ceiling: f64,
) -> anyhow::Result<()> {
    let gpu = d.gpu();
    let start = d.context_len();
    // Room for the eager run, the warm-ups and the traced runs (each appends `rows` rows, and the
    // block of the last one sits past them): the context is shortened if needed (by at most a
    // few hundred rows of a synthetic context: the timing barely depends on it).
    let need = (FORWARDS + 4) * rows + d.cfg.block_size;
    let room = d.max_context().checked_sub(need).ok_or_else(|| {
        anyhow::anyhow!("draft chain trace: {need} context rows needed, the draft holds {}", d.max_context())
    })?;
    if start > room {
        d.truncate_context(room)?;
    }
    let what = format!("draft step ({rows} context rows + block of {}", d.cfg.block_size);
    let mut step = |eager: bool| -> anyhow::Result<()> {
        if eager {
            // An eager block pass (a graph replay launches nothing from the host to log).
            d.drop_block_graph();
        }
        d.extend_context_device(features, rows)?;
        d.propose(bonus, k)?;
        Ok(())
    };
    let result = report_runs(&gpu, &what, &mut step, host_s, step_bytes, ceiling);
    d.truncate_context(start.min(d.context_len()))?;
    result
}

/// Records the launch order from one eager run (`step(true)`), warms up, traces up to
/// `FORWARDS` runs (`step(false)`) and prints the shares by family and by (kernel, grid, tag).
/// `what`: the label, e.g. "tree forward (22 nodes" (the report closes the parenthesis).
fn report_runs(
    gpu: &Gpu,
    what: &str,
    step: &mut dyn FnMut(bool) -> anyhow::Result<()>,
    host_s: f64,
    step_bytes: f64,
    ceiling: f64,
) -> anyhow::Result<()> {
    let trace = ChainTrace::open(gpu)?;
    gpu.start_launch_log();
    let eager = step(true);
    let log = gpu.take_launch_log();
    eager?;
    for _ in 0..3 {
        step(false)?;
    }
    let forwards = (CHAIN_TRACE_CAP as usize / log.len().max(1)).min(FORWARDS);
    trace.reset()?;
    for _ in 0..forwards {
        step(false)?;
    }
    let (records, count) = trace.read()?;
    if count != records.len() {
        anyhow::bail!("chain trace: {count} records written, {} kept (buffer full)", records.len());
    }
    let shares = kernel_shares(&log, &records).map_err(|m| anyhow::anyhow!("chain trace of the {what}): {m}"))?;
    let granularity = records.windows(2).fold(0u64, |g, w| gcd(g, w[1].ready_ns.abs_diff(w[0].ready_ns)));
    let span_ms =
        records.chunks_exact(log.len()).map(|f| (f[f.len() - 1].ready_ns - f[0].ready_ns) as f64 / 1e6).sum::<f64>()
            / forwards as f64;
    println!(
        "chain trace of one {what}; {forwards} runs, {} kernels each; globaltimer steps of {granularity} ns): \
         each kernel's share = its ready → next kernel's ready",
        log.len()
    );
    let mut fam: BTreeMap<&str, Sum> = BTreeMap::new();
    let mut groups: BTreeMap<Group, Sum> = BTreeMap::new();
    for KernelShare { name, grid, tag, share_ns, lead_ns } in &shares {
        let Some(ns) = share_ns else { continue };
        let f = fam.entry(family(name)).or_default();
        *f = (f.0 + ns, f.1 + 1, f.2 + lead_ns);
        let g = groups.entry((name, *grid, *tag)).or_default();
        *g = (g.0 + ns, g.1 + 1, g.2 + lead_ns);
    }
    let mut fam: Vec<_> = fam.into_iter().collect();
    fam.sort_by(|a, b| b.1 .0.total_cmp(&a.1 .0));
    for (f, (ns, k, lead)) in &fam {
        println!(
            "  {f:<10} {:8.3} ms  {:5.1} %  {k:4} kernels, {:6.2} µs each, launched {:5.2} µs before ready",
            ns / 1e6,
            100.0 * ns / 1e6 / span_ms,
            ns / 1e3 / *k as f64,
            lead / 1e3 / *k as f64
        );
    }
    let last = shares.last().map(|s| s.name).unwrap_or("?");
    println!(
        "  sum {span_ms:.3} ms from the first kernel's ready to the last's ({last} not included) vs {:.3} ms \
         per run host-timed",
        host_s * 1e3
    );
    if let Some((_, (qmm_ns, _, _))) = fam.iter().find(|(f, _)| *f == "qmm") {
        let s = qmm_ns / 1e9;
        println!(
            "  qmm in the chain: {:.2} GB of weights in {:.3} ms = {:.0} GB/s = {:.3} of copy",
            step_bytes / 1e9,
            s * 1e3,
            step_bytes / s / 1e9,
            step_bytes / s / 1e9 / ceiling
        );
    }
    let mut groups: Vec<_> = groups.into_iter().collect();
    groups.sort_by(|a, b| b.1 .0.total_cmp(&a.1 .0));
    println!("  largest (kernel, grid, in_features of a matmul) groups: total ms, launches, µs each, µs launched before ready");
    for ((name, grid, tag), (ns, k, lead)) in groups.iter().take(28) {
        println!(
            "    {name:<28} {:>12} {:>6} {:8.3} ms {k:4} × {:7.2} µs  lead {:5.2}",
            format!("{}x{}x{}", grid.0, grid.1, grid.2),
            if *tag > 0 { tag.to_string() } else { String::new() },
            ns / 1e6,
            ns / 1e3 / *k as f64,
            lead / 1e3 / *k as f64
        );
    }
    Ok(())
}
