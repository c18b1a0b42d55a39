//! Bad files never panic or allocate absurdly: proptest mutations (byte flips, truncations,
//! huge 64-bit fields, splices) of valid GGUF and safetensors files, and one named test per
//! class of corruption checking the error names what is wrong.

use flashtree::gguf::{parse_header, GgmlType, GgufWriter, Value};
use flashtree::model::safetensors_io::read_safetensors;
use flashtree::model::{DraftConfig, Qwen35Config};
use proptest::prelude::*;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/gguf").join(name)).expect("fixture")
}

/// The tiny synthetic target's header (tokenizer included) + first tensors, and its draft's
/// safetensors, generated once per test process.
fn tiny_files() -> &'static (Vec<u8>, Vec<u8>) {
    static FILES: OnceLock<(Vec<u8>, Vec<u8>)> = OnceLock::new();
    FILES.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("flashtree-robust-{}", std::process::id()));
        let out = flashtree::synth::tiny(&dir, 11).expect("tiny synth");
        let g = std::fs::read(&out.target).expect("target");
        let st = std::fs::read(out.draft_dir.expect("draft").join("model.safetensors")).expect("safetensors");
        let _ = std::fs::remove_dir_all(&dir);
        (g, st)
    })
}

/// Parses, and when accepted exercises every consumer: tensor slices, first-block
/// dequantization, the qwen35 and dflash config readers. Must never panic.
fn exercise_gguf(bytes: &[u8]) {
    let Ok(h) = parse_header(bytes, Path::new("mutant.gguf")) else {
        return;
    };
    for t in &h.tensors {
        let r = h.tensor_range(&t.name).expect("listed tensor has a range");
        assert!(r.end <= bytes.len(), "range past end accepted for {}", t.name);
        let data = &bytes[r];
        let n = data.len().min(4 * t.ty.type_size());
        let n = n - n % t.ty.type_size();
        if t.ty.is_supported() {
            let _ = flashtree_reference::quant::dequantize(t.ty, &data[..n]);
        }
    }
    if let Ok(c) = Qwen35Config::from_header(&h, None, true) {
        let _ = c.tensor_inventory();
    }
    let _ = DraftConfig::from_dflash_header(&h);
}

#[derive(Debug, Clone)]
enum Mutation {
    Flip { pos: usize, xor: u8 },
    Truncate { len: usize },
    Huge { pos: usize, value: u64 },
    Splice { pos: usize, bytes: Vec<u8> },
}

fn mutation(max_pos: usize) -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (0..max_pos, 1u8..=255).prop_map(|(pos, xor)| Mutation::Flip { pos, xor }),
        (0..max_pos).prop_map(|len| Mutation::Truncate { len }),
        (0..max_pos, prop_oneof![Just(u64::MAX), Just(1u64 << 62), Just(u32::MAX as u64 + 1), any::<u64>()])
            .prop_map(|(pos, value)| Mutation::Huge { pos, value }),
        (0..max_pos, prop::collection::vec(any::<u8>(), 1..16))
            .prop_map(|(pos, bytes)| Mutation::Splice { pos, bytes }),
    ]
}

fn apply(mut b: Vec<u8>, muts: &[Mutation]) -> Vec<u8> {
    for m in muts {
        match m {
            Mutation::Flip { pos, xor } => {
                if let Some(x) = b.get_mut(*pos) {
                    *x ^= xor;
                }
            }
            Mutation::Truncate { len } => b.truncate(*len),
            Mutation::Huge { pos, value } => {
                if pos + 8 <= b.len() {
                    b[*pos..pos + 8].copy_from_slice(&value.to_le_bytes());
                }
            }
            Mutation::Splice { pos, bytes } => {
                let p = (*pos).min(b.len());
                b.splice(p..p, bytes.iter().copied());
            }
        }
    }
    b
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    /// Mutants of a gguf-py file with every value type never panic.
    #[test]
    fn mutated_all_types_gguf_never_panics(muts in prop::collection::vec(mutation(3840), 1..4)) {
        exercise_gguf(&apply(fixture("pywritten.gguf"), &muts));
    }

    /// Mutants of the tiny qwen35 target's header region (tokenizer arrays, hyperparameters,
    /// tensor table) never panic, and the config reader refuses or accepts them cleanly.
    #[test]
    fn mutated_qwen35_header_never_panics(muts in prop::collection::vec(mutation(12_000), 1..4)) {
        let (g, _) = tiny_files();
        exercise_gguf(&apply(g.clone(), &muts));
    }

    /// Mutants of a draft's safetensors header never panic; accepted ones slice in bounds.
    #[test]
    fn mutated_safetensors_never_panics(muts in prop::collection::vec(mutation(2_000), 1..4)) {
        let (_, st) = tiny_files();
        let b = apply(st.clone(), &muts);
        if let Ok(t) = read_safetensors(&b, Path::new("mutant.safetensors")) {
            for e in t.tensors() {
                let _ = t.data(&e.name);
            }
        }
    }
}

/// Every prefix of a valid file is either refused with a "file ends early"-style error or (for
/// prefixes that still hold all tensor data) accepted.
#[test]
fn every_truncation_is_refused_without_panic() {
    let full = fixture("pywritten.gguf");
    let complete = parse_header(&full, Path::new("f.gguf")).expect("valid");
    let needed = complete.tensors.iter().map(|t| complete.data_start + t.offset + t.nbytes).max().unwrap_or(0);
    for len in 0..full.len() {
        let r = parse_header(&full[..len], Path::new("f.gguf"));
        if (len as u64) < needed {
            let e = r.expect_err("a truncated file is refused").to_string();
            assert!(e.contains("f.gguf"), "{e}");
        }
    }
}

/// A small valid file built by our writer, plus the header offset of each tensor's info.
fn small_file() -> (Vec<u8>, GgufWriter) {
    let mut w = GgufWriter::new();
    w.set("general.architecture", Value::String("qwen35".into()));
    w.set("k.u32", Value::U32(5));
    w.set("k.arr", Value::i32_array([1, 2, 3]));
    w.add_tensor("a", &[32, 2], GgmlType::Q8_0).expect("ok");
    w.add_tensor("b", &[8], GgmlType::F32).expect("ok");
    let a = vec![0u8; 68];
    let b = vec![0u8; 32];
    (w.to_bytes(&[&a, &b]).expect("writes"), w)
}

/// Position just after tensor `name`'s name string in the header.
fn after_name(bytes: &[u8], name: &str) -> usize {
    let mut pat = (name.len() as u64).to_le_bytes().to_vec();
    pat.extend_from_slice(name.as_bytes());
    bytes.windows(pat.len()).rposition(|w| w == pat.as_slice()).expect("name in header") + pat.len()
}

fn err_of(bytes: &[u8]) -> String {
    parse_header(bytes, Path::new("bad.gguf")).expect_err("must be refused").to_string()
}

/// Found by `cargo fuzz` (gguf_header): an empty tensor in a file that ends inside the
/// alignment padding before the data section must be refused, not sliced past the end.
#[test]
fn file_ending_inside_the_data_padding_is_refused() {
    let mut w = GgufWriter::new();
    w.set("k", Value::U8(0));
    w.add_tensor("empty", &[0], GgmlType::F32).expect("empty tensor is valid");
    let b = w.to_bytes(&[&[]]).expect("writes");
    let h = parse_header(&b, Path::new("ok.gguf")).expect("complete file is valid");
    assert_eq!(h.tensor_range("empty").expect("range"), h.data_start as usize..h.data_start as usize);
    let cut = &b[..b.len() - 4];
    let e = err_of(cut);
    assert!(e.contains("data section"), "{e}");
    exercise_gguf(cut);
}

#[test]
fn huge_tensor_count_is_refused_before_allocating() {
    let (mut b, _) = small_file();
    b[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
    let e = err_of(&b);
    assert!(e.contains("tensors: more than the"), "{e}");
    b[8..16].copy_from_slice(&1000u64.to_le_bytes()); // plausible count, but not in the file
    let e = err_of(&b);
    assert!(e.contains("tensor infos") && e.contains("cannot fit"), "{e}");
}

#[test]
fn huge_kv_count_is_refused_before_allocating() {
    let (mut b, _) = small_file();
    b[16..24].copy_from_slice(&(1u64 << 60).to_le_bytes());
    assert!(err_of(&b).contains("cannot fit"));
    b[16..24].copy_from_slice(&((1u64 << 20) + 1).to_le_bytes());
    let e = err_of(&b);
    assert!(e.contains("cannot fit") || e.contains("more than"), "{e}");
}

#[test]
fn huge_array_length_is_refused_before_allocating() {
    let (mut b, _) = small_file();
    let p = after_name(&b, "k.arr") + 4 + 4; // value type, element type
    b[p..p + 8].copy_from_slice(&(u64::MAX / 2).to_le_bytes());
    let e = err_of(&b);
    assert!(e.contains("k.arr") && e.contains("cannot fit"), "{e}");
}

/// A u8 array whose bytes are all present but whose parsed size would be ~32× the file is
/// refused by the element budget.
#[test]
fn arrays_beyond_the_element_budget_are_refused() {
    let n = flashtree::gguf::parse::MAX_ARRAY_ELEMENTS as usize + 1;
    let mut w = GgufWriter::new();
    w.set("big", Value::U8(0));
    let mut b = w.to_bytes(&[]).expect("writes");
    // replace the u8 value by an array header + n bytes
    let p = after_name(&b, "big");
    b.truncate(p);
    b.extend_from_slice(&9u32.to_le_bytes());
    b.extend_from_slice(&0u32.to_le_bytes());
    b.extend_from_slice(&(n as u64).to_le_bytes());
    b.resize(b.len() + n, 1);
    let e = err_of(&b);
    assert!(e.contains("\"big\"") && e.contains("elements"), "{e}");
}

#[test]
fn huge_string_length_is_refused() {
    let (mut b, _) = small_file();
    b[24..32].copy_from_slice(&u64::MAX.to_le_bytes()); // length of the first key
    let e = err_of(&b);
    assert!(e.contains("ends early"), "{e}");
}

#[test]
fn huge_dims_are_refused_as_overflow() {
    let (mut b, _) = small_file();
    let p = after_name(&b, "a") + 4;
    b[p + 8..p + 16].copy_from_slice(&(1u64 << 62).to_le_bytes()); // ne1
    let e = err_of(&b);
    assert!(e.contains("\"a\"") && (e.contains("overflows") || e.contains("past the end")), "{e}");
}

/// Found by `cargo fuzz` (gguf_header): a zero dimension must not hide an overflowing product
/// of the others.
#[test]
fn zero_dim_does_not_hide_an_overflowing_shape() {
    let (mut b, _) = small_file();
    let p = after_name(&b, "a");
    b[p..p + 4].copy_from_slice(&4u32.to_le_bytes()); // 4 dims now: 32, 2, then type, offset bytes reinterpreted
    let e = parse_header(&b, Path::new("z.gguf"));
    assert!(e.is_err());
    assert!(flashtree::gguf::parse::tensor_nbytes(&[32, 0, 1 << 40, 1 << 40], GgmlType::F32).is_err());
    assert_eq!(flashtree::gguf::parse::tensor_nbytes(&[32, 0, 1 << 20], GgmlType::F32), Ok(0));
}

#[test]
fn offset_past_end_is_refused() {
    let (mut b, _) = small_file();
    let p = after_name(&b, "b") + 4 + 8 + 4;
    b[p..p + 8].copy_from_slice(&(1u64 << 20).to_le_bytes());
    let e = err_of(&b);
    assert!(e.contains("\"b\"") && e.contains("past the end"), "{e}");
}

#[test]
fn overlapping_tensors_are_refused() {
    let (mut b, _) = small_file();
    let p = after_name(&b, "b") + 4 + 8 + 4;
    b[p..p + 8].copy_from_slice(&32u64.to_le_bytes()); // inside a's 68 bytes, aligned
    let e = err_of(&b);
    assert!(e.contains("overlap") && e.contains("\"a\"") && e.contains("\"b\""), "{e}");
}

#[test]
fn misaligned_offset_is_refused() {
    let (mut b, _) = small_file();
    let p = after_name(&b, "b") + 4 + 8 + 4;
    b[p..p + 8].copy_from_slice(&81u64.to_le_bytes());
    assert!(err_of(&b).contains("not a multiple of the alignment"));
}

#[test]
fn bad_utf8_key_is_refused() {
    let (mut b, _) = small_file();
    b[32] = 0xff; // first byte of the first key
    assert!(err_of(&b).contains("UTF-8"));
}

#[test]
fn unknown_value_type_is_refused() {
    let (mut b, _) = small_file();
    let p = after_name(&b, "k.u32");
    b[p..p + 4].copy_from_slice(&99u32.to_le_bytes());
    let e = err_of(&b);
    assert!(e.contains("k.u32") && e.contains("99"), "{e}");
}

#[test]
fn unknown_tensor_type_is_refused() {
    let (mut b, _) = small_file();
    let p = after_name(&b, "b") + 4 + 8;
    b[p..p + 4].copy_from_slice(&39u32.to_le_bytes()); // MXFP4: not supported here
    let e = err_of(&b);
    assert!(e.contains("\"b\"") && e.contains("unknown ggml type id 39"), "{e}");
}

#[test]
fn row_length_not_a_block_multiple_is_refused() {
    let (mut b, _) = small_file();
    let p = after_name(&b, "a") + 4;
    b[p..p + 8].copy_from_slice(&33u64.to_le_bytes());
    assert!(err_of(&b).contains("not a multiple of the Q8_0 block size 32"));
}

#[test]
fn too_many_dims_are_refused() {
    let (mut b, _) = small_file();
    let p = after_name(&b, "a");
    b[p..p + 4].copy_from_slice(&5u32.to_le_bytes());
    assert!(err_of(&b).contains("5 dimensions"));
}

#[test]
fn bad_magic_and_version_are_refused() {
    let (b, _) = small_file();
    let mut m = b.clone();
    m[0] = b'X';
    assert!(err_of(&m).contains("not a GGUF file"));
    let mut v = b;
    v[4..8].copy_from_slice(&1u32.to_le_bytes());
    assert!(err_of(&v).contains("version 1"));
}

#[test]
fn wrong_architecture_is_named() {
    let mut w = GgufWriter::new();
    w.set("general.architecture", Value::String("llama".into()));
    let b = w.to_bytes(&[]).expect("writes");
    let h = parse_header(&b, Path::new("llama.gguf")).expect("valid container");
    let e = Qwen35Config::from_header(&h, None, true).expect_err("not qwen35").to_string();
    assert!(e.contains("llama.gguf") && e.contains("\"llama\"") && e.contains("qwen35"), "{e}");
}

#[test]
fn missing_and_mistyped_qwen35_keys_are_named() {
    let (g, _) = tiny_files();
    let h = parse_header(g, Path::new("tiny.gguf")).expect("valid");
    // Rebuild the metadata with one key removed and one retyped.
    let rebuild = |drop: &str, retype: Option<(&str, Value)>| {
        let mut w = GgufWriter::new();
        for (k, v) in &h.metadata {
            if k == drop {
                continue;
            }
            match &retype {
                Some((rk, rv)) if rk == k => w.set(k.clone(), rv.clone()),
                _ => w.set(k.clone(), v.clone()),
            }
        }
        w.to_bytes(&[]).expect("writes")
    };
    let b = rebuild("qwen35.ssm.inner_size", None);
    let hh = parse_header(&b, Path::new("m.gguf")).expect("valid");
    let e = Qwen35Config::from_header(&hh, None, true).expect_err("missing key").to_string();
    assert!(e.contains("qwen35.ssm.inner_size") && e.contains("missing"), "{e}");
    let b = rebuild("", Some(("qwen35.embedding_length", Value::String("5120".into()))));
    let hh = parse_header(&b, Path::new("m.gguf")).expect("valid");
    let e = Qwen35Config::from_header(&hh, None, true).expect_err("string dim").to_string();
    assert!(e.contains("qwen35.embedding_length") && e.contains("string"), "{e}");
    let b = rebuild("", Some(("qwen35.attention.head_count_kv", Value::U16(3))));
    let hh = parse_header(&b, Path::new("m.gguf")).expect("valid");
    let e = Qwen35Config::from_header(&hh, None, true).expect_err("3 ∤ 4").to_string();
    assert!(e.contains("head_count_kv") && e.contains("does not divide"), "{e}");
}

#[test]
fn wrong_tensor_shape_names_tensor_found_and_expected() {
    let dir = std::env::temp_dir().join(format!("flashtree-shape-{}", std::process::id()));
    let out = flashtree::synth::tiny(&dir, 5).expect("synth");
    let g = flashtree::gguf::Gguf::open(&out.target).expect("opens");
    let mut c = Qwen35Config::from_gguf(&g).expect("config");
    c.feed_forward_length = 768; // the file says 512
    let e = c.validate(&g).expect_err("shape mismatch").to_string();
    assert!(e.contains("blk.0.ffn_gate.weight") && e.contains("[256, 512]") && e.contains("[256, 768]"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn safetensors_with_bad_header_is_refused_with_the_file_name() {
    let mut b = vec![0u8; 16];
    b[..8].copy_from_slice(&(u64::MAX).to_le_bytes());
    let e = read_safetensors(&b, Path::new("x.safetensors")).err().expect("refused").to_string();
    assert!(e.contains("x.safetensors"), "{e}");
    let json = br#"{"t":{"dtype":"BF16","shape":[1000000,1000000],"data_offsets":[0,4]}}"#;
    let mut b = (json.len() as u64).to_le_bytes().to_vec();
    b.extend_from_slice(json);
    b.extend_from_slice(&[0; 4]);
    assert!(read_safetensors(&b, Path::new("x.safetensors")).is_err());
    let json = br#"{"t":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}}"#;
    let mut b = (json.len() as u64).to_le_bytes().to_vec();
    b.extend_from_slice(json);
    b.extend_from_slice(&[0; 8]);
    let e = read_safetensors(&b, Path::new("x.safetensors")).err().expect("dtype").to_string();
    assert!(e.contains("tensor t") && e.contains("I64"), "{e}");
}

#[test]
fn draft_config_errors_name_the_key() {
    let p = Path::new("config.json");
    let e = DraftConfig::from_zlab_json("{not json", p).expect_err("bad JSON").to_string();
    assert!(e.contains("invalid JSON"), "{e}");
    let base = r#"{"hidden_size":256,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":1,
        "intermediate_size":512,"rope_theta":1e7,"dflash_config":{"mask_token_id":5,"target_layer_ids":[0,2]}}"#;
    DraftConfig::from_zlab_json(base, p).expect("valid");
    let e = DraftConfig::from_zlab_json(&base.replace("\"rope_theta\":1e7,", ""), p).expect_err("no theta").to_string();
    assert!(e.contains("rope_theta"), "{e}");
    let e = DraftConfig::from_zlab_json(&base.replace("\"num_attention_heads\":4", "\"num_attention_heads\":-4"), p)
        .expect_err("negative")
        .to_string();
    assert!(e.contains("num_attention_heads"), "{e}");
}

/// What `main` prints: a GGUF whose architecture is 3.7 KB of control bytes gives an error with
/// the string escaped and cut, the file named once.
#[test]
fn binary_content_in_an_error_is_escaped_and_cut() {
    let mut w = GgufWriter::new();
    let binary: String = [1u8, 2, 3, 27, 7, 8].iter().map(|&b| b as char).cycle().take(3720).collect();
    w.set("general.architecture", Value::String(binary));
    let path = std::env::temp_dir().join(format!("flashtree-binary-arch-{}.gguf", std::process::id()));
    std::fs::write(&path, w.to_bytes(&[]).expect("writes")).unwrap();
    let g = flashtree::gguf::Gguf::open(&path).expect("a valid container");
    let e = anyhow::Error::new(Qwen35Config::from_gguf(&g).expect_err("not qwen35"));
    let shown = flashtree::cli::error_message(&e);
    let _ = std::fs::remove_file(&path);
    assert!(shown.len() < 600, "{} bytes: {shown}", shown.len());
    assert!(!shown.chars().any(|c| c.is_control()), "{shown}");
    assert_eq!(shown.matches(path.to_str().unwrap()).count(), 1, "{shown}");
    assert!(shown.contains("expected \"qwen35\""), "{shown}");
}

/// A cause whose text its parent already prints (`#[error("I/O error: {0}")]` over the
/// `io::Error` it wraps) is printed once.
#[test]
fn a_cause_is_printed_once() {
    let io = std::io::Error::other("No such device");
    let kind = Box::new(flashtree::gguf::GgufErrorKind::Io(io));
    let e = anyhow::Error::new(flashtree::gguf::GgufError { file: "m.gguf".into(), offset: None, kind })
        .context("opening m.gguf");
    let shown = flashtree::cli::error_message(&e);
    assert_eq!(shown.matches("No such device").count(), 1, "{shown}");
    assert_eq!(shown, "opening m.gguf: m.gguf: I/O error: No such device");
}

#[test]
fn empty_token_ids_and_a_missing_tiktoken_file_are_errors() {
    let e = flashtree::cli::logits::parse_list::<u32>("tokens", "1,,2").unwrap_err().to_string();
    assert!(e.contains("item 2 is empty"), "{e}");
    assert!(flashtree::cli::logits::parse_list::<u32>("tokens", "1,2,").is_err());
    assert_eq!(flashtree::cli::logits::parse_list::<u32>("tokens", " 1, 2").unwrap(), [1, 2]);
    let args = flashtree::cli::synth::SynthArgs {
        preset: "qwen3.5-27b".into(),
        quant: "q4_k_m".into(),
        seed: 0,
        out: std::env::temp_dir().join("flashtree-never-written"),
        layers: Some(4),
        no_draft: true,
        tiktoken: Some("/nonexistent/qwen3_6.tiktoken".into()),
    };
    let e = flashtree::cli::synth::run(args.clone()).unwrap_err().to_string();
    assert!(e.contains("--tiktoken /nonexistent/qwen3_6.tiktoken") && e.contains("not a file"), "{e}");
    let e =
        flashtree::cli::synth::run(flashtree::cli::synth::SynthArgs { preset: "tiny".into(), layers: None, ..args })
            .unwrap_err()
            .to_string();
    assert!(e.contains("only used by the qwen3.5-27b preset"), "{e}");
}
