//! The kernels' pinned nightly (`channel` in `gpu-kernels/rust-toolchain.toml`), installed with
//! the components the PTX build needs (`rust-src` for `-Zbuild-std=core`, `llvm-tools` for
//! `llvm-link`/`opt`/`llc`) through rustup when missing, so that a machine with only rustup needs
//! no manual step.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Components the PTX build needs.
pub const COMPONENTS: [&str; 2] = ["rust-src", "llvm-tools"];

/// The pinned toolchain, its sysroot and host triple.
#[derive(Debug, Clone)]
pub struct Nightly {
    pub channel: String,
    pub sysroot: PathBuf,
    pub host: String,
}

impl Nightly {
    /// Folder of the LLVM tools (`llc`, `opt`, `llvm-link`) of this toolchain.
    pub fn llvm_bin(&self) -> PathBuf {
        self.sysroot.join("lib/rustlib").join(&self.host).join("bin")
    }
}

/// The `channel = "…"` of a rust-toolchain.toml text.
pub fn parse_channel(toml: &str) -> Option<String> {
    toml.lines().map(str::trim).filter(|l| !l.starts_with('#')).find_map(|l| {
        let rest = l.strip_prefix("channel")?.trim_start().strip_prefix('=')?.trim();
        let v = rest.strip_prefix('"')?.split('"').next()?;
        (!v.is_empty()).then(|| v.to_string())
    })
}

/// The pinned channel of `gpu-kernels/rust-toolchain.toml`.
pub fn pinned_channel(root: &Path) -> Result<String, String> {
    let file = root.join("gpu-kernels/rust-toolchain.toml");
    let text = std::fs::read_to_string(&file).map_err(|e| format!("reading {}: {e}", file.display()))?;
    parse_channel(&text).ok_or_else(|| format!("{}: no `channel = \"…\"` line", file.display()))
}

/// The one command that installs the pinned toolchain with its components.
pub fn install_command(channel: &str) -> String {
    format!("rustup toolchain install {channel} --profile minimal --component {}", COMPONENTS.join(","))
}

/// A command run with the pinned toolchain (rustup's `RUSTUP_TOOLCHAIN`), no auto-install.
pub fn command(program: &str, channel: &str) -> Command {
    let mut c = Command::new(program);
    c.env("RUSTUP_TOOLCHAIN", channel).env("RUSTUP_AUTO_INSTALL", "0");
    c
}

/// Sysroot and host triple of `channel`, or `None` when the toolchain is not installed.
fn probe(channel: &str) -> Option<(PathBuf, String)> {
    let out = command("rustc", channel).arg("-vV").output().ok()?;
    if !out.status.success() {
        return None;
    }
    let host = String::from_utf8_lossy(&out.stdout).lines().find_map(|l| l.strip_prefix("host: "))?.to_string();
    let out = command("rustc", channel).args(["--print", "sysroot"]).output().ok()?;
    if !out.status.success() {
        return None;
    }
    Some((PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()), host))
}

/// Components missing from a sysroot.
fn missing_components(sysroot: &Path, host: &str) -> Vec<&'static str> {
    let mut missing = Vec::new();
    if !sysroot.join("lib/rustlib/src/rust/library/core/Cargo.toml").exists() {
        missing.push("rust-src");
    }
    if !sysroot.join("lib/rustlib").join(host).join("bin/llc").exists() {
        missing.push("llvm-tools");
    }
    missing
}

/// The pinned nightly with its components, installing what is missing through rustup.
pub fn ensure(root: &Path) -> Result<Nightly, String> {
    let channel = pinned_channel(root)?;
    let fix = install_command(&channel);
    if let Some((sysroot, host)) = probe(&channel) {
        if missing_components(&sysroot, &host).is_empty() {
            return Ok(Nightly { channel, sysroot, host });
        }
    }
    eprintln!("xtask: the kernels' toolchain {channel} or its components are missing; running `{fix}`");
    let mut install = Command::new("rustup");
    install.args(["toolchain", "install", &channel, "--profile", "minimal", "--component", &COMPONENTS.join(",")]);
    match install.status() {
        Ok(s) if s.success() => {}
        Ok(s) => return Err(format!("`{fix}` failed ({s}); run it by hand to see why")),
        Err(e) => return Err(format!("cannot run rustup ({e}): install rustup, then run `{fix}`")),
    }
    let (sysroot, host) =
        probe(&channel).ok_or_else(|| format!("{channel} is still not usable after `{fix}`; run it by hand"))?;
    let missing = missing_components(&sysroot, &host);
    if !missing.is_empty() {
        return Err(format!("{channel} still lacks {} after `{fix}`; run it by hand", missing.join(", ")));
    }
    Ok(Nightly { channel, sysroot, host })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_channel_line() {
        let t = "# c\n[toolchain]\nchannel = \"nightly-2026-05-20\"\ncomponents = [\"rust-src\"]\n";
        assert_eq!(parse_channel(t).as_deref(), Some("nightly-2026-05-20"));
        assert_eq!(parse_channel("# channel = \"x\"\n[toolchain]\n"), None);
    }

    #[test]
    fn the_pinned_channel_is_dated() {
        let c = pinned_channel(&crate::workspace_root()).unwrap();
        let date = c.strip_prefix("nightly-").expect("a nightly");
        assert!(date.len() == 10 && date.as_bytes()[4] == b'-' && date.as_bytes()[7] == b'-', "{c} is not dated");
    }

    #[test]
    fn install_command_names_toolchain_and_components() {
        assert_eq!(
            install_command("nightly-2026-05-20"),
            "rustup toolchain install nightly-2026-05-20 --profile minimal --component rust-src,llvm-tools"
        );
    }
}
