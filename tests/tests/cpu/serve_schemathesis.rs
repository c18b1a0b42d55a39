//! Schemathesis (PyPI, pinned in `.ci/run`'s `.venv`) against `GET /openapi.json` of
//! `flashtree serve` on a `synth --preset tiny` pair (CPU backend, AR, a 96-token context so
//! every generated request is short): a bounded number of cases per operation, no answer may be
//! a 5xx (schemathesis's `not_a_server_error` check, and `/metrics` counts none), and the server
//! still answers afterwards. Prints the number of cases run.
//!
//! Needs `schemathesis`: `$FLASHTREE_SCHEMATHESIS`, else `.venv/bin/schemathesis` of the
//! checkout. Without it the test says `skipped: schemathesis not installed` — unless
//! `FLASHTREE_REQUIRE_SCHEMATHESIS` is set (CI sets it), then it fails.

use flashtree::cli::pair_args::PairArgs;
use std::io::Write;
use std::path::PathBuf;
use std::process::Command;

use flashtree::cli::backend::BackendArg;
use flashtree::cli::generate::ModeArg;
use flashtree::cli::serve::ServeArgs;
use flashtree_tests::serve::{local, start};

/// Examples per operation and phase (`--max-examples`).
const MAX_EXAMPLES: &str = "10";

fn schemathesis() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("FLASHTREE_SCHEMATHESIS") {
        return Some(PathBuf::from(p));
    }
    let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/schemathesis");
    venv.is_file().then_some(venv)
}

#[test]
fn schemathesis_finds_no_server_error_and_the_server_keeps_serving() {
    let Some(st) = schemathesis() else {
        assert!(
            std::env::var_os("FLASHTREE_REQUIRE_SCHEMATHESIS").is_none(),
            "FLASHTREE_REQUIRE_SCHEMATHESIS is set but schemathesis is not installed (.ci/run installs it)"
        );
        // Written past the test harness's capture, so the skip is seen (as the GPU tests' are).
        let _ = writeln!(std::io::stderr(), "skipped: schemathesis not installed (.ci/run installs it into .venv)");
        return;
    };
    let (target, _) = flashtree_tests::tiny::tiny_pair().clone();
    let url = start(ServeArgs {
        ctx: Some(96),
        ..local(PairArgs { model: target, draft: None, backend: BackendArg::Cpu, mode: ModeArg::Ar, budget: 22 })
    });
    // Schemathesis keeps a `.schemathesis/` folder in its working directory: a temporary one.
    let work = std::env::temp_dir().join(format!("flashtree-schemathesis-{}", std::process::id()));
    std::fs::create_dir_all(&work).unwrap();
    let out = Command::new(&st)
        .current_dir(&work)
        .args(["run", &format!("{url}/openapi.json"), "--checks", "not_a_server_error"])
        .args(["--max-examples", MAX_EXAMPLES, "--seed", "1", "--workers", "1", "--no-color"])
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", st.display()));
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "schemathesis failed:\n{text}");
    // "Test cases:\n  N generated, N passed"
    let cases = text
        .lines()
        .skip_while(|l| !l.starts_with("Test cases:"))
        .nth(1)
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no case count in:\n{text}"));
    assert!(cases > 50, "{cases} cases:\n{text}");
    let _ = writeln!(std::io::stderr(), "schemathesis: {cases} cases against /openapi.json, no 5xx");

    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let c = reqwest::Client::new();
        let metrics = c.get(format!("{url}/metrics")).send().await.unwrap().text().await.unwrap();
        let server_errors: Vec<&str> =
            metrics.lines().filter(|l| l.starts_with("flashtree_requests_total") && l.contains("status=\"5")).collect();
        assert!(server_errors.is_empty(), "{server_errors:?}");
        assert!(metrics.contains("route=\"/v1/chat/completions\",status=\"200\""), "{metrics}");
        let health = c.get(format!("{url}/health")).send().await.unwrap();
        assert_eq!(health.status(), 200, "the server is alive");
        let r = c
            .post(format!("{url}/v1/chat/completions"))
            .json(&serde_json::json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "and still generates");
    });
}
