//! `flashtree serve`'s tool calls, thinking split, `/v1/completions` and the Anthropic routes,
//! over HTTP on a `synth --preset tiny` pair (CPU). The tiny model's own text is noise, so the
//! replies that must hold a tool call or a think block come from `--script
//! tests/sdk/script.json` (the real model runs under the speculative loop; only its picked
//! tokens follow the script, see `flashtree::serve::script`). The server renders with the built-in Qwen3.5 template
//! (`--chat-template qwen35`: tools section, open think block); the tiny GGUF carries a bare
//! ChatML one.

use flashtree::cli::pair_args::PairArgs;
use std::path::PathBuf;
use std::sync::OnceLock;

use flashtree::cli::backend::BackendArg;
use flashtree::cli::generate::ModeArg;
use flashtree::cli::serve::ServeArgs;
use flashtree_tests::serve::{local, start};
use serde_json::{json, Value};

/// The tiny pair and the scripted replies (shared with the SDK test: `tests/sdk/script.json`).
fn tiny() -> &'static (PathBuf, PathBuf, PathBuf) {
    static PAIR: OnceLock<(PathBuf, PathBuf, PathBuf)> = OnceLock::new();
    PAIR.get_or_init(|| {
        let (target, draft) = flashtree_tests::tiny::tiny_pair().clone();
        (target, draft, std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("sdk/script.json"))
    })
}

fn server() -> &'static str {
    static URL: OnceLock<String> = OnceLock::new();
    URL.get_or_init(|| {
        let (model, draft, script) = tiny().clone();
        start(ServeArgs {
            chat_template: Some("qwen35".into()),
            script: Some(script),
            ..local(PairArgs { model, draft: Some(draft), backend: BackendArg::Cpu, mode: ModeArg::Tree, budget: 22 })
        })
    })
}

/// The same pair and script served in AR mode: one token per round and no draft, for the long
/// replies of the thinking-budget test (the scripted target accepts none of a random draft's
/// tokens, so each tree round would verify 23 nodes for one token).
fn ar_server() -> &'static str {
    static URL: OnceLock<String> = OnceLock::new();
    URL.get_or_init(|| {
        let (model, _, script) = tiny().clone();
        start(ServeArgs {
            chat_template: Some("qwen35".into()),
            script: Some(script),
            ..local(PairArgs { model, draft: None, backend: BackendArg::Cpu, mode: ModeArg::Ar, budget: 0 })
        })
    })
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

async fn post(path: &str, body: &Value) -> (u16, Value) {
    post_to(server(), path, body).await
}

async fn post_to(base: &str, path: &str, body: &Value) -> (u16, Value) {
    let r = reqwest::Client::new().post(format!("{base}{path}")).json(body).send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap())
}

/// (event name, data) of an SSE answer.
async fn events(path: &str, body: &Value) -> Vec<(String, String)> {
    events_from(server(), path, body).await
}

async fn events_from(base: &str, path: &str, body: &Value) -> Vec<(String, String)> {
    let r = reqwest::Client::new().post(format!("{base}{path}")).json(body).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let text = r.text().await.unwrap();
    let mut out = Vec::new();
    let mut name = String::new();
    for l in text.lines() {
        if let Some(n) = l.strip_prefix("event: ") {
            name = n.to_string();
        } else if let Some(d) = l.strip_prefix("data: ") {
            out.push((std::mem::take(&mut name), d.to_string()));
        }
    }
    out
}

fn user(text: &str) -> Value {
    json!([{ "role": "user", "content": text }])
}

fn weather_tool() -> Value {
    json!([{ "type": "function", "function": { "name": "get_weather", "description": "Weather of a city",
             "parameters": { "type": "object", "properties": { "city": { "type": "string" },
                                                               "days": { "type": "integer" } } } } }])
}

#[test]
fn openai_tool_calls_are_parsed_from_the_xml_and_json_forms() {
    rt().block_on(async {
        let body =
            json!({ "messages": user("please call the weather tool"), "tools": weather_tool(), "max_tokens": 200 });
        let (status, v) = post("/v1/chat/completions", &body).await;
        assert_eq!(status, 200, "{v}");
        let choice = &v["choices"][0];
        assert_eq!(choice["finish_reason"], "tool_calls", "{v}");
        assert_eq!(choice["message"]["reasoning_content"], "I need the weather.");
        assert_eq!(choice["message"]["content"], "Let me check.");
        let call = &choice["message"]["tool_calls"][0];
        assert_eq!(call["type"], "function");
        assert_eq!(call["function"]["name"], "get_weather");
        let args: Value = serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
        assert_eq!(args, json!({ "city": "Paris", "days": 3 }));

        // Streamed: the same reasoning, text and call.
        let mut s = body.clone();
        s["stream"] = json!(true);
        let ev = events("/v1/chat/completions", &s).await;
        assert_eq!(ev.last().unwrap().1, "[DONE]");
        let chunks: Vec<Value> = ev[..ev.len() - 1].iter().map(|e| serde_json::from_str(&e.1).unwrap()).collect();
        let field = |f: &str| -> String {
            chunks.iter().filter_map(|c| c["choices"][0]["delta"][f].as_str().map(str::to_string)).collect()
        };
        assert_eq!(field("reasoning_content"), "I need the weather.");
        assert_eq!(field("content").trim(), "Let me check.");
        // The call streams: its first delta has index, id, type and name, the next ones argument
        // fragments that join into the non-streamed arguments.
        let calls: Vec<&Value> = chunks.iter().filter_map(|c| c["choices"][0]["delta"].get("tool_calls")).collect();
        assert!(calls.len() > 2, "{chunks:?}");
        assert_eq!(calls[0][0]["index"], 0);
        assert_eq!(calls[0][0]["type"], "function");
        assert!(calls[0][0]["id"].as_str().unwrap().starts_with("call_"), "{:?}", calls[0]);
        assert_eq!(calls[0][0]["function"]["name"], "get_weather");
        let joined: String = calls.iter().map(|c| c[0]["function"]["arguments"].as_str().unwrap()).collect();
        assert_eq!(joined, choice["message"]["tool_calls"][0]["function"]["arguments"].as_str().unwrap());
        assert!(calls[1..].iter().all(|c| c[0]["index"] == 0 && c[0].get("id").is_none()));
        assert_eq!(chunks.last().unwrap()["choices"][0]["finish_reason"], "tool_calls");

        // The older JSON form.
        let body = json!({ "messages": user("use the json form"), "tools": weather_tool() });
        let (_, v) = post("/v1/chat/completions", &body).await;
        let call = &v["choices"][0]["message"]["tool_calls"][0];
        assert_eq!(call["function"]["arguments"], r#"{"city": "Oslo"}"#, "{v}"); // as the model wrote it
        assert!(v["choices"][0]["message"]["content"].is_null(), "{v}");

        // Without tools in the request, the same text is plain content.
        let (_, v) = post("/v1/chat/completions", &json!({ "messages": user("use the json form") })).await;
        assert!(v["choices"][0]["message"]["content"].as_str().unwrap().starts_with("<tool_call>"), "{v}");
        assert_eq!(v["choices"][0]["finish_reason"], "stop");

        // A broken call degrades to text.
        let body = json!({ "messages": user("a broken call"), "tools": weather_tool() });
        let (status, v) = post("/v1/chat/completions", &body).await;
        assert_eq!(status, 200, "{v}");
        assert!(v["choices"][0]["message"].get("tool_calls").is_none(), "{v}");
        assert!(v["choices"][0]["message"]["content"].as_str().unwrap().contains("junk"), "{v}");
    });
}

#[test]
fn a_tool_result_turn_renders_and_answers() {
    rt().block_on(async {
        let messages = json!([
            { "role": "user", "content": "weather in Paris?" },
            { "role": "assistant", "content": null, "tool_calls": [{ "id": "c1", "type": "function",
              "function": { "name": "get_weather", "arguments": "{\"city\":\"Paris\"}" } }] },
            { "role": "tool", "tool_call_id": "c1", "content": "sunny" },
            { "role": "user", "content": "think then answer" },
        ]);
        let (status, v) = post("/v1/chat/completions", &json!({ "messages": messages, "tools": weather_tool() })).await;
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["choices"][0]["message"]["content"], "The answer is 4.");
        assert_eq!(v["choices"][0]["message"]["reasoning_content"], "Two plus two is four.");
        // Arguments that are not a JSON object are refused, naming the field.
        let mut bad = messages.clone();
        bad[1]["tool_calls"][0]["function"]["arguments"] = json!("[1,");
        let (status, v) = post("/v1/chat/completions", &json!({ "messages": bad })).await;
        assert_eq!(status, 400, "{v}");
        assert!(v["error"]["message"].as_str().unwrap().contains("tool_calls[0].function.arguments"), "{v}");
        let (status, v) = post(
            "/v1/chat/completions",
            &json!({ "messages": user("x"), "tools": weather_tool(), "tool_choice": "required" }),
        )
        .await;
        assert_eq!(status, 400, "{v}");
        assert!(v["error"]["message"].as_str().unwrap().contains("tool_choice"), "{v}");
    });
}

#[test]
fn completions_answer_a_raw_prompt_stream_and_not() {
    rt().block_on(async {
        let body = json!({ "model": "m", "prompt": "def add(a, b):", "max_tokens": 8 });
        let (status, v) = post("/v1/completions", &body).await;
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["object"], "text_completion");
        assert_eq!(v["model"], "m");
        let text = v["choices"][0]["text"].as_str().unwrap().to_string();
        let completion = v["usage"]["completion_tokens"].as_u64().unwrap();
        assert!((1..=8).contains(&completion), "{v}");
        let mut s = body.clone();
        s["stream"] = json!(true);
        s["stream_options"] = json!({ "include_usage": true });
        let ev = events("/v1/completions", &s).await;
        assert_eq!(ev.last().unwrap().1, "[DONE]");
        let chunks: Vec<Value> = ev[..ev.len() - 1].iter().map(|e| serde_json::from_str(&e.1).unwrap()).collect();
        let streamed: String = chunks.iter().filter_map(|c| c["choices"].get(0)?["text"].as_str()).collect();
        assert_eq!(streamed, text);
        assert_eq!(chunks.last().unwrap()["usage"]["completion_tokens"].as_u64(), Some(completion));
        for bad in [json!({ "prompt": ["a", "b"] }), json!({ "prompt": "a", "echo": true }), json!({ "prompt": 5 })] {
            let (status, v) = post("/v1/completions", &bad).await;
            assert_eq!(status, 400, "{bad}: {v}");
            assert_eq!(v["error"]["type"], "invalid_request_error");
        }
    });
}

fn anthropic_tools() -> Value {
    json!([{ "name": "get_weather", "description": "Weather of a city",
             "input_schema": { "type": "object", "properties": { "city": { "type": "string" },
                                                                 "days": { "type": "integer" } } } }])
}

#[test]
fn messages_give_thinking_text_and_tool_use_blocks() {
    rt().block_on(async {
        let body = json!({ "model": "claude-sonnet-4-5", "max_tokens": 64000, "system": "be brief",
                           "messages": user("please call the weather tool"), "tools": anthropic_tools() });
        let (status, v) = post("/v1/messages", &body).await;
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["type"], "message");
        assert_eq!(v["model"], "claude-sonnet-4-5");
        assert_eq!(v["stop_reason"], "tool_use");
        let kinds: Vec<&str> = v["content"].as_array().unwrap().iter().map(|b| b["type"].as_str().unwrap()).collect();
        assert_eq!(kinds, ["thinking", "text", "tool_use"], "{v}");
        assert_eq!(v["content"][0]["thinking"], "I need the weather.");
        assert_eq!(v["content"][1]["text"], "Let me check.");
        assert_eq!(v["content"][2]["input"], json!({ "city": "Paris", "days": 3 }));
        let counted = post("/v1/messages/count_tokens", &body).await.1["input_tokens"].as_u64().unwrap();
        let u = &v["usage"];
        let prompt = u["input_tokens"].as_u64().unwrap() + u["cache_read_input_tokens"].as_u64().unwrap();
        assert_eq!(counted, prompt, "count_tokens vs the prefill the worker ran: {v}");

        // The stream: the full event sequence, in order.
        let mut s = body.clone();
        s["stream"] = json!(true);
        let ev = events("/v1/messages", &s).await;
        let names: Vec<&str> = ev.iter().map(|e| e.0.as_str()).collect();
        let data: Vec<Value> = ev.iter().map(|e| serde_json::from_str(&e.1).unwrap()).collect();
        assert_eq!(names[..2], ["message_start", "ping"], "{names:?}");
        assert_eq!(names[names.len() - 2..], ["message_delta", "message_stop"], "{names:?}");
        for (n, d) in names.iter().zip(&data) {
            assert_eq!(d["type"], *n, "the data's type is the event's name");
        }
        assert_eq!(data[0]["message"]["model"], "claude-sonnet-4-5");
        let starts: Vec<&Value> = data.iter().filter(|d| d["type"] == "content_block_start").collect();
        let kinds: Vec<&str> = starts.iter().map(|d| d["content_block"]["type"].as_str().unwrap()).collect();
        assert_eq!(kinds, ["thinking", "text", "tool_use"], "{names:?}");
        let stops = data.iter().filter(|d| d["type"] == "content_block_stop").count();
        assert_eq!(stops, 3);
        let deltas = |k: &str, f: &str| -> String {
            data.iter().filter(|d| d["delta"]["type"] == k).map(|d| d["delta"][f].as_str().unwrap()).collect()
        };
        assert_eq!(deltas("thinking_delta", "thinking"), "I need the weather.");
        assert_eq!(deltas("text_delta", "text").trim(), "Let me check.");
        let input: Value = serde_json::from_str(&deltas("input_json_delta", "partial_json")).unwrap();
        assert_eq!(input, json!({ "city": "Paris", "days": 3 }));
        let fragments = data.iter().filter(|d| d["delta"]["type"] == "input_json_delta").count();
        assert!(fragments > 1, "the input streams in fragments: {fragments}");
        assert!(data.iter().any(|d| d["delta"]["type"] == "signature_delta"));
        let md = &data[data.len() - 2];
        assert_eq!(md["delta"]["stop_reason"], "tool_use");
        assert!(md["usage"]["output_tokens"].as_u64().unwrap() > 0);
        // Each block's deltas carry its index, blocks numbered from 0.
        for (i, st) in starts.iter().enumerate() {
            assert_eq!(st["index"], i);
        }
    });
}

#[test]
fn messages_stop_sequences_and_count_tokens_match_the_prefill() {
    rt().block_on(async {
        let body = json!({ "model": "x", "max_tokens": 100, "messages": user("say the stop word"),
                           "stop_sequences": ["STOP"] });
        let (status, v) = post("/v1/messages", &body).await;
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["stop_reason"], "stop_sequence");
        assert_eq!(v["stop_sequence"], "STOP");
        assert_eq!(v["content"][0]["text"], "alpha beta ");
        // A system prompt given as blocks and tools are both counted.
        let plain = json!({ "messages": user("hello") });
        let with = json!({ "messages": user("hello"), "system": [{ "type": "text", "text": "be brief" }],
                           "tools": anthropic_tools() });
        let a = post("/v1/messages/count_tokens", &plain).await.1["input_tokens"].as_u64().unwrap();
        let b = post("/v1/messages/count_tokens", &with).await.1["input_tokens"].as_u64().unwrap();
        assert!(b > a + 20, "system and tools not counted: {a} vs {b}");
        // Disabled thinking pre-fills an empty think block: the reply is all text.
        let body =
            json!({ "max_tokens": 50, "messages": user("say the stop word"), "thinking": { "type": "disabled" } });
        let (_, v) = post("/v1/messages", &body).await;
        assert_eq!(v["content"][0]["type"], "text", "{v}");
    });
}

#[test]
fn messages_errors_use_anthropics_shape() {
    rt().block_on(async {
        let c = reqwest::Client::new();
        for bad in ["{", r#"{"messages": 3}"#, r#"{"messages": [{"role": "tool", "content": "x"}]}"#] {
            for path in ["/v1/messages", "/v1/messages/count_tokens"] {
                let r = c.post(format!("{}{path}", server())).body(bad).send().await.unwrap();
                assert_eq!(r.status().as_u16(), 400, "{bad}");
                let v: Value = r.json().await.unwrap();
                assert_eq!(v["type"], "error", "{v}");
                assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
            }
        }
        // A prompt longer than the context is a recognisable error.
        let long = "word ".repeat(20_000);
        let (status, v) = post("/v1/messages", &json!({ "max_tokens": 5, "messages": user(&long) })).await;
        assert_eq!(status, 400, "{v}");
        assert!(v["error"]["message"].as_str().unwrap().contains("context"), "{v}");
        let r = c.get(format!("{}/v1/messages/nothing", server())).send().await.unwrap();
        assert_eq!(r.status().as_u16(), 404);
        assert_eq!(r.json::<Value>().await.unwrap()["error"]["type"], "not_found_error");
    });
}

/// Tokens of `text` in the tiny model's vocabulary.
fn count(text: &str) -> usize {
    static TK: OnceLock<flashtree::tokenizer::gguf::GgufTokenizer> = OnceLock::new();
    let tk = TK.get_or_init(|| {
        let file = flashtree::gguf::Gguf::open(&tiny().0).unwrap();
        flashtree::tokenizer::gguf::from_gguf(&file).unwrap()
    });
    tk.tokenizer.encode(text).unwrap().len()
}

/// Checks an Anthropic event sequence: `message_start` first, blocks numbered from 0, each
/// started, given its deltas and stopped before the next starts, then `message_delta` and
/// `message_stop`. Returns the blocks: (type, joined text / thinking / partial_json).
fn anthropic_blocks(events: &[(String, String)]) -> Vec<(String, String)> {
    let data: Vec<Value> = events.iter().map(|e| serde_json::from_str(&e.1).unwrap()).collect();
    let names: Vec<&str> = events.iter().map(|e| e.0.as_str()).collect();
    assert_eq!(names[0], "message_start", "{names:?}");
    assert_eq!(names[names.len() - 2..], ["message_delta", "message_stop"], "{names:?}");
    let mut blocks: Vec<(String, String)> = Vec::new();
    let mut open: Option<usize> = None;
    for (n, d) in names.iter().zip(&data) {
        assert_eq!(d["type"], *n, "the data's type is the event's name");
        match *n {
            "content_block_start" => {
                assert_eq!(open, None, "a block started inside another: {names:?}");
                assert_eq!(d["index"], blocks.len(), "{names:?}");
                open = Some(blocks.len());
                let kind = d["content_block"]["type"].as_str().unwrap().to_string();
                if kind == "tool_use" {
                    assert_eq!(d["content_block"]["input"], json!({}));
                    assert!(d["content_block"]["id"].as_str().unwrap().starts_with("toolu_"));
                }
                blocks.push((kind, String::new()));
            }
            "content_block_delta" => {
                assert_eq!(Some(d["index"].as_u64().unwrap() as usize), open, "{names:?}");
                let delta = &d["delta"];
                let part = match delta["type"].as_str().unwrap() {
                    "text_delta" => &delta["text"],
                    "thinking_delta" => &delta["thinking"],
                    "input_json_delta" => &delta["partial_json"],
                    "signature_delta" => continue,
                    other => panic!("unknown delta {other}"),
                };
                blocks.last_mut().unwrap().1.push_str(part.as_str().unwrap());
            }
            "content_block_stop" => {
                assert_eq!(Some(d["index"].as_u64().unwrap() as usize), open, "{names:?}");
                open = None;
            }
            "message_delta" => assert_eq!(open, None, "message_delta inside a block: {names:?}"),
            _ => {}
        }
    }
    blocks
}

/// One tool call as an OpenAI stream gave it.
#[derive(Debug, Default)]
struct StreamedCall {
    name: String,
    /// The argument fragments joined.
    arguments: String,
    /// How many non-empty fragments.
    fragments: usize,
}

/// The OpenAI stream's chunks (before `[DONE]`) and its tool calls, checking that a call's first
/// delta carries its id, type and name and the later ones do not.
fn openai_stream(events: &[(String, String)]) -> (Vec<Value>, Vec<StreamedCall>) {
    assert_eq!(events.last().unwrap().1, "[DONE]");
    let chunks: Vec<Value> = events[..events.len() - 1].iter().map(|e| serde_json::from_str(&e.1).unwrap()).collect();
    let mut calls: Vec<StreamedCall> = Vec::new();
    for c in &chunks {
        for tc in c["choices"][0]["delta"]["tool_calls"].as_array().into_iter().flatten() {
            let i = tc["index"].as_u64().unwrap() as usize;
            if i == calls.len() {
                assert_eq!(tc["type"], "function", "{tc}");
                assert!(tc["id"].as_str().unwrap().starts_with("call_"), "{tc}");
                let name = tc["function"]["name"].as_str().unwrap().to_string();
                calls.push(StreamedCall { name, ..StreamedCall::default() });
            } else {
                assert!(tc.get("id").is_none() && tc["function"].get("name").is_none(), "{tc}");
            }
            let frag = tc["function"]["arguments"].as_str().unwrap();
            if !frag.is_empty() {
                calls[i].arguments.push_str(frag);
                calls[i].fragments += 1;
            }
        }
    }
    (chunks, calls)
}

fn note_tool() -> Value {
    json!([{ "type": "function", "function": { "name": "save_note", "parameters": { "type": "object",
             "properties": { "text": { "type": "string" }, "pages": { "type": "integer" } } } } }])
}

#[test]
fn streamed_tool_call_arguments_join_into_the_non_streamed_ones() {
    rt().block_on(async {
        let body = json!({ "messages": user("please write a long note"), "tools": note_tool(), "max_tokens": 400 });
        let (status, v) = post("/v1/chat/completions", &body).await;
        assert_eq!(status, 200, "{v}");
        let whole = v["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"].as_str().unwrap().to_string();
        let args: Value = serde_json::from_str(&whole).unwrap();
        assert_eq!(args["pages"], 2);
        assert!(
            args["text"].as_str().unwrap().starts_with("Line one")
                && args["text"].as_str().unwrap().contains("\"quotes\", a backslash \\ and a tab\t.")
        );
        let mut s = body.clone();
        s["stream"] = json!(true);
        let (chunks, calls) = openai_stream(&events("/v1/chat/completions", &s).await);
        assert_eq!(calls.len(), 1, "{chunks:?}");
        assert_eq!(calls[0].name, "save_note");
        assert_eq!(calls[0].arguments, whole, "the joined fragments are the non-streamed arguments");
        assert!(calls[0].fragments > 5, "a long argument streams in fragments: {}", calls[0].fragments);
        let content: String = chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();
        assert_eq!(content, "Saving it.");
        assert_eq!(chunks.last().unwrap()["choices"][0]["finish_reason"], "tool_calls");

        // Stop strings still cut the reply when tools are offered (text held for a possible call
        // is released when generation ends).
        let body = json!({ "messages": user("say the stop word"), "tools": note_tool(), "stop": ["STOP"] });
        let (_, v) = post("/v1/chat/completions", &body).await;
        assert_eq!(v["choices"][0]["message"]["content"], "alpha beta ", "{v}");
        assert_eq!(v["choices"][0]["finish_reason"], "stop");

        // Anthropic: a tool_use block whose input_json_delta fragments join into the input.
        let tools = json!([{ "name": "save_note", "input_schema": note_tool()[0]["function"]["parameters"] }]);
        let body = json!({ "max_tokens": 400, "messages": user("please write a long note"), "tools": tools });
        let (_, m) = post("/v1/messages", &body).await;
        assert_eq!(m["content"][1]["input"], args, "{m}");
        let mut s = body.clone();
        s["stream"] = json!(true);
        let ev = events("/v1/messages", &s).await;
        let fragments = ev.iter().filter(|e| e.1.contains("input_json_delta")).count();
        assert!(fragments > 5, "{fragments}");
        let blocks = anthropic_blocks(&ev);
        let kinds: Vec<&str> = blocks.iter().map(|b| b.0.as_str()).collect();
        assert_eq!(kinds, ["text", "tool_use"]);
        assert_eq!(blocks[1].1, whole, "the same JSON text in both APIs");
        assert!(ev[ev.len() - 2].1.contains("\"stop_reason\":\"tool_use\""), "{:?}", ev[ev.len() - 2]);
    });
}

#[test]
fn a_call_that_breaks_after_its_start_ends_in_valid_json_and_its_text_follows() {
    rt().block_on(async {
        for (trigger, raw_start, partial) in [
            ("a call cut short", "<tool_call>\n{\"name\": \"get_weather\"", json!({ "city": "Par" })),
            ("a drifting call", "<tool_call>\n<function=get_weather>", json!({ "city": "Rome" })),
        ] {
            let body = json!({ "messages": user(trigger), "tools": weather_tool(), "max_tokens": 200 });
            let (_, v) = post("/v1/chat/completions", &body).await;
            let msg = &v["choices"][0]["message"];
            assert!(msg.get("tool_calls").is_none(), "not reported when not streamed: {v}");
            assert!(msg["content"].as_str().unwrap().starts_with(raw_start), "{v}");
            assert_eq!(v["choices"][0]["finish_reason"], "stop");
            let mut s = body.clone();
            s["stream"] = json!(true);
            let (chunks, calls) = openai_stream(&events("/v1/chat/completions", &s).await);
            assert_eq!(calls.len(), 1, "{chunks:?}");
            assert_eq!(calls[0].name, "get_weather");
            let args: Value = serde_json::from_str(&calls[0].arguments).expect("closed to valid JSON");
            assert_eq!(args, partial);
            let content: String = chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();
            assert_eq!(content, msg["content"].as_str().unwrap(), "the raw text follows as content");
            assert_eq!(chunks.last().unwrap()["choices"][0]["finish_reason"], "stop");

            let body =
                json!({ "max_tokens": 200, "messages": user(trigger), "tools": anthropic_tools(), "stream": true });
            let ev = events("/v1/messages", &body).await;
            let blocks = anthropic_blocks(&ev);
            let kinds: Vec<&str> = blocks.iter().map(|b| b.0.as_str()).collect();
            assert_eq!(kinds, ["tool_use", "text"], "{ev:?}");
            assert_eq!(serde_json::from_str::<Value>(&blocks[0].1).unwrap(), partial);
            assert!(blocks[1].1.starts_with(raw_start));
            assert!(ev[ev.len() - 2].1.contains("\"stop_reason\":\"end_turn\""), "{:?}", ev[ev.len() - 2]);
        }
    });
}

#[test]
fn a_thinking_budget_closes_the_thinking_and_the_answer_follows() {
    rt().block_on(async {
        let body = json!({ "max_tokens": 2000, "messages": user("think at length"),
                           "thinking": { "type": "enabled", "budget_tokens": 1024 } });
        let (status, v) = post_to(ar_server(), "/v1/messages", &body).await;
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["content"][0]["type"], "thinking", "{v}");
        assert_eq!(v["content"][0]["thinking"], "z".repeat(1024), "thinking stops after 1024 tokens");
        assert_eq!(v["content"][1]["text"], "The budget answer.", "{v}");
        assert_eq!(v["stop_reason"], "end_turn");
        // Output: the thinking, the closing tokens as if generated, the answer and its EOS.
        let closing = count(&flashtree::serve::thinking::template_close(&flashtree::chat::ChatTemplate::qwen35()));
        let output = 1024 + closing + count("The budget answer.") + 1;
        assert_eq!(v["usage"]["output_tokens"], output, "{v}");
        let counted = post_to(ar_server(), "/v1/messages/count_tokens", &body).await.1["input_tokens"].clone();
        let u = &v["usage"];
        assert_eq!(u["input_tokens"].as_u64().unwrap() + u["cache_read_input_tokens"].as_u64().unwrap(), counted);

        // Streamed: the same blocks and usage.
        let mut s = body.clone();
        s["stream"] = json!(true);
        let ev = events_from(ar_server(), "/v1/messages", &s).await;
        let blocks = anthropic_blocks(&ev);
        assert_eq!(blocks, [("thinking".into(), "z".repeat(1024)), ("text".into(), "The budget answer.".to_string())]);
        let last: Value = serde_json::from_str(&ev[ev.len() - 2].1).unwrap();
        assert_eq!(last["usage"]["output_tokens"], output);

        // A model that closes its thinking within the budget answers as without one.
        let body = json!({ "max_tokens": 2000, "messages": user("think then answer"),
                           "thinking": { "type": "enabled", "budget_tokens": 1024 } });
        let (_, v) = post_to(ar_server(), "/v1/messages", &body).await;
        assert_eq!(v["content"][0]["thinking"], "Two plus two is four.", "{v}");
        assert_eq!(v["content"][1]["text"], "The answer is 4.", "{v}");
        let (_, plain) =
            post_to(ar_server(), "/v1/messages", &json!({ "max_tokens": 2000, "messages": user("think then answer") }))
                .await;
        assert_eq!(v["usage"]["output_tokens"], plain["usage"]["output_tokens"]);
    });
}

#[test]
fn thinking_budgets_are_checked_as_anthropic_checks_them() {
    rt().block_on(async {
        for (thinking, max, what) in [
            (json!({ "type": "enabled" }), 4096, "budget_tokens"),
            (json!({ "type": "enabled", "budget_tokens": 1000 }), 4096, "at least 1024"),
            (json!({ "type": "enabled", "budget_tokens": 4096 }), 4096, "max_tokens"),
            (json!({ "type": "enabled", "budget_tokens": "lots" }), 4096, "budget_tokens"),
        ] {
            let body = json!({ "max_tokens": max, "messages": user("hello"), "thinking": thinking });
            let (status, v) = post("/v1/messages", &body).await;
            assert_eq!(status, 400, "{body}: {v}");
            assert_eq!(v["type"], "error");
            assert_eq!(v["error"]["type"], "invalid_request_error");
            assert!(v["error"]["message"].as_str().unwrap().contains(what), "{v}");
        }
    });
}
