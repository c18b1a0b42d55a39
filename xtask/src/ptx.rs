//! `cargo xtask ptx`: build `gpu-kernels` for `nvptx64-nvidia-cuda` with the nightly toolchain
//! pinned in `gpu-kernels/rust-toolchain.toml` (installed by [`toolchain::ensure`] when missing), using this binary as the bitcode linker.
//!
//! Output: `target/ptx/gpu_kernels.<arch>.ptx` (PTX ISA 8.0), or with `--features F` (experiment
//! builds of `gpu-kernels`' cargo features, loaded at run time with `FLASHTREE_PTX=<file>`)
//! `target/ptx/gpu_kernels.<arch>+F.ptx`.

use std::path::PathBuf;
use std::process::Command;

use crate::{linker, ptxas, run_checked, toolchain, workspace_root};

/// PTX ISA version emitted; a CUDA 12.0+ driver accepts it (13.0 accepts ≤ 9.0).
pub const PTX_FEATURE: &str = "ptx80";

#[derive(Debug, Clone, PartialEq)]
pub struct PtxOptions {
    pub arch: String,
    pub ptxas: bool,
    /// Cargo features of `gpu-kernels` (comma-separated), empty for the shipped build.
    pub features: String,
}

impl PtxOptions {
    pub fn parse(args: &[String]) -> Result<Self, String> {
        let mut o = PtxOptions { arch: "sm_90a".into(), ptxas: false, features: String::new() };
        let mut it = args.iter();
        while let Some(a) = it.next() {
            match a.as_str() {
                "--arch" => o.arch = it.next().ok_or("--arch needs sm_90a")?.clone(),
                "--ptxas" => o.ptxas = true,
                "--features" => o.features = it.next().ok_or("--features needs a feature list")?.clone(),
                other => return Err(format!("ptx: unknown argument `{other}`")),
            }
        }
        // sm_90a only: the multi-tile qmm kernels use `wgmma` (Hopper's arch-specific features).
        if o.arch != "sm_90a" {
            return Err(format!("ptx: --arch must be sm_90a (the kernels use wgmma), got `{}`", o.arch));
        }
        Ok(o)
    }
}

/// Environment variables that the outer (stable) cargo sets and that must not leak into the
/// nested nightly build.
fn is_leaky_env(key: &str) -> bool {
    (key.starts_with("CARGO") && key != "CARGO_HOME" && key != "CARGO_NET_OFFLINE")
        || key.starts_with("RUSTUP_TOOLCHAIN")
        || key.starts_with("RUSTC")
        || key.starts_with("RUST_RECURSION")
        || matches!(
            key,
            "RUSTFLAGS"
                | "RUSTDOCFLAGS"
                | "TARGET"
                | "HOST"
                | "OUT_DIR"
                | "PROFILE"
                | "OPT_LEVEL"
                | "DEBUG"
                | "NUM_JOBS"
                | "RUSTDOC"
        )
}

fn nightly(cmd: &str, kernels: &PathBuf, channel: &str) -> Command {
    let mut c = Command::new(cmd);
    c.current_dir(kernels);
    for (k, _) in std::env::vars_os() {
        if let Some(k) = k.to_str() {
            if is_leaky_env(k) {
                c.env_remove(k);
            }
        }
    }
    // The pinned channel, explicitly (a `rustup override` or a parent's RUSTUP_TOOLCHAIN must not win).
    c.env("RUSTUP_TOOLCHAIN", channel).env("RUSTUP_AUTO_INSTALL", "0");
    c
}

/// Builds the PTX; returns its path. The output file is rewritten only when its content changes,
/// so that a no-change build leaves its modification time (and everything built on it) alone.
pub fn build(o: &PtxOptions) -> Result<PathBuf, String> {
    let root = workspace_root();
    let kernels = root.join("gpu-kernels");
    let toolchain = toolchain::ensure(&root)?;
    let llvm_bin = toolchain.llvm_bin();
    let suffix = if o.features.is_empty() { String::new() } else { format!("+{}", o.features.replace(',', "+")) };
    let target_dir = root.join("target").join(format!("gpu-{}-{PTX_FEATURE}{suffix}", o.arch));
    let linked = target_dir.join("nvptx64-nvidia-cuda/release/deps/gpu_kernels.ptx");
    // Cargo does not track the linker binary: force a re-link.
    let _ = std::fs::remove_file(&linked);
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    let flags = format!(
        "target.nvptx64-nvidia-cuda.rustflags=[\"-Ctarget-cpu={}\",\"-Ctarget-feature=+{PTX_FEATURE}\"]",
        o.arch
    );
    let mut cargo = nightly("cargo", &kernels, &toolchain.channel);
    cargo
        .args(["build", "--release", "-Zbuild-std=core", "--target", "nvptx64-nvidia-cuda"])
        .args(if o.features.is_empty() { vec![] } else { vec!["--features".to_string(), o.features.clone()] })
        .arg("--config")
        .arg(format!("target.nvptx64-nvidia-cuda.linker=\"{}\"", me.display()))
        .arg("--config")
        .arg(flags)
        .env(linker::AS_LINKER_ENV, "1")
        .env(linker::LLVM_BIN_ENV, &llvm_bin)
        .env("CARGO_TARGET_DIR", &target_dir);
    run_checked(&mut cargo)?;
    let built = target_dir.join("nvptx64-nvidia-cuda/release/gpu_kernels.ptx");
    let out_dir = root.join("target/ptx");
    std::fs::create_dir_all(&out_dir).map_err(|e| e.to_string())?;
    let out = out_dir.join(format!("gpu_kernels.{}{suffix}.ptx", o.arch));
    let text = std::fs::read(&built).map_err(|e| format!("reading {}: {e}", built.display()))?;
    if std::fs::read(&out).ok().as_deref() != Some(&text[..]) {
        std::fs::write(&out, &text).map_err(|e| format!("writing {}: {e}", out.display()))?;
    }
    let kernels_n = std::fs::read_to_string(&out).map(|s| s.matches(".entry ").count()).unwrap_or(0);
    eprintln!("xtask: wrote {} ({kernels_n} kernels)", out.display());
    if o.ptxas {
        ptxas::check(&out, &o.arch)?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_options() {
        let o = PtxOptions::parse(&["--arch".into(), "sm_90a".into(), "--ptxas".into()]).unwrap();
        assert_eq!(o, PtxOptions { arch: "sm_90a".into(), ptxas: true, features: String::new() });
        assert!(PtxOptions::parse(&["--arch".into(), "sm_80".into()]).is_err());
        assert!(PtxOptions::parse(&["--bogus".into()]).is_err());
    }

    #[test]
    fn outer_cargo_env_does_not_leak() {
        assert!(is_leaky_env("RUSTUP_TOOLCHAIN"));
        assert!(is_leaky_env("CARGO_MANIFEST_DIR"));
        assert!(is_leaky_env("RUSTC"));
        assert!(is_leaky_env("CARGO_ENCODED_RUSTFLAGS"));
        assert!(!is_leaky_env("CARGO_HOME"));
        assert!(!is_leaky_env("PATH"));
    }
}
