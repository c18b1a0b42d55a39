//! `flashtree convert` writes safely: into a temporary file renamed over `--output`, never onto
//! one of its input files (refused, the input byte-identical afterwards), and never over an
//! existing file without `--force`.

use clap::Parser;
use flashtree::cli::convert::{run, ConvertArgs};
use std::path::{Path, PathBuf};

#[derive(Parser)]
struct ConvertCli {
    #[command(flatten)]
    args: ConvertArgs,
}

fn convert(argv: &[&str]) -> anyhow::Result<()> {
    let cli = ConvertCli::try_parse_from(std::iter::once("convert").chain(argv.iter().copied())).expect("parse");
    run(&cli.args)
}

/// A private copy of the HF fixture `a` (the test may try to write into it).
fn copy_of_fixture(tag: &str) -> PathBuf {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/hf/a");
    let dir = std::env::temp_dir().join(format!("flashtree-convert-output-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(src.join(f), dir.join(f)).unwrap();
    }
    dir
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

fn leftovers(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".partial-"))
        .collect()
}

#[test]
fn convert_onto_its_own_input_is_refused_and_the_input_is_intact() {
    let dir = copy_of_fixture("self");
    let input = dir.join("model.safetensors");
    let before = std::fs::read(&input).unwrap();
    for force in [false, true] {
        let mut argv = vec!["--input", s(&dir), "--output", s(&input), "--outtype", "f32"];
        if force {
            argv.push("--force");
        }
        let e = format!("{:#}", convert(&argv).unwrap_err());
        assert!(e.contains("is the input file") && e.contains("model.safetensors"), "{e}");
    }
    // the same file through another path (a hard link) is the same inode
    let link = dir.join("alias.gguf");
    std::fs::hard_link(&input, &link).unwrap();
    let e = format!("{:#}", convert(&["--input", s(&dir), "--output", s(&link), "--force"]).unwrap_err());
    assert!(e.contains("is the input file"), "{e}");
    assert_eq!(std::fs::read(&input).unwrap(), before, "the input changed");
    assert!(leftovers(&dir).is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn existing_output_needs_force_and_is_replaced_whole() {
    let dir = copy_of_fixture("force");
    let out_dir = dir.join("out");
    std::fs::create_dir_all(&out_dir).unwrap();
    let out = out_dir.join("a.gguf");
    convert(&["--input", s(&dir), "--output", s(&out), "--outtype", "f32"]).unwrap();
    let first = std::fs::read(&out).unwrap();
    assert_eq!(&first[..4], b"GGUF");
    let e = format!("{:#}", convert(&["--input", s(&dir), "--output", s(&out), "--outtype", "bf16"]).unwrap_err());
    assert!(e.contains("exists") && e.contains("--force"), "{e}");
    assert_eq!(std::fs::read(&out).unwrap(), first, "refused, yet the output changed");
    convert(&["--input", s(&dir), "--output", s(&out), "--outtype", "bf16", "--force"]).unwrap();
    let second = std::fs::read(&out).unwrap();
    assert!(second.len() < first.len(), "bf16 output should replace the f32 one");
    assert!(leftovers(&out_dir).is_empty(), "{:?}", leftovers(&out_dir));
    // a directory as --output is named as such
    let e = format!("{:#}", convert(&["--input", s(&dir), "--output", s(&out_dir)]).unwrap_err());
    assert!(e.contains("is a directory"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_failed_conversion_leaves_no_output_and_no_temporary_file() {
    let dir = copy_of_fixture("fail");
    // a truncated tensor file: the conversion fails while reading it
    let st = dir.join("model.safetensors");
    let bytes = std::fs::read(&st).unwrap();
    std::fs::write(&st, &bytes[..bytes.len() / 2]).unwrap();
    let out_dir = dir.join("out");
    std::fs::create_dir_all(&out_dir).unwrap();
    let out = out_dir.join("a.gguf");
    assert!(convert(&["--input", s(&dir), "--output", s(&out), "--outtype", "f32"]).is_err());
    assert!(!out.exists());
    assert!(leftovers(&out_dir).is_empty(), "{:?}", leftovers(&out_dir));
    let _ = std::fs::remove_dir_all(&dir);
}
