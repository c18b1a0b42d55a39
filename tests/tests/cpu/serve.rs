//! `flashtree serve` on a `synth --preset tiny` pair (CPU backend), driven over HTTP with
//! reqwest: chat completions (JSON and SSE) give the text `generate --chat` gives, usage and
//! prefix reuse are reported, bad requests get 400 in OpenAI's shape and the server keeps
//! serving, the API key is enforced, a full queue answers 429.

use flashtree::cli::pair_args::PairArgs;
use std::sync::OnceLock;

use flashtree::cli::backend::BackendArg;
use flashtree::cli::generate::{GenerateArgs, ModeArg};
use flashtree::cli::serve::ServeArgs;
use flashtree_tests::serve::{local, start};
use serde_json::{json, Value};

use flashtree_tests::tiny::tiny_pair as tiny;

fn serve_args() -> ServeArgs {
    let (model, draft) = tiny().clone();
    local(PairArgs { model, draft: Some(draft), backend: BackendArg::Cpu, mode: ModeArg::Tree, budget: 22 })
}

/// The shared server of the tests that need no special flags.
fn server() -> &'static str {
    static URL: OnceLock<String> = OnceLock::new();
    URL.get_or_init(|| start(serve_args()))
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

/// `generate --chat` text of `prompt` on the tiny pair.
fn generate_text(prompt: &str, max_tokens: usize) -> String {
    let (model, draft) = tiny().clone();
    flashtree_tests::serve::generate_text(&GenerateArgs {
        pair: PairArgs { model, draft: Some(draft), mode: ModeArg::Tree, budget: 22, backend: BackendArg::Cpu },
        max_tokens,
        prompt: Some(prompt.into()),
        chat: true,
        system: None,
        no_think: false,
        ctx: None,
        verbose: false,
        sampling: Default::default(),
        output_format: Default::default(),
    })
}

async fn post(url: &str, body: &Value) -> (u16, Value) {
    let r = reqwest::Client::new().post(format!("{url}/v1/chat/completions")).json(body).send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap())
}

/// The `data:` payloads of an SSE answer.
async fn stream(url: &str, body: &Value) -> Vec<String> {
    let r = reqwest::Client::new().post(format!("{url}/v1/chat/completions")).json(body).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert!(r.headers()["content-type"].to_str().unwrap().starts_with("text/event-stream"));
    let text = r.text().await.unwrap();
    text.lines().filter_map(|l| l.strip_prefix("data: ")).map(str::to_string).collect()
}

#[test]
fn chat_completions_stream_and_not_give_the_text_of_generate() {
    let url = server();
    let want = generate_text("def add(a, b):", 24);
    let body = json!({ "model": "anything-at-all", "messages": [{ "role": "user", "content": "def add(a, b):" }],
                       "max_tokens": 24, "future_field": { "ignored": true } });
    rt().block_on(async {
        let (status, v) = post(url, &body).await;
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["object"], "chat.completion");
        assert_eq!(v["model"], "anything-at-all");
        assert_eq!(v["choices"][0]["message"]["content"], want.as_str());
        assert_eq!(v["choices"][0]["message"]["role"], "assistant");
        let completion = v["usage"]["completion_tokens"].as_u64().unwrap();
        assert!((1..=24).contains(&completion), "{v}");
        let finish = v["choices"][0]["finish_reason"].as_str().unwrap();
        assert_eq!(finish == "length", completion == 24, "{v}");
        let prompt = v["usage"]["prompt_tokens"].as_u64().unwrap();
        assert_eq!(v["usage"]["total_tokens"].as_u64().unwrap(), prompt + completion);

        let mut sbody = body.clone();
        sbody["stream"] = json!(true);
        sbody["stream_options"] = json!({ "include_usage": true });
        let events = stream(url, &sbody).await;
        assert_eq!(events.last().unwrap(), "[DONE]");
        let chunks: Vec<Value> = events[..events.len() - 1].iter().map(|e| serde_json::from_str(e).unwrap()).collect();
        assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
        let text: String = chunks.iter().filter_map(|c| c["choices"].get(0)?["delta"]["content"].as_str()).collect();
        assert_eq!(text, want);
        let usage = chunks.last().unwrap();
        assert_eq!(usage["choices"], json!([]));
        assert_eq!(usage["usage"]["completion_tokens"].as_u64().unwrap(), completion);
        assert_eq!(usage["usage"]["prompt_tokens"].as_u64().unwrap(), prompt);
        let finishes: Vec<&Value> =
            chunks.iter().filter_map(|c| c["choices"].get(0)).map(|c| &c["finish_reason"]).collect();
        assert_eq!(finishes.iter().filter(|f| !f.is_null()).count(), 1);
        assert_eq!(finishes.last().unwrap().as_str(), Some(finish));
        assert!(chunks[..chunks.len() - 1].iter().all(|c| c["usage"].is_null()));

        // Without include_usage: no usage chunk.
        sbody["stream_options"] = json!({ "include_usage": false });
        let events = stream(url, &sbody).await;
        assert!(events.iter().all(|e| !e.contains("\"usage\"")), "{events:?}");
    });
}

#[test]
fn a_stop_string_cuts_the_text_before_it() {
    let url = server();
    let full = generate_text("def add(a, b):", 24);
    // A stop string taken from the middle of the text (at a char boundary).
    let chars: Vec<char> = full.chars().collect();
    if chars.len() < 6 {
        panic!("the tiny model gave too short a text to test stop strings: {full:?}");
    }
    let stop: String = chars[3..5].iter().collect();
    let want = &full[..full.find(&stop).unwrap()];
    let body =
        json!({ "messages": [{ "role": "user", "content": "def add(a, b):" }], "max_tokens": 24, "stop": [stop] });
    rt().block_on(async {
        let (status, v) = post(url, &body).await;
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["choices"][0]["message"]["content"], want);
        assert_eq!(v["choices"][0]["finish_reason"], "stop");
        let mut s = body.clone();
        s["stream"] = json!(true);
        let events = stream(url, &s).await;
        let text: String = events[..events.len() - 1]
            .iter()
            .map(|e| serde_json::from_str::<Value>(e).unwrap())
            .filter_map(|c| c["choices"][0]["delta"]["content"].as_str().map(str::to_string))
            .collect();
        assert_eq!(text, want);
    });
}

#[test]
fn a_continued_conversation_reuses_the_cached_prefix() {
    // Its own server, so no other test's request comes between the two turns.
    let url = start(serve_args());
    rt().block_on(async {
        let first = json!({ "messages": [{ "role": "user", "content": "hello there" }], "max_tokens": 1 });
        let (status, v) = post(&url, &first).await;
        assert_eq!(status, 200, "{v}");
        let p1 = v["usage"]["prompt_tokens"].as_u64().unwrap();
        assert_eq!(v["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
        let reply = v["choices"][0]["message"]["content"].as_str().unwrap().to_string();
        let second = json!({ "messages": [
            { "role": "user", "content": "hello there" },
            { "role": "assistant", "content": reply },
            { "role": "user", "content": "and again" },
        ], "max_tokens": 4 });
        let (status, v) = post(&url, &second).await;
        assert_eq!(status, 200, "{v}");
        // The first turn's caches hold its prompt (its one output token was still pending).
        assert_eq!(v["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64(), Some(p1), "{v}");
    });
}

#[test]
fn malformed_requests_get_400_in_openai_shape_and_the_server_keeps_serving() {
    let url = server();
    rt().block_on(async {
        let c = reqwest::Client::new();
        let raw = |b: &'static str| c.post(format!("{url}/v1/chat/completions")).body(b).send();
        for bad in ["{", "not json", "[]", r#"{"messages": "hi"}"#, r#"{"messages": [{"role": 3}]}"#, ""] {
            let r = raw(bad).await.unwrap();
            assert_eq!(r.status().as_u16(), 400, "{bad}");
            let v: Value = r.json().await.unwrap();
            assert_eq!(v["error"]["type"], "invalid_request_error", "{bad}: {v}");
            assert!(v["error"]["message"].as_str().unwrap().len() > 10, "{v}");
        }
        let user = json!([{ "role": "user", "content": "hi" }]);
        let cases = [
            (json!({ "messages": [] }), "messages"),
            (json!({ "messages": [{ "role": "wizard", "content": "hi" }] }), "role"),
            (json!({ "messages": [{ "role": "user", "content": [{ "type": "image_url" }] }] }), "image_url"),
            (json!({ "messages": user, "max_tokens": 0 }), "max_completion_tokens"),
            (json!({ "messages": user, "max_tokens": -1 }), "max_tokens"),
            (json!({ "messages": user, "n": 2 }), "n"),
            (json!({ "messages": user, "stop": ["a", "b", "c", "d", "e"] }), "stop"),
            (json!({ "messages": user, "top_p": 2.0 }), "top_p"),
            (json!({ "messages": user, "temperature": -1.0 }), "temperature"),
            (json!({ "messages": user, "tools": [{ "type": "function" }] }), "tools[0]"),
            (json!({ "messages": user, "logprobs": true }), "logprobs"),
        ];
        for (body, needle) in cases {
            let (status, v) = post(url, &body).await;
            assert_eq!(status, 400, "{body}: {v}");
            assert!(v["error"]["message"].as_str().unwrap().contains(needle), "{body}: {v}");
        }
        // A prompt longer than the context (4096 tokens).
        let long = "word ".repeat(20_000);
        let (status, v) = post(url, &json!({ "messages": [{ "role": "user", "content": long }] })).await;
        assert_eq!(status, 400, "{v}");
        assert_eq!(v["error"]["code"], "context_length_exceeded", "{v}");
        // A body above the limit (1 MiB here).
        let huge = "x".repeat(2 << 20);
        // (Its own client: the server closes a connection whose body it did not read, and a
        // pooled connection reused after that would fail the next request.)
        let once = reqwest::Client::builder().pool_max_idle_per_host(0).build().unwrap();
        let r = once.post(format!("{url}/v1/chat/completions")).body(huge).send().await.unwrap();
        assert_eq!(r.status().as_u16(), 413);
        assert!(r.json::<Value>().await.unwrap()["error"]["message"].is_string());
        // Unknown route: 404 in the same shape.
        let r = c.get(format!("{url}/v1/nothing")).send().await.unwrap();
        assert_eq!(r.status().as_u16(), 404);
        assert!(r.json::<Value>().await.unwrap()["error"]["message"].is_string());
        // Known route, wrong method: 405 in each API's shape.
        let r = c.get(format!("{url}/v1/chat/completions")).send().await.unwrap();
        assert_eq!(r.status().as_u16(), 405);
        let v: Value = r.json().await.unwrap();
        assert!(v["error"]["message"].as_str().unwrap().contains("GET"), "{v}");
        let r = c.get(format!("{url}/v1/messages")).send().await.unwrap();
        assert_eq!(r.status().as_u16(), 405);
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["type"], "error", "{v}");
        // Still serving.
        let (status, v) = post(url, &json!({ "messages": user, "max_tokens": 2 })).await;
        assert_eq!(status, 200, "{v}");
        let h: Value = c.get(format!("{url}/health")).send().await.unwrap().json().await.unwrap();
        assert_eq!(h["status"], "ok");
    });
}

#[test]
fn sampling_parameters_are_honoured_with_a_seed() {
    let url = server();
    let (model, draft) = tiny().clone();
    let want = flashtree_tests::serve::generate_text(&GenerateArgs {
        pair: PairArgs { model, draft: Some(draft), mode: ModeArg::Tree, budget: 22, backend: BackendArg::Cpu },
        max_tokens: 16,
        prompt: Some("def f(x):".into()),
        chat: true,
        system: None,
        no_think: false,
        ctx: None,
        verbose: false,
        sampling: flashtree::cli::sampling::SamplingArgs {
            temperature: 0.8,
            top_k: 0,
            top_p: 0.9,
            min_p: 0.0,
            seed: Some(11),
        },
        output_format: Default::default(),
    });
    assert_ne!(want, generate_text("def f(x):", 16), "seed 11 samples the greedy text: pick another seed");
    rt().block_on(async {
        let body = json!({ "messages": [{ "role": "user", "content": "def f(x):" }], "max_tokens": 16,
                           "temperature": 0.8, "top_p": 0.9, "seed": 11 });
        let (status, v) = post(url, &body).await;
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["choices"][0]["message"]["content"], want.as_str());
    });
}

#[test]
fn models_lists_the_loaded_model() {
    let url = server();
    rt().block_on(async {
        let v: Value = reqwest::get(format!("{url}/v1/models")).await.unwrap().json().await.unwrap();
        assert_eq!(v["object"], "list");
        let stem = tiny().0.file_stem().unwrap().to_string_lossy().into_owned();
        assert_eq!(v["data"][0]["id"], stem.as_str());
    });
}

#[test]
fn the_api_key_is_needed_everywhere_but_health() {
    let url = start(ServeArgs { api_key: Some("sekrit".into()), ..serve_args() });
    rt().block_on(async {
        let c = reqwest::Client::new();
        let models = format!("{url}/v1/models");
        assert_eq!(c.get(format!("{url}/health")).send().await.unwrap().status().as_u16(), 200);
        let r = c.get(&models).send().await.unwrap();
        assert_eq!(r.status().as_u16(), 401);
        assert_eq!(r.json::<Value>().await.unwrap()["error"]["code"], "invalid_api_key");
        assert_eq!(c.get(&models).bearer_auth("wrong").send().await.unwrap().status().as_u16(), 401);
        assert_eq!(c.get(&models).bearer_auth("sekrit").send().await.unwrap().status().as_u16(), 200);
        assert_eq!(c.get(&models).header("x-api-key", "sekrit").send().await.unwrap().status().as_u16(), 200);
        let r = c
            .post(format!("{url}/v1/chat/completions"))
            .header("x-api-key", "sekrit")
            .json(&json!({ "messages": [{ "role": "user", "content": "hi" }], "max_tokens": 2 }))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200);
    });
}

#[test]
fn a_full_queue_answers_429_with_retry_after_and_a_disconnect_frees_the_worker() {
    let url = start(ServeArgs { pair: PairArgs { mode: ModeArg::Ar, ..serve_args().pair }, queue: 1, ..serve_args() });
    rt().block_on(async {
        let c = reqwest::Client::new();
        // A long request, streamed: once its first chunk arrives the worker is busy with it.
        let long = json!({ "messages": [{ "role": "user", "content": "go" }], "max_tokens": 4000, "stream": true,
                           "ignore_eos": true });
        let mut running = c.post(format!("{url}/v1/chat/completions")).json(&long).send().await.unwrap();
        assert_eq!(running.status().as_u16(), 200);
        // The role chunk comes at once; a second `data:` needs the worker's text.
        let mut seen = String::new();
        while seen.matches("data: ").count() < 2 {
            seen.push_str(&String::from_utf8_lossy(&running.chunk().await.unwrap().unwrap()));
        }
        // Three more at once: one fits the queue, the others are refused at once.
        let short = json!({ "messages": [{ "role": "user", "content": "hi" }], "max_tokens": 2 });
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        for _ in 0..3 {
            let (c, url, short, tx) = (c.clone(), url.clone(), short.clone(), tx.clone());
            tokio::spawn(async move {
                let r = c.post(format!("{url}/v1/chat/completions")).json(&short).send().await.unwrap();
                let status = r.status().as_u16();
                let retry = r.headers().contains_key("retry-after");
                let v: Value = r.json().await.unwrap();
                tx.send((status, retry, v)).unwrap();
            });
        }
        for _ in 0..2 {
            let (status, retry, v) = rx.recv().await.unwrap();
            assert_eq!(status, 429, "{v}");
            assert!(retry, "429 without Retry-After");
            assert_eq!(v["error"]["type"], "rate_limit_error");
        }
        // The client of the long request leaves: the worker stops it within a round and serves
        // the waiting one (finishing the long one would take seconds more at ~400 tok/s).
        drop(running);
        let (status, _, v) = tokio::time::timeout(std::time::Duration::from_secs(3), rx.recv())
            .await
            .expect("the worker went on with the request of a client that left")
            .unwrap();
        assert_eq!(status, 200, "{v}");
    });
}
