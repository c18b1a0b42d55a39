//! Command-line subcommands. Each module holds a clap `Args` struct and a `run` function;
//! `src/main.rs` only dispatches.

pub mod info;
