//! Hostile hyperparameters are refused by the one config source (`flashtree::model`) on every
//! path that reads them — a draft `config.json`, a `dflash` GGUF, a `qwen35` GGUF, an HF target
//! `config.json` — quickly, without overflow panics (these tests run in debug builds), and with
//! an error naming the file, the key and what was expected.

use flashtree::convert::dflash::load_draft;
use flashtree::convert::gguf_load::load_qwen35;
use flashtree::convert::hf_config;
use flashtree::gguf::{Gguf, GgufWriter, Value};
use flashtree::model::{DraftConfig, DraftModel, Qwen35Config};
use serde_json::{json, Value as Json};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// A tiny synthetic pair (target GGUF, z-lab draft folder) and the draft as a `dflash` GGUF.
struct Tiny {
    dir: PathBuf,
    target: PathBuf,
    draft_dir: PathBuf,
    draft_gguf: PathBuf,
}

fn tiny() -> &'static Tiny {
    static T: OnceLock<Tiny> = OnceLock::new();
    T.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("flashtree-hostile-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let out = flashtree::synth::tiny(&dir, 3).expect("synth tiny");
        let draft_dir = out.draft_dir.expect("draft written");
        let cfg = DraftModel::open(&draft_dir).expect("draft loads").config;
        let files = flashtree::convert::safetensors::open_folder(&draft_dir).expect("files");
        let draft_gguf = dir.join("draft.gguf");
        flashtree::convert::gguf_write::convert_dflash(
            &draft_dir,
            &cfg,
            &files,
            Some(&out.target),
            flashtree::convert::out_type::OutType::BF16,
            &draft_gguf,
        )
        .expect("dflash GGUF written");
        Tiny { dir, target: out.target, draft_dir, draft_gguf }
    })
}

/// Runs `f`, which must fail within a second; returns its error text.
fn refused<T, E: std::fmt::Display>(what: &str, f: impl FnOnce() -> Result<T, E>) -> String {
    let t = Instant::now();
    let e = match f() {
        Ok(_) => panic!("{what}: accepted"),
        Err(e) => e.to_string(),
    };
    assert!(t.elapsed() < Duration::from_secs(1), "{what}: took {:?} to refuse", t.elapsed());
    e
}

fn assert_names(what: &str, err: &str, parts: &[&str]) {
    for p in parts {
        assert!(err.contains(p), "{what}: error does not mention {p:?}: {err}");
    }
}

/// A copy of the tiny draft folder whose `config.json` has `edit` applied.
fn draft_folder_with(name: &str, edit: impl FnOnce(&mut Json)) -> PathBuf {
    let t = tiny();
    let dir = t.dir.join(format!("draft-{name}"));
    std::fs::create_dir_all(&dir).expect("mkdir");
    let mut cfg: Json =
        serde_json::from_str(&std::fs::read_to_string(t.draft_dir.join("config.json")).expect("config")).expect("json");
    edit(&mut cfg);
    std::fs::write(dir.join("config.json"), cfg.to_string()).expect("write config");
    std::fs::copy(t.draft_dir.join("model.safetensors"), dir.join("model.safetensors")).expect("copy weights");
    dir
}

/// Metadata edits: `(key, Some(value))` sets, `(key, None)` removes.
type Edits = Vec<(&'static str, Option<Value>)>;

/// A copy of GGUF `src` (tensors included) with metadata `edits` applied (`None` removes the key).
fn gguf_with(src: &Path, name: &str, edits: &[(&str, Option<Value>)]) -> PathBuf {
    let g = Gguf::open(src).expect("opens");
    let mut w = GgufWriter::new();
    for (k, v) in &g.metadata {
        match edits.iter().find(|(ek, _)| ek == k) {
            Some((_, None)) => {}
            Some((_, Some(nv))) => w.set(k.clone(), nv.clone()),
            None => w.set(k.clone(), v.clone()),
        }
    }
    for (k, v) in edits {
        if let Some(v) = v {
            if g.get(k).is_none() {
                w.set(*k, v.clone());
            }
        }
    }
    for t in &g.tensors {
        w.add_tensor(t.name.clone(), &t.dims, t.ty).expect("tensor");
    }
    let out = tiny().dir.join(name);
    w.write_file(&out, |i, _, sink| sink.write_all(g.tensor_data(&g.tensors[i].name).expect("data")))
        .expect("write gguf");
    out
}

#[test]
fn hostile_draft_config_json_is_refused_naming_file_and_key() {
    type Edit = Box<dyn Fn(&mut Json)>;
    let cases: Vec<(&str, Edit, &[&str])> = vec![
        ("block-size", Box::new(|c| c["block_size"] = json!(100000)), &["block_size", "100000", "1..=256"]),
        ("dflash-block-size", Box::new(|c| c["dflash_config"]["block_size"] = json!(100000)), &["block_size"]),
        ("block-size-1", Box::new(|c| c["block_size"] = json!(1)), &["block_size", "2..=256"]),
        ("zero-layers", Box::new(|c| c["num_hidden_layers"] = json!(0)), &["num_hidden_layers", "1..=4096"]),
        ("huge-hidden", Box::new(|c| c["hidden_size"] = json!(u64::MAX)), &["hidden_size", "18446744073709551615"]),
        ("float-hidden", Box::new(|c| c["hidden_size"] = json!(1e30)), &["hidden_size"]),
        ("negative-heads", Box::new(|c| c["num_attention_heads"] = json!(-4)), &["num_attention_heads"]),
        ("huge-head-dim", Box::new(|c| c["head_dim"] = json!(1u64 << 40)), &["head_dim"]),
        ("heads-times-dim", Box::new(|c| c["head_dim"] = json!(1 << 24)), &["heads × head_dim"]),
        ("odd-head-dim", Box::new(|c| c["head_dim"] = json!(15)), &["head_dim", "odd"]),
        ("kv-not-dividing", Box::new(|c| c["num_key_value_heads"] = json!(3)), &["num_key_value_heads", "divide"]),
        (
            "huge-layer-id",
            Box::new(|c| c["dflash_config"]["target_layer_ids"] = json!([u64::MAX])),
            &["target_layer_ids"],
        ),
        ("empty-layer-ids", Box::new(|c| c["dflash_config"]["target_layer_ids"] = json!([])), &["target_layer_ids"]),
        (
            "too-many-layer-ids",
            Box::new(|c| c["dflash_config"]["target_layer_ids"] = json!(vec![1; 5000])),
            &["target_layer_ids", "5000"],
        ),
        (
            "mask-outside-vocab",
            Box::new(|c| c["dflash_config"]["mask_token_id"] = json!(1u64 << 20)),
            &["mask_token_id"],
        ),
        ("mask-over-u32", Box::new(|c| c["dflash_config"]["mask_token_id"] = json!(1u64 << 40)), &["mask_token_id"]),
        ("zero-theta", Box::new(|c| c["rope_theta"] = json!(0.0)), &["rope_theta", "positive"]),
        ("huge-theta", Box::new(|c| c["rope_theta"] = json!(1e300)), &["rope_theta"]),
        (
            "layer-types-length",
            Box::new(|c| c["layer_types"] = json!(vec!["full_attention"; 7])),
            &["layer_types", "7"],
        ),
        (
            "sliding-without-window",
            Box::new(|c| {
                let n = c["num_hidden_layers"].as_u64().expect("n") as usize;
                c["layer_types"] = json!(vec!["sliding_attention"; n]);
                c.as_object_mut().expect("obj").remove("sliding_window");
            }),
            &["sliding_window"],
        ),
        ("not-an-object", Box::new(|c| *c = json!([1, 2])), &["config.json", "object"]),
        ("causal-string", Box::new(|c| c["is_causal"] = json!("yes")), &["is_causal", "true or false"]),
    ];
    for (name, edit, expect) in cases {
        let dir = draft_folder_with(name, |c| edit(c));
        let file = dir.join("config.json");
        let text = std::fs::read_to_string(&file).expect("read");
        let e = refused(name, || DraftConfig::from_zlab_json(&text, &file));
        assert_names(name, &e, expect);
        assert_names(name, &e, &[&file.display().to_string()]);
        // `generate`, `inspect` and `convert` go through the same reader.
        let e = refused(name, || load_draft(&dir));
        assert_names(name, &e, expect);
        let e = refused(name, || DraftModel::open(&dir));
        assert_names(name, &e, expect);
    }
}

#[test]
fn oversized_config_json_is_refused_before_reading() {
    let dir = draft_folder_with("oversized", |_| {});
    let f = std::fs::File::create(dir.join("config.json")).expect("create");
    f.set_len(flashtree::model::json::MAX_CONFIG_BYTES + 1).expect("sparse file");
    let e = refused("oversized", || load_draft(&dir));
    assert_names("oversized", &e, &["config.json", "bytes"]);
}

#[test]
fn hostile_dflash_gguf_is_refused_naming_file_and_key() {
    let src = &tiny().draft_gguf;
    load_draft(src).expect("the unedited draft GGUF loads");
    let cases: Vec<(&str, Edits, &[&str])> = vec![
        ("block-size", vec![("dflash.block_size", Some(Value::U32(100_000)))], &["dflash.block_size", "100000"]),
        ("zero-layers", vec![("dflash.block_count", Some(Value::U32(0)))], &["dflash.block_count", "1..=4096"]),
        ("huge-hidden", vec![("dflash.embedding_length", Some(Value::U64(u64::MAX)))], &["dflash.embedding_length"]),
        ("zero-heads", vec![("dflash.attention.head_count", Some(Value::U32(0)))], &["dflash.attention.head_count"]),
        (
            "value-length",
            vec![("dflash.attention.value_length", Some(Value::U32(8)))],
            &["dflash.attention.value_length", "differs"],
        ),
        (
            "layer-id-zero",
            vec![("dflash.target_layers", Some(Value::i32_array([0])))],
            &["dflash.target_layers", "ids + 1"],
        ),
        (
            "layer-id-negative",
            vec![("dflash.target_layers", Some(Value::i32_array([i32::MIN])))],
            &["dflash.target_layers"],
        ),
        ("no-layers-key", vec![("dflash.target_layers", None)], &["dflash.target_layers"]),
        ("no-mask", vec![("tokenizer.ggml.mask_token_id", None)], &["tokenizer.ggml.mask_token_id"]),
        (
            "mask-outside-vocab",
            vec![("tokenizer.ggml.mask_token_id", Some(Value::U32(u32::MAX)))],
            &["mask_token_id", "vocab_size"],
        ),
        (
            "window-without-pattern",
            vec![("dflash.attention.sliding_window", Some(Value::U32(4)))],
            &["sliding_window_pattern"],
        ),
        ("nan-theta", vec![("dflash.rope.freq_base", Some(Value::F32(f32::NAN)))], &["dflash.rope.freq_base", "NaN"]),
        ("wrong-arch", vec![("general.architecture", Some(Value::String("qwen35".into())))], &["dflash", "qwen35"]),
    ];
    for (name, edits, expect) in cases {
        let path = gguf_with(src, &format!("draft-{name}.gguf"), &edits);
        let e = refused(name, || load_draft(&path));
        assert_names(name, &e, expect);
        assert_names(name, &e, &[&path.display().to_string()]);
    }
}

#[test]
fn hostile_target_gguf_is_refused_by_every_loader() {
    let src = &tiny().target;
    load_qwen35(src).expect("the unedited target loads");
    let cases: Vec<(&str, Edits, &[&str])> = vec![
        ("zero-blocks", vec![("qwen35.block_count", Some(Value::U32(0)))], &["qwen35.block_count", "1..=4096"]),
        ("huge-embd", vec![("qwen35.embedding_length", Some(Value::U64(u64::MAX)))], &["qwen35.embedding_length"]),
        (
            // The loader `generate` used assumed interval 4 here; inspect refused. Now both refuse.
            "no-layer-pattern",
            vec![("qwen35.full_attention_interval", None), ("qwen35.attention.recurrent_layers", None)],
            &["full_attention_interval", "layer pattern"],
        ),
        (
            "odd-rope-dims",
            vec![("qwen35.rope.dimension_count", Some(Value::U32(3)))],
            &["qwen35.rope.dimension_count", "even"],
        ),
        (
            "value-length",
            vec![("qwen35.attention.value_length", Some(Value::U32(8)))],
            &["qwen35.attention.value_length", "differs"],
        ),
        (
            "huge-state",
            vec![("qwen35.ssm.state_size", Some(Value::U32(1 << 24)))],
            &["qwen35.ssm.state_size", "conv channels"],
        ),
        ("zero-context", vec![("qwen35.context_length", Some(Value::U32(0)))], &["qwen35.context_length"]),
        ("huge-kernel", vec![("qwen35.ssm.conv_kernel", Some(Value::U32(1000)))], &["qwen35.ssm.conv_kernel"]),
        (
            "nextn-all",
            vec![("qwen35.nextn_predict_layers", Some(Value::U32(1000)))],
            &["nextn_predict_layers", "no trunk"],
        ),
        ("inf-eps", vec![("qwen35.attention.layer_norm_rms_epsilon", Some(Value::F32(f32::INFINITY)))], &["epsilon"]),
    ];
    for (name, edits, expect) in cases {
        let path = gguf_with(src, &format!("target-{name}.gguf"), &edits);
        let e = refused(name, || load_qwen35(&path));
        assert_names(name, &e, expect);
        assert_names(name, &e, &[&path.display().to_string()]);
        let e = refused(name, || Qwen35Config::load(&path));
        assert_names(name, &e, expect);
    }
}

#[test]
fn hostile_hf_target_config_is_refused_naming_file_and_key() {
    let good = std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/hf/a/config.json"))
        .expect("fixture");
    let file = Path::new("hf/config.json");
    hf_config::parse(&good, file).expect("the fixture parses");
    let base: Json = serde_json::from_str(&good).expect("json");
    let cases: Vec<(&str, Json, &[&str])> = vec![
        ("num_hidden_layers", json!(u64::MAX), &["num_hidden_layers", "1..=4096"]),
        ("num_hidden_layers", json!(0), &["num_hidden_layers"]),
        ("hidden_size", json!(u64::MAX), &["hidden_size"]),
        ("vocab_size", json!(0), &["vocab_size"]),
        ("linear_num_value_heads", json!(1 << 22), &["linear_value_head_dim", "exceeds"]),
        ("layer_types", json!(["full_attention"]), &["layer_types", "1 entries"]),
        ("head_dim", json!(-1), &["head_dim"]),
        ("rms_norm_eps", json!(-1e-6), &["rms_norm_eps", "positive"]),
    ];
    for (key, value, expect) in cases {
        let mut c = base.clone();
        c[key] = value;
        let e = refused(key, || hf_config::parse(&c.to_string(), file));
        assert_names(key, &e, expect);
        assert_names(key, &e, &["hf/config.json"]);
    }
}
