//! `GET /metrics` and `GET /openapi.json` of `flashtree serve` on a `synth --preset tiny` pair
//! (CPU backend, DDTree): requests counted by route and status (unknown paths as `unmatched`),
//! tokens and the reused prefix of a conversation's second turn, tok/s and acceptance length of
//! the last request and in total, the queue; the OpenAPI document lists every route.

use flashtree::cli::pair_args::PairArgs;
use std::collections::HashMap;

use flashtree::cli::backend::BackendArg;
use flashtree::cli::generate::ModeArg;
use flashtree::cli::serve::ServeArgs;
use flashtree_tests::serve::{local, start};
use serde_json::{json, Value};

/// The samples of an exposition text: `name{labels}` → value.
fn samples(text: &str) -> HashMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (k, v) = l.rsplit_once(' ').unwrap();
            (k.to_string(), v.parse().unwrap())
        })
        .collect()
}

#[test]
fn metrics_count_requests_tokens_reuse_and_speed() {
    let (target, draft) = flashtree_tests::tiny::tiny_pair().clone();
    let url = start(ServeArgs {
        queue: 4,
        ..local(PairArgs {
            model: target,
            draft: Some(draft),
            backend: BackendArg::Cpu,
            mode: ModeArg::Tree,
            budget: 8,
        })
    });
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let c = reqwest::Client::new();
        let chat = |messages: Value, max_tokens: u32| {
            let c = c.clone();
            let url = url.clone();
            async move {
                let r = c
                    .post(format!("{url}/v1/chat/completions"))
                    .json(&json!({"messages": messages, "max_tokens": max_tokens, "ignore_eos": true}))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), 200);
                r.json::<Value>().await.unwrap()
            }
        };
        // A one-token reply: its text tokenises back to that token, so the second turn extends
        // the cached tokens.
        let first = chat(json!([{"role": "user", "content": "hello"}]), 1).await;
        let reply = first["choices"][0]["message"]["content"].as_str().unwrap().to_string();
        let second = chat(
            json!([
                {"role": "user", "content": "hello"},
                {"role": "assistant", "content": reply},
                {"role": "user", "content": "more"},
            ]),
            12,
        )
        .await;
        let bad = c.post(format!("{url}/v1/chat/completions")).body("{").send().await.unwrap();
        assert_eq!(bad.status(), 400);
        let missing = c.get(format!("{url}/no/such/route")).send().await.unwrap();
        assert_eq!(missing.status(), 404);

        let r = c.get(format!("{url}/metrics")).send().await.unwrap();
        assert_eq!(r.status(), 200);
        let ct = r.headers()["content-type"].to_str().unwrap().to_string();
        assert!(ct.starts_with("text/plain; version=0.0.4"), "{ct}");
        let text = r.text().await.unwrap();
        let m = samples(&text);
        let get = |k: &str| *m.get(k).unwrap_or_else(|| panic!("{k} missing in\n{text}"));
        assert_eq!(get("flashtree_requests_total{route=\"/v1/chat/completions\",status=\"200\"}"), 2.0);
        assert_eq!(get("flashtree_requests_total{route=\"/v1/chat/completions\",status=\"400\"}"), 1.0);
        assert_eq!(get("flashtree_requests_total{route=\"unmatched\",status=\"404\"}"), 1.0);
        assert_eq!(get("flashtree_generations_total{outcome=\"done\"}"), 2.0);
        let usage = |v: &Value, k: &str| v["usage"][k].as_f64().unwrap();
        assert_eq!(
            get("flashtree_prompt_tokens_total"),
            usage(&first, "prompt_tokens") + usage(&second, "prompt_tokens")
        );
        assert_eq!(
            get("flashtree_completion_tokens_total"),
            usage(&first, "completion_tokens") + usage(&second, "completion_tokens")
        );
        let reused = second["usage"]["prompt_tokens_details"]["cached_tokens"].as_f64().unwrap();
        assert!(reused >= usage(&first, "prompt_tokens"), "the second turn reuses at least the first prompt: {second}");
        assert_eq!(get("flashtree_reused_prompt_tokens_total"), reused);
        assert_eq!(
            get("flashtree_prefilled_tokens_total"),
            get("flashtree_prompt_tokens_total") - get("flashtree_reused_prompt_tokens_total")
        );
        assert!(get("flashtree_tokens_per_second") > 0.0);
        assert!(get("flashtree_last_tokens_per_second") > 0.0);
        assert!(get("flashtree_acceptance_length") >= 1.0);
        assert!(get("flashtree_last_acceptance_length") >= 1.0);
        assert!(get("flashtree_verify_rounds_total") >= 2.0);
        assert_eq!(get("flashtree_queue_depth"), 0.0);
        assert_eq!(get("flashtree_queue_capacity"), 4.0);
        assert_eq!(get("flashtree_busy"), 0.0);
        assert_eq!(get("flashtree_info{model=\"tiny-q4_k_m\",mode=\"tree\",budget=\"8\",backend=\"cpu\"}"), 1.0);

        let doc: Value = c.get(format!("{url}/openapi.json")).send().await.unwrap().json().await.unwrap();
        assert_eq!(doc["openapi"], "3.1.0");
        for path in flashtree::serve::metrics::ROUTES {
            assert!(doc["paths"][path].is_object(), "{path} missing in /openapi.json");
        }
    });
}
