//! `flashtree inspect FILE|DIR [--json] [--draft DIR]`.

use clap::Args;
use std::path::PathBuf;

/// Show a model's architecture, hyperparameters, tensor types and memory plan.
#[derive(Args, Debug, Clone)]
pub struct InspectArgs {
    /// A GGUF file, a DFlash draft folder, or a folder of models.
    pub path: PathBuf,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// A draft (z-lab folder or dflash GGUF) to include in the memory plan of a target file.
    #[arg(long)]
    pub draft: Option<PathBuf>,
}

pub fn run(args: InspectArgs) -> anyhow::Result<()> {
    let reports = match (&args.draft, args.path.is_file()) {
        (Some(d), true) => vec![crate::inspect::inspect_gguf(&args.path, Some(d))?],
        _ => crate::inspect::inspect_path(&args.path)?,
    };
    if args.json {
        let v: Vec<serde_json::Value> = reports.iter().map(|r| r.to_json()).collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        for r in reports {
            print!("{}", r.to_table());
        }
    }
    Ok(())
}
