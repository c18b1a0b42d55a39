//! GGUFs written by llama.cpp's own converter (`convert_hf_to_gguf.py` of llama-cpp-python 0.3.36,
//! run by `tools/fixtures/llamacpp/gen_llamacpp.py` on the HF fixtures `a` and `b`; outputs committed
//! under `tests/fixtures/llamacpp/`) load into the reference as the same model HF transformers ran.
//!
//! Those files differ from ours where it matters (qwen35-architecture.md §6.1, §13): the layer pattern
//! is in `qwen35.attention.recurrent_layers` while `qwen35.full_attention_interval` says 4 (the
//! converter's default, wrong for both fixtures), the value heads are in llama.cpp's tiled order, norms
//! are stored as `1 + w`, `ssm_a = −exp(A_log)`, the conv kernel is squeezed to `[channels, kernel]`,
//! and the vocabulary is a real `tokenizer.ggml.*` block.
//!
//! Tolerance against HF (‖Δ‖/‖ref‖ per position): 1e-4, the bound of `model_fixtures.rs`, which gives
//! its error budget. The F32 and BF16 files hold exactly the values our HF loader produces (the
//! checkpoint is BF16), which is asserted first, so any layout error fails bit-exactly before the
//! numeric comparison.

use clap::Parser;
use flashtree::cli::logits::{render, LogitsArgs};
use flashtree::convert::gguf_load::{load_qwen35, read_tensor};
use flashtree::convert::gguf_write::convert_qwen35;
use flashtree::convert::hf_config;
use flashtree::convert::out_type::OutType;
use flashtree::convert::qwen35::load_hf;
use flashtree::convert::safetensors::{open_folder, SafeTensors};
use flashtree::gguf::Gguf;
use flashtree::inspect::inspect_path;
use flashtree_reference::model::{ForwardOptions, Qwen35State, Qwen35Weights};
use flashtree_reference::quant::GgmlType;
use std::path::PathBuf;

/// The bound against HF in f32; see the module doc.
const TOL: f64 = 1e-4;

fn hf_fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/hf").join(name)
}

fn llamacpp_fixture(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/llamacpp").join(file)
}

fn rows(st: &SafeTensors, name: &str) -> Vec<Vec<f32>> {
    let t = st.read_f32(name).unwrap_or_else(|e| panic!("{e}"));
    let cols = *t.shape.last().expect("2-D tensor");
    t.data.chunks_exact(cols).map(|r| r.to_vec()).collect()
}

/// Worst over positions of ‖got − want‖ / ‖want‖.
fn worst_rel(what: &str, got: &[Vec<f32>], want: &[Vec<f32>]) -> f64 {
    assert_eq!(got.len(), want.len(), "{what}: row count");
    let worst = got
        .iter()
        .zip(want)
        .map(|(g, w)| {
            assert_eq!(g.len(), w.len(), "{what}: row length");
            let num: f64 = g.iter().zip(w).map(|(a, b)| (*a as f64 - *b as f64).powi(2)).sum();
            let den: f64 = w.iter().map(|b| (*b as f64).powi(2)).sum();
            (num / den.max(1e-300)).sqrt()
        })
        .fold(0.0, f64::max);
    eprintln!("{what}: worst relative error {worst:.2e} over {} positions", got.len());
    worst
}

fn expected(name: &str) -> SafeTensors {
    SafeTensors::open(&hf_fixture(name).join("expected.safetensors")).expect("expected.safetensors")
}

fn tokens(exp: &SafeTensors) -> Vec<u32> {
    exp.read_i64("tokens").expect("tokens").into_iter().map(|t| t as u32).collect()
}

fn forward(w: &Qwen35Weights, toks: &[u32], layers: &[usize]) -> (Vec<Vec<f32>>, Vec<Vec<Vec<f32>>>) {
    let mut st = Qwen35State::new(&w.hparams);
    let opts = ForwardOptions { capture_layers: layers.to_vec(), ..Default::default() };
    let o = w.forward(&mut st, toks, &opts).expect("forward");
    (o.logits, o.captured)
}

/// The layer pattern `qwen35.full_attention_interval` alone would give (layer `i` recurrent iff
/// `(i + 1) % n != 0`).
fn interval_pattern(file: &Gguf, n_layer: usize) -> Vec<bool> {
    let n = file.get_u64("qwen35.full_attention_interval").expect("llama.cpp writes the interval") as usize;
    (0..n_layer).map(|i| (i + 1) % n != 0).collect()
}

/// Loads a llama.cpp file whose matrices are lossless for the BF16 checkpoint (F32 or BF16) and checks
/// it is the model HF ran: same hyperparameters and weights as our HF loader, bit for bit, then logits
/// and hidden states against HF's within 1e-4.
fn check_lossless(file: &str, name: &str, layers: &[usize], matrix_type: GgmlType) {
    let path = llamacpp_fixture(file);
    let g = Gguf::open(&path).unwrap_or_else(|e| panic!("{e}"));
    let from_lcpp = load_qwen35(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let (_, from_hf) = load_hf(&hf_fixture(name)).unwrap_or_else(|e| panic!("{e}"));

    // The file's interval disagrees with the true pattern, so only recurrent_layers can give it.
    let n_layer = from_hf.hparams.recurrent.len();
    assert_ne!(
        interval_pattern(&g, n_layer),
        from_hf.hparams.recurrent,
        "{file}: fixture must test the key's precedence"
    );
    assert_eq!(from_lcpp.hparams, from_hf.hparams, "{file}: hyperparameters (layer pattern, rope dims, head dims …)");
    assert_eq!(from_lcpp.token_embd, from_hf.token_embd, "{file}: token_embd");
    assert_eq!(from_lcpp.output_norm, from_hf.output_norm, "{file}: output_norm (1 + w)");
    assert_eq!(format!("{:?}", from_lcpp.output), format!("{:?}", from_hf.output), "{file}: output");
    for (il, (a, b)) in from_lcpp.layers.iter().zip(&from_hf.layers).enumerate() {
        assert_eq!(format!("{a:?}"), format!("{b:?}"), "{file}: layer {il} weights differ");
    }
    assert!(
        g.tensor_infos().all(|t| t.ty == GgmlType::F32 || t.ty == matrix_type),
        "{file}: every tensor F32 or {matrix_type}"
    );
    assert!(g.tensor_infos().any(|t| t.ty == matrix_type), "{file}: has {matrix_type} tensors");

    let exp = expected(name);
    let (logits, hidden) = forward(&from_lcpp, &tokens(&exp), layers);
    let e = worst_rel(&format!("{file} logits"), &logits, &rows(&exp, "logits"));
    assert!(e < TOL, "{file}: logits: worst relative error {e:.3e} ≥ {TOL:e}");
    for (c, &l) in layers.iter().enumerate() {
        let e = worst_rel(&format!("{file} hidden {l}"), &hidden[c], &rows(&exp, &format!("hidden.{l}")));
        assert!(e < TOL, "{file}: hidden of layer {l}: worst relative error {e:.3e} ≥ {TOL:e}");
    }
}

#[test]
fn llamacpp_f32_gguf_of_fixture_a_is_the_model_transformers_ran() {
    check_lossless("a-f32.gguf", "a", &[0, 1, 2, 3], GgmlType::F32);
}

#[test]
fn llamacpp_bf16_gguf_of_multimodal_fixture_b_is_the_model_transformers_ran() {
    check_lossless("b-bf16.gguf", "b", &[0, 2, 5], GgmlType::BF16);
}

/// A scratch file unique to this process, removed when dropped.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn llamacpp_q8_0_gguf_matches_our_own_q8_0_conversion_tensor_by_tensor() {
    // Logits of a Q8_0 model are not compared with HF: random tiny models amplify 0.5% weight
    // rounding to large logit differences (see convert.rs). Instead every tensor is compared with
    // our converter's Q8_0 output of the same checkpoint, after dequantization; both place the
    // value heads the same way and round the same BF16 values with the same Q8_0 rule, so they must
    // agree exactly where both chose the same type (Q8_0, or F16 for `ssm_out`, whose 72-wide rows
    // do not fill Q8_0 blocks), and with our F32 values where llama.cpp kept F32.
    let dir = hf_fixture("a");
    let lcpp = Gguf::open(llamacpp_fixture("a-q8_0.gguf")).unwrap_or_else(|e| panic!("{e}"));
    let ours_path = Scratch(std::env::temp_dir().join(format!("flashtree-lcpp-a-q8-{}.gguf", std::process::id())));
    let cfg = hf_config::read(&dir).expect("config");
    let files = open_folder(&dir).expect("safetensors");
    convert_qwen35(&dir, &cfg, &files, OutType::Q8_0, &ours_path.0).unwrap_or_else(|e| panic!("{e}"));
    let ours = Gguf::open(&ours_path.0).expect("our Q8_0");
    let ours_f32_path = Scratch(std::env::temp_dir().join(format!("flashtree-lcpp-a-f32-{}.gguf", std::process::id())));
    convert_qwen35(&dir, &cfg, &files, OutType::F32, &ours_f32_path.0).unwrap_or_else(|e| panic!("{e}"));
    let ours_f32 = Gguf::open(&ours_f32_path.0).expect("our F32");

    let mut n_q8 = 0;
    for t in lcpp.tensor_infos() {
        let x = read_tensor(&lcpp, &t.name).expect("read").expect("present");
        let (reference, what) = match ours.tensor(&t.name) {
            Some(o) if o.ty == t.ty => (&ours, "our Q8_0 file"),
            _ if t.ty == GgmlType::F32 => (&ours_f32, "our F32 file"),
            Some(o) => panic!("{}: llama.cpp stored {} where we chose {}", t.name, t.ty, o.ty),
            None => panic!("{}: not in our conversion", t.name),
        };
        let y = read_tensor(reference, &t.name).expect("read").expect("present");
        assert_eq!(x.shape, y.shape, "{}: shape", t.name);
        assert!(x.data == y.data, "{} ({}): values differ from {what}", t.name, t.ty);
        n_q8 += usize::from(t.ty == GgmlType::Q8_0);
    }
    assert!(n_q8 > 0, "the file has Q8_0 tensors");
    let w = load_qwen35(&llamacpp_fixture("a-q8_0.gguf")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(w.hparams, load_hf(&dir).expect("hf").1.hparams);
}

#[derive(Parser)]
struct LogitsCli {
    #[command(flatten)]
    args: LogitsArgs,
}

fn parse_rows(v: &serde_json::Value) -> Vec<Vec<f32>> {
    v.as_array()
        .expect("rows")
        .iter()
        .map(|r| r.as_array().expect("row").iter().map(|x| x.as_f64().expect("number") as f32).collect())
        .collect()
}

#[test]
fn logits_command_on_the_llamacpp_gguf_reproduces_transformers() {
    let path = llamacpp_fixture("b-bf16.gguf");
    let exp = expected("b");
    let list: Vec<String> = tokens(&exp).iter().map(u32::to_string).collect();
    let model = path.to_str().expect("utf-8 path");
    let argv = ["logits", "--model", model, "--tokens", &list.join(","), "--layers", "2", "--json"];
    let cli = LogitsCli::try_parse_from(argv).expect("arguments parse");
    let out: serde_json::Value = serde_json::from_str(&render(&cli.args).expect("logits")).expect("JSON");
    let e = worst_rel("logits command", &parse_rows(&out["logits"]), &rows(&exp, "logits"));
    assert!(e < TOL, "logits via the command: worst relative error {e:.3e}");
    let e = worst_rel("logits command hidden 2", &parse_rows(&out["hidden"]["2"]), &rows(&exp, "hidden.2"));
    assert!(e < TOL, "hidden 2 via the command: worst relative error {e:.3e}");
    let text = LogitsCli::try_parse_from(["logits", "--model", model, "--tokens", "1,2,3"]).expect("parse");
    let text = render(&text.args).expect("text output");
    assert_eq!(text.lines().count(), 3, "{text}");
    assert!(text.starts_with("pos 0 token 1 "), "{text}");
}

fn hyper<'a>(r: &'a flashtree::inspect::Report, key: &str) -> &'a str {
    &r.hyperparameters.iter().find(|(k, _)| k == key).unwrap_or_else(|| panic!("no {key:?} in {r:?}")).1
}

#[test]
fn inspect_reads_the_llamacpp_ggufs_layer_pattern_and_vocabulary() {
    for (file, layers, vocab, rope) in [
        ("a-f32.gguf", "4 (2 Gated DeltaNet, 2 full attention)", "320", "12 dims"),
        ("a-q8_0.gguf", "4 (2 Gated DeltaNet, 2 full attention)", "320", "12 dims"),
        ("b-bf16.gguf", "6 (4 Gated DeltaNet, 2 full attention)", "288", "4 dims"),
    ] {
        let path = llamacpp_fixture(file);
        let reports = inspect_path(&path).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(reports.len(), 1);
        let r = &reports[0];
        let g = Gguf::open(&path).expect("open");
        assert_eq!(r.architecture, "qwen35");
        assert_eq!((r.tensor_count, r.tensor_bytes), (g.tensor_count(), g.tensor_bytes()), "{file}");
        assert_eq!(hyper(r, "layers"), layers, "{file}");
        assert_eq!(hyper(r, "vocabulary"), vocab, "{file}");
        assert!(hyper(r, "rope").starts_with(rope), "{file}: {}", hyper(r, "rope"));
        let plan = r.memory.as_ref().expect("qwen35 has a memory plan");
        assert!(plan.recurrent_state_bytes > 0, "{file}");
        let table = r.to_table();
        assert!(table.contains("Gated DeltaNet"), "{table}");
        assert_eq!(r.to_json()["tensor_count"], r.tensor_count, "{file}: JSON report");
    }
}
