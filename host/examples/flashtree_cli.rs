//! Stand-alone runner for the `synth` and `inspect` subcommands until they are wired into
//! `flashtree`'s `main.rs`: `cargo run --release -p flashtree --example flashtree_cli -- synth …`.

use clap::{Parser, Subcommand};
use flashtree::cli::{inspect, synth};

#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    Synth(synth::SynthArgs),
    Inspect(inspect::InspectArgs),
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().cmd {
        Cmd::Synth(a) => synth::run(a),
        Cmd::Inspect(a) => inspect::run(a),
    }
}
