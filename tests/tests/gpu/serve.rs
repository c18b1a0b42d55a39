//! `flashtree serve --backend gpu` on the shipped demo pair: a greedy chat completion (JSON and
//! SSE) gives the text `generate --chat --backend gpu` gives, a second turn reuses the first's
//! caches, and a seeded sampled request (temperature > 0, on the device sampler) gives the text
//! of `generate --backend gpu` with the same flags.

use flashtree::cli::backend::BackendArg;
use flashtree::cli::default_model;
use flashtree::cli::generate::{GenerateArgs, ModeArg};
use flashtree::cli::pair_args::PairArgs;
use flashtree::cli::serve::ServeArgs;
use flashtree_tests::gpu::gpu_or_skip;
use flashtree_tests::serve::{generate_text, local, start};
use serde_json::{json, Value};

#[test]
fn serve_on_the_gpu_gives_the_text_of_generate_greedy_and_sampled() {
    if gpu_or_skip("serve_on_the_gpu_gives_the_text_of_generate_greedy_and_sampled").is_none() {
        return;
    }
    let model = default_model::target();
    let draft = default_model::draft_for(&model);
    let prompt = "def fibonacci(n):";
    let args = GenerateArgs {
        pair: PairArgs {
            model: model.clone(),
            draft: draft.clone(),
            mode: ModeArg::Tree,
            budget: 22,
            backend: BackendArg::Gpu,
        },
        max_tokens: 48,
        prompt: Some(prompt.into()),
        chat: true,
        system: None,
        no_think: false,
        ctx: None,
        verbose: false,
        sampling: Default::default(),
        output_format: Default::default(),
    };
    let want = generate_text(&args);
    let sampling =
        flashtree::cli::sampling::SamplingArgs { temperature: 0.7, top_k: 20, top_p: 0.95, min_p: 0.0, seed: Some(5) };
    let want_sampled = generate_text(&GenerateArgs { sampling, max_tokens: 24, ..args.clone() });
    let url = start(ServeArgs {
        queue: 4,
        ..local(PairArgs { model, draft, backend: BackendArg::Gpu, mode: ModeArg::Tree, budget: 22 })
    });
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let c = reqwest::Client::new();
        let chat = format!("{url}/v1/chat/completions");
        let body = json!({ "messages": [{ "role": "user", "content": prompt }], "max_tokens": 48 });
        let v: Value = c.post(&chat).json(&body).send().await.unwrap().json().await.unwrap();
        assert_eq!(v["choices"][0]["message"]["content"], want.as_str(), "{v}");

        let mut s = body.clone();
        s["stream"] = json!(true);
        let text = c.post(&chat).json(&s).send().await.unwrap().text().await.unwrap();
        let streamed: String = text
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .filter(|d| *d != "[DONE]")
            .filter_map(|d| {
                serde_json::from_str::<Value>(d).unwrap()["choices"][0]["delta"]["content"].as_str().map(str::to_string)
            })
            .collect();
        assert_eq!(streamed, want);

        // The same conversation continued: the first turn's prompt is kept in the caches.
        let first = json!({ "messages": [{ "role": "user", "content": prompt }], "max_tokens": 1 });
        let v: Value = c.post(&chat).json(&first).send().await.unwrap().json().await.unwrap();
        let p1 = v["usage"]["prompt_tokens"].as_u64().unwrap();
        let reply = v["choices"][0]["message"]["content"].as_str().unwrap().to_string();
        let second = json!({ "messages": [
            { "role": "user", "content": prompt },
            { "role": "assistant", "content": reply },
            { "role": "user", "content": "and now in C" },
        ], "max_tokens": 8 });
        let v: Value = c.post(&chat).json(&second).send().await.unwrap().json().await.unwrap();
        assert_eq!(v["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64(), Some(p1), "{v}");

        let hot = json!({ "messages": [{ "role": "user", "content": prompt }], "max_tokens": 24,
                          "temperature": 0.7, "top_k": 20, "top_p": 0.95, "seed": 5 });
        let r = c.post(&chat).json(&hot).send().await.unwrap();
        assert_eq!(r.status().as_u16(), 200);
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["choices"][0]["message"]["content"], want_sampled.as_str(), "{v}");
    });
}
