//! Chat templates: a model's `tokenizer.chat_template` (Jinja) rendered with `minijinja` plus the
//! Python string methods HF templates use (`startswith`, `split`, `strip`, …), `raise_exception`
//! and `tojson`. When a GGUF has no template, [`ChatTemplate::qwen35`] is our Qwen3.5 format.
//!
//! A template comes from the model file, so it runs with limits: [`FUEL`] instructions per
//! render (a loop that would not end is refused), [`RECURSION_LIMIT`] nested blocks/macros, and
//! [`MAX_OUTPUT_BYTES`] of output. Not bounded: intermediate strings a template builds without
//! emitting them (`{% set ns.s = ns.s ~ ns.s %}` doubles per instruction).

use minijinja::{context, Environment, Error, ErrorKind};
use serde_json::json;

/// Chat errors.
#[derive(Debug, thiserror::Error)]
pub enum ChatError {
    /// The template does not compile.
    #[error("chat template does not compile: {0}")]
    Compile(String),
    /// Rendering failed (including the template's own `raise_exception`).
    #[error("chat template rendering failed: {0}")]
    Render(String),
    /// Rendering hit one of the limits (fuel, recursion, output size).
    #[error("chat template refused: {0}")]
    Limit(String),
}

/// Instructions one render may execute. The Qwen3.5 template spends ≈ 10³ on a short chat and
/// its cost does not grow with the length of the messages' text; 10⁷ leaves room for long
/// conversations and still stops a runaway loop within about a second.
pub const FUEL: u64 = 10_000_000;

/// Nesting depth of blocks, loops and macro calls.
pub const RECURSION_LIMIT: usize = 100;

/// Largest rendered prompt.
pub const MAX_OUTPUT_BYTES: usize = 64 << 20;

/// The render's sink: refuses to grow past `limit` bytes.
struct CappedOutput {
    bytes: Vec<u8>,
    limit: usize,
    over: bool,
}

impl std::io::Write for CappedOutput {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.bytes.len() + buf.len() > self.limit {
            self.over = true;
            return Err(std::io::Error::other("output limit"));
        }
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// One chat message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// `system`, `user`, `assistant` or `tool`.
    pub role: String,
    /// The text.
    pub content: String,
    /// An assistant turn's thinking, if kept apart from `content`.
    pub reasoning_content: Option<String>,
    /// An assistant turn's tool calls, in OpenAI's shape
    /// (`{"type":"function","function":{"name","arguments": {…}}}`, arguments as an object).
    pub tool_calls: Vec<serde_json::Value>,
}

impl Message {
    /// A message without reasoning.
    pub fn new(role: &str, content: &str) -> Self {
        Self { role: role.into(), content: content.into(), reasoning_content: None, tool_calls: Vec::new() }
    }
}

/// Rendering switches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RenderOptions {
    /// Append the assistant header so the model answers.
    pub add_generation_prompt: bool,
    /// Let the model think (`enable_thinking`); false pre-fills an empty think block.
    pub enable_thinking: bool,
}

/// A compiled chat template.
#[derive(Debug)]
pub struct ChatTemplate {
    env: Environment<'static>,
}

const QWEN35: &str = include_str!("qwen35.jinja");

impl ChatTemplate {
    /// Compiles `source` (e.g. the GGUF's `tokenizer.chat_template`).
    pub fn new(source: &str) -> Result<Self, ChatError> {
        let mut env = Environment::new();
        env.set_fuel(Some(FUEL));
        env.set_recursion_limit(RECURSION_LIMIT);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", |msg: String| -> Result<String, Error> {
            Err(Error::new(ErrorKind::InvalidOperation, msg))
        });
        // No debug info in errors: minijinja's debug renderer panics on some broken templates
        // (a span ending before it starts, found by fuzz/chat_template) and would print the whole
        // template source and every referenced variable into the message.
        env.set_debug(false);
        env.add_template_owned("chat", source.to_string()).map_err(|e| ChatError::Compile(format!("{e:#}")))?;
        Ok(Self { env })
    }

    /// Our Qwen3.5 chat format (used when the model file carries no template).
    pub fn qwen35() -> Self {
        Self::new(QWEN35).expect("the built-in template compiles (checked by tests)")
    }

    /// Renders `messages` to the prompt text.
    pub fn render(&self, messages: &[Message], opts: RenderOptions) -> Result<String, ChatError> {
        self.render_with_tools(messages, &[], opts)
    }

    /// Renders `messages` with tool definitions `tools` (OpenAI's
    /// `{"type":"function","function":{"name","description","parameters"}}`; none = the template's
    /// `tools` is undefined, as without tools).
    pub fn render_with_tools(
        &self,
        messages: &[Message],
        tools: &[serde_json::Value],
        opts: RenderOptions,
    ) -> Result<String, ChatError> {
        let msgs: Vec<serde_json::Value> = messages
            .iter()
            .map(|m| {
                let mut v = json!({"role": m.role, "content": m.content});
                if let Some(r) = &m.reasoning_content {
                    v["reasoning_content"] = json!(r);
                }
                if !m.tool_calls.is_empty() {
                    v["tool_calls"] = json!(m.tool_calls);
                }
                v
            })
            .collect();
        let tools_value =
            if tools.is_empty() { minijinja::Value::UNDEFINED } else { minijinja::Value::from_serialize(tools) };
        let tmpl = self.env.get_template("chat").map_err(|e| ChatError::Render(format!("{e:#}")))?;
        let ctx = context! {
            messages => minijinja::Value::from_serialize(&msgs),
            tools => tools_value,
            add_generation_prompt => opts.add_generation_prompt,
            enable_thinking => opts.enable_thinking,
            bos_token => "",
            eos_token => "<|im_end|>",
        };
        let mut out = CappedOutput { bytes: Vec::new(), limit: MAX_OUTPUT_BYTES, over: false };
        match tmpl.render_captured_to(ctx, &mut out) {
            // minijinja writes whole UTF-8 strings
            Ok(_) => String::from_utf8(out.bytes).map_err(|e| ChatError::Render(e.to_string())),
            Err(_) if out.over => {
                Err(ChatError::Limit(format!("the rendered prompt grows past {MAX_OUTPUT_BYTES} bytes")))
            }
            Err(e) if e.kind() == ErrorKind::OutOfFuel => Err(ChatError::Limit(format!(
                "it runs more than {FUEL} instructions (a loop that does not end, or nested loops too large)"
            ))),
            Err(e) if e.kind() == ErrorKind::InvalidOperation && e.to_string().contains("recursion limit") => {
                Err(ChatError::Limit(format!("it nests deeper than {RECURSION_LIMIT} levels: {e}")))
            }
            Err(e) => Err(ChatError::Render(format!("{e:#}"))),
        }
    }
}
