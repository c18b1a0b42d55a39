//! `flashtree serve` driven by the official `openai` and `anthropic` Python SDKs and curl
//! (`tests/sdk/drive.py`): every route, stream and not, usage, count_tokens equality, tool calls
//! parsed back, thinking split, malformed input, 4 concurrent clients, a client that leaves
//! mid-stream, the API key, prefix reuse. The server is the one `flashtree serve` runs, started
//! in-process on a `synth --preset tiny` pair (CPU) with `--script tests/sdk/script.json`
//! (scripted replies under the real speculative loop, see `flashtree::serve::script`),
//! `--chat-template qwen35` and `--api-key`.
//!
//! The SDKs come from the repository's `.venv` (`.ci/run` installs them, pinned); without them
//! the test prints `skipped: no python SDKs` and passes — unless `FLASHTREE_REQUIRE_SDK` is set
//! (as `.ci/run` does), then it fails.

use flashtree::cli::pair_args::PairArgs;
use std::path::{Path, PathBuf};
use std::process::Command;

use flashtree::cli::backend::BackendArg;
use flashtree::cli::generate::ModeArg;
use flashtree::cli::serve::ServeArgs;
use flashtree_tests::serve::{local, start};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// The venv's python when it can import both SDKs.
fn python() -> Option<PathBuf> {
    let py = repo().join(".venv/bin/python");
    let ok = Command::new(&py)
        .args(["-c", "import openai, anthropic"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    ok.then_some(py)
}

#[test]
fn the_openai_and_anthropic_sdks_and_curl_drive_every_route() {
    let Some(py) = python() else {
        if std::env::var_os("FLASHTREE_REQUIRE_SDK").is_some() {
            panic!("FLASHTREE_REQUIRE_SDK is set but .venv/bin/python cannot import openai and anthropic");
        }
        println!(
            "skipped: no python SDKs (.venv/bin/python cannot import openai and anthropic; .ci/run installs them)"
        );
        return;
    };
    let (target, draft) = flashtree_tests::tiny::tiny_pair().clone();
    let url = start(ServeArgs {
        api_key: Some("sdk-test-key".into()),
        chat_template: Some("qwen35".into()),
        script: Some(repo().join("tests/sdk/script.json")),
        ..local(PairArgs {
            model: target,
            draft: Some(draft),
            backend: BackendArg::Cpu,
            mode: ModeArg::Tree,
            budget: 22,
        })
    });
    let run = Command::new(&py)
        .arg(repo().join("tests/sdk/drive.py"))
        .args([url.as_str(), "sdk-test-key"])
        .output()
        .expect("running tests/sdk/drive.py");
    let stdout = String::from_utf8_lossy(&run.stdout);
    println!("{stdout}");
    assert!(run.status.success(), "tests/sdk/drive.py failed:\n{stdout}\n{}", String::from_utf8_lossy(&run.stderr));
    assert!(stdout.contains("all SDK checks passed"), "{stdout}");
}
