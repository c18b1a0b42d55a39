//! `cargo xtask <task>`: the project's build tasks.
//!
//! * `ptx [--arch sm_90a] [--ptxas] [--features F]` — build `gpu-kernels` to PTX with the stock nightly
//!   NVPTX backend; this same binary is the bitcode linker rustc calls (see [`linker`]).
//! * `sass [--arch sm_90a] [--features F] [--loops] [KERNEL…]` — the static instruction census of
//!   the kernels' hot loops (see [`sass`]).
//! * `gpu-bundle` — release test and bench executables, the PTX and `run.sh` in `.gpu-bundle/`.
//!
//! When the environment variable `GPU_XTASK_AS_LINKER=1` is set, the binary behaves as the
//! `llvm-bitcode-linker` replacement instead (rustc invokes it with that command line).

mod bundle;
mod irfix;
mod linker;
mod ptx;
mod ptxas;
mod sass;
mod synth;
mod toolchain;

use std::process::ExitCode;

fn main() -> ExitCode {
    if std::env::var_os(linker::AS_LINKER_ENV).is_some() {
        return report(linker::run(std::env::args().skip(1).collect()));
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((task, rest)) = args.split_first() else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let result = match task.as_str() {
        "ptx" => ptx::PtxOptions::parse(rest).and_then(|o| ptx::build(&o).map(|_| ())),
        "gpu-bundle" => bundle::run(rest),
        "sass" => sass::run(rest),
        "synth" => synth::run(rest),
        "-h" | "--help" | "help" => {
            println!("{USAGE}");
            Ok(())
        }
        other => Err(format!("unknown task `{other}`\n{USAGE}")),
    };
    report(result)
}

fn report(result: Result<(), String>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: error: {e}");
            ExitCode::FAILURE
        }
    }
}

const USAGE: &str = "usage: cargo xtask <task>
tasks:
  ptx [--arch sm_90a] [--ptxas] [--features F]
                                        build gpu-kernels to target/ptx/gpu_kernels.<arch>[+F].ptx;
                                        --ptxas assembles it with ptxas -v and fails on spills and stack frames
                                        and on serialized warpgroup products
  sass [--arch sm_90a] [--features F] [--loops] [KERNEL…]
                                        assemble the PTX, disassemble it (nvdisasm) and print each
                                        kernel's hot-loop instruction census (target/sass/census.tsv)
  gpu-bundle                            pack release test/bench binaries, PTX and run.sh into .gpu-bundle/";

/// Root of the workspace (the parent of this crate's manifest directory).
pub fn workspace_root() -> std::path::PathBuf {
    let here = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    here.parent().unwrap_or(here).to_path_buf()
}

/// Runs a command, failing with its command line when it cannot start or exits non-zero.
pub fn run_checked(cmd: &mut std::process::Command) -> Result<(), String> {
    let status = cmd.status().map_err(|e| format!("cannot start {:?}: {e}", cmd.get_program()))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{cmd:?} failed with {status}"))
    }
}
