//! GGUF reader/writer against gguf-py 0.19.0 (committed fixtures from
//! `tools/fixtures/gguf/gen_gguf_fixtures.py`):
//! * files gguf-py wrote (every value type, nested arrays, alignment 64, 1–4-D tensors of eight
//!   types, a 3-shard split) read back with the metadata and tensor bytes gguf-py was given;
//! * our writer reproduces gguf-py's file byte for byte from the parsed header and data;
//! * the file our writer produces (committed) is what gguf-py's reader reported reading.

use flashtree::gguf::{Gguf, GgufFile, GgufWriter, Value, ValueType};
use flashtree_reference::quant::GgmlType;
use serde_json::Value as Json;
use std::path::PathBuf;

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/gguf")
}

fn load_json(name: &str) -> Json {
    let p = fixture_dir().join(name);
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&text).expect("fixture JSON parses")
}

fn fnv1a64(data: &[u8]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in data {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// Our value as the JSON gguf-py's side produced (arrays flattened like gguf-py's reader when
/// `flatten`).
fn to_json(v: &Value, flatten: bool) -> Json {
    match v {
        Value::String(s) => Json::from(s.as_str()),
        Value::Bool(b) => Json::from(*b),
        Value::F32(x) => Json::from(*x as f64),
        Value::F64(x) => Json::from(*x),
        Value::Array { items, .. } => {
            let mut out = Vec::new();
            for it in items {
                match (it, flatten) {
                    (Value::Array { .. }, true) => {
                        if let Json::Array(inner) = to_json(it, true) {
                            out.extend(inner);
                        }
                    }
                    _ => out.push(to_json(it, flatten)),
                }
            }
            Json::Array(out)
        }
        other => match other.as_integer() {
            Some(i) if i < 0 => Json::from(i as i64),
            Some(i) => Json::from(i as u64),
            None => Json::Null,
        },
    }
}

/// Checks metadata (order, types, values) and tensors (ne, type, data hash) against `desc`.
fn check_against_description(file: &Gguf, desc: &Json, flatten_nested: bool) {
    let meta = desc["metadata"].as_array().expect("metadata list");
    assert_eq!(file.metadata.len(), meta.len(), "number of keys");
    for ((key, value), want) in file.metadata.iter().zip(meta) {
        assert_eq!(key, want["key"].as_str().unwrap_or_default(), "key order");
        assert_eq!(value.value_type().name(), want["type"], "type of {key}");
        if let (Value::Array { elem, .. }, Some(e)) = (value, want["elem"].as_str()) {
            if !(flatten_nested && *elem == ValueType::Array) {
                assert_eq!(elem.name(), e, "element type of {key}");
            }
        }
        assert_eq!(to_json(value, flatten_nested), want["value"], "value of {key}");
    }
    let tensors = desc["tensors"].as_array().expect("tensor list");
    assert_eq!(file.tensor_count(), tensors.len(), "number of tensors");
    for (t, want) in file.tensor_infos().zip(tensors) {
        assert_eq!(t.name, want["name"].as_str().unwrap_or_default());
        let ne: Vec<u64> = want["ne"].as_array().expect("ne").iter().filter_map(Json::as_u64).collect();
        assert_eq!(t.dims, ne, "ne of {}", t.name);
        assert_eq!(t.ty.name(), want["type"], "type of {}", t.name);
        let data = file.tensor_data(&t.name).expect("tensor data");
        assert_eq!(fnv1a64(data), want["fnv1a64"], "data of {}", t.name);
    }
}

#[test]
fn reads_every_value_type_and_tensor_gguf_py_wrote() {
    let f = Gguf::open(fixture_dir().join("pywritten.gguf")).expect("gguf-py file opens");
    assert_eq!(f.version, 3);
    assert_eq!(f.alignment, 64);
    assert_eq!(f.data_start % 64, 0);
    check_against_description(&f, &load_json("pywritten.json"), false);
}

#[test]
fn typed_getters_accept_any_integer_width_and_name_the_key_on_error() {
    let f = GgufFile::open(fixture_dir().join("pywritten.gguf")).expect("opens");
    assert_eq!(f.get_u32("test.u16").expect("u16 widens"), 65535);
    assert_eq!(f.get_u64("test.u8").expect("u8 widens"), 255);
    assert_eq!(f.get_f32("test.f64").expect("f64 narrows"), std::f32::consts::E);
    assert_eq!(f.get_int_array("test.arr_i32").expect("ints"), vec![11, 11, 10, 0, -5]);
    let e = f.get_u32("test.i8").expect_err("negative is not a u32").to_string();
    assert!(e.contains("pywritten.gguf") && e.contains("test.i8") && e.contains("expected"), "{e}");
    let e = f.get_str("no.such.key").expect_err("missing").to_string();
    assert!(e.contains("no.such.key") && e.contains("missing"), "{e}");
    let e = f.tensor_data("nope").expect_err("no tensor").to_string();
    assert!(e.contains("\"nope\""), "{e}");
}

#[test]
fn split_files_gguf_py_wrote_open_as_one_model_from_any_shard() {
    let desc = load_json("pywritten.json");
    let want: Vec<&Json> = desc["tensors"].as_array().expect("tensors").iter().take(5).collect();
    for shard in 1..=3 {
        let p = fixture_dir().join(format!("pysplit-0000{shard}-of-00003.gguf"));
        let f = Gguf::open(&p).expect("split set opens");
        assert_eq!(f.shards().len(), 3);
        assert_eq!(f.get_u32("test.u32").expect("metadata from shard 1"), 7);
        assert_eq!(f.tensor_count(), 5);
        for (t, w) in f.tensor_infos().zip(&want) {
            assert_eq!(t.name, w["name"].as_str().unwrap_or_default());
            assert_eq!(fnv1a64(f.tensor_data(&t.name).expect("data")), w["fnv1a64"]);
        }
    }
}

#[test]
fn a_lone_shard_without_its_siblings_is_an_error_naming_the_missing_file() {
    let dir = std::env::temp_dir().join(format!("flashtree-split-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let src = fixture_dir().join("pysplit-00001-of-00003.gguf");
    std::fs::copy(&src, dir.join("m-00001-of-00003.gguf")).expect("copy");
    let e = Gguf::open(dir.join("m-00001-of-00003.gguf")).err().expect("missing shards").to_string();
    assert!(e.contains("m-00002-of-00003.gguf"), "{e}");
    std::fs::copy(&src, dir.join("renamed.gguf")).expect("copy");
    let e = Gguf::open(dir.join("renamed.gguf")).err().expect("shard alone").to_string();
    assert!(e.contains("shard 1 of a 3-file split"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Our writer, fed the parsed header and tensor bytes of gguf-py's file, writes the same bytes.
#[test]
fn writer_reproduces_the_gguf_py_file_byte_for_byte() {
    let path = fixture_dir().join("pywritten.gguf");
    let original = std::fs::read(&path).expect("fixture");
    let f = GgufFile::open(&path).expect("opens");
    let mut w = GgufWriter::new();
    for (k, v) in &f.metadata {
        w.set(k.clone(), v.clone());
    }
    let mut data = Vec::new();
    for t in &f.tensors {
        w.add_tensor(t.name.clone(), &t.dims, t.ty).expect("valid tensor");
        data.push(f.tensor_data(&t.name).expect("data"));
    }
    let ours = w.to_bytes(&data).expect("writes");
    assert_eq!(ours.len(), original.len(), "file size");
    assert!(ours == original, "first difference at byte {:?}", ours.iter().zip(&original).position(|(a, b)| a != b));
}

/// The file our writer makes for the gguf-py read-back check (no nested arrays: gguf-py's
/// reader flattens them).
fn flashtree_written() -> (GgufWriter, Vec<Vec<u8>>) {
    let mut w = GgufWriter::new();
    w.set("general.architecture", Value::String("testarch".into()));
    w.set_alignment(128).expect("power of two");
    w.set("t.u8", Value::U8(200));
    w.set("t.i8", Value::I8(-100));
    w.set("t.u16", Value::U16(60000));
    w.set("t.i16", Value::I16(-30000));
    w.set("t.u32", Value::U32(4_000_000_000));
    w.set("t.i32", Value::I32(-2_000_000_000));
    w.set("t.f32", Value::F32(1.0e-6));
    w.set("t.bool", Value::Bool(true));
    w.set("t.str", Value::String("Ġunicode ✓ 日本".into()));
    w.set("t.u64", Value::U64(u64::MAX - 1));
    w.set("t.i64", Value::I64(i64::MIN + 1));
    w.set("t.f64", Value::F64(-1.0e300));
    w.set("t.arr_str", Value::string_array(["x", "", "y z"]));
    w.set("t.arr_i32", Value::i32_array([11, 11, 10, 0]));
    w.set("t.arr_bool", Value::Array { elem: ValueType::Bool, items: vec![Value::Bool(false), Value::Bool(true)] });
    w.set("t.arr_f32", Value::Array { elem: ValueType::F32, items: vec![Value::F32(0.25), Value::F32(-3.0)] });
    let mut data = Vec::new();
    let mut add = |name: &str, dims: &[u64], ty: GgmlType, x: Vec<f32>| {
        w.add_tensor(name, dims, ty).expect("valid");
        data.push(flashtree_reference::quant::quantize(ty, &x).expect("whole blocks"));
    };
    let ramp = |n: usize| (0..n).map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0).collect::<Vec<f32>>();
    add("w.f32", &[7, 3], GgmlType::F32, ramp(21));
    add("w.bf16", &[16, 2, 2], GgmlType::BF16, ramp(64));
    add("w.q8_0", &[64, 2], GgmlType::Q8_0, ramp(128));
    add("w.q4_k", &[256, 3], GgmlType::Q4_K, ramp(768));
    add("w.q6_k", &[512], GgmlType::Q6_K, ramp(512));
    (w, data)
}

/// The committed `flashtree_written.gguf` is exactly what the writer produces (regenerate with
/// `FLASHTREE_BLESS=1`, then run `gen_gguf_fixtures.py read` on it), and gguf-py's reading of it
/// (`flashtree_written.gguf-py.json`) has every key, type, value, shape, offset and byte we wrote.
#[test]
fn gguf_py_reads_what_our_writer_writes() {
    let (w, data) = flashtree_written();
    let refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
    let bytes = w.to_bytes(&refs).expect("writes");
    let path = fixture_dir().join("flashtree_written.gguf");
    if std::env::var_os("FLASHTREE_BLESS").is_some() {
        std::fs::write(&path, &bytes).expect("bless");
    }
    let committed = std::fs::read(&path).expect("committed file");
    assert!(committed == bytes, "writer output differs from the committed fixture (FLASHTREE_BLESS=1 to regenerate)");

    let py = load_json("flashtree_written.gguf-py.json");
    assert_eq!(py["alignment"], 128);
    let meta = py["metadata"].as_array().expect("metadata");
    assert_eq!(meta.len(), w.metadata().len());
    for ((k, v), m) in w.metadata().iter().zip(meta) {
        assert_eq!(m["key"], k.as_str());
        assert_eq!(m["type"], v.value_type().name(), "{k}");
        assert_eq!(m["value"], to_json(v, true), "{k}");
    }
    let tensors = py["tensors"].as_array().expect("tensors");
    assert_eq!(tensors.len(), data.len());
    let header_len = w.header_bytes().len() as u64;
    for (((spec, d), off), t) in w.tensors().iter().zip(&data).zip(w.offsets()).zip(tensors) {
        assert_eq!(t["name"], spec.name.as_str());
        assert_eq!(t["type"], spec.ty.name());
        let ne: Vec<u64> = t["ne"].as_array().expect("ne").iter().filter_map(Json::as_u64).collect();
        assert_eq!(ne, spec.dims);
        assert_eq!(t["offset"], header_len + off, "{}: absolute data offset", spec.name);
        assert_eq!(t["fnv1a64"], fnv1a64(d), "{}", spec.name);
    }
}

/// Our reader reads our writer's output back to the same metadata and data.
#[test]
fn writer_output_reads_back_identically() {
    let (w, data) = flashtree_written();
    let dir = std::env::temp_dir().join(format!("flashtree-rt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp");
    let p = dir.join("rt.gguf");
    w.write_file(&p, |i, _, out| out.write_all(&data[i])).expect("writes");
    let f = GgufFile::open(&p).expect("reads");
    assert_eq!(f.metadata.as_slice(), w.metadata());
    for (spec, d) in w.tensors().iter().zip(&data) {
        assert_eq!(f.tensor_data(&spec.name).expect("data"), d.as_slice());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn writer_refuses_a_data_callback_that_writes_the_wrong_length() {
    let (w, _) = flashtree_written();
    let mut sink = Vec::new();
    let e = w.write(&mut sink, |_, _, out| out.write_all(&[1, 2, 3])).expect_err("short data");
    assert!(e.to_string().contains("w.f32"), "{e}");
}

/// gguf-py reads the tiny synthetic preset (seed 1): `synth_tiny_seed1.gguf-py.json` is
/// `gen_gguf_fixtures.py read` of it, and it lists exactly our keys, values, tensors and bytes.
/// (Regenerate after an intentional change to synth: `flashtree synth --preset tiny --seed 1`.)
#[test]
fn gguf_py_reads_the_tiny_synth_preset() {
    let dir = std::env::temp_dir().join(format!("flashtree-gguf-tiny-{}", std::process::id()));
    let out = flashtree::synth::tiny(&dir, 1).expect("synth");
    let f = Gguf::open(&out.target).expect("opens");
    let py = load_json("synth_tiny_seed1.gguf-py.json");
    let meta = py["metadata"].as_array().expect("metadata");
    assert_eq!(meta.len(), f.metadata.len());
    for ((k, v), m) in f.metadata.iter().zip(meta) {
        assert_eq!(m["key"], k.as_str());
        assert_eq!(m["type"], v.value_type().name(), "{k}");
        assert_eq!(m["value"], to_json(v, true), "{k}");
    }
    let tensors = py["tensors"].as_array().expect("tensors");
    assert_eq!(tensors.len(), f.tensor_count());
    for (t, p) in f.tensor_infos().zip(tensors) {
        assert_eq!(p["name"], t.name.as_str());
        assert_eq!(p["type"], t.ty.name());
        assert_eq!(p["offset"], f.data_start + t.offset);
        assert_eq!(p["fnv1a64"], fnv1a64(f.tensor_data(&t.name).expect("data")), "{}", t.name);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

mod roundtrip_props {
    use flashtree::gguf::{parse_header, GgmlType, GgufWriter, Value, ValueType};
    use proptest::prelude::*;

    fn scalar() -> impl Strategy<Value = Value> {
        prop_oneof![
            any::<u8>().prop_map(Value::U8),
            any::<i8>().prop_map(Value::I8),
            any::<u16>().prop_map(Value::U16),
            any::<i16>().prop_map(Value::I16),
            any::<u32>().prop_map(Value::U32),
            any::<i32>().prop_map(Value::I32),
            any::<u64>().prop_map(Value::U64),
            any::<i64>().prop_map(Value::I64),
            (-1e30f32..1e30).prop_map(Value::F32),
            (-1e300f64..1e300).prop_map(Value::F64),
            any::<bool>().prop_map(Value::Bool),
            ".{0,12}".prop_map(Value::String),
        ]
    }

    fn value() -> impl Strategy<Value = Value> {
        prop_oneof![
            3 => scalar(),
            1 => prop::collection::vec(any::<i32>(), 0..8).prop_map(Value::i32_array),
            1 => prop::collection::vec(".{0,6}", 0..8).prop_map(Value::string_array),
            1 => prop::collection::vec(prop::collection::vec(any::<u8>(), 0..4), 0..4).prop_map(|v| Value::Array {
                elem: ValueType::Array,
                items: v.into_iter().map(|a| Value::Array { elem: ValueType::U8, items: a.into_iter().map(Value::U8).collect() }).collect(),
            }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        /// Whatever metadata and tensor table the writer is given, the reader returns exactly
        /// it: same keys in order, same values, same shapes, types and bytes.
        #[test]
        fn writer_then_reader_is_identity(
            kvs in prop::collection::btree_map("[a-z]{1,8}(\\.[a-z]{1,8}){0,2}", value(), 0..12),
            rows in prop::collection::vec(1u64..4, 0..5),
            align_pow in 3u32..8,
        ) {
            let mut w = GgufWriter::new();
            w.set_alignment(1 << align_pow).expect("power of two");
            for (k, v) in &kvs {
                w.set(k.clone(), v.clone());
            }
            let types = [GgmlType::F32, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::BF16, GgmlType::Q6_K];
            let mut data = Vec::new();
            for (i, &r) in rows.iter().enumerate() {
                let ty = types[i % types.len()];
                w.add_tensor(format!("t{i}"), &[256, r], ty).expect("valid");
                data.push((0..r as usize * ty.row_bytes(256).unwrap_or(0) as usize).map(|j| (j * 31 + i) as u8).collect::<Vec<u8>>());
            }
            let refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
            let bytes = w.to_bytes(&refs).expect("writes");
            let h = parse_header(&bytes, std::path::Path::new("rt.gguf")).expect("reads");
            prop_assert_eq!(h.metadata.as_slice(), w.metadata());
            prop_assert_eq!(h.alignment, 1u64 << align_pow);
            for (i, d) in data.iter().enumerate() {
                let r = h.tensor_range(&format!("t{i}")).expect("tensor");
                prop_assert_eq!(&bytes[r], d.as_slice());
            }
        }
    }
}

/// Splitting our writer the way gguf-py does (2 tensors per shard) reproduces gguf-py's three
/// shards byte for byte, and the shards open as one model.
#[test]
fn writer_split_reproduces_gguf_py_shards() {
    let src = GgufFile::open(fixture_dir().join("pywritten.gguf")).expect("opens");
    let mut w = GgufWriter::new();
    w.set("general.architecture", Value::String("testarch".into()));
    w.set("test.u32", Value::U32(7));
    let mut data = Vec::new();
    for t in src.tensors.iter().take(5) {
        w.add_tensor(t.name.clone(), &t.dims, t.ty).expect("valid");
        data.push(src.tensor_data(&t.name).expect("data"));
    }
    let shards = w.split(2).expect("splits");
    assert_eq!(shards.len(), 3);
    let mut k = 0;
    for (i, s) in shards.iter().enumerate() {
        let n = s.tensors().len();
        let bytes = s.to_bytes(&data[k..k + n]).expect("writes");
        k += n;
        let want = std::fs::read(fixture_dir().join(format!("pysplit-0000{}-of-00003.gguf", i + 1))).expect("fixture");
        assert!(bytes == want, "shard {} differs from gguf-py's", i + 1);
    }
}
