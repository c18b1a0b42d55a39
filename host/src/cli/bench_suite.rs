//! `flashtree bench --prompts FILE.jsonl…`: the prompt-set bench. Every prompt of every set runs
//! in every mode of `--modes` (greedy, from empty caches, up to `--tokens` tokens or EOS) on one
//! loaded pair; then the table per dataset (decode tok/s per mode, speedup over `ar`, mean
//! acceptance length), `bench.json` (the table's numbers, each run, the accepted-depth
//! histograms) and `bench.svg` (`cli::bench_plot`).
//!
//! Per dataset and mode: tok/s = Σ (generated − 1) / Σ decode seconds (the first token comes from
//! prefill, whose time is left out, as `Stats::decode_tokens_per_second`); acceptance length =
//! Σ accepted path lengths / Σ rounds. With `ar` in the modes the others' tokens are compared
//! with its tokens: greedy speculative decoding is lossless, so a difference is a bug and fails
//! the command (after the results are written).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use serde_json::{json, Value};

use super::backend::BackendArg;
use super::bench::BenchArgs;
use super::generate::{ModeArg, MAX_BUDGET};
use super::pair::{draft_or_demo, with_pair, PairInfo, PairRunner, PairSpec};
use crate::chat::{Message, RenderOptions};
use crate::spec::{DecodingRule, Draft, GenerateConfig, Mode, Session, Stats, Target};

/// Largest prompt file read (bytes).
pub const MAX_PROMPT_FILE: u64 = 256 << 20;

/// One prompt of a set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptRecord {
    /// The dataset: the line's `suite`, else the file's stem.
    pub dataset: String,
    /// The line's `id`, else `FILE:LINE`.
    pub id: String,
    /// The chat turns (a `prompt` / `turns[0]` / `question` line is one user turn).
    pub messages: Vec<Message>,
}

/// Reads a JSONL prompt set: at most `limit` prompts; blank lines skipped; any other line must
/// be a JSON object with `messages` (objects with string `role` and `content`), `prompt`,
/// `turns` (a non-empty array whose first element is a string) or `question`. Errors name the
/// file, the line and what was expected.
pub fn read_prompt_set(path: &Path, limit: Option<usize>) -> anyhow::Result<Vec<PromptRecord>> {
    let size = std::fs::metadata(path).with_context(|| format!("--prompts {}: cannot read it", path.display()))?.len();
    if size > MAX_PROMPT_FILE {
        bail!("--prompts {}: {size} bytes, more than the {MAX_PROMPT_FILE} bytes read", path.display());
    }
    let text = std::fs::read(path).with_context(|| format!("--prompts {}: cannot read it", path.display()))?;
    let text = String::from_utf8_lossy(&text);
    let stem = path.file_stem().map_or_else(|| "prompts".into(), |s| s.to_string_lossy().into_owned());
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if limit.is_some_and(|n| out.len() >= n) {
            break;
        }
        if line.trim().is_empty() {
            continue;
        }
        let at = || format!("{}:{}", path.display(), i + 1);
        let v: Value = serde_json::from_str(line).with_context(|| format!("{}: not a JSON object", at()))?;
        let messages = messages_of(&v).map_err(|why| anyhow::anyhow!("{}: {why}", at()))?;
        let dataset = v.get("suite").and_then(Value::as_str).map_or_else(|| stem.clone(), str::to_string);
        let id = match v.get("id") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Number(n)) => n.to_string(),
            _ => at(),
        };
        out.push(PromptRecord { dataset, id, messages });
    }
    if out.is_empty() {
        bail!("--prompts {}: no prompts in it", path.display());
    }
    Ok(out)
}

/// The chat turns of one prompt line, or what is wrong with it.
fn messages_of(v: &Value) -> Result<Vec<Message>, String> {
    let Some(obj) = v.as_object() else { return Err("expected a JSON object".into()) };
    if let Some(m) = obj.get("messages") {
        let list = m.as_array().ok_or("`messages` must be an array")?;
        let mut out = Vec::with_capacity(list.len());
        for (j, msg) in list.iter().enumerate() {
            let field =
                |k: &str| msg.get(k).and_then(Value::as_str).ok_or(format!("messages[{j}].{k} must be a string"));
            out.push(Message::new(field("role")?, field("content")?));
        }
        if out.is_empty() {
            return Err("`messages` is empty".into());
        }
        return Ok(out);
    }
    let text = match (obj.get("prompt"), obj.get("turns"), obj.get("question")) {
        (Some(p), _, _) => p.as_str().ok_or("`prompt` must be a string")?,
        (None, Some(t), _) => {
            t.as_array().and_then(|a| a.first()).and_then(Value::as_str).ok_or("`turns` must start with a string")?
        }
        (None, None, Some(q)) => q.as_str().ok_or("`question` must be a string")?,
        _ => return Err("expected a `messages`, `prompt`, `turns` or `question` field".into()),
    };
    Ok(vec![Message::new("user", text)])
}

/// One prompt run in one mode.
#[derive(Debug, Clone)]
pub struct Run {
    pub dataset: String,
    pub id: String,
    pub mode: Mode,
    pub stats: Stats,
    /// Whether the tokens equal the `ar` run's (`None`: no `ar` run, or this is it).
    pub matches_ar: Option<bool>,
}

/// A dataset's numbers in one mode.
#[derive(Debug, Clone, PartialEq)]
pub struct ModeSummary {
    pub mode: Mode,
    pub prompts: usize,
    pub generated: usize,
    pub decode_s: f64,
    pub tokens_per_second: f64,
    pub acceptance_length: f64,
    /// `accepted_depth[d]`: rounds that accepted `d` draft tokens.
    pub accepted_depth: Vec<u64>,
}

/// Sums the runs of one dataset and mode (see the module doc for the formulas).
pub fn summarise(runs: &[&Run], mode: Mode) -> ModeSummary {
    let mut s = ModeSummary {
        mode,
        prompts: runs.len(),
        generated: 0,
        decode_s: 0.0,
        tokens_per_second: 0.0,
        acceptance_length: 0.0,
        accepted_depth: Vec::new(),
    };
    let (mut decoded, mut rounds, mut path_sum) = (0usize, 0usize, 0u64);
    for r in runs {
        let st = &r.stats;
        s.generated += st.generated;
        decoded += st.generated.saturating_sub(1);
        s.decode_s += (st.time.total() - st.time.prefill).as_secs_f64();
        rounds += st.steps;
        if s.accepted_depth.len() < st.accepted_depth.len() {
            s.accepted_depth.resize(st.accepted_depth.len(), 0);
        }
        for (d, &n) in st.accepted_depth.iter().enumerate() {
            s.accepted_depth[d] += n;
            path_sum += (d as u64 + 1) * n;
        }
    }
    if s.decode_s > 0.0 {
        s.tokens_per_second = decoded as f64 / s.decode_s;
    }
    if rounds > 0 {
        s.acceptance_length = path_sum as f64 / rounds as f64;
    }
    s
}

/// A dataset's summaries, in the order of the modes.
#[derive(Debug, Clone)]
pub struct DatasetSummary {
    pub name: String,
    pub modes: Vec<ModeSummary>,
}

impl DatasetSummary {
    /// The mode's tok/s over `ar`'s, when both ran.
    pub fn speedup(&self, m: &ModeSummary) -> Option<f64> {
        let ar = self.modes.iter().find(|s| s.mode == Mode::Ar)?;
        (ar.tokens_per_second > 0.0).then(|| m.tokens_per_second / ar.tokens_per_second)
    }
}

/// Groups `runs` by dataset (first-seen order) and mode (`modes`' order).
pub fn summaries(runs: &[Run], modes: &[Mode]) -> Vec<DatasetSummary> {
    let mut names: Vec<&str> = Vec::new();
    for r in runs {
        if !names.contains(&r.dataset.as_str()) {
            names.push(&r.dataset);
        }
    }
    names
        .into_iter()
        .map(|name| DatasetSummary {
            name: name.to_string(),
            modes: modes
                .iter()
                .map(|&m| summarise(&runs.iter().filter(|r| r.dataset == name && r.mode == m).collect::<Vec<_>>(), m))
                .collect(),
        })
        .collect()
}

/// The table: one row per dataset; per mode tok/s, speedup over `ar` and acceptance length.
pub fn table(sums: &[DatasetSummary]) -> String {
    let Some(first) = sums.first() else { return "no runs\n".into() };
    let mut head = format!("{:<16} {:>7}", "dataset", "prompts");
    for m in &first.modes {
        head.push_str(&format!(" | {:>10} {:>6} {:>6}", format!("{} tok/s", m.mode.name()), "×ar", "AL"));
    }
    let mut out = head.clone() + "\n" + &"-".repeat(head.chars().count()) + "\n";
    for d in sums {
        out.push_str(&format!("{:<16} {:>7}", d.name, d.modes.first().map_or(0, |m| m.prompts)));
        for m in &d.modes {
            let speedup = d.speedup(m).map_or_else(|| "-".into(), |x| format!("{x:.2}"));
            out.push_str(&format!(" | {:>10.1} {:>6} {:>6.2}", m.tokens_per_second, speedup, m.acceptance_length));
        }
        out.push('\n');
    }
    out
}

/// The JSON written to `bench.json` (`skipped`: the ids of prompts longer than the context).
pub fn to_json(
    args: &BenchArgs,
    info: &PairInfo,
    draft: Option<&Path>,
    (runs, skipped): (&[Run], &[String]),
    sums: &[DatasetSummary],
) -> Value {
    let mode_json = |d: &DatasetSummary, m: &ModeSummary| {
        json!({
            "mode": m.mode.name(),
            "prompts": m.prompts,
            "generated_tokens": m.generated,
            "decode_seconds": m.decode_s,
            "tokens_per_second": m.tokens_per_second,
            "speedup_over_ar": d.speedup(m),
            "acceptance_length": m.acceptance_length,
            "accepted_depth_histogram": m.accepted_depth,
        })
    };
    json!({
        "model": args.model.display().to_string(),
        "draft": draft.map(|d| d.display().to_string()),
        "backend": if info.gpu { "gpu" } else { "cpu" },
        "budget": args.budget,
        "max_tokens_per_prompt": args.tokens,
        "chat_template": !args.raw,
        "skipped_prompts": skipped,
        "datasets": sums.iter().map(|d| json!({
            "name": d.name,
            "modes": d.modes.iter().map(|m| mode_json(d, m)).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "runs": runs.iter().map(|r| json!({
            "dataset": r.dataset,
            "id": r.id,
            "mode": r.mode.name(),
            "prompt_tokens": r.stats.prompt_tokens,
            "generated_tokens": r.stats.generated,
            "rounds": r.stats.steps,
            "tokens_per_second": r.stats.decode_tokens_per_second(),
            "acceptance_length": r.stats.acceptance_length(),
            "prefill_seconds": r.stats.time.prefill.as_secs_f64(),
            "stop": r.stats.stop.name(),
            "matches_ar": r.matches_ar,
        })).collect::<Vec<_>>(),
    })
}

/// Runs the prompt-set bench (`bench --prompts`).
pub fn run(args: &BenchArgs) -> anyhow::Result<()> {
    if !args.oracle_depths.is_empty() {
        bail!("--oracle-depths belongs to the step bench; it is not used with --prompts");
    }
    if args.tokens == 0 {
        bail!("--tokens must be at least 1");
    }
    if args.limit == Some(0) {
        bail!("--limit must be at least 1");
    }
    if args.budget == 0 || args.budget > MAX_BUDGET {
        bail!("--budget {}: the speculative modes need 1..={MAX_BUDGET} nodes", args.budget);
    }
    let mut modes: Vec<Mode> = Vec::new();
    for m in args.modes.iter().map(|m| ModeArg::mode(*m)) {
        if !modes.contains(&m) {
            modes.push(m);
        }
    }
    if modes.is_empty() {
        bail!("--modes is empty");
    }
    // AR first: the other modes are compared with its tokens.
    modes.sort_by_key(|&m| m != Mode::Ar);
    let mut prompts = Vec::new();
    for p in &args.prompts {
        prompts.extend(read_prompt_set(p, args.limit)?);
    }
    let speculative = modes.iter().any(|&m| m != Mode::Ar);
    let draft = if speculative { draft_or_demo(&args.model, args.draft.as_deref(), true) } else { None };
    if speculative && draft.is_none() {
        bail!(
            "--modes {}: the speculative modes need --draft",
            modes.iter().map(|m| m.name()).collect::<Vec<_>>().join(",")
        );
    }
    let out_dir = args.out.clone().unwrap_or_else(|| PathBuf::from("."));
    std::fs::create_dir_all(&out_dir).with_context(|| format!("--out {}: cannot create it", out_dir.display()))?;
    let spec = PairSpec {
        model: args.model.clone(),
        draft: draft.clone(),
        backend: args.backend.unwrap_or(BackendArg::Auto),
        ctx: args.ctx,
        budget: args.budget,
        verbose: false,
    };
    let suite = Suite { args, modes: &modes, prompts: &prompts, draft: draft.as_deref(), out_dir: &out_dir };
    with_pair(&spec, suite)
}

/// The runs over a loaded pair.
struct Suite<'a> {
    args: &'a BenchArgs,
    modes: &'a [Mode],
    prompts: &'a [PromptRecord],
    draft: Option<&'a Path>,
    out_dir: &'a Path,
}

impl PairRunner for Suite<'_> {
    type Output = ();

    fn run<T, D>(self, mut session: Session<T, D>, info: &PairInfo) -> anyhow::Result<()>
    where
        T: Target,
        D: Draft<Features = T::Features>,
    {
        let args = self.args;
        let mut runs = Vec::new();
        let mut skipped = Vec::new();
        let bar = indicatif::ProgressBar::new((self.prompts.len() * self.modes.len()) as u64);
        bar.set_style(
            indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} runs {elapsed} {msg}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        for p in self.prompts {
            let prompt = encode(info, p, args.raw)?;
            let room = info.room(prompt.len());
            if room == 0 {
                bar.suspend(|| {
                    eprintln!(
                        "skipped {} ({}): {} prompt tokens leave no room in the context of {} tokens",
                        p.id,
                        p.dataset,
                        prompt.len(),
                        info.ctx
                    )
                });
                skipped.push(p.id.clone());
                bar.inc(self.modes.len() as u64);
                continue;
            }
            let mut ar_tokens: Option<Vec<u32>> = None;
            for &mode in self.modes {
                bar.set_message(format!("{} {}", p.id, mode.name()));
                let cfg = GenerateConfig {
                    mode,
                    budget: if mode == Mode::Ar { 0 } else { args.budget },
                    max_tokens: args.tokens.min(room),
                    eos: info.tk.stop_ids.clone(),
                    rule: DecodingRule::Greedy,
                };
                // Every run from empty caches: no reuse between prompts or modes.
                session.reset().map_err(|e| anyhow::anyhow!(e))?;
                let (tokens, stats) = session
                    .generate(&prompt, &cfg, |_| std::ops::ControlFlow::Continue(()))
                    .map_err(|e| anyhow::anyhow!("{} ({}), {}: {e}", p.id, p.dataset, mode.name()))?;
                let matches_ar = match (&ar_tokens, mode) {
                    (_, Mode::Ar) => {
                        ar_tokens = Some(tokens);
                        None
                    }
                    (Some(ar), _) => Some(*ar == tokens),
                    (None, _) => None,
                };
                runs.push(Run { dataset: p.dataset.clone(), id: p.id.clone(), mode, stats, matches_ar });
                bar.inc(1);
            }
        }
        bar.finish_and_clear();
        let sums = summaries(&runs, self.modes);
        print!("{}", table(&sums));
        if !skipped.is_empty() {
            println!("{} prompts skipped (longer than the context): {}", skipped.len(), skipped.join(", "));
        }
        let json = to_json(args, info, self.draft, (&runs, &skipped), &sums);
        let json_path = self.out_dir.join("bench.json");
        let text = serde_json::to_string_pretty(&json).context("serialising the results")?;
        std::fs::write(&json_path, text + "\n").with_context(|| format!("writing {}", json_path.display()))?;
        let svg_path = self.out_dir.join("bench.svg");
        super::bench_plot::write_svg(&svg_path, &sums)?;
        println!("wrote {} and {}", json_path.display(), svg_path.display());
        let differ: Vec<String> = runs
            .iter()
            .filter(|r| r.matches_ar == Some(false))
            .map(|r| format!("{} ({}) in {}", r.id, r.dataset, r.mode.name()))
            .collect();
        if !differ.is_empty() {
            bail!("the output differs from AR for {} (a bug: greedy decoding must be lossless)", differ.join(", "));
        }
        Ok(())
    }
}

/// The prompt's tokens: its turns through the chat template (thinking on, as the anchor's
/// runs), or with `raw` their contents joined by newlines.
fn encode(info: &PairInfo, p: &PromptRecord, raw: bool) -> anyhow::Result<Vec<u32>> {
    let text = if raw {
        p.messages.iter().map(|m| m.content.as_str()).collect::<Vec<_>>().join("\n")
    } else {
        let opts = RenderOptions { add_generation_prompt: true, enable_thinking: true };
        info.template
            .render(&p.messages, opts)
            .with_context(|| format!("{} ({}): the chat template", p.id, p.dataset))?
    };
    let ids = info.tk.tokenizer.encode(&text).with_context(|| format!("{} ({}): tokenising", p.id, p.dataset))?;
    if ids.is_empty() {
        bail!("{} ({}): the prompt has no tokens", p.id, p.dataset);
    }
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(name: &str, text: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("flashtree-bench-suite-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn prompt_sets_of_each_shape_are_read_and_bad_lines_named() {
        let p = write(
            "mixed.jsonl",
            concat!(
                r#"{"id":"a","suite":"he","messages":[{"role":"user","content":"hi"}],"max_tokens":5}"#,
                "\n\n",
                r#"{"prompt":"def f():"}"#,
                "\n",
                r#"{"id":7,"turns":["first","second"]}"#,
                "\n",
                r#"{"question":"2+2?"}"#,
                "\n"
            ),
        );
        let r = read_prompt_set(&p, None).unwrap();
        assert_eq!(r.len(), 4);
        assert_eq!((r[0].dataset.as_str(), r[0].id.as_str()), ("he", "a"));
        assert_eq!(r[1].dataset, "mixed");
        assert!(r[1].id.ends_with("mixed.jsonl:3"), "{}", r[1].id);
        assert_eq!(r[2].messages, vec![Message::new("user", "first")]);
        assert_eq!(r[2].id, "7");
        assert_eq!(r[3].messages[0].content, "2+2?");
        assert_eq!(read_prompt_set(&p, Some(2)).unwrap().len(), 2);

        let bad = write("bad.jsonl", "{\"prompt\":\"ok\"}\n{\"messages\":[{\"role\":\"user\"}]}\n");
        let e = format!("{:#}", read_prompt_set(&bad, None).unwrap_err());
        assert!(e.contains("bad.jsonl:2") && e.contains("messages[0].content"), "{e}");
        let bad = write("bad2.jsonl", "[1,2]\n");
        let e = format!("{:#}", read_prompt_set(&bad, None).unwrap_err());
        assert!(e.contains("bad2.jsonl:1") && e.contains("object"), "{e}");
        let bad = write("bad3.jsonl", "{\"text\":\"x\"}\n");
        let e = format!("{:#}", read_prompt_set(&bad, None).unwrap_err());
        assert!(e.contains("`prompt`"), "{e}");
        let empty = write("empty.jsonl", "\n\n");
        assert!(read_prompt_set(&empty, None).is_err());
    }

    fn run_with(mode: Mode, generated: usize, paths: &[usize], decode_ms: u64) -> Run {
        let mut stats = Stats { generated, ..Stats::default() };
        for &p in paths {
            stats.record_round(p, false);
        }
        stats.time.verify = std::time::Duration::from_millis(decode_ms);
        Run { dataset: "d".into(), id: "x".into(), mode, stats, matches_ar: None }
    }

    #[test]
    fn summaries_sum_tokens_time_and_paths() {
        let runs = vec![
            run_with(Mode::Ar, 5, &[1, 1, 1, 1], 400),
            run_with(Mode::Ar, 3, &[1, 1], 200),
            run_with(Mode::Tree, 5, &[3, 1], 100),
            run_with(Mode::Tree, 3, &[2], 50),
        ];
        let s = summaries(&runs, &[Mode::Ar, Mode::Tree]);
        assert_eq!(s.len(), 1);
        let (ar, tree) = (&s[0].modes[0], &s[0].modes[1]);
        assert!((ar.tokens_per_second - 6.0 / 0.6).abs() < 1e-6, "{ar:?}");
        assert!((ar.acceptance_length - 1.0).abs() < 1e-9);
        assert!((tree.tokens_per_second - 6.0 / 0.15).abs() < 1e-6, "{tree:?}");
        assert!((tree.acceptance_length - 2.0).abs() < 1e-9);
        assert_eq!(tree.accepted_depth, vec![1, 1, 1]);
        assert!((s[0].speedup(tree).unwrap() - 4.0).abs() < 1e-6);
        let t = table(&s);
        assert!(t.contains("tree tok/s") && t.contains("4.00") && t.contains("2.00"), "{t}");
    }
}
