//! `flashtree convert` and `flashtree logits` on the HF fixtures: HF → GGUF → reference must
//! reproduce HF transformers' logits, and the DFlash draft must survive its GGUF round trip.

use clap::Parser;
use flashtree::cli::logits::{render, LogitsArgs};
use flashtree::convert::dflash::load_draft;
use flashtree::convert::gguf_load::{load_qwen35, read_tensor};
use flashtree::convert::gguf_write::{convert_dflash, convert_qwen35};
use flashtree::convert::hf_config;
use flashtree::convert::out_type::OutType;
use flashtree::convert::qwen35::load_hf;
use flashtree::convert::safetensors::{open_folder, SafeTensors};
use flashtree::gguf::Gguf;
use flashtree_reference::model::{ForwardOptions, Qwen35State, Qwen35Weights};
use flashtree_reference::quant::GgmlType;
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/hf").join(name)
}

/// A scratch file unique to this process and name, removed when dropped.
struct Scratch(PathBuf);

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for Scratch {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn scratch(name: &str) -> Scratch {
    let dir = std::env::temp_dir().join(format!("flashtree-convert-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    Scratch(dir.join(name))
}

fn rows(st: &SafeTensors, name: &str) -> Vec<Vec<f32>> {
    let t = st.read_f32(name).unwrap_or_else(|e| panic!("{e}"));
    let cols = *t.shape.last().expect("2-D");
    t.data.chunks_exact(cols).map(|r| r.to_vec()).collect()
}

fn worst_rel(got: &[Vec<f32>], want: &[Vec<f32>]) -> f64 {
    assert_eq!(got.len(), want.len());
    got.iter()
        .zip(want)
        .map(|(g, w)| {
            let num: f64 = g.iter().zip(w).map(|(a, b)| (*a as f64 - *b as f64).powi(2)).sum();
            let den: f64 = w.iter().map(|b| (*b as f64).powi(2)).sum();
            (num / den).sqrt()
        })
        .fold(0.0, f64::max)
}

fn convert_target(name: &str, out: OutType, file: &str) -> Scratch {
    let dir = fixture(name);
    let cfg = hf_config::read(&dir).expect("config");
    let files = open_folder(&dir).expect("safetensors");
    let path = scratch(file);
    convert_qwen35(&dir, &cfg, &files, out, &path).unwrap_or_else(|e| panic!("{e}"));
    path
}

fn logits_of(w: &Qwen35Weights, toks: &[u32], layers: &[usize]) -> (Vec<Vec<f32>>, Vec<Vec<Vec<f32>>>) {
    let mut st = Qwen35State::new(&w.hparams);
    let o = w
        .forward(&mut st, toks, &ForwardOptions { capture_layers: layers.to_vec(), ..Default::default() })
        .expect("forward");
    (o.logits, o.captured)
}

fn expected(name: &str) -> SafeTensors {
    SafeTensors::open(&fixture(name).join("expected.safetensors")).expect("expected")
}

fn tokens(exp: &SafeTensors) -> Vec<u32> {
    exp.read_i64("tokens").expect("tokens").into_iter().map(|t| t as u32).collect()
}

fn check_f32_gguf(name: &str, layers: &[usize]) {
    let path = convert_target(name, OutType::F32, &format!("{name}-f32.gguf"));
    let from_gguf = load_qwen35(&path).unwrap_or_else(|e| panic!("{e}"));
    let (_, from_hf) = load_hf(&fixture(name)).expect("hf");
    // F32 GGUF holds exactly the transformed HF values: the two loads are the same weights.
    assert_eq!(from_gguf.hparams, from_hf.hparams);
    assert_eq!(from_gguf.token_embd, from_hf.token_embd);
    assert_eq!(format!("{:?}", from_gguf.layers), format!("{:?}", from_hf.layers), "layer weights differ");
    let exp = expected(name);
    let (logits, hidden) = logits_of(&from_gguf, &tokens(&exp), layers);
    // 1e-4: the bound against HF in f32 (see model_fixtures.rs for the error budget).
    let e = worst_rel(&logits, &rows(&exp, "logits"));
    assert!(e < 1e-4, "{name}: logits from the F32 GGUF: worst relative error {e:.3e}");
    for (c, &l) in layers.iter().enumerate() {
        let e = worst_rel(&hidden[c], &rows(&exp, &format!("hidden.{l}")));
        assert!(e < 1e-4, "{name}: hidden {l}: worst relative error {e:.3e}");
    }
    let file = Gguf::open(&path).expect("reopen");
    assert!(file.tensor_infos().all(|t| t.ty == GgmlType::F32), "every tensor F32");
    assert!(file.get("qwen35.attention.recurrent_layers").is_some());
}

#[test]
fn hf_fixture_a_converted_to_f32_gguf_reproduces_transformers() {
    check_f32_gguf("a", &[0, 3]);
}

#[test]
fn hf_fixture_b_multimodal_layout_converted_to_f32_gguf_reproduces_transformers() {
    check_f32_gguf("b", &[2, 5]);
}

#[test]
fn bf16_and_f16_conversions_of_bf16_weights_are_lossless() {
    // The fixture's weights are BF16 values, which BF16 holds exactly and F16 too except for a few
    // F16-subnormal values (≤ 3e-9 relative per tensor): the same 1e-4 bound as F32 applies.
    let exp = expected("a");
    let (toks, hf) = (tokens(&exp), rows(&exp, "logits"));
    for out in [OutType::BF16, OutType::F16] {
        let w = load_qwen35(&convert_target("a", out, &format!("a-{out:?}.gguf"))).unwrap_or_else(|e| panic!("{e}"));
        let e = worst_rel(&logits_of(&w, &toks, &[]).0, &hf);
        assert!(e < 1e-4, "{out:?}: worst relative logits error {e:.3e}");
    }
}

/// Relative RMS rounding error a type may add to a tensor: half a quantization step relative to
/// the block's range, with headroom (Q8_0: 2⁻⁸·127/… ≈ 0.5%; Q6_K ≈ 2%; Q4_K ≈ 8%).
fn type_bound(ty: GgmlType) -> f64 {
    match ty {
        GgmlType::F32 | GgmlType::BF16 => 0.0, // BF16-valued weights: exact
        GgmlType::F16 => 1e-3,                 // exact unless a value is F16-subnormal (2⁻¹¹ step)
        GgmlType::Q8_0 => 1e-2,
        GgmlType::Q6_K => 4e-2,
        GgmlType::Q4_K => 1.5e-1,
        other => panic!("unexpected type {other}"),
    }
}

#[test]
fn quantized_conversions_follow_the_type_rules_and_round_each_tensor_within_its_format() {
    // Logits are not compared here: these random tiny models amplify weight rounding by up to
    // ~4× per layer at some positions (Q8_0 weights at 0.5% give up to 80% logit differences), so
    // the property checked is per tensor. Layout bugs show up as O(1) tensor errors.
    for name in ["a", "b"] {
        let f32_path = convert_target(name, OutType::F32, &format!("{name}-ref.gguf"));
        let reference = Gguf::open(&f32_path).expect("f32");
        for out in [OutType::Q8_0, OutType::Q4KM] {
            let path = convert_target(name, out, &format!("{name}-{out:?}.gguf"));
            let q = Gguf::open(&path).expect("quantized");
            assert_eq!(q.tensor_count(), reference.tensor_count());
            for t in reference.tensor_infos() {
                let qi = q.tensor(&t.name).unwrap_or_else(|| panic!("{} missing", t.name));
                let row = t.dims[0] as usize;
                let want_ty = flashtree::convert::out_type::tensor_type(out, &t.name, t.dims.len(), row, None, 0);
                if t.dims.len() == 1 || t.name.contains("_norm") || t.name.contains("ssm_conv1d") {
                    assert_eq!(qi.ty, GgmlType::F32, "{} stays F32", t.name);
                } else if !matches!(want_ty, GgmlType::Q6_K) {
                    // (layer-dependent Q6_K upgrades aside, the type follows the rules)
                    assert!(qi.ty == want_ty || qi.ty == GgmlType::Q6_K, "{}: {} vs {}", t.name, qi.ty, want_ty);
                }
                let x = read_tensor(&reference, &t.name).expect("read").expect("present");
                let y = read_tensor(&q, &t.name).expect("read").expect("present");
                assert_eq!(x.shape, y.shape, "{}", t.name);
                let num: f64 = x.data.iter().zip(&y.data).map(|(a, b)| (*a as f64 - *b as f64).powi(2)).sum();
                let den: f64 = x.data.iter().map(|a| (*a as f64).powi(2)).sum();
                let e = (num / den).sqrt();
                assert!(e <= type_bound(qi.ty), "{name} {out:?} {} ({}): relative error {e:.3e}", t.name, qi.ty);
            }
        }
    }
}

#[derive(Parser)]
struct LogitsCli {
    #[command(flatten)]
    args: LogitsArgs,
}

#[test]
fn logits_command_on_a_converted_fixture_reproduces_transformers() {
    let path = convert_target("b", OutType::F32, "b-cli.gguf");
    let exp = expected("b");
    let toks = tokens(&exp);
    let list: Vec<String> = toks.iter().map(u32::to_string).collect();
    let argv = [
        "logits",
        "--model",
        path.to_str().expect("utf-8 path"),
        "--tokens",
        &list.join(","),
        "--layers",
        "2,5",
        "--json",
    ];
    let cli = LogitsCli::try_parse_from(argv).expect("arguments parse");
    let out: serde_json::Value = serde_json::from_str(&render(&cli.args).expect("logits")).expect("JSON");
    let parse_rows = |v: &serde_json::Value| -> Vec<Vec<f32>> {
        v.as_array()
            .expect("rows")
            .iter()
            .map(|r| r.as_array().expect("row").iter().map(|x| x.as_f64().expect("number") as f32).collect())
            .collect()
    };
    let e = worst_rel(&parse_rows(&out["logits"]), &rows(&exp, "logits"));
    assert!(e < 1e-4, "logits via the command: worst relative error {e:.3e}");
    let e = worst_rel(&parse_rows(&out["hidden"]["5"]), &rows(&exp, "hidden.5"));
    assert!(e < 1e-4, "hidden 5 via the command: worst relative error {e:.3e}");
    let text = LogitsCli::try_parse_from(["logits", "--model", path.to_str().expect("utf-8"), "--tokens", "1,2"])
        .expect("parse");
    assert!(render(&text.args).expect("text").starts_with("pos 0 token 1 "));
    let bad = LogitsCli::try_parse_from(["logits", "--model", path.to_str().expect("utf-8"), "--tokens", "1,x"])
        .expect("parse");
    assert!(render(&bad.args).is_err(), "a non-numeric token is an error");
}

fn draft_round_trip(target_name: &str, name: &str, out: OutType) {
    let dir = fixture(name);
    let (cfg, zlab) = load_draft(&dir).expect("z-lab load");
    let path = scratch(&format!("{name}-{out:?}.gguf"));
    convert_dflash(&dir, &cfg, &open_folder(&dir).expect("files"), Some(Path::new(&fixture(target_name))), out, &path)
        .unwrap_or_else(|e| panic!("{e}"));
    let (gcfg, w) = load_draft(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(gcfg.target_layer_ids, cfg.target_layer_ids, "target_layers stored as id+1 and read back");
    assert_eq!(gcfg.rope_theta, cfg.rope_theta);
    assert_eq!(gcfg.sliding_layers, cfg.sliding_layers);
    assert_eq!(gcfg.sliding_window, cfg.sliding_window);
    assert_eq!(gcfg.mask_token_id, cfg.mask_token_id);
    if out == OutType::BF16 {
        // The z-lab tensors are BF16: the BF16 GGUF holds them exactly.
        assert_eq!(format!("{:?}", w.layers), format!("{:?}", zlab.layers));
        assert_eq!(w.fc, zlab.fc);
    }
    let (_, target) = load_hf(&fixture(target_name)).expect("target");
    let exp = SafeTensors::open(&dir.join("expected.safetensors")).expect("expected");
    let block: Vec<u32> = exp.read_i64("block_tokens").expect("block").into_iter().map(|t| t as u32).collect();
    let start = exp.read_i64("block_start").expect("start")[0] as usize;
    let o = w.forward(&target.token_embd, target.lm_head(), &rows(&exp, "features"), 0, &block, start).expect("draft");
    let e = worst_rel(&o.logits, &rows(&exp, "logits"));
    // BF16: exact weights, 1e-4 as for the HF-loaded draft. Q8_0: ~2⁻⁸ per weight, measured ≤ 1e-2.
    let bound = if out == OutType::BF16 { 1e-4 } else { 3e-2 };
    assert!(e < bound, "{name} {out:?}: draft logits worst relative error {e:.3e}");
}

#[test]
fn dflash_drafts_convert_to_llamacpp_layout_and_back() {
    draft_round_trip("a", "draft-full", OutType::BF16);
    draft_round_trip("a", "draft-swa", OutType::BF16);
    draft_round_trip("a", "draft-swa", OutType::Q8_0);
    draft_round_trip("c", "draft-c-full", OutType::BF16);
    draft_round_trip("c", "draft-c-swa", OutType::Q8_0);
}

#[test]
fn corrupt_safetensors_and_configs_are_errors_naming_the_file() {
    let good = std::fs::read(fixture("a").join("model.safetensors")).expect("fixture");
    let hlen = u64::from_le_bytes(good[..8].try_into().expect("8 bytes")) as usize;
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("short", vec![1, 2, 3]),
        ("header-past-end", {
            let mut b = good.clone();
            b[..8].copy_from_slice(&(u64::MAX / 2).to_le_bytes());
            b
        }),
        ("not-json", {
            let mut b = good.clone();
            b[8] = b'!';
            b
        }),
        ("truncated-data", good[..8 + hlen + 100].to_vec()),
    ];
    for (name, bytes) in cases {
        let path = scratch(&format!("{name}.safetensors"));
        std::fs::write(&path, &bytes).expect("write");
        let err = match SafeTensors::open(&path) {
            Ok(_) => panic!("{name}: a corrupt file opened"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains(&format!("{name}.safetensors")), "{name}: error does not name the file: {err}");
    }
    // A config that names an unknown layer type or misses rope_theta is an error, not a default.
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("a").join("config.json")).expect("config"))
            .expect("json");
    v["layer_types"][0] = serde_json::json!("mamba");
    let err = hf_config::parse(&v.to_string(), Path::new("a/config.json")).expect_err("unknown layer type").to_string();
    assert!(err.contains("a/config.json") && err.contains("layer_types") && err.contains("mamba"), "{err}");
    let mut d: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("draft-full").join("config.json")).expect("config"))
            .expect("json");
    d.as_object_mut().expect("object").remove("rope_theta");
    let err = flashtree::model::DraftConfig::from_zlab_json(&d.to_string(), Path::new("d/config.json"))
        .expect_err("rope_theta must not be defaulted")
        .to_string();
    assert!(err.contains("d/config.json") && err.contains("rope_theta"), "{err}");
}

#[test]
fn synthetic_tiny_q4_k_m_target_and_draft_load_into_the_reference_and_run() {
    // Cross-check with the synth preset (Q4_K/Q5_K/Q6_K mix written by another module): the GGUF
    // loader dequantizes every type and the forward gives finite logits; the draft folder loads.
    let dir = std::env::temp_dir().join(format!("flashtree-convert-synth-{}", std::process::id()));
    let out = flashtree::synth::tiny(&dir, 7).expect("synth tiny");
    let w = load_qwen35(&out.target).unwrap_or_else(|e| panic!("{e}"));
    let (logits, _) = logits_of(&w, &[1, 2, 3, 4, 5], &[]);
    assert!(logits.iter().flatten().all(|x| x.is_finite()), "finite logits");
    if let Some(d) = out.draft_dir.as_deref() {
        let (cfg, draft) = load_draft(d).unwrap_or_else(|e| panic!("{e}"));
        let feats = vec![vec![0.5f32; draft.fc.cols]; 3];
        let block: Vec<u32> =
            std::iter::once(1).chain(std::iter::repeat_n(cfg.mask_token_id, cfg.block_size - 1)).collect();
        let o = draft.forward(&w.token_embd, w.lm_head(), &feats, 0, &block, 3).expect("draft");
        assert!(o.logits.iter().flatten().all(|x| x.is_finite()));
    }
    let _ = std::fs::remove_dir_all(&dir);
}
