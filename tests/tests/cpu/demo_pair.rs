//! The shipped demo pair (`models/`, trained by `tools/train/`): the target's reference logits equal
//! HF transformers' on the same (Q8_0) weights, its tokenizer equals HF `tokenizers`', `generate`
//! with no `--model` runs the pair, and tree / chain output equals AR output.
//!
//! Fixture: `tests/fixtures/demo/` from `tools/train/fixture.py` (HF on the trained BF16 weights
//! after gguf-py's Q8_0 round trip, which is the shipped GGUF's quantizer). Tolerances as in
//! `model_fixtures.rs`: ‖Δ‖/‖ref‖ per position ≤ 1e-4 against HF in f32 (the bound), and
//! against HF's modeling code in f64 the bound below.

use clap::Parser;
use flashtree::cli::default_model;
use flashtree::cli::generate::{run_to, GenerateArgs, ModeArg};
use flashtree::cli::pair_args::PairArgs;
use flashtree::convert::gguf_load::load_qwen35;
use flashtree::convert::safetensors::SafeTensors;
use flashtree::gguf::Gguf;
use flashtree::tokenizer::gguf::from_gguf;
use flashtree_reference::model::{DeltaNetMode, ForwardOptions, Qwen35State};
use std::path::PathBuf;

const TOL: f64 = 1e-4;
const TOL_F64: f64 = 1e-5;

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/demo")
}

fn rel(a: &[f32], b: &[f32]) -> f64 {
    let num: f64 = a.iter().zip(b).map(|(x, y)| (*x as f64 - *y as f64).powi(2)).sum();
    let den: f64 = b.iter().map(|y| (*y as f64).powi(2)).sum();
    (num / den.max(1e-300)).sqrt()
}

fn rows(st: &SafeTensors, name: &str) -> Vec<Vec<f32>> {
    let t = st.read_f32(name).unwrap_or_else(|e| panic!("{e}"));
    let cols = *t.shape.last().expect("2-D tensor");
    t.data.chunks_exact(cols).map(|r| r.to_vec()).collect()
}

#[test]
fn demo_target_logits_and_tokens_match_transformers() {
    let target = default_model::target();
    let file = Gguf::open(&target).unwrap_or_else(|e| panic!("{}: {e}", target.display()));
    let tk = from_gguf(&file).expect("tokenizer");
    let w = load_qwen35(&target).expect("load the demo target");
    let exp = SafeTensors::open(&fixture().join("expected.safetensors")).expect("expected.safetensors");
    let prompts: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture().join("prompts.json")).expect("prompts.json"))
            .expect("prompts.json is JSON");
    let prompts = prompts.as_array().expect("a list of prompts");
    assert!(prompts.len() >= 3);
    for (i, p) in prompts.iter().enumerate() {
        let text = p["text"].as_str().expect("text");
        let want: Vec<u32> =
            p["tokens"].as_array().expect("tokens").iter().map(|t| t.as_u64().unwrap() as u32).collect();
        assert_eq!(tk.tokenizer.encode(text).unwrap(), want, "prompt {i}: flashtree's tokens differ from HF's");
        let stored: Vec<u32> = exp.read_i64(&format!("tokens.{i}")).unwrap().into_iter().map(|t| t as u32).collect();
        assert_eq!(stored, want);
        let mut st = Qwen35State::new(&w.hparams);
        let opts = ForwardOptions { capture_layers: vec![], deltanet: DeltaNetMode::Chunked { chunk: 8 } };
        let got = w.forward(&mut st, &want, &opts).expect("forward").logits;
        for (name, tol) in [(format!("logits.{i}"), TOL), (format!("logits_f64.{i}"), TOL_F64)] {
            let want_rows = rows(&exp, &name);
            assert_eq!(got.len(), want_rows.len(), "{name}: rows");
            let worst = got.iter().zip(&want_rows).map(|(g, w)| rel(g, w)).fold(0f64, f64::max);
            eprintln!("{name}: worst relative error {worst:.2e} over {} positions", got.len());
            assert!(worst < tol, "{name}: relative error {worst:.3e} ≥ {tol:e}");
        }
    }
}

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    generate: GenerateArgs,
}

fn run(a: &GenerateArgs) -> (String, String) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    run_to(a, &mut out, &mut err).unwrap_or_else(|e| panic!("{e:#}"));
    (String::from_utf8(out).unwrap(), String::from_utf8(err).unwrap())
}

fn acceptance(stats: &str) -> f64 {
    let at = stats.find("acceptance length ").expect("acceptance length printed") + "acceptance length ".len();
    stats[at..].split(|c: char| !(c.is_ascii_digit() || c == '.')).next().unwrap().parse().unwrap()
}

/// The README's first command: no `--model`, no `--draft`, default mode (tree, budget 22).
#[test]
fn generate_without_model_runs_the_demo_pair_and_tree_equals_ar() {
    let cli =
        Cli::try_parse_from(["generate", "--prompt", "def fibonacci(n):", "--max-tokens", "48", "--backend", "cpu"])
            .expect("arguments");
    let tree = cli.generate;
    assert_eq!(tree.pair.model, default_model::target());
    assert_eq!(tree.pair.mode, ModeArg::Tree);
    assert_eq!(tree.pair.draft, None);
    let (tree_text, tree_stats) = run(&tree);
    let (ar_text, _) = run(&GenerateArgs { pair: PairArgs { mode: ModeArg::Ar, ..tree.pair.clone() }, ..tree.clone() });
    let (chain_text, chain_stats) =
        run(&GenerateArgs { pair: PairArgs { mode: ModeArg::Chain, ..tree.pair.clone() }, ..tree.clone() });
    eprintln!("{tree_text}\ntree: {tree_stats}\nchain: {chain_stats}");
    assert!(tree_text.trim().len() > 20, "no text: {tree_text:?}");
    assert_eq!(tree_text, ar_text, "tree output differs from AR output");
    assert_eq!(chain_text, ar_text, "chain output differs from AR output");
    // A trained draft: well above the ≈ 1.0 of a random one.
    assert!(acceptance(&tree_stats) > 1.5, "{tree_stats}");
}
