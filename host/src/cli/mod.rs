//! CLI subcommands implemented as library modules (clap `Args` + `run`), wired into `main.rs`.

pub mod inspect;
pub mod synth;
