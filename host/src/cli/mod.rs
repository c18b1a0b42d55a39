//! Command-line subcommands: each module has a clap `Args` struct and a `run` function.

pub mod convert;
pub mod logits;
