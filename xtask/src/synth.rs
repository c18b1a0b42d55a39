//! `cargo xtask synth …`: forwards to `flashtree synth …` (built in release mode), which writes
//! a synthetic qwen35 GGUF + DFlash draft; see `host/src/cli/synth.rs` for the options. The logic
//! lives in the host library so that xtask stays free of heavy dependencies.

/// Runs `cargo run --release -p flashtree -- synth <rest>` from the workspace root.
pub fn run(rest: &[String]) -> Result<(), String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = std::process::Command::new(cargo);
    cmd.current_dir(crate::workspace_root())
        .args(["run", "--release", "-p", "flashtree", "--", "synth"])
        .args(rest);
    crate::run_checked(&mut cmd)
}
