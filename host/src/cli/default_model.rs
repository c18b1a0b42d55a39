//! The shipped demo pair (`models/` of the repository): what `generate` and `bench` run when no
//! `--model` is given, and the draft `generate` adds when the model is that pair's target.
//!
//! The folder is, in this order: `$FLASHTREE_MODELS` when set; else the first `models/` holding
//! [`TARGET_FILE`] in an ancestor of the running executable's folder (a `target/release/flashtree`
//! built in a checkout finds `<checkout>/models`); else the `models/` of the checkout this binary
//! was compiled from (`CARGO_MANIFEST_DIR/..`, right for `cargo run` and tests). When none exists
//! the last is still returned, so the error names a concrete path.

use std::path::{Path, PathBuf};

/// Environment variable naming the folder of the demo pair.
pub const MODELS_ENV: &str = "FLASHTREE_MODELS";
/// The demo target (qwen35 GGUF, Q8_0), see `models/README.md`.
pub const TARGET_FILE: &str = "pycode-25m-q8_0.gguf";
/// Its DFlash draft (`dflash` GGUF, Q8_0).
pub const DRAFT_FILE: &str = "pycode-25m-dflash-q8_0.gguf";

/// The folder of the demo pair (see the module doc for the search order).
pub fn models_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os(MODELS_ENV).filter(|v| !v.is_empty()) {
        return PathBuf::from(dir);
    }
    let from_exe = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.ancestors().skip(1).map(|a| a.join("models")).find(|m| m.join(TARGET_FILE).is_file()));
    let host_crate = Path::new(env!("CARGO_MANIFEST_DIR"));
    from_exe.unwrap_or_else(|| host_crate.parent().unwrap_or(host_crate).join("models"))
}

/// The default `--model`: the demo target.
pub fn target() -> PathBuf {
    models_dir().join(TARGET_FILE)
}

/// The demo draft when `model` is the demo target file (compared by file name and folder, so a
/// relative and an absolute path to it agree); `None` for any other model.
pub fn draft_for(model: &Path) -> Option<PathBuf> {
    if model.file_name()? != TARGET_FILE {
        return None;
    }
    let draft = model.with_file_name(DRAFT_FILE);
    draft.is_file().then_some(draft)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_draft_is_added_only_to_the_demo_target() {
        let dir = std::env::temp_dir().join(format!("flashtree-default-model-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(TARGET_FILE), b"").unwrap();
        assert_eq!(draft_for(&dir.join(TARGET_FILE)), None, "no draft file yet");
        std::fs::write(dir.join(DRAFT_FILE), b"").unwrap();
        assert_eq!(draft_for(&dir.join(TARGET_FILE)), Some(dir.join(DRAFT_FILE)));
        assert_eq!(draft_for(&dir.join("other.gguf")), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
