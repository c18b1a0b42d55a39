//! Synthetic models: the tiny preset loads through the qwen35 and DFlash loaders, is seeded and
//! deterministic, small, and follows the Q4_K_M type rules; the 27B preset's type mix and byte
//! total match gguf-format-and-quants.md §5.2 (computed from the inventory, no file written).

use flashtree::gguf::{GgmlType, Gguf};
use flashtree::model::{DraftModel, Qwen35Config};
use flashtree::synth::{tensor_type, QuantMix, SynthShape};
use std::collections::BTreeMap;
use std::path::PathBuf;

fn tmp(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("flashtree-synth-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn tiny_preset_loads_validates_and_is_small() {
    let dir = tmp("load");
    let t0 = std::time::Instant::now();
    let out = flashtree::synth::tiny(&dir, 1).expect("synth tiny");
    let took = t0.elapsed();
    let (g, c) = Qwen35Config::load(&out.target).expect("target validates");
    assert_eq!(c.n_layer(), 4);
    assert_eq!(c.attention_layers(), vec![3]);
    assert_eq!(c.vocab_size, 512);
    assert!(out.target_bytes < 4 << 20, "tiny target is {} bytes", out.target_bytes);
    let draft = DraftModel::open(out.draft_dir.as_deref().expect("draft written")).expect("draft loads");
    draft.config.check_target(&c, &out.target).expect("draft matches target");
    assert_eq!(draft.config.target_layer_ids, vec![0, 2]);
    // every stored value is finite
    for t in g.tensor_infos() {
        let x = flashtree_reference::quant::dequantize(t.ty, g.tensor_data(&t.name).expect("data"))
            .expect("supported type");
        assert!(x.iter().all(|v| v.is_finite()), "{} has non-finite values", t.name);
    }
    eprintln!("tiny synth took {took:?} (debug build)");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn tiny_preset_is_deterministic_per_seed() {
    let (a, b, c) = (tmp("seed-a"), tmp("seed-b"), tmp("seed-c"));
    let oa = flashtree::synth::tiny(&a, 7).expect("a");
    let ob = flashtree::synth::tiny(&b, 7).expect("b");
    let oc = flashtree::synth::tiny(&c, 8).expect("c");
    let read = |p: &PathBuf| std::fs::read(p).expect("read");
    assert!(read(&oa.target) == read(&ob.target), "same seed, same target bytes");
    assert!(read(&oa.target) != read(&oc.target), "different seed, different weights");
    let st = |o: &flashtree::synth::SynthOutput| read(&o.draft_dir.clone().expect("draft").join("model.safetensors"));
    assert!(st(&oa) == st(&ob));
    for d in [a, b, c] {
        let _ = std::fs::remove_dir_all(d);
    }
}

#[test]
fn tiny_preset_types_follow_the_q4_k_m_rules() {
    let dir = tmp("types");
    let out = flashtree::synth::tiny(&dir, 3).expect("synth");
    let g = Gguf::open(&out.target).expect("opens");
    assert_eq!(g.tensor("output.weight").expect("head").ty, GgmlType::Q6_K);
    assert_eq!(g.tensor("token_embd.weight").expect("embd").ty, GgmlType::Q4_K);
    assert_eq!(g.tensor("blk.0.attn_qkv.weight").expect("qkv").ty, GgmlType::Q5_K);
    assert_eq!(g.tensor("blk.0.ssm_conv1d.weight").expect("conv").ty, GgmlType::F32);
    assert_eq!(g.tensor("blk.1.ffn_gate.weight").expect("gate").ty, GgmlType::Q4_K);
    assert_eq!(g.get_u32("general.file_type").expect("ftype"), 15);
    assert_eq!(g.get_str("tokenizer.ggml.model").expect("model"), "gpt2");
    let _ = std::fs::remove_dir_all(&dir);
}

/// §5.2: 851 tensors — F32 353, Q4_K 407, Q5_K 48, Q6_K 43 — and 16,529,278,976 bytes.
#[test]
fn qwen35_27b_q4_k_m_mix_matches_the_spec_table() {
    let s = SynthShape::qwen35_27b();
    // The inventory of the 27B shape, via a config built from the same numbers.
    let c = Qwen35Config {
        block_count: 64,
        nextn_predict_layers: 0,
        context_length: s.context,
        embedding_length: s.d,
        feed_forward_length: s.ff,
        head_count: s.heads,
        head_count_kv: s.kv_heads,
        key_length: s.head_dim,
        value_length: s.head_dim,
        rms_norm_eps: s.eps,
        rope_dimension_count: s.rope_dims,
        rope_freq_base: s.rope_theta,
        rope_dimension_sections: None,
        full_attention_interval: Some(4),
        recurrent_layers: (0..64).map(|i| s.is_recurrent(i)).collect(),
        ssm_conv_kernel: 4,
        ssm_state_size: 128,
        ssm_group_count: 16,
        ssm_time_step_rank: 48,
        ssm_inner_size: 6144,
        vocab_size: s.vocab,
        has_output: true,
        file_type: Some(15),
    };
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    let mut bytes = 0u64;
    let mut attn_v = 0;
    let mut q6_attn_v_layers = Vec::new();
    for e in c.tensor_inventory() {
        let ty = tensor_type(QuantMix::Q4KM, &e.name, e.dims.len(), 64, attn_v);
        if e.name.ends_with("attn_v.weight") {
            attn_v += 1;
            if ty == GgmlType::Q6_K {
                q6_attn_v_layers.push(e.name.split('.').nth(1).unwrap_or_default().parse::<usize>().unwrap_or(999));
            }
        }
        *counts.entry(ty.name()).or_default() += 1;
        bytes += flashtree::gguf::parse::tensor_nbytes(&e.dims, ty).expect("valid shape");
    }
    assert_eq!(counts.values().sum::<usize>(), 851);
    assert_eq!(counts["F32"], 353);
    assert_eq!(counts["Q4_K"], 407);
    assert_eq!(counts["Q5_K"], 48);
    assert_eq!(counts["Q6_K"], 43);
    assert_eq!(q6_attn_v_layers, vec![3, 7, 11, 15, 19, 23, 27, 31, 43, 55]);
    assert_eq!(bytes, 16_529_278_976);
}

/// The tiny draft converted to a llama.cpp `dflash` GGUF loads through the dflash path with the
/// same config and the same weights (2-D bit-identical, 1-D widened to F32 exactly).
#[test]
fn tiny_draft_roundtrips_through_the_dflash_gguf_layout() {
    let dir = tmp("dflash");
    let out = flashtree::synth::tiny(&dir, 9).expect("synth");
    let zlab = DraftModel::open(out.draft_dir.as_deref().expect("draft")).expect("z-lab loads");
    let draft_dir = out.draft_dir.as_deref().expect("draft");
    let files = flashtree::convert::safetensors::open_folder(draft_dir).expect("files");
    let path = dir.join("tiny-dflash.gguf");
    flashtree::convert::gguf_write::convert_dflash(
        draft_dir,
        &zlab.config,
        &files,
        Some(&out.target),
        flashtree::convert::out_type::OutType::BF16,
        &path,
    )
    .expect("writes");
    let g = DraftModel::open(&path).expect("dflash GGUF loads");
    let mut a = zlab.config.clone();
    let b = g.config.clone();
    a.max_position_embeddings = b.max_position_embeddings; // config.json has it too; equal anyway
    assert_eq!(a.vocab_size, b.vocab_size, "vocab from the copied tokenizer");
    assert_eq!(a, b);
    for e in zlab.config.tensor_inventory() {
        let (x, y) = (zlab.tensor(&e.name).expect("z"), g.tensor(&e.name).expect("g"));
        assert_eq!(x.ne, y.ne, "{}", e.name);
        let dx = flashtree_reference::quant::dequantize(x.ty, x.data).expect("deq");
        let dy = flashtree_reference::quant::dequantize(y.ty, y.data).expect("deq");
        assert_eq!(dx, dy, "{}", e.name);
    }
    let h = Gguf::open(&path).expect("opens");
    assert_eq!(h.get_int_array("dflash.target_layers").expect("ids"), vec![1, 3]);
    assert_eq!(h.tensor("enc.output_norm.weight").expect("hidden norm").ty, GgmlType::F32);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Merges recovered from tiktoken ranks: every multi-byte token is the merge of the two parts
/// BPE leaves when only lower-ranked tokens may merge; specials and padding follow the ranks.
#[test]
fn merges_are_recovered_from_tiktoken_ranks() {
    fn b64(bytes: &[u8]) -> String {
        const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut s = String::new();
        for c in bytes.chunks(3) {
            let n = (c[0] as u32) << 16 | (*c.get(1).unwrap_or(&0) as u32) << 8 | *c.get(2).unwrap_or(&0) as u32;
            for i in 0..=c.len() {
                s.push(T[(n >> (18 - 6 * i) & 63) as usize] as char);
            }
            for _ in c.len()..3 {
                s.push('=');
            }
        }
        s
    }
    let mut lines: Vec<String> = (0..=255u8).map(|b| format!("{} {}", b64(&[b]), b)).collect();
    for (r, t) in [(256, &b"ab"[..]), (257, b" a"), (258, b"abc"), (259, b" ab")] {
        lines.push(format!("{} {r}", b64(t)));
    }
    let v = flashtree::synth::vocab::qwen35_from_tiktoken(&lines.join("\n"), 300).expect("parses");
    // " ab": "ab" (256) outranks " a" (257), so BPE leaves " " + "ab"
    assert_eq!(v.merges, vec!["a b", "Ġ a", "ab c", "Ġ ab"]);
    assert_eq!(v.tokens[259], "Ġab");
    assert_eq!(v.tokens[260], "<|endoftext|>");
    assert_eq!(v.tokens[299], "[PAD299]");
    assert_eq!((v.bos, v.eos), (260, 262));
    assert!(flashtree::synth::vocab::qwen35_from_tiktoken("QQ== 1", 300).is_err(), "ranks must be dense");
}

/// The `safetensors` Python package reads the tiny draft (seed 1) with our names, dtypes,
/// shapes and bytes (`synth_tiny_seed1_draft.safetensors-py.json`, written by
/// `tools/fixtures/gguf/read_safetensors.py`).
#[test]
fn python_safetensors_reads_the_tiny_draft() {
    fn fnv1a64(data: &[u8]) -> String {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for &b in data {
            h ^= b as u64;
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        format!("{h:016x}")
    }
    let dir = tmp("st-py");
    let out = flashtree::synth::tiny(&dir, 1).expect("synth");
    let path = out.draft_dir.expect("draft").join("model.safetensors");
    let bytes = std::fs::read(&path).expect("read");
    let table = flashtree::model::safetensors_io::read_safetensors(&bytes, &path).expect("parses");
    let fixture =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/gguf/synth_tiny_seed1_draft.safetensors-py.json");
    let py: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture).expect("fixture")).expect("json");
    assert_eq!(py["metadata"]["format"], "pt");
    let tensors = py["tensors"].as_array().expect("tensors");
    assert_eq!(tensors.len(), table.tensors().len());
    for (e, p) in table.tensors().iter().zip(tensors) {
        assert_eq!(p["name"], e.name.as_str());
        assert_eq!(p["dtype"], "BF16");
        let shape: Vec<u64> = p["shape"].as_array().expect("shape").iter().filter_map(|v| v.as_u64()).collect();
        assert_eq!(shape, e.shape, "{}", e.name);
        assert_eq!(p["fnv1a64"], fnv1a64(table.data(&e.name).expect("data")), "{}", e.name);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
