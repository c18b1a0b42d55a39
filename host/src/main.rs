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
    /// Generate text: AR, DFlash chain or DDTree tree speculative decoding, on the GPU engine or the CPU reference.
    Generate(cli::generate::GenerateArgs),
    /// Serve the model over HTTP: OpenAI-compatible /v1/chat/completions, /v1/models, /health.
    Serve(cli::serve::ServeArgs),
    /// Chat with the model in a multi-turn REPL (reply streamed; Ctrl+C stops it, Ctrl+D exits).
    Chat(cli::chat::ChatArgs),
    /// Measure the GPU engine: AR tok/s against the bandwidth limit, tree verify vs AR step,
    /// prefill, load time, memory, per-family breakdown.
    Bench(cli::bench::BenchArgs),
    /// Show the GPU found and, with --bench, the measured copy bandwidth.
    Info(cli::info::InfoArgs),
    /// Describe a model file or draft folder: hyperparameters, tensor types, memory plan.
    Inspect(cli::inspect::InspectArgs),
    /// Teacher-forced logits (and hidden states) of a token sequence.
    Logits(cli::logits::LogitsArgs),
    /// Convert an HF Qwen3.5 checkpoint to a qwen35 GGUF, or a z-lab DFlash draft to a dflash GGUF.
    Convert(cli::convert::ConvertArgs),
    /// Write a synthetic qwen35 GGUF + DFlash draft with seeded random weights.
    Synth(cli::synth::SynthArgs),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Generate(a) => cli::generate::run(&a),
        Command::Serve(a) => cli::serve::run(&a),
        Command::Chat(a) => cli::chat::run(&a),
        Command::Bench(a) => cli::bench::run(&a),
        Command::Info(a) => cli::info::run(&a),
        Command::Inspect(a) => cli::inspect::run(a),
        Command::Logits(a) => cli::logits::run(&a),
        Command::Convert(a) => cli::convert::run(&a),
        Command::Synth(a) => cli::synth::run(a),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", cli::error_message(&e));
            std::process::ExitCode::FAILURE
        }
    }
}
