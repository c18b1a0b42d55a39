//! The GPU engine on the shipped demo target (`models/`, see `models/README.md`): for the fixture
//! prompts of `tests/fixtures/demo/`, every row's logits (chains of ≤ 32, the engine's prefill)
//! within 2e-3 (max |Δ| over a row / the row's largest |logit|) of the CPU reference run inside
//! `with_device_rounding` — the bound of `engine.rs` and `engine_hf.rs`; and `generate
//! --backend gpu --mode ar` with no `--model` runs it.

use flashtree::cli::default_model;
use flashtree::cli::pair_args::PairArgs;
use flashtree::convert::gguf_load::load_qwen35;
use flashtree::engine::Engine;
use flashtree::gguf::Gguf;
use flashtree::model::Qwen35Config;
use flashtree_reference::model::tensor::with_device_rounding;
use flashtree_reference::model::Qwen35State;
use flashtree_tests::gpu::gpu_or_skip;

use crate::engine::{engine_arithmetic, engine_chain_logits, rel_err};

/// Bound vs the reference with the engine's roundings (relative to the row's max |logit|).
const TOL_EMULATED: f64 = 2e-3;

fn fixture_prompts() -> Vec<Vec<u32>> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/demo/prompts.json");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).expect("prompts.json")).unwrap();
    v.as_array()
        .expect("a list")
        .iter()
        .map(|p| p["tokens"].as_array().expect("tokens").iter().map(|t| t.as_u64().unwrap() as u32).collect())
        .collect()
}

#[test]
fn demo_target_logits_on_the_gpu_match_the_reference() {
    if gpu_or_skip("demo_target_logits_on_the_gpu_match_the_reference").is_none() {
        return;
    }
    let path = default_model::target();
    let cpu = load_qwen35(&path).expect("load the demo target");
    for toks in fixture_prompts() {
        let gpu = flashtree::gpu::Gpu::try_new().expect("gpu");
        let g = Gguf::open(&path).expect("open the demo target");
        let cfg = Qwen35Config::from_gguf(&g).expect("config");
        let mut e = Engine::load(gpu, &g, cfg, 256, |_, _| {}).expect("the engine loads the demo target");
        let got = engine_chain_logits(&mut e, &toks);
        let want = with_device_rounding(|| {
            let mut st = Qwen35State::new(&cpu.hparams);
            cpu.forward(&mut st, &toks, &engine_arithmetic()).expect("reference forward").logits
        });
        assert_eq!(got.len(), want.len());
        let worst = got.iter().zip(&want).map(|(a, b)| rel_err(a, b)).fold(0f64, f64::max);
        eprintln!("demo target, {} tokens: worst row error {worst:.2e}", toks.len());
        assert!(worst <= TOL_EMULATED, "demo target: row error {worst:.3e} > {TOL_EMULATED:e}");
    }
}

#[test]
fn generate_without_model_runs_the_demo_target_on_the_gpu() {
    if gpu_or_skip("generate_without_model_runs_the_demo_target_on_the_gpu").is_none() {
        return;
    }
    let args = flashtree::cli::generate::GenerateArgs {
        pair: PairArgs {
            model: default_model::target(),
            draft: None,
            mode: flashtree::cli::generate::ModeArg::Ar,
            budget: 0,
            backend: flashtree::cli::backend::BackendArg::Gpu,
        },
        max_tokens: 32,
        prompt: Some("def fibonacci(n):\n".into()),
        chat: false,
        system: None,
        no_think: false,
        ctx: None,
        verbose: false,
        sampling: Default::default(),
        output_format: Default::default(),
    };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    flashtree::cli::generate::run_to(&args, &mut out, &mut err).unwrap();
    let err = String::from_utf8_lossy(&err);
    assert!(err.contains("backend gpu"), "stats line: {err}");
    assert!(!String::from_utf8_lossy(&out).trim().is_empty());
}
