//! `flashtree bench --prompts` on the shipped demo pair (CPU backend, a few prompts, few tokens):
//! the table's numbers land in bench.json with every field, the speculative modes give AR's
//! tokens, and bench.svg holds both charts.

use std::path::PathBuf;

use flashtree::cli::backend::BackendArg;
use flashtree::cli::bench::{run, BenchArgs};
use flashtree::cli::generate::ModeArg;
use serde_json::Value;

/// A fresh folder per test: the tests of this file run in parallel threads of one process, so a
/// folder keyed by the process alone would be wiped by one test while the other writes into it.
fn dir(test: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("flashtree-bench-suite-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn prompt_sets_run_in_every_mode_and_write_json_and_svg() {
    let d = dir("modes");
    // One set in the anchor's shape (chat messages, `suite`), one with a plain `prompt` field.
    let he = d.join("bench_he.jsonl");
    std::fs::write(
        &he,
        concat!(
            r#"{"id":"he_01","suite":"he","messages":[{"role":"user","content":"def add(a, b):\n"}],"max_tokens":512}"#,
            "\n",
            r#"{"id":"he_02","suite":"he","messages":[{"role":"user","content":"class Stack:\n"}],"max_tokens":512}"#,
            "\n",
        ),
    )
    .unwrap();
    let plain = d.join("plain.jsonl");
    std::fs::write(&plain, "{\"prompt\": \"import os\\n\"}\n{\"prompt\": \"never read: --limit 1\"}\n").unwrap();
    // Longer than the 64-token context given below: skipped and named.
    let long = d.join("long.jsonl");
    std::fs::write(&long, format!("{{\"id\": \"long_01\", \"prompt\": \"{}\"}}\n", "x = 1\\n".repeat(100))).unwrap();
    let out = d.join("out");
    let args = BenchArgs {
        model: flashtree::cli::default_model::target(),
        mode: ModeArg::Ar,
        backend: Some(BackendArg::Cpu),
        ctx: Some(64),
        prompt_tokens: 512,
        tokens: 8,
        tree_nodes: 22,
        seed: 1,
        draft: None,
        oracle_depths: vec![],
        budget: 22,
        temperature: 0.0,
        prompts: vec![he, plain, long],
        modes: vec![ModeArg::Ar, ModeArg::Chain, ModeArg::Tree],
        limit: Some(1),
        out: Some(out.clone()),
        raw: true,
        chain_trace: false,
    };
    run(&args).expect("bench --prompts");

    let json: Value = serde_json::from_str(&std::fs::read_to_string(out.join("bench.json")).unwrap()).unwrap();
    assert_eq!(json["backend"], "cpu");
    assert_eq!(json["budget"], 22);
    assert_eq!(json["skipped_prompts"], serde_json::json!(["long_01"]));
    let datasets = json["datasets"].as_array().unwrap();
    let names: Vec<&str> = datasets.iter().map(|d| d["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["he", "plain"], "`suite`, else the file's stem; the skipped prompt's set has no runs");
    for d in datasets {
        let modes = d["modes"].as_array().unwrap();
        let names: Vec<&str> = modes.iter().map(|m| m["mode"].as_str().unwrap()).collect();
        assert_eq!(names, ["ar", "chain", "tree"]);
        for m in modes {
            assert_eq!(m["prompts"], 1, "--limit 1: {m}");
            let generated = m["generated_tokens"].as_u64().unwrap();
            assert!((2..=8).contains(&generated), "{m}");
            assert!(m["tokens_per_second"].as_f64().unwrap() > 0.0, "{m}");
            assert!(m["decode_seconds"].as_f64().unwrap() > 0.0, "{m}");
            let al = m["acceptance_length"].as_f64().unwrap();
            let hist: Vec<u64> =
                m["accepted_depth_histogram"].as_array().unwrap().iter().map(|n| n.as_u64().unwrap()).collect();
            assert!(hist.iter().sum::<u64>() > 0, "{m}");
            let mean = hist.iter().enumerate().map(|(d, &n)| (d as u64 + 1) * n).sum::<u64>() as f64
                / hist.iter().sum::<u64>() as f64;
            assert!((al - mean).abs() < 1e-9, "the acceptance length is the histogram's mean path: {m}");
            let speedup = m["speedup_over_ar"].as_f64().unwrap();
            if m["mode"] == "ar" {
                assert_eq!(al, 1.0);
                assert_eq!(speedup, 1.0);
            } else {
                assert!(speedup > 0.0, "{m}");
            }
        }
    }
    let runs = json["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2 * 3, "two prompts (one per file) in three modes");
    for r in runs {
        for k in [
            "dataset",
            "id",
            "mode",
            "prompt_tokens",
            "generated_tokens",
            "rounds",
            "tokens_per_second",
            "acceptance_length",
            "stop",
        ] {
            assert!(!r[k].is_null(), "{k} missing in {r}");
        }
        match r["mode"].as_str().unwrap() {
            "ar" => assert!(r["matches_ar"].is_null()),
            _ => assert_eq!(r["matches_ar"], true, "greedy speculative decoding gives AR's tokens: {r}"),
        }
    }

    let svg = std::fs::read_to_string(out.join("bench.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert!(svg.len() > 10_000, "{} bytes", svg.len());
    for text in ["decode tok/s per mode", "accepted draft tokens per round", "he", "plain", "tree", "chain"] {
        assert!(svg.contains(text), "{text:?} missing in the SVG");
    }
    assert!(svg.matches("<rect").count() >= 2 * 3 + 4, "bars of both charts");
}

#[test]
fn bad_prompt_files_and_flags_are_refused_before_loading() {
    let d = dir("bad-flags").join("bad");
    std::fs::create_dir_all(&d).unwrap();
    let bad = d.join("bad.jsonl");
    std::fs::write(&bad, "{\"prompt\": 3}\n").unwrap();
    let mut args = BenchArgs {
        model: PathBuf::from("/nonexistent/model.gguf"),
        mode: ModeArg::Ar,
        backend: Some(BackendArg::Cpu),
        ctx: None,
        prompt_tokens: 512,
        tokens: 8,
        tree_nodes: 22,
        seed: 1,
        draft: None,
        oracle_depths: vec![],
        budget: 22,
        temperature: 0.0,
        prompts: vec![bad.clone()],
        modes: vec![ModeArg::Ar],
        limit: None,
        out: Some(d.join("out")),
        raw: false,
        chain_trace: false,
    };
    let e = format!("{:#}", run(&args).unwrap_err());
    assert!(e.contains("bad.jsonl:1") && e.contains("`prompt` must be a string"), "{e}");
    std::fs::write(&bad, "{\"prompt\": \"x\"}\n").unwrap();
    args.modes = vec![ModeArg::Ar, ModeArg::Tree];
    let e = format!("{:#}", run(&args).unwrap_err());
    assert!(e.contains("need --draft"), "{e}");
    args.modes = vec![ModeArg::Ar];
    args.oracle_depths = vec![3];
    let e = format!("{:#}", run(&args).unwrap_err());
    assert!(e.contains("--oracle-depths"), "{e}");
}
