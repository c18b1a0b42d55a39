//! Chat templates render with minijinja: thinking on/off, system prompt, multi-turn (earlier
//! turns' thinking dropped), tool responses, template errors; HF-style Python string methods work.

use flashtree::chat::{ChatTemplate, Message, RenderOptions};

const ON: RenderOptions = RenderOptions { add_generation_prompt: true, enable_thinking: true };
const OFF: RenderOptions = RenderOptions { add_generation_prompt: true, enable_thinking: false };

#[test]
fn single_turn_with_thinking_on_and_off() {
    let t = ChatTemplate::qwen35();
    let msgs = [Message::new("user", "Hi")];
    assert_eq!(t.render(&msgs, ON).unwrap(), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n");
    assert_eq!(
        t.render(&msgs, OFF).unwrap(),
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    );
}

#[test]
fn system_prompt_and_multi_turn_drop_earlier_thinking() {
    let t = ChatTemplate::qwen35();
    let msgs = [
        Message::new("system", "Be brief."),
        Message::new("user", "2+2?"),
        Message::new("assistant", "<think>\nadd\n</think>\n\n4"),
        Message::new("user", "and 3+3?"),
    ];
    assert_eq!(
        t.render(&msgs, OFF).unwrap(),
        "<|im_start|>system\nBe brief.<|im_end|>\n\
         <|im_start|>user\n2+2?<|im_end|>\n\
         <|im_start|>assistant\n4<|im_end|>\n\
         <|im_start|>user\nand 3+3?<|im_end|>\n\
         <|im_start|>assistant\n<think>\n\n</think>\n\n"
    );
}

#[test]
fn assistant_turn_after_the_last_user_keeps_its_reasoning_and_tools_render() {
    let t = ChatTemplate::qwen35();
    let mut a = Message::new("assistant", "Calling.");
    a.reasoning_content = Some("need weather".into());
    let msgs = [Message::new("user", "Weather?"), a, Message::new("tool", "sunny"), Message::new("tool", "22C")];
    let none = RenderOptions { add_generation_prompt: false, enable_thinking: true };
    assert_eq!(
        t.render(&msgs, none).unwrap(),
        "<|im_start|>user\nWeather?<|im_end|>\n\
         <|im_start|>assistant\n<think>\nneed weather\n</think>\n\nCalling.<|im_end|>\n\
         <|im_start|>user\n<tool_response>\nsunny\n</tool_response>\n<tool_response>\n22C\n</tool_response><|im_end|>\n"
    );
}

#[test]
fn template_errors_are_reported_not_panics() {
    assert!(ChatTemplate::new("{% if %}").is_err());
    let t = ChatTemplate::qwen35();
    let e = t.render(&[Message::new("user", "a"), Message::new("system", "late")], ON).unwrap_err();
    assert!(e.to_string().contains("system message"), "{e}");
    assert!(t.render(&[Message::new("robot", "x")], ON).is_err());
}

/// A GGUF-style template using Python methods, slicing and tojson (as HF templates do).
#[test]
fn hf_style_templates_with_python_methods_render() {
    let src = "{%- for m in messages[::-1] %}{{ m.role.upper() }}:{{ m.content.strip().startswith('x') }}|{% endfor %}{{ messages[0].content | tojson }}";
    let t = ChatTemplate::new(src).unwrap();
    let out = t.render(&[Message::new("user", "  xy "), Message::new("assistant", "b")], ON).unwrap();
    assert_eq!(out, "ASSISTANT:False|USER:True|\"  xy \"");
}

/// A template from a model file runs with limits: nested loops that would run ~10¹⁰ steps, deep
/// recursion and a huge output are refused quickly with an error naming the limit.
#[test]
fn hostile_templates_are_refused_by_the_limits() {
    let msgs = [Message::new("user", "hi")];
    let opts = RenderOptions { add_generation_prompt: true, enable_thinking: true };
    let refused = |src: &str, want: &str| {
        let t0 = std::time::Instant::now();
        let e = ChatTemplate::new(src).unwrap().render(&msgs, opts).unwrap_err().to_string();
        assert!(e.contains("chat template refused") && e.contains(want), "{src}: {e}");
        assert!(t0.elapsed().as_secs() < 20, "{src}: took {:?}", t0.elapsed());
    };
    refused(
        "{% for a in range(100000) %}{% for b in range(100000) %}{% for c in range(100000) %}x{% endfor %}{% endfor %}{% endfor %}",
        "instructions",
    );
    refused("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "nests deeper");
    refused("{% for a in range(100000) %}{{ 'x' * 100000 }}{% endfor %}", "bytes");
    // the built-in template on a long message stays far inside the fuel
    let long = "word ".repeat(20_000);
    let text = ChatTemplate::qwen35().render(&[Message::new("user", &long)], opts).unwrap();
    assert!(text.len() > long.len());
}
