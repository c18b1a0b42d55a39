//! Bounds checked before anything large is allocated: the context (`--ctx`, at most the model's
//! trained context; prompt + `--max-tokens` must fit) and the CPU backend's memory plan against
//! the RAM available; and the load progress shown while the weights are dequantised.

use std::io::IsTerminal;
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context};

use crate::gguf::Gguf;

/// The context to run with: `requested` (`--ctx`) or the trained context of `model`.
pub fn choose_context(requested: Option<usize>, trained: usize, model: &Path) -> anyhow::Result<usize> {
    match requested {
        None => Ok(trained),
        Some(0) => bail!("--ctx 0: the context must hold at least one token"),
        Some(c) if c > trained => bail!(
            "--ctx {c} is above the trained context of {} ({trained} tokens); choose --ctx {trained} or less",
            model.display()
        ),
        Some(c) => Ok(c),
    }
}

/// Refuses a prompt that does not fit the context together with the tokens to generate.
pub fn check_prompt_fits(prompt_tokens: usize, max_tokens: usize, ctx: usize) -> anyhow::Result<()> {
    let need = prompt_tokens.saturating_add(max_tokens);
    if max_tokens == 0 && need > ctx {
        bail!(
            "{prompt_tokens} tokens do not fit the context of {ctx} (give fewer tokens, or raise --ctx up to the \
             model's trained context)"
        );
    }
    if need > ctx {
        bail!(
            "the prompt has {prompt_tokens} tokens and --max-tokens is {max_tokens}: {need} tokens do not fit the \
             context of {ctx} (shorten the prompt, lower --max-tokens, or raise --ctx up to the model's trained context)"
        );
    }
    Ok(())
}

/// Longest prompt text (bytes) that can still fit `ctx` tokens: every token covers at most
/// `longest_token` bytes, so a longer text needs more than `ctx` tokens. Checked before
/// tokenising, so a huge input is refused without tokenising it.
pub fn max_prompt_bytes(ctx: usize, longest_token: usize) -> usize {
    ctx.saturating_mul(longest_token.max(1))
}

/// `MemAvailable` of a `/proc/meminfo` text, in bytes.
pub fn parse_mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kb.checked_mul(1024)
}

/// The RAM available now (`MemAvailable` of `/proc/meminfo`), when the system says.
pub fn mem_available() -> Option<u64> {
    parse_mem_available(&std::fs::read_to_string("/proc/meminfo").ok()?)
}

/// What the CPU backend will hold, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuMemoryPlan {
    /// The target's weights dequantised to f32 (4 bytes per parameter).
    pub target_weights: u64,
    /// The draft's weights as f32.
    pub draft_weights: u64,
    /// KV rows (f32 keys + values) of every attention layer for the tokens of the run, the
    /// DeltaNet states, and the logits rows the reference keeps for a whole prefill.
    pub state: u64,
    /// One saved copy of every DeltaNet state and conv window (`chat` and `serve` keep one at
    /// the end of the reusable prompt prefix; `generate` none).
    pub snapshot: u64,
}

impl CpuMemoryPlan {
    pub fn total(&self) -> u64 {
        self.target_weights.saturating_add(self.draft_weights).saturating_add(self.state).saturating_add(self.snapshot)
    }
}

fn gib(b: u64) -> String {
    format!("{:.2} GiB", b as f64 / (1u64 << 30) as f64)
}

/// The CPU backend's plan for `target` run over `tokens` positions (`prompt` of them in one
/// prefill), with a draft of `draft_weights` f32 bytes, counting one recurrent snapshot when
/// `snapshot` (a session that reuses prompt prefixes saves one).
pub fn cpu_plan(
    target: &Gguf,
    tokens: usize,
    prompt: usize,
    draft_weights: u64,
    snapshot: bool,
) -> anyhow::Result<CpuMemoryPlan> {
    let cfg = crate::model::Qwen35Config::from_gguf(target)?;
    let params = target.tensor_infos().fold(0u64, |a, t| a.saturating_add(t.n_elements()));
    let plan = crate::inspect::memory_plan(&cfg, 0, None);
    let tokens = tokens as u64;
    let attn = cfg.attention_layers().len() as u64;
    let kv_f32 = [attn, cfg.head_count_kv as u64, (cfg.key_length + cfg.value_length) as u64, 4, tokens]
        .iter()
        .fold(1u64, |a, &x| a.saturating_mul(x));
    let logits = (prompt as u64).saturating_mul(cfg.vocab_size as u64).saturating_mul(4);
    let recurrent = plan.recurrent_state_bytes.saturating_add(plan.conv_state_bytes);
    let state = kv_f32.saturating_add(recurrent).saturating_add(logits);
    let snapshot = if snapshot { recurrent } else { 0 };
    Ok(CpuMemoryPlan { target_weights: params.saturating_mul(4), draft_weights, state, snapshot })
}

/// f32 bytes of a draft's weights: a `dflash` GGUF's parameters × 4, or a z-lab folder's
/// safetensors bytes × 2 (z-lab drafts are bf16).
pub fn draft_f32_bytes(path: &Path) -> anyhow::Result<u64> {
    if path.is_dir() {
        let mut bytes = 0u64;
        for e in std::fs::read_dir(path).with_context(|| format!("reading the draft folder {}", path.display()))? {
            let e = e?;
            if e.path().extension().is_some_and(|x| x == "safetensors") {
                bytes = bytes.saturating_add(e.metadata()?.len());
            }
        }
        Ok(bytes.saturating_mul(2))
    } else {
        let g = Gguf::open(path)?; // its errors name the file
        Ok(g.tensor_infos().fold(0u64, |a, t| a.saturating_add(t.n_elements())).saturating_mul(4))
    }
}

/// Refuses a plan larger than `available` bytes (unknown availability passes).
pub fn check_memory(plan: &CpuMemoryPlan, available: Option<u64>) -> anyhow::Result<()> {
    let Some(avail) = available else { return Ok(()) };
    if plan.total() > avail {
        bail!(
            "the CPU backend needs about {} ({} target weights as f32 + {} draft weights + {} state and logits \
             + {} recurrent snapshot) but only {} of RAM is available (MemAvailable); the CPU backend is for small models — use a smaller \
             model, fewer tokens (--ctx, --max-tokens) or a machine with more memory",
            gib(plan.total()),
            gib(plan.target_weights),
            gib(plan.draft_weights),
            gib(plan.state),
            gib(plan.snapshot),
            gib(avail)
        );
    }
    Ok(())
}

/// A spinner on stderr naming the current load step with the elapsed time; shown only when
/// stderr is a terminal or with `--verbose` (then also as plain lines when not a terminal).
pub struct LoadProgress {
    bar: Option<indicatif::ProgressBar>,
    plain: bool,
}

impl LoadProgress {
    pub fn new(verbose: bool) -> Self {
        let tty = std::io::stderr().is_terminal();
        if !tty {
            return Self { bar: None, plain: verbose };
        }
        let bar = indicatif::ProgressBar::new_spinner();
        bar.set_style(
            indicatif::ProgressStyle::with_template("{spinner} [{elapsed}] {msg}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
        );
        bar.enable_steady_tick(Duration::from_millis(120));
        Self { bar: Some(bar), plain: false }
    }

    /// Starts a step.
    pub fn step(&self, msg: String) {
        match &self.bar {
            Some(b) => b.set_message(msg),
            None if self.plain => eprintln!("{msg}"),
            None => {}
        }
    }

    /// Loads the target's weights (dequantising them to f32) under `msg`, the spinner turned
    /// into a bar of the file's tensor bytes read so far while it runs.
    pub fn load_target(
        &self,
        msg: String,
        path: &Path,
    ) -> Result<flashtree_reference::model::Qwen35Weights, crate::convert::ConvertError> {
        self.step(msg);
        let Some(bar) = &self.bar else { return crate::convert::gguf_load::load_qwen35(path) };
        let spinner = bar.style();
        bar.set_style(
            indicatif::ProgressStyle::with_template("{spinner} [{elapsed}] {msg} {bar:30} {bytes}/{total_bytes}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        let r = crate::convert::gguf_load::load_qwen35_with_progress(path, &mut |done, total| {
            bar.set_length(total);
            bar.set_position(done);
        });
        bar.set_style(spinner);
        r
    }

    /// Clears the spinner.
    pub fn finish(self) {
        if let Some(b) = self.bar {
            b.finish_and_clear();
        }
    }
}

/// `s` for an error message: control and non-ASCII-printable characters escaped, cut to about
/// [`MAX_QUOTED`] characters with the full length noted.
pub fn cut(s: &str) -> String {
    let n = s.chars().count();
    let head: String = s.chars().take(MAX_QUOTED).flat_map(char::escape_debug).collect();
    if n > MAX_QUOTED {
        format!("{head}… ({n} characters)")
    } else {
        head
    }
}

/// Characters of user or file content quoted in an error.
pub const MAX_QUOTED: usize = 120;

/// `gib` for messages elsewhere.
pub fn format_gib(b: u64) -> String {
    gib(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_mem_available() {
        let t = "MemTotal:       16000000 kB\nMemFree:         100 kB\nMemAvailable:    2048 kB\n";
        assert_eq!(parse_mem_available(t), Some(2048 * 1024));
        assert_eq!(parse_mem_available("MemTotal: 1 kB\n"), None);
    }

    #[test]
    fn context_choice_and_fit() {
        let m = Path::new("m.gguf");
        assert_eq!(choose_context(None, 4096, m).unwrap(), 4096);
        assert_eq!(choose_context(Some(100), 4096, m).unwrap(), 100);
        let e = choose_context(Some(5000), 4096, m).unwrap_err().to_string();
        assert!(e.contains("5000") && e.contains("4096") && e.contains("m.gguf"), "{e}");
        assert!(check_prompt_fits(4000, 96, 4096).is_ok());
        let e = check_prompt_fits(4000, 97, 4096).unwrap_err().to_string();
        assert!(e.contains("4000 tokens") && e.contains("4097") && e.contains("4096"), "{e}");
    }

    #[test]
    fn memory_plan_over_the_available_ram_is_refused_with_numbers() {
        let plan = CpuMemoryPlan { target_weights: 8 << 30, draft_weights: 1 << 30, state: 1 << 30, snapshot: 1 << 29 };
        assert!(check_memory(&plan, None).is_ok());
        assert!(check_memory(&plan, Some(21 << 29)).is_ok());
        let e = check_memory(&plan, Some(20 << 29)).unwrap_err().to_string();
        assert!(e.contains("10.50 GiB") && e.contains("10.00 GiB") && e.contains("0.50 GiB recurrent snapshot"), "{e}");
    }
}
