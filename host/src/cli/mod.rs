//! Command-line subcommands: each module has a clap `Args` struct and a `run` function, wired
//! into `main.rs`.

pub mod convert;
pub mod generate;
pub mod inspect;
pub mod logits;
pub mod synth;
