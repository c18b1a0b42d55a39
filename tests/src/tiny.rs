//! The tiny synthetic pair (`flashtree synth --preset tiny --seed 7`) the CLI and server tests
//! run on, written once per test binary into the temp folder.

use std::path::PathBuf;
use std::sync::OnceLock;

/// `(target GGUF, draft folder)` of the tiny pair, synthesised on first use in this process.
pub fn tiny_pair() -> &'static (PathBuf, PathBuf) {
    static PAIR: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    PAIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("flashtree-tiny-pair-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let out = flashtree::synth::tiny(&dir, 7).expect("synth tiny");
        (out.target, out.draft_dir.expect("draft written"))
    })
}
