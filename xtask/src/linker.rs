//! The bitcode linker for `nvptx64-nvidia-cuda` (replaces `llvm-bitcode-linker`).
//!
//! rustc calls the program given by `-C linker` with
//! `--export-symbol K … <crate .o> <libcore.rlib> … --target-cpu sm_90 --target-feature=… -o out.ptx`.
//! We run, with the nightly's own LLVM tools (same LLVM as rustc, so bitcode versions match):
//!
//! 1. `llvm-link --ignore-non-bitcode <inputs> -o linked.bc`
//! 2. `llvm-dis` → [`crate::irfix::fix_module`] → `fixed.ll`
//! 3. `opt --nvptx-short-ptr --internalize-public-api-file=<kernels> -passes=internalize,globaldce,default<O3>`
//! 4. `llc --nvptx-short-ptr -O3 -o out.ptx`
//!
//! Work files stay next to the output in `<out>.link/` for debugging.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::irfix;
use crate::run_checked;

/// Set by `cargo xtask ptx` so that this binary acts as the linker.
pub const AS_LINKER_ENV: &str = "GPU_XTASK_AS_LINKER";
/// Folder holding `llvm-link`, `opt`, `llc`, `llvm-dis` of the nightly toolchain.
pub const LLVM_BIN_ENV: &str = "GPU_XTASK_LLVM_BIN";

#[derive(Debug, Default, PartialEq)]
struct LinkArgs {
    exports: Vec<String>,
    inputs: Vec<PathBuf>,
    output: PathBuf,
    cpu: String,
    ptx_version: Option<String>,
}

fn parse(args: &[String]) -> Result<LinkArgs, String> {
    let mut a = LinkArgs::default();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--export-symbol" => a.exports.push(it.next().ok_or("--export-symbol needs a value")?.clone()),
            "-o" => a.output = PathBuf::from(it.next().ok_or("-o needs a value")?),
            "--target-cpu" => a.cpu = it.next().ok_or("--target-cpu needs a value")?.clone(),
            "-L" | "--target" => {
                it.next();
            }
            s if s.starts_with("--target-feature=") => {
                // `+ptx70,+ptx71,…,+ptx80`: the highest ptx feature wins.
                let best = s["--target-feature=".len()..]
                    .split(',')
                    .filter_map(|f| f.strip_prefix("+ptx"))
                    .filter_map(|v| v.parse::<u32>().ok())
                    .max();
                a.ptx_version = best.map(|v| format!("ptx{v}"));
            }
            s if s.starts_with('-') => {} // -O3, --debug, …
            s => a.inputs.push(PathBuf::from(s)),
        }
    }
    if a.output.as_os_str().is_empty() {
        return Err("linker: no -o output given".into());
    }
    if a.cpu.is_empty() {
        a.cpu = "sm_90a".into();
    }
    Ok(a)
}

/// Linker entry point.
pub fn run(args: Vec<String>) -> Result<(), String> {
    let a = parse(&args)?;
    let llvm = PathBuf::from(std::env::var_os(LLVM_BIN_ENV).ok_or_else(|| format!("{LLVM_BIN_ENV} is not set"))?);
    let work = with_suffix(&a.output, ".link");
    std::fs::create_dir_all(&work).map_err(|e| format!("create {}: {e}", work.display()))?;
    std::fs::write(work.join("args.txt"), args.join("\n")).map_err(|e| e.to_string())?;

    let linked = work.join("linked.bc");
    run_checked(
        Command::new(llvm.join("llvm-link")).arg("--ignore-non-bitcode").args(&a.inputs).arg("-o").arg(&linked),
    )?;
    let linked_ll = work.join("linked.ll");
    run_checked(Command::new(llvm.join("llvm-dis")).arg(&linked).arg("-o").arg(&linked_ll))?;
    let ir = std::fs::read_to_string(&linked_ll).map_err(|e| format!("read {}: {e}", linked_ll.display()))?;
    let (fixed, report) = irfix::fix_module(&ir)?;
    let fixed_ll = work.join("fixed.ll");
    std::fs::write(&fixed_ll, fixed).map_err(|e| e.to_string())?;
    std::fs::write(work.join("irfix.txt"), report.to_string()).map_err(|e| e.to_string())?;

    let api = work.join("kernels.txt");
    std::fs::write(&api, a.exports.join("\n")).map_err(|e| e.to_string())?;
    let mattr = a.ptx_version.as_ref().map(|v| format!("-mattr=+{v}"));
    let opt_bc = work.join("opt.bc");
    let mut opt = Command::new(llvm.join("opt"));
    opt.arg("--nvptx-short-ptr")
        .arg("-mtriple=nvptx64-nvidia-cuda")
        .arg(format!("-mcpu={}", a.cpu))
        .args(mattr.iter())
        .arg(format!("--internalize-public-api-file={}", api.display()))
        .arg("-passes=internalize,globaldce,default<O3>")
        .arg(&fixed_ll)
        .arg("-o")
        .arg(&opt_bc);
    run_checked(&mut opt)?;
    let mut llc = Command::new(llvm.join("llc"));
    llc.arg("--nvptx-short-ptr")
        .arg("-mtriple=nvptx64-nvidia-cuda")
        .arg(format!("-mcpu={}", a.cpu))
        .args(mattr.iter())
        .arg("-O3")
        .arg(&opt_bc)
        .arg("-o")
        .arg(&a.output);
    run_checked(&mut llc)
}

fn with_suffix(p: &Path, suffix: &str) -> PathBuf {
    let mut s = p.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_rustc_llbc_command_line() {
        let args: Vec<String> = [
            "--export-symbol",
            "k1",
            "--export-symbol",
            "k2",
            "a.o",
            "libcore.rlib",
            "-L",
            "/x",
            "--target",
            "nvptx64-nvidia-cuda",
            "--target-cpu",
            "sm_90a",
            "--target-feature=+ptx70,+ptx80,+ptx78",
            "-o",
            "out.ptx",
            "-O3",
            "--debug",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let a = parse(&args).unwrap();
        assert_eq!(a.exports, vec!["k1", "k2"]);
        assert_eq!(a.inputs, vec![PathBuf::from("a.o"), PathBuf::from("libcore.rlib")]);
        assert_eq!(a.output, PathBuf::from("out.ptx"));
        assert_eq!(a.cpu, "sm_90a");
        assert_eq!(a.ptx_version.as_deref(), Some("ptx80"));
    }

    #[test]
    fn missing_output_is_an_error() {
        assert!(parse(&["a.o".to_string()]).is_err());
    }
}
