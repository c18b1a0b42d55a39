//! `flashtree generate` on a `synth --preset tiny` pair: streams text and prints stats; AR, chain
//! and tree produce the same text; chat mode renders the template; mismatches are clear errors.

use flashtree::cli::generate::{run_to, GenerateArgs, ModeArg};
use flashtree::cli::pair_args::PairArgs;
use std::path::PathBuf;

use flashtree_tests::tiny::tiny_pair as tiny;

fn args(mode: ModeArg) -> GenerateArgs {
    let (model, draft) = tiny().clone();
    GenerateArgs {
        pair: PairArgs {
            model,
            draft: Some(draft),
            mode,
            budget: 22,
            backend: flashtree::cli::backend::BackendArg::Cpu,
        },
        max_tokens: 24,
        prompt: Some("The quick brown fox".into()),
        chat: false,
        system: None,
        no_think: false,
        ctx: None,
        verbose: false,
        sampling: Default::default(),
        output_format: Default::default(),
    }
}

fn run(a: &GenerateArgs) -> anyhow::Result<(String, String)> {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    run_to(a, &mut out, &mut err)?;
    Ok((String::from_utf8(out)?, String::from_utf8(err)?))
}

#[test]
fn generate_streams_the_same_text_in_every_mode_and_prints_stats() {
    let (ar_text, ar_stats) = run(&args(ModeArg::Ar)).unwrap();
    assert!(!ar_text.trim_end_matches('\n').is_empty(), "no text");
    assert!(ar_stats.contains("acceptance length 1.000"), "{ar_stats}");
    for mode in [ModeArg::Chain, ModeArg::Tree, ModeArg::AnchorTree] {
        let (text, stats) = run(&args(mode)).unwrap();
        assert_eq!(text, ar_text, "{mode:?}");
        for want in ["tokens: ", "tok/s", "acceptance length", "accepted depth histogram", "verify"] {
            assert!(stats.contains(want), "{mode:?}: {want:?} missing in {stats}");
        }
    }
}

#[test]
fn chat_mode_renders_the_template_and_generates() {
    let mut a = args(ModeArg::Tree);
    a.chat = true;
    a.system = Some("Be brief.".into());
    a.max_tokens = 8;
    let (_, stats) = run(&a).unwrap();
    assert!(stats.contains("tokens: "), "{stats}");
}

#[test]
fn bad_flags_and_mismatched_pairs_are_clear_errors() {
    let mut a = args(ModeArg::Tree);
    a.pair.draft = None;
    assert!(run(&a).unwrap_err().to_string().contains("needs --draft"));
    let mut a = args(ModeArg::Tree);
    a.pair.budget = 1 << 20;
    assert!(run(&a).unwrap_err().to_string().contains("--budget"));
    let mut a = args(ModeArg::Tree);
    a.pair.draft = Some(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/hf/draft-full"));
    let e = format!("{:#}", run(&a).unwrap_err());
    assert!(e.contains("hidden size"), "{e}");
    let mut a = args(ModeArg::Ar);
    a.pair.model = PathBuf::from("/nonexistent/model.gguf");
    assert!(run(&a).is_err());
}

/// Peak resident memory of this process so far (`VmHWM`), in bytes.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// The tiny model's context is 4096 tokens: a 100k-character prompt (once 18 GB and counting) and
/// a prompt of a few thousand tokens beyond it are refused before the weights are loaded — fast,
/// in little memory, naming both numbers.
#[test]
fn prompts_beyond_the_context_are_refused_fast_and_small() {
    let t0 = std::time::Instant::now();
    let mut a = args(ModeArg::Tree);
    a.prompt = Some("hello world ".repeat(8_334)); // 100k characters
    let e = format!("{:#}", run(&a).unwrap_err());
    assert!(e.contains("context of 4096 tokens"), "{e}");
    // short enough in bytes to be tokenised, too many tokens
    a.prompt = Some("hello world ".repeat(4_000));
    let e = format!("{:#}", run(&a).unwrap_err());
    assert!(e.contains("do not fit the context of 4096") && e.contains("--max-tokens is 24"), "{e}");
    // a prompt that fits, with --max-tokens pushing it past the context
    a.prompt = Some("hello".into());
    a.max_tokens = 5000;
    let e = format!("{:#}", run(&a).unwrap_err());
    assert!(e.contains("5000") && e.contains("4096"), "{e}");
    let took = t0.elapsed();
    assert!(took.as_secs() < 20, "refusing took {took:?}");
    let peak = peak_rss();
    assert!(peak < 2 << 30, "peak resident memory {peak} bytes");
}

#[test]
fn ctx_above_the_trained_context_is_refused_and_a_smaller_one_applies() {
    let mut a = args(ModeArg::Ar);
    a.ctx = Some(5000);
    let e = format!("{:#}", run(&a).unwrap_err());
    assert!(e.contains("--ctx 5000") && e.contains("4096"), "{e}");
    a.ctx = Some(32);
    let e = format!("{:#}", run(&a).unwrap_err());
    assert!(e.contains("context of 32"), "{e}");
    a.max_tokens = 4;
    run(&a).unwrap();
}

#[test]
fn options_that_would_be_ignored_are_errors() {
    let mut a = args(ModeArg::Ar);
    a.system = Some("Be brief.".into());
    let e = run(&a).unwrap_err().to_string();
    assert!(e.contains("--system") && e.contains("--chat"), "{e}");
    let mut a = args(ModeArg::Ar);
    a.no_think = true;
    let e = run(&a).unwrap_err().to_string();
    assert!(e.contains("--no-think") && e.contains("--chat"), "{e}");
}

#[test]
fn a_directory_as_model_is_named_a_directory() {
    let mut a = args(ModeArg::Ar);
    a.pair.model = tiny().1.clone(); // the draft folder
    let e = flashtree::cli::error_message(&run(&a).unwrap_err());
    assert!(e.contains("is a directory") && e.contains("expected a qwen35 GGUF file"), "{e}");
}

#[test]
fn logits_checks_tokens_against_the_context() {
    use flashtree::cli::logits::{render, LogitsArgs};
    let model = tiny().0.clone();
    let args = |tokens: String, ctx| LogitsArgs {
        model: model.clone(),
        tokens,
        layers: None,
        json: false,
        ctx,
        backend: flashtree::cli::backend::BackendArg::Cpu,
    };
    let e = format!("{:#}", render(&args("1,2,3".into(), Some(5000))).unwrap_err());
    assert!(e.contains("--ctx 5000") && e.contains("4096"), "{e}");
    let e = format!("{:#}", render(&args("1,2,3".into(), Some(2))).unwrap_err());
    assert!(e.contains("3 tokens") && e.contains("context of 2"), "{e}");
    let many = vec!["1"; 4097].join(",");
    let e = format!("{:#}", render(&args(many, None)).unwrap_err());
    assert!(e.contains("4097") && e.contains("4096"), "{e}");
    assert!(render(&args("1,2,3".into(), Some(3))).unwrap().starts_with("pos 0 token 1 "));
    let e = format!("{:#}", render(&args("1,,2".into(), None)).unwrap_err());
    assert!(e.contains("item 2 is empty"), "{e}");
}

#[test]
fn the_cpu_memory_plan_counts_f32_weights_and_is_checked_against_ram() {
    use flashtree::cli::limits::{check_memory, cpu_plan, draft_f32_bytes};
    let (model, draft) = tiny().clone();
    let g = flashtree::gguf::Gguf::open(&model).unwrap();
    let params: u64 = g.tensor_infos().map(|t| t.n_elements()).sum();
    let plan = cpu_plan(&g, 100, 10, draft_f32_bytes(&draft).unwrap(), false).unwrap();
    assert_eq!(plan.target_weights, 4 * params);
    assert!(plan.draft_weights > 0 && plan.state > 0);
    assert_eq!(plan.snapshot, 0, "generate keeps no snapshot");
    // chat and serve keep one: every DeltaNet state and conv window once more.
    let cfg = flashtree::model::Qwen35Config::from_gguf(&g).unwrap();
    let m = flashtree::inspect::memory_plan(&cfg, 0, None);
    let with = cpu_plan(&g, 100, 10, plan.draft_weights, true).unwrap();
    assert!(m.recurrent_state_bytes > 0 && m.conv_state_bytes > 0);
    assert_eq!(with.snapshot, m.recurrent_state_bytes + m.conv_state_bytes);
    assert_eq!(with.total(), plan.total() + with.snapshot);
    let e = check_memory(&plan, Some(plan.total() - 1)).unwrap_err().to_string();
    assert!(e.contains("RAM is available") && e.contains("GiB"), "{e}");
    check_memory(&plan, Some(plan.total())).unwrap();
}

/// `--backend auto` runs every mode where the target can run (the GPU when present, else the
/// CPU), and `--backend gpu` with a speculative mode is no longer refused for the mode: without
/// a GPU it fails only for the missing driver.
#[test]
fn backend_flags_run_speculative_modes_on_the_gpu_when_present() {
    use flashtree::cli::backend::BackendArg;
    let gpu = flashtree::gpu::Gpu::try_new().is_ok();
    let mut a = args(ModeArg::Tree);
    a.pair.backend = BackendArg::Auto;
    let (text, stats) = run(&a).unwrap();
    let want = if gpu { "mode tree budget 22 backend gpu" } else { "mode tree budget 22 backend cpu" };
    assert!(stats.contains(want), "{stats}");
    if !gpu {
        assert_eq!(text, run(&args(ModeArg::Ar)).unwrap().0);
        a.pair.backend = BackendArg::Gpu;
        let e = format!("{:#}", run(&a).unwrap_err());
        assert!(e.contains("no CUDA driver") && !e.contains("not built yet"), "{e}");
    }
}

/// `--output-format ids` parsed back to token ids.
fn ids_of(a: &GenerateArgs) -> Vec<u32> {
    let (out, _) = run(a).unwrap();
    assert_eq!(out.lines().count(), 1, "{out:?}");
    out.trim_end().split(' ').map(|t| t.parse().unwrap()).collect()
}

#[derive(clap::Parser)]
struct Cli {
    #[command(flatten)]
    generate: GenerateArgs,
}

/// The sampling flags: greedy by default and at T = 0; a seed gives the same ids in AR, chain
/// and tree; `ids` and `json` outputs; a random seed printed with --verbose; `--backend gpu`
/// does not refuse sampling; out-of-range values name their flag.
#[test]
fn sampling_flags_and_output_formats() {
    use clap::Parser;
    use flashtree::cli::sampling::{OutputFormat, SamplingArgs};
    let (model, draft) = tiny().clone();
    let parsed = Cli::try_parse_from([
        "generate",
        "--model",
        model.to_str().unwrap(),
        "--draft",
        draft.to_str().unwrap(),
        "--prompt",
        "The quick brown fox",
        "--max-tokens",
        "24",
        "--backend",
        "cpu",
        "--output-format",
        "ids",
    ])
    .unwrap()
    .generate;
    assert_eq!(parsed.sampling.temperature, 0.0, "greedy by default");
    assert_eq!(parsed.output_format, OutputFormat::Ids);
    let greedy = ids_of(&parsed);
    assert_eq!(greedy.len(), 24);
    let sampled = |mode, temperature, seed| {
        let sampling = SamplingArgs { temperature, top_k: 50, top_p: 0.95, min_p: 0.0, seed: Some(seed) };
        ids_of(&GenerateArgs { pair: PairArgs { mode, ..parsed.pair.clone() }, sampling, ..parsed.clone() })
    };
    for mode in [ModeArg::Ar, ModeArg::Chain, ModeArg::Tree] {
        assert_eq!(sampled(mode, 0.0, 3), greedy, "{mode:?}: T = 0 is greedy");
    }
    let mut by_seed = Vec::new();
    for seed in [1, 2] {
        let ar = sampled(ModeArg::Ar, 0.9, seed);
        for mode in [ModeArg::Chain, ModeArg::Tree] {
            assert_eq!(sampled(mode, 0.9, seed), ar, "{mode:?} seed {seed}");
        }
        by_seed.push(ar);
    }
    assert_ne!(by_seed[0], by_seed[1], "two seeds gave the same ids");
    assert!(by_seed.iter().any(|s| *s != greedy), "sampling gave the greedy ids");

    // JSON: the ids of the `ids` format, the seed, the stop reason.
    let sampling = SamplingArgs { temperature: 0.9, top_k: 50, top_p: 0.95, min_p: 0.0, seed: Some(1) };
    let a = GenerateArgs {
        pair: PairArgs { mode: ModeArg::Tree, ..parsed.pair.clone() },
        sampling,
        output_format: OutputFormat::Json,
        ..parsed.clone()
    };
    let (out, _) = run(&a).unwrap();
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["ids"], serde_json::json!(by_seed[0]));
    assert_eq!(v["seed"], 1);
    assert_eq!(v["stop"], "max tokens");
    assert!(v["text"].is_string());

    // No seed: a random one, printed with --verbose, and the run reproduces with it.
    let sampling = SamplingArgs { temperature: 0.9, seed: None, ..SamplingArgs::default() };
    let (out, err) = run(&GenerateArgs { sampling, verbose: true, ..parsed.clone() }).unwrap();
    let seed: u64 = err
        .lines()
        .find_map(|l| l.strip_prefix("sampling seed "))
        .unwrap_or_else(|| panic!("no seed in {err}"))
        .parse()
        .unwrap();
    let sampling = SamplingArgs { temperature: 0.9, seed: Some(seed), ..SamplingArgs::default() };
    assert_eq!(run(&GenerateArgs { sampling, ..parsed.clone() }).unwrap().0, out);

    // Sampling is not refused on the GPU: without one, the only error is the missing device
    // (with one, `gpu-tests` checks the sampled ids against the CPU's).
    let sampling = SamplingArgs { temperature: 0.7, ..SamplingArgs::default() };
    let gpu = GenerateArgs {
        pair: PairArgs { backend: flashtree::cli::backend::BackendArg::Gpu, ..parsed.pair.clone() },
        sampling,
        ..parsed.clone()
    };
    if let Err(e) = run(&gpu) {
        let e = format!("{e:#}");
        assert!(!e.contains("sampl") && e.contains("--backend gpu"), "{e}");
    }

    for (flag, want) in
        [("--top-p=0", "--top-p 0"), ("--min-p=1.5", "--min-p 1.5"), ("--temperature=-1", "--temperature -1")]
    {
        let mut argv = vec!["generate", "--model", model.to_str().unwrap(), "--backend", "cpu", "--mode", "ar"];
        argv.push(flag);
        let a = Cli::try_parse_from(argv).unwrap().generate;
        let e = format!("{:#}", run(&a).unwrap_err());
        assert!(e.contains(want), "{e}");
    }
}
