//! The load progress on a terminal (rexpect's pseudo-terminal): `flashtree generate` on the
//! shipped demo pair (CPU backend) draws the bar of the weights read (bytes of the file) and
//! runs to the end — a regression test for the stderr lock that `generate` held while the bar's
//! ticker thread waited for it (both stopped for good on a terminal). Off a terminal the bar is
//! hidden: the plain run's stderr has no escape sequences.
#![cfg(unix)]

use std::process::Command;

fn generate() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_flashtree"));
    cmd.args(["generate", "--backend", "cpu", "--mode", "ar", "--max-tokens", "2", "--prompt", "def f"]);
    cmd.env("TERM", "xterm").env_remove("FLASHTREE_MODELS");
    cmd
}

#[test]
fn the_load_bar_is_drawn_on_a_terminal_and_the_command_finishes() {
    let mut p = rexpect::session::spawn_command(generate(), Some(240_000)).expect("spawning flashtree generate");
    p.exp_regex(r"loading \S+pycode-25m-q8_0\.gguf").expect("the load step");
    p.exp_regex(r"[0-9.]+ [KM]iB/[0-9.]+ [KM]iB").expect("the bar's bytes");
    p.exp_string("backend cpu").expect("the run finishes");
    p.exp_eof().unwrap();
}

#[test]
fn the_load_bar_is_hidden_off_a_terminal() {
    let out = generate().output().unwrap();
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains('\x1b') && !err.contains("MiB/"), "{err}");
    assert!(err.contains("backend cpu"), "{err}");
}
