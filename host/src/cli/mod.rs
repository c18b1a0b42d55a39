//! Command-line subcommands. Each module holds a clap `Args` struct and a `run` function;
//! `src/main.rs` only dispatches.

pub mod backend;
pub mod bench;
pub mod bench_plot;
pub mod bench_suite;
pub mod chain_trace;
pub mod chat;
pub mod convert;
pub mod default_model;
pub mod generate;
pub mod gpu_draft_load;
pub mod info;
pub mod inspect;
pub mod limits;
pub mod logits;
pub mod pair;
pub mod pair_args;
pub mod sampling;
pub mod serve;
pub mod synth;

/// Longest text of one cause in an error message; file content quoted by an error (a corrupt
/// string, a binary header) is cut here at the latest.
pub const MAX_CAUSE_CHARS: usize = 600;

/// Longest `"…"`-quoted segment (a string from a file, already escaped by `{:?}`) kept in an
/// error message.
pub const MAX_QUOTED_CHARS: usize = 200;

/// Cuts every `"…"` segment of `text` longer than [`MAX_QUOTED_CHARS`] characters.
fn cut_quoted(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len().min(4 * MAX_CAUSE_CHARS));
    let mut i = 0;
    while i < chars.len() {
        out.push(chars[i]);
        if chars[i] == '"' {
            // the closing quote: the next `"` not preceded by a backslash
            let mut j = i + 1;
            while j < chars.len() && !(chars[j] == '"' && chars[j - 1] != '\\') {
                j += 1;
            }
            if j < chars.len() && j - i - 1 > MAX_QUOTED_CHARS {
                out.extend(&chars[i + 1..i + 1 + MAX_QUOTED_CHARS]);
                out.push_str(&format!("…\" ({} characters)", j - i - 1));
                i = j + 1;
                continue;
            }
        }
        i += 1;
    }
    out
}

/// The message `main` prints for an error: its causes joined with ": ", each once (a cause whose
/// text its parent already contains — `#[error("…: {0}")]` over a `#[source]` — is skipped),
/// control characters escaped, quoted strings cut to [`MAX_QUOTED_CHARS`] and each cause to
/// [`MAX_CAUSE_CHARS`].
pub fn error_message(e: &anyhow::Error) -> String {
    let mut out = String::new();
    let mut previous = String::new();
    for cause in e.chain() {
        let raw = cause.to_string();
        if !previous.is_empty() && previous.contains(&raw) {
            continue;
        }
        let text = cut_quoted(&raw);
        let mut shown: String = text
            .chars()
            .take(MAX_CAUSE_CHARS)
            .flat_map(|c| -> Box<dyn Iterator<Item = char>> {
                if c.is_control() && c != '\n' {
                    Box::new(c.escape_default())
                } else {
                    Box::new(std::iter::once(c))
                }
            })
            .collect();
        let n = text.chars().count();
        if n > MAX_CAUSE_CHARS {
            shown.push_str(&format!("… ({} more characters)", n - MAX_CAUSE_CHARS));
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&shown);
        previous = raw;
    }
    out
}
