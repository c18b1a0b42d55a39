//! A model file's `tokenizer.chat_template` on arbitrary input: compiling and rendering a short
//! conversation (both `add_generation_prompt` and `enable_thinking` settings) yields a prompt or
//! an error — never a panic, a hang or unbounded memory (the renderer's fuel, recursion and
//! output limits).
#![no_main]

use flashtree::chat::{ChatTemplate, Message, RenderOptions};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(source) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(t) = ChatTemplate::new(source) else {
        return;
    };
    let msgs = [
        Message::new("system", "You are helpful."),
        Message::new("user", "Hi <think> there"),
        Message::new("assistant", "<think>\nhm\n</think>\n\nHello!"),
        Message::new("user", "Tell me more."),
    ];
    for (add_generation_prompt, enable_thinking) in [(true, true), (false, false)] {
        let _ = t.render(&msgs, RenderOptions { add_generation_prompt, enable_thinking });
    }
});
