//! `--ptxas`: assemble the PTX with `ptxas -v` (from the PyPI `nvidia-cuda-nvcc` wheel pinned to
//! CUDA 13.0), print registers / spills / shared memory per kernel, and fail on any spill.
//!
//! ptxas is found at `$PTXAS`, else in the project venv `.venv` (as `.ci/run` installs it), else
//! on `PATH`.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::workspace_root;

/// Resource usage of one kernel as reported by `ptxas -v`.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct KernelUsage {
    pub name: String,
    pub registers: u32,
    pub stack_bytes: u32,
    pub spill_stores: u32,
    pub spill_loads: u32,
    pub shared_bytes: u32,
}

/// A CUDA tool from the PyPI wheels: `$<env>`, else `.venv`'s `nvidia/cu13/bin/<name>` (as
/// `.ci/run` installs it), else `<name>` on `PATH`; `install` says how to get it when none is there.
pub fn find_cuda_tool(env: &str, name: &str, install: &str) -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os(env) {
        return Ok(PathBuf::from(p));
    }
    if let Ok(entries) = std::fs::read_dir(workspace_root().join(".venv/lib")) {
        for e in entries.flatten() {
            let p = e.path().join("site-packages/nvidia/cu13/bin").join(name);
            if p.exists() {
                return Ok(p);
            }
        }
    }
    if Command::new(name).arg("--version").output().is_ok_and(|o| o.status.success()) {
        return Ok(PathBuf::from(name));
    }
    Err(format!("{name} not found: set {env}, or {install}"))
}

fn find_ptxas() -> Result<PathBuf, String> {
    find_cuda_tool("PTXAS", "ptxas", "`python3 -m venv .venv && .venv/bin/pip install 'nvidia-cuda-nvcc==13.0.*'`")
}

/// Assembles `ptx` for `arch` with `ptxas -v -O3` into the `.cubin` beside it; returns the cubin's
/// path and ptxas's log.
pub fn assemble(ptx: &Path, arch: &str) -> Result<(PathBuf, String), String> {
    let ptxas = find_ptxas()?;
    let cubin = ptx.with_extension("cubin");
    let out = Command::new(&ptxas)
        .args(["-v", "-O3", &format!("-arch={arch}")])
        .arg(ptx)
        .arg("-o")
        .arg(&cubin)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", ptxas.display()))?;
    let log = String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!("ptxas failed on {}:\n{log}", ptx.display()));
    }
    Ok((cubin, log))
}

/// Kernels named in ptxas's C7514 remarks (warpgroup products serialized).
pub fn serialized_kernels(log: &str) -> Vec<String> {
    let mut out: Vec<String> = log
        .lines()
        .filter(|l| l.contains("C7514"))
        .filter_map(|l| l.rsplit("in the function '").next().and_then(|s| s.split('\'').next()))
        .map(str::to_string)
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Assembles `ptx` for `arch`, prints the usage table, fails on spills, on stack frames and on
/// warpgroup products serialized by ptxas (remark C7514: every `HGMMA` waits for the one before
/// it). No shipped kernel has any of them; a change that serializes a kernel's products would lose
/// their overlap without a sound (the Q8_0 kernels did until docs/perf/qmatmul.md session 17), and
/// a stack frame without spills is local memory all the same (conditional stores lowered to a
/// dummy stack slot cost every prep kernel ≈ 1 µs: the eighteenth engine session's `r10`).
pub fn check(ptx: &Path, arch: &str) -> Result<(), String> {
    let (_, log) = assemble(ptx, arch)?;
    let usage = parse_log(&log);
    println!("ptxas {arch}: {} kernels", usage.len());
    println!("{:<40} {:>5} {:>7} {:>7} {:>7} {:>7}", "kernel", "regs", "stack", "spill-st", "spill-ld", "smem");
    for u in &usage {
        println!(
            "{:<40} {:>5} {:>7} {:>7} {:>7} {:>7}",
            u.name, u.registers, u.stack_bytes, u.spill_stores, u.spill_loads, u.shared_bytes
        );
    }
    let spilling: Vec<&str> =
        usage.iter().filter(|u| u.spill_stores > 0 || u.spill_loads > 0).map(|u| u.name.as_str()).collect();
    let total: u32 = usage.iter().map(|u| u.spill_stores + u.spill_loads).sum();
    println!("total spill bytes: {total}");
    if usage.is_empty() {
        return Err("ptxas reported no kernels".into());
    }
    if !spilling.is_empty() {
        return Err(format!("register spills in: {}", spilling.join(", ")));
    }
    let stacked = with_stack_frames(&usage);
    if !stacked.is_empty() {
        return Err(format!("stack frames (local memory) in: {}", stacked.join(", ")));
    }
    let serialized = serialized_kernels(&log);
    println!(
        "warpgroup products serialized by ptxas (C7514): {}",
        if serialized.is_empty() { "none".to_string() } else { serialized.join(", ") }
    );
    if !serialized.is_empty() {
        return Err(format!(
            "ptxas serializes the warpgroup products of {} (remark C7514: a non-wgmma instruction reads \
             accumulators of a product group in flight)",
            serialized.join(", ")
        ));
    }
    Ok(())
}

/// The kernels with a stack frame, as `name (N bytes)`.
fn with_stack_frames(usage: &[KernelUsage]) -> Vec<String> {
    usage.iter().filter(|u| u.stack_bytes > 0).map(|u| format!("{} ({} bytes)", u.name, u.stack_bytes)).collect()
}

/// Parses `ptxas -v` output into per-kernel usage.
pub fn parse_log(log: &str) -> Vec<KernelUsage> {
    let mut out: Vec<KernelUsage> = Vec::new();
    for line in log.lines() {
        let l = line.trim();
        if let Some(rest) = l.strip_prefix("ptxas info    : Function properties for ") {
            out.push(KernelUsage { name: rest.trim().to_string(), ..Default::default() });
        } else if l.contains("bytes stack frame") {
            if let Some(u) = out.last_mut() {
                u.stack_bytes = number_before(l, "bytes stack frame");
                u.spill_stores = number_before(l, "bytes spill stores");
                u.spill_loads = number_before(l, "bytes spill loads");
            }
        } else if l.contains("Used ") && l.contains(" registers") {
            if let Some(u) = out.last_mut() {
                u.registers = number_before(l, "registers");
                u.shared_bytes = number_before(l, "bytes smem");
            }
        }
    }
    out
}

fn number_before(line: &str, marker: &str) -> u32 {
    let Some(p) = line.find(marker) else { return 0 };
    line[..p].split(|c: char| !c.is_ascii_digit()).rfind(|s| !s.is_empty()).and_then(|s| s.parse().ok()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serialized_kernels_are_named_once_each() {
        let remark = |k: &str| {
            format!(
                "ptxas info    : (C7514) Potential Performance Loss: wgmma.mma_async instructions are serialized \
                 due to non wgmma instructions reading accumulator registers of  a wgmma between start and end of \
                 the pipeline stage in the function '{k}'\n"
            )
        };
        let log = remark("qmm_q8_0_nt3")
            + &remark("qmm_q4k_nt3")
            + &remark("qmm_q8_0_nt3")
            + "ptxas info    : Used 40 registers\n";
        assert_eq!(serialized_kernels(&log), vec!["qmm_q4k_nt3".to_string(), "qmm_q8_0_nt3".to_string()]);
        assert!(serialized_kernels("ptxas info    : Used 40 registers\n").is_empty());
    }

    #[test]
    fn parses_ptxas_verbose_output() {
        let log = "ptxas info    : 0 bytes gmem\n\
ptxas info    : Compiling entry function 'gemv_bf16' for 'sm_90'\n\
ptxas info    : Function properties for gemv_bf16\n\
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n\
ptxas info    : Used 38 registers, used 0 barriers, 368 bytes cmem[0]\n\
ptxas info    : Compiling entry function 'argmax' for 'sm_90'\n\
ptxas info    : Function properties for argmax\n\
    16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads\n\
ptxas info    : Used 255 registers, used 1 barriers, 512 bytes smem, 360 bytes cmem[0]\n";
        let u = parse_log(log);
        assert_eq!(u.len(), 2);
        assert_eq!(u[0], KernelUsage { name: "gemv_bf16".into(), registers: 38, ..Default::default() });
        assert_eq!(u[1].registers, 255);
        assert_eq!(u[1].stack_bytes, 16);
        assert_eq!(u[1].spill_stores, 8);
        assert_eq!(u[1].spill_loads, 4);
        assert_eq!(u[1].shared_bytes, 512);
        assert_eq!(with_stack_frames(&u), vec!["argmax (16 bytes)".to_string()]);
        assert!(with_stack_frames(&u[..1]).is_empty());
    }
}
