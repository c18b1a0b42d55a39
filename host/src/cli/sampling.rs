//! `generate`'s decoding flags (`--temperature --top-k --top-p --min-p --seed`) → a
//! [`DecodingRule`], and `--output-format`.

use std::hash::{BuildHasher, Hasher};

use anyhow::Context;
use clap::{Args, ValueEnum};

use crate::spec::DecodingRule;

/// Decoding flags. The defaults are greedy decoding (T = 0); the model file's
/// `general.sampling.*` keys are not read (a run is greedy unless asked).
#[derive(Debug, Clone, Args)]
pub struct SamplingArgs {
    /// Sampling temperature; 0 = greedy (argmax, the other sampling flags ignored). T > 0 samples
    /// exactly as AR sampling would in every mode, on either backend (one definition: the same
    /// seed draws the same tokens from the same logits on the CPU and the GPU).
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f32,
    /// Keep the K most likely tokens (0 = no limit). Applied after the temperature.
    #[arg(long, default_value_t = 0)]
    pub top_k: usize,
    /// Keep the smallest set of most likely tokens holding this much probability, in (0, 1]
    /// (1 = no limit). Applied after top-k.
    #[arg(long, default_value_t = 1.0)]
    pub top_p: f32,
    /// Drop tokens less likely than this fraction of the most likely one, in [0, 1] (0 = no
    /// limit). Applied after top-p.
    #[arg(long, default_value_t = 0.0)]
    pub min_p: f32,
    /// Seed of the sampler's random stream (keyed by seed and position: the same seed gives the
    /// same text in every mode and budget). Default: a random seed, printed with --verbose.
    #[arg(long)]
    pub seed: Option<u64>,
}

impl Default for SamplingArgs {
    fn default() -> Self {
        Self { temperature: 0.0, top_k: 0, top_p: 1.0, min_p: 0.0, seed: None }
    }
}

impl SamplingArgs {
    /// The rule these flags ask for and, when sampling, its seed (`--seed`, else a random one).
    /// T = 0 is [`DecodingRule::Greedy`]. Out-of-range values are errors naming the flag.
    pub fn rule(&self) -> anyhow::Result<(DecodingRule, Option<u64>)> {
        if self.temperature == 0.0 {
            // Ranges are still checked, so a typo does not pass silently.
            DecodingRule::sample(0.0, self.top_k, self.top_p, self.min_p, 0).map_err(flag_error)?;
            return Ok((DecodingRule::Greedy, None));
        }
        let seed = self.seed.unwrap_or_else(random_seed);
        let r = DecodingRule::sample(self.temperature, self.top_k, self.top_p, self.min_p, seed).map_err(flag_error)?;
        Ok((r, Some(seed)))
    }
}

/// Names the flag in a rule's range error (`top_p 2: …` → `--top-p 2: …`).
fn flag_error(e: crate::spec::SpecError) -> anyhow::Error {
    let msg = e.to_string();
    let msg = msg.strip_prefix("invalid configuration: ").unwrap_or(&msg);
    let msg =
        msg.replacen("top_p", "--top-p", 1).replacen("min_p", "--min-p", 1).replacen("temperature", "--temperature", 1);
    anyhow::anyhow!(msg)
}

/// A seed from the process's hasher keys (randomised by the OS) and the clock.
fn random_seed() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    h.write_u128(now);
    h.finish()
}

/// What `generate` writes to stdout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum OutputFormat {
    /// The continuation as text, streamed as tokens are committed.
    #[default]
    Text,
    /// The generated token ids on one line, space-separated (written at the end).
    Ids,
    /// One JSON object at the end: `text`, `ids`, `prompt_tokens`, `stop`, `seed` (null when
    /// greedy).
    Json,
}

/// Writes the non-streamed formats of `ids` (`Text` was streamed already: nothing).
pub fn write_result(
    format: OutputFormat,
    ids: &[u32],
    text: &str,
    prompt_tokens: usize,
    stop: &str,
    seed: Option<u64>,
    out: &mut dyn std::io::Write,
) -> anyhow::Result<()> {
    match format {
        OutputFormat::Text => Ok(()),
        OutputFormat::Ids => {
            let line: Vec<String> = ids.iter().map(u32::to_string).collect();
            writeln!(out, "{}", line.join(" ")).context("writing the token ids")
        }
        OutputFormat::Json => {
            let v = serde_json::json!({
                "text": text,
                "ids": ids,
                "prompt_tokens": prompt_tokens,
                "stop": stop,
                "seed": seed,
            });
            writeln!(out, "{v}").context("writing the JSON result")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_make_the_rule_and_name_themselves_in_errors() {
        let a = SamplingArgs::default();
        assert_eq!(a.rule().unwrap(), (DecodingRule::Greedy, None));
        let a = SamplingArgs { temperature: 0.7, top_k: 5, seed: Some(9), ..SamplingArgs::default() };
        assert_eq!(a.rule().unwrap(), (DecodingRule::sample(0.7, 5, 1.0, 0.0, 9).unwrap(), Some(9)));
        let (r, seed) = SamplingArgs { temperature: 0.7, ..SamplingArgs::default() }.rule().unwrap();
        assert!(!r.is_greedy() && seed.is_some());
        for (a, flag) in [
            (SamplingArgs { top_p: 0.0, ..SamplingArgs::default() }, "--top-p"),
            (SamplingArgs { temperature: 1.0, min_p: 2.0, ..SamplingArgs::default() }, "--min-p"),
            (SamplingArgs { temperature: -1.0, ..SamplingArgs::default() }, "--temperature"),
        ] {
            let e = a.rule().unwrap_err().to_string();
            assert!(e.starts_with(flag), "{e}");
        }
    }

    #[test]
    fn ids_and_json_formats() {
        let mut out = Vec::new();
        write_result(OutputFormat::Ids, &[5, 17, 3], "x", 2, "max tokens", None, &mut out).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "5 17 3\n");
        let mut out = Vec::new();
        write_result(OutputFormat::Json, &[5, 17], "a\"b", 2, "max tokens", Some(4), &mut out).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["ids"], serde_json::json!([5, 17]));
        assert_eq!(v["text"], "a\"b");
        assert_eq!(v["seed"], 4);
        let mut out = Vec::new();
        write_result(OutputFormat::Text, &[5], "t", 1, "eos", None, &mut out).unwrap();
        assert!(out.is_empty());
    }
}
