//! Command-line subcommands. Each module holds a clap `Args` struct and a `run` function;
//! `src/main.rs` only dispatches.

pub mod convert;
pub mod generate;
pub mod info;
pub mod inspect;
pub mod logits;
pub mod synth;
