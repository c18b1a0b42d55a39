//! Regression tests for what the `chat_template` fuzz target found (fuzz/README.md): each input is
//! refused with an error, never a panic.

use flashtree::chat::{ChatTemplate, Message, RenderOptions};

/// A template whose render error (`{% for in messages %}`: unpacking into an empty target) has a
/// span ending before it starts on the same line: minijinja's
/// debug renderer (`{e:#}` with debug info) computes `end_col - start_col` and overflowed
/// (a panic: overflow in debug builds, capacity overflow in release). Found by `chat_template`
/// after ≈ 380 s. Errors are now formatted without minijinja's debug info.
#[test]
fn render_error_with_a_reversed_span_is_an_error_not_a_panic() {
    let src = "{% set ns = namespace(n=0) %}{% for in messages %}{% for c in m.cot %}\
               {% set ns.n = ns.n + 0 %}{% endfor %}{% endfor %}{t %}o%#{ ns.n }}";
    let e = match ChatTemplate::new(src) {
        Err(e) => e.to_string(),
        Ok(t) => t
            .render(&[Message::new("user", "hi")], RenderOptions { add_generation_prompt: true, enable_thinking: true })
            .expect_err("a broken template does not render")
            .to_string(),
    };
    assert!(e.contains("cannot unpack"), "{e}");
    assert!(e.len() < 1000, "the error stays short: {} bytes", e.len());
}
