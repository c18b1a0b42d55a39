//! Embeds the kernels' PTX into the host crate.
//!
//! `KERNELS_PTX=<file>` names a prebuilt PTX to embed as is. Otherwise this script runs
//! `cargo xtask ptx` (the xtask is built into its own target folder, so the outer cargo's lock is
//! not contended) whenever the kernel sources change, and embeds a copy of
//! `target/ptx/gpu_kernels.sm_90a.ptx` taken into `OUT_DIR`. The copy matters: the xtask's output
//! is this script's *output*, and watching it (or embedding it in place, which makes rustc's
//! dep-info watch it) would make every build dirty, because it is written after this script
//! starts. Building the kernels needs the dated nightly named in `gpu-kernels/rust-toolchain.toml`
//! with `rust-src` and `llvm-tools`; the xtask installs them through rustup when missing.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=KERNELS_PTX");
    if let Some(ptx) = std::env::var_os("KERNELS_PTX") {
        let ptx = PathBuf::from(ptx);
        if !ptx.exists() {
            fail(&format!("KERNELS_PTX={} does not exist", ptx.display()));
        }
        println!("cargo:rerun-if-changed={}", ptx.display());
        println!("cargo:rustc-env=FLASHTREE_KERNELS_PTX={}", ptx.display());
        return;
    }
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let root = manifest.parent().expect("host/ has a parent").to_path_buf();
    for watched in
        ["gpu-kernels/src", "gpu-kernels/Cargo.toml", "gpu-kernels/rust-toolchain.toml", "kernel-abi/src", "xtask/src"]
    {
        println!("cargo:rerun-if-changed={}", root.join(watched).display());
    }
    build_ptx(&root);
    let ptx = root.join("target/ptx/gpu_kernels.sm_90a.ptx");
    if !ptx.exists() {
        fail(&format!("{} was not produced; run `cargo xtask ptx` to see why", ptx.display()));
    }
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let embedded = out_dir.join("gpu_kernels.sm_90a.ptx");
    if let Err(e) = std::fs::copy(&ptx, &embedded) {
        fail(&format!("copying {} to {}: {e}", ptx.display(), embedded.display()));
    }
    println!("cargo:rustc-env=FLASHTREE_KERNELS_PTX={}", embedded.display());
}

fn build_ptx(root: &Path) {
    let xtask_target = root.join("target/xtask-for-build");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut build = Command::new(&cargo);
    build
        .args(["build", "--quiet", "--release", "-p", "xtask", "--manifest-path"])
        .arg(root.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&xtask_target);
    for k in ["RUSTC_WRAPPER", "RUSTC_WORKSPACE_WRAPPER", "CARGO_ENCODED_RUSTFLAGS", "RUSTFLAGS", "CARGO_TARGET_DIR"] {
        build.env_remove(k);
    }
    run(&mut build, "building the xtask");
    let exe = xtask_target.join("release").join(format!("xtask{}", std::env::consts::EXE_SUFFIX));
    run(Command::new(exe).arg("ptx"), "building the GPU kernels (`cargo xtask ptx`)");
}

fn run(cmd: &mut Command, what: &str) {
    match cmd.status() {
        Ok(s) if s.success() => {}
        Ok(s) => fail(&format!("{what} failed ({s}); see the messages above")),
        Err(e) => fail(&format!("{what}: cannot start {:?}: {e}", cmd.get_program())),
    }
}

fn fail(msg: &str) -> ! {
    eprintln!(
        "error: {msg}\n\
         The GPU kernels are built by `cargo xtask ptx` with the dated nightly of \
         gpu-kernels/rust-toolchain.toml (it runs `rustup toolchain install <that nightly> --profile minimal \
         --component rust-src,llvm-tools` itself when they are missing).\n\
         Or set KERNELS_PTX to a prebuilt gpu_kernels.sm_90a.ptx."
    );
    std::process::exit(1);
}
