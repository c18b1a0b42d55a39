//! `flashtree generate` on a `synth --preset tiny` pair: streams text and prints stats; AR, chain
//! and tree produce the same text; chat mode renders the template; mismatches are clear errors.

use flashtree::cli::generate::{run_to, GenerateArgs, ModeArg};
use std::path::PathBuf;
use std::sync::OnceLock;

fn tiny() -> &'static (PathBuf, PathBuf) {
    static PAIR: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    PAIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("flashtree-generate-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let out = flashtree::synth::tiny(&dir, 7).expect("synth tiny");
        (out.target, out.draft_dir.expect("draft written"))
    })
}

fn args(mode: ModeArg) -> GenerateArgs {
    let (model, draft) = tiny().clone();
    GenerateArgs {
        model,
        draft: Some(draft),
        mode,
        budget: 22,
        max_tokens: 24,
        prompt: Some("The quick brown fox".into()),
        chat: false,
        system: None,
        no_think: false,
    }
}

fn run(a: &GenerateArgs) -> anyhow::Result<(String, String)> {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    run_to(a, &mut out, &mut err)?;
    Ok((String::from_utf8(out)?, String::from_utf8(err)?))
}

#[test]
fn generate_streams_the_same_text_in_every_mode_and_prints_stats() {
    let (ar_text, ar_stats) = run(&args(ModeArg::Ar)).unwrap();
    assert!(!ar_text.trim_end_matches('\n').is_empty(), "no text");
    assert!(ar_stats.contains("acceptance length 1.000"), "{ar_stats}");
    for mode in [ModeArg::Chain, ModeArg::Tree, ModeArg::AnchorTree] {
        let (text, stats) = run(&args(mode)).unwrap();
        assert_eq!(text, ar_text, "{mode:?}");
        for want in ["tokens: ", "tok/s", "acceptance length", "accepted depth histogram", "verify"] {
            assert!(stats.contains(want), "{mode:?}: {want:?} missing in {stats}");
        }
    }
}

#[test]
fn chat_mode_renders_the_template_and_generates() {
    let mut a = args(ModeArg::Tree);
    a.chat = true;
    a.system = Some("Be brief.".into());
    a.max_tokens = 8;
    let (_, stats) = run(&a).unwrap();
    assert!(stats.contains("tokens: "), "{stats}");
}

#[test]
fn bad_flags_and_mismatched_pairs_are_clear_errors() {
    let mut a = args(ModeArg::Tree);
    a.draft = None;
    assert!(run(&a).unwrap_err().to_string().contains("needs --draft"));
    let mut a = args(ModeArg::Tree);
    a.budget = 1 << 20;
    assert!(run(&a).unwrap_err().to_string().contains("--budget"));
    let mut a = args(ModeArg::Tree);
    a.draft = Some(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/hf/draft-full"));
    let e = format!("{:#}", run(&a).unwrap_err());
    assert!(e.contains("hidden size"), "{e}");
    let mut a = args(ModeArg::Ar);
    a.model = PathBuf::from("/nonexistent/model.gguf");
    assert!(run(&a).is_err());
}
