//! The `flashtree` command line.

use clap::{Parser, Subcommand};

use flashtree::cli;

#[derive(Debug, Parser)]
#[command(
    name = "flashtree",
    version,
    about = "Speculative DFlash + DDTree inference of qwen35 models on one NVIDIA GPU"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Show the GPU found and, with --bench, the measured copy bandwidth.
    Info(cli::info::InfoArgs),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Info(a) => cli::info::run(&a),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
