//! CLI subcommands implemented as library modules (clap `Args` + `run`), wired into `main.rs`.

pub mod convert;
pub mod inspect;
pub mod logits;
pub mod synth;
