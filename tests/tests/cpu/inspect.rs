//! `flashtree inspect` report: counts and bytes agree with the tensor table, the memory plan
//! follows from the hyperparameters, and the JSON carries the same numbers.

use flashtree::gguf::Gguf;
use flashtree::inspect::{human_bytes, inspect_path};

#[test]
fn inspect_reports_tiny_target_and_draft_consistently() {
    let dir = std::env::temp_dir().join(format!("flashtree-inspect-{}", std::process::id()));
    let out = flashtree::synth::tiny(&dir, 2).expect("synth");
    let reports = inspect_path(&dir).expect("inspect folder");
    assert_eq!(reports.len(), 2, "target + draft");
    let t = &reports[0];
    let g = Gguf::open(&out.target).expect("opens");
    assert_eq!(t.architecture, "qwen35");
    assert_eq!(t.tensor_count, g.tensor_count());
    assert_eq!(t.tensor_bytes, g.tensor_bytes());
    assert_eq!(t.tensor_types.values().map(|s| s.count).sum::<usize>(), g.tensor_count());
    let m = t.memory.as_ref().expect("qwen35 has a plan");
    // 1 attention layer × 1 kv head × (64 + 64) values × 2 bytes
    assert_eq!(m.kv[0].cache_type, "F16");
    assert_eq!(m.kv[0].bytes_per_token, 256);
    assert_eq!(m.kv[3].bytes_per_token, 128 * 14 / 32);
    // 3 GDN layers × 4 value heads × 64 × 64 × 4 bytes
    assert_eq!(m.recurrent_state_bytes, 3 * 4 * 64 * 64 * 4);
    assert_eq!(m.draft_weights_bytes, Some(reports[1].tensor_bytes));
    let table = t.to_table();
    assert!(table.contains("Q4_K") && table.contains("KV cache TQ3_0"), "{table}");
    let j = t.to_json();
    assert_eq!(j["tensor_count"], t.tensor_count);
    assert_eq!(j["memory"]["kv"][0]["bytes_per_token"], 256);
    assert_eq!(reports[1].kind, "DFlash draft (z-lab folder)");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn human_bytes_shows_decimal_and_binary_units() {
    assert_eq!(human_bytes(512), "512 B");
    assert_eq!(human_bytes(16_529_278_976), "16.53 GB (15.39 GiB)");
}

#[test]
fn inspect_of_a_missing_path_is_an_error_naming_it() {
    let e = inspect_path(std::path::Path::new("/nonexistent/model")).expect_err("missing").to_string();
    assert!(e.contains("/nonexistent/model"), "{e}");
}
