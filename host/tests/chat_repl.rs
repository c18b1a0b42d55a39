//! `flashtree chat` in a pseudo-terminal (rexpect), on the shipped demo pair with the CPU
//! backend: two turns, the second stopped by Ctrl+C mid-reply, then a third turn that reuses the
//! conversation so far (the interrupted reply included), `/stats`, `/reset`, Ctrl+D.
//!
//! Lives in the `flashtree` package (not `flashtree-tests`) because it runs the binary, which
//! cargo builds only for its own package's integration tests (`CARGO_BIN_EXE_flashtree`).
#![cfg(unix)]

use std::process::Command;

use rexpect::session::PtySession;

/// Seconds any one expected output may take (the CPU backend is slow on a busy machine).
const TIMEOUT_MS: u64 = 240_000;

fn spawn() -> PtySession {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_flashtree"));
    cmd.args(["chat", "--backend", "cpu", "--mode", "ar", "--max-tokens", "6", "--no-think"]);
    cmd.env("TERM", "xterm").env_remove("FLASHTREE_MODELS");
    rexpect::session::spawn_command(cmd, Some(TIMEOUT_MS)).expect("spawning flashtree chat")
}

/// Waits for the stats line after a reply and returns it.
fn reply_stats(p: &mut PtySession) -> String {
    let (_, line) = p
        .exp_regex(r"\[\d+ tokens, [0-9.]+ tok/s, acceptance length [0-9.]+; prompt \d+ tokens, \d+ reused[^\]]*\]")
        .expect("a stats line");
    line
}

/// The number right after the first `prefix` in `line`.
fn number_after(line: &str, prefix: &str) -> usize {
    let i = line.find(prefix).unwrap_or_else(|| panic!("{prefix:?} in {line:?}")) + prefix.len();
    let digits: String = line[i..].chars().take_while(char::is_ascii_digit).collect();
    digits.parse().unwrap_or_else(|_| panic!("a number after {prefix:?} in {line:?}"))
}

/// (generated, prompt, reused) of a stats line.
fn counts(line: &str) -> (usize, usize, usize) {
    let tail = &line[line.find("; prompt ").unwrap_or_else(|| panic!("{line:?}"))..];
    (number_after(line, "["), number_after(tail, "prompt "), number_after(tail, "tokens, "))
}

#[test]
fn chat_keeps_the_session_across_an_interrupted_reply() {
    let mut p = spawn();
    p.exp_string("Ctrl+D exits").expect("the banner");
    p.exp_string(">>> ").expect("the prompt");

    // Turn 1: a complete reply of at most 6 tokens.
    p.send_line("def add(a, b):").unwrap();
    let first = reply_stats(&mut p);
    let (generated, _, reused) = counts(&first);
    assert!((1..=6).contains(&generated), "{first}");
    assert_eq!(reused, 0, "a cold start reuses nothing: {first}");

    // Turn 2: a long reply, interrupted once it has started.
    p.exp_string(">>> ").unwrap();
    p.send_line("/max 2000").unwrap();
    p.exp_string("replies stop after 2000 tokens").unwrap();
    p.exp_string(">>> ").unwrap();
    p.send_line("def mul(a, b):").unwrap();
    p.exp_string("def mul(a, b):").unwrap(); // the echo
                                             // Three letters in a row: the reply's text (the terminal's escape sequences have no such run).
    p.exp_regex(r"[A-Za-z_]{3}").expect("the reply starts");
    std::thread::sleep(std::time::Duration::from_millis(300));
    p.send_control('c').unwrap();
    let second = reply_stats(&mut p);
    assert!(second.contains("interrupted"), "Ctrl+C stops the reply: {second}");
    let (cut, prompt2, reused2) = counts(&second);
    assert!((1..2000).contains(&cut), "{second}");
    assert!(reused2 > 0, "turn 2 extends turn 1: {second}");

    // Turn 3: the session goes on; its prompt extends the interrupted turn.
    p.exp_string(">>> ").unwrap();
    p.send_line("/max 4").unwrap();
    p.exp_string(">>> ").unwrap();
    p.send_line("print(add(1, 2))").unwrap();
    let third = reply_stats(&mut p);
    assert!(!third.contains("interrupted"), "{third}");
    let (_, _, reused3) = counts(&third);
    assert!(reused3 > prompt2, "turn 3 reuses turn 2 with its interrupted reply: {second} then {third}");

    p.exp_string(">>> ").unwrap();
    p.send_line("/stats").unwrap();
    p.exp_string("session: 3 replies").expect("three replies counted");
    p.exp_string(">>> ").unwrap();
    p.send_line("/reset").unwrap();
    p.exp_string("new conversation").unwrap();
    p.exp_string(">>> ").unwrap();
    p.send_control('d').unwrap();
    p.exp_eof().expect("Ctrl+D exits");
}
