//! The arguments `generate`, `chat` and `serve` share — which target and draft, how they decode,
//! where they run — and the checks all three apply to them before anything is read.

use std::path::PathBuf;

use anyhow::bail;
use clap::Args;

use super::backend::BackendArg;
use super::generate::{ModeArg, MAX_BUDGET};

/// The model pair and its decoding (flattened into each command's arguments).
#[derive(Debug, Clone, Args)]
pub struct PairArgs {
    /// Target model (qwen35 GGUF); default: the demo target in `models/` (`$FLASHTREE_MODELS`
    /// overrides the folder; see `models/README.md`).
    #[arg(long, default_value_os_t = super::default_model::target())]
    pub model: PathBuf,
    /// DFlash draft: a z-lab folder (config.json + safetensors) or a `dflash` GGUF. Not needed
    /// for `--mode ar`; the demo target's draft is taken when the model is the demo target.
    #[arg(long)]
    pub draft: Option<PathBuf>,
    /// Decoding mode.
    #[arg(long, value_enum, default_value_t = ModeArg::Tree)]
    pub mode: ModeArg,
    /// Tree budget: non-root nodes verified per round.
    /// On the GPU a verify of up to 32 nodes (budget ≤ 31) streams each weight matrix once;
    /// budget 32 and above (33+ nodes) stream it twice (nvidia-h200, 27B: a 33-node verify costs
    /// 2.7 AR steps, a 23-node one 1.4).
    #[arg(long, default_value_t = 22)]
    pub budget: usize,
    /// Where the target runs: `auto` = the GPU when one is present, `gpu` = the GPU or an
    /// error, `cpu` = the CPU reference. The draft runs on the same backend as the target.
    /// Sampling (`--temperature` > 0) runs on either: on the GPU one draw per tree node on the
    /// device, the same definition as the CPU's.
    #[arg(long, value_enum, default_value_t = BackendArg::Auto)]
    pub backend: BackendArg,
}

impl PairArgs {
    /// The arguments a run uses: a `--budget` over [`MAX_BUDGET`] is refused; a speculative
    /// mode without `--draft` takes the demo target's draft when `--model` is the demo target,
    /// and is refused otherwise (naming the mode); `--mode ar` drops a given draft (AR loads
    /// none).
    pub fn resolved(&self) -> anyhow::Result<PairArgs> {
        if self.budget > MAX_BUDGET {
            bail!("--budget {} is larger than the maximum {MAX_BUDGET}", self.budget);
        }
        let mut a = self.clone();
        if a.mode == ModeArg::Ar {
            a.draft = None;
        } else if a.draft.is_none() {
            a.draft = super::default_model::draft_for(&a.model);
            if a.draft.is_none() {
                bail!("--mode {} needs --draft", a.mode.mode().name());
            }
        }
        Ok(a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(mode: ModeArg, draft: Option<&str>, budget: usize) -> PairArgs {
        PairArgs {
            model: PathBuf::from("/nonexistent/target.gguf"),
            draft: draft.map(PathBuf::from),
            mode,
            budget,
            backend: BackendArg::Cpu,
        }
    }

    #[test]
    fn resolved_checks_the_budget_and_the_draft_of_each_mode() {
        let e = pair(ModeArg::Tree, Some("d"), MAX_BUDGET + 1).resolved().unwrap_err().to_string();
        assert!(e.contains(&format!("--budget {}", MAX_BUDGET + 1)) && e.contains(&MAX_BUDGET.to_string()), "{e}");
        let e = pair(ModeArg::AnchorTree, None, 22).resolved().unwrap_err().to_string();
        assert!(e.contains("needs --draft") && e.contains("anchor-tree"), "{e}");
        assert_eq!(pair(ModeArg::Chain, Some("d"), 22).resolved().unwrap().draft, Some(PathBuf::from("d")));
        assert_eq!(pair(ModeArg::Ar, Some("d"), 22).resolved().unwrap().draft, None);
        assert_eq!(pair(ModeArg::Ar, None, MAX_BUDGET).resolved().unwrap().draft, None);
    }
}
