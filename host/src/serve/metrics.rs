//! `GET /metrics`: the server's counters in the Prometheus text exposition format (0.0.4).
//!
//! Requests are counted by a middleware over every route, by route ([`ROUTES`]; any other path is
//! `route="unmatched"`, so clients cannot grow the label set) and status.
//! Generations are recorded by the worker when a job ends ([`Metrics::record`]): prompt,
//! reused-prefix and completion tokens, decode time and verify rounds (so the totals' tok/s and
//! acceptance length are exact ratios of sums), and the last request's tok/s and acceptance
//! length. The queue depth is read from the job channel when scraped.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::routes::AppState;
use super::worker::Outcome;

/// The exposition format's content type.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Counters shared by the HTTP side and the worker.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Answers by (route template, status code).
    requests: Mutex<BTreeMap<(String, u16), u64>>,
    generations: Mutex<Generations>,
    /// 1 while the worker runs a job.
    busy: AtomicU64,
}

/// Sums over the generations that ended.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Generations {
    pub done: u64,
    pub failed: u64,
    pub prompt_tokens: u64,
    pub reused_tokens: u64,
    pub completion_tokens: u64,
    /// Σ (completion tokens − 1): the tokens the decode time produced (the first comes from
    /// prefill).
    pub decoded_tokens: u64,
    pub decode_seconds: f64,
    pub rounds: u64,
    /// Σ accepted path lengths (= decoded tokens unless a stop cut a round short).
    pub accepted: u64,
    pub last_tokens_per_second: f64,
    pub last_acceptance_length: f64,
}

impl Metrics {
    /// A shared, empty set.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Counts one answer.
    pub fn count_request(&self, route: &str, status: u16) {
        let mut r = self.requests.lock().unwrap_or_else(|e| e.into_inner());
        *r.entry((route.to_string(), status)).or_default() += 1;
    }

    /// Records a generation that ended (`None`: it failed).
    pub fn record(&self, outcome: Option<&Outcome>) {
        let mut g = self.generations.lock().unwrap_or_else(|e| e.into_inner());
        let Some(o) = outcome else {
            g.failed += 1;
            return;
        };
        g.done += 1;
        g.prompt_tokens += o.prompt_tokens as u64;
        g.reused_tokens += o.reused_tokens as u64;
        g.completion_tokens += o.completion_tokens as u64;
        g.decoded_tokens += o.completion_tokens.saturating_sub(1) as u64;
        g.decode_seconds += o.decode_seconds;
        g.rounds += o.rounds as u64;
        g.accepted += (o.acceptance_length * o.rounds as f64).round() as u64;
        g.last_tokens_per_second = o.tokens_per_second;
        g.last_acceptance_length = o.acceptance_length;
    }

    /// Marks the worker busy (a job runs) or idle.
    pub fn set_busy(&self, busy: bool) {
        self.busy.store(busy as u64, Ordering::Relaxed);
    }

    /// The sums so far.
    pub fn generations(&self) -> Generations {
        *self.generations.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The exposition text; `queued`/`capacity`: the job queue's depth and size; `info`: the
    /// labels of `flashtree_info`.
    pub fn render(&self, queued: usize, capacity: usize, info: &[(&str, &str)]) -> String {
        let requests = self.requests.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let g = self.generations();
        let mut s = String::new();
        let mut put = |name: &str, kind: &str, help: &str, samples: Vec<(String, String)>| {
            let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for (labels, value) in samples {
                let _ = writeln!(s, "{name}{labels} {value}");
            }
        };
        let labels: Vec<String> = info.iter().map(|(k, v)| format!("{k}=\"{}\"", escape(v))).collect();
        put(
            "flashtree_info",
            "gauge",
            "The served model and decoding (labels); always 1.",
            vec![(format!("{{{}}}", labels.join(",")), "1".into())],
        );
        let one = |v: String| vec![(String::new(), v)];
        put(
            "flashtree_requests_total",
            "counter",
            "HTTP answers by route template and status code.",
            requests
                .iter()
                .map(|((route, status), n)| {
                    (format!("{{route=\"{}\",status=\"{status}\"}}", escape(route)), n.to_string())
                })
                .collect(),
        );
        put(
            "flashtree_generations_total",
            "counter",
            "Generations that ended, by outcome.",
            vec![
                ("{outcome=\"done\"}".into(), g.done.to_string()),
                ("{outcome=\"failed\"}".into(), g.failed.to_string()),
            ],
        );
        put(
            "flashtree_prompt_tokens_total",
            "counter",
            "Prompt tokens of finished generations.",
            one(g.prompt_tokens.to_string()),
        );
        put(
            "flashtree_reused_prompt_tokens_total",
            "counter",
            "Prompt tokens kept in the caches from the previous request (not prefilled again).",
            one(g.reused_tokens.to_string()),
        );
        put(
            "flashtree_prefilled_tokens_total",
            "counter",
            "Prompt tokens run through prefill.",
            one(g.prompt_tokens.saturating_sub(g.reused_tokens).to_string()),
        );
        put("flashtree_completion_tokens_total", "counter", "Generated tokens.", one(g.completion_tokens.to_string()));
        put(
            "flashtree_decode_seconds_total",
            "counter",
            "Decode time (prefill excluded).",
            one(float(g.decode_seconds)),
        );
        put(
            "flashtree_verify_rounds_total",
            "counter",
            "Verify rounds (one per target forward after prefill).",
            one(g.rounds.to_string()),
        );
        let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
        put(
            "flashtree_tokens_per_second",
            "gauge",
            "Decode tokens per second over all generations (Σ decoded tokens / Σ decode seconds).",
            one(float(ratio(g.decoded_tokens as f64, g.decode_seconds))),
        );
        put(
            "flashtree_acceptance_length",
            "gauge",
            "Mean tokens accepted per verify round over all generations.",
            one(float(ratio(g.accepted as f64, g.rounds as f64))),
        );
        put(
            "flashtree_last_tokens_per_second",
            "gauge",
            "Decode tokens per second of the last generation.",
            one(float(g.last_tokens_per_second)),
        );
        put(
            "flashtree_last_acceptance_length",
            "gauge",
            "Mean tokens accepted per verify round in the last generation.",
            one(float(g.last_acceptance_length)),
        );
        put("flashtree_queue_depth", "gauge", "Requests waiting in the queue.", one(queued.to_string()));
        put(
            "flashtree_queue_capacity",
            "gauge",
            "Requests the queue holds (more are answered 429).",
            one(capacity.to_string()),
        );
        put(
            "flashtree_busy",
            "gauge",
            "1 while a generation runs.",
            one(self.busy.load(Ordering::Relaxed).to_string()),
        );
        s
    }
}

/// A sample value: finite floats as Rust prints them, others as the format spells them.
fn float(x: f64) -> String {
    if x.is_nan() {
        "NaN".into()
    } else if x.is_infinite() {
        if x > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else {
        format!("{x}")
    }
}

/// A label value escaped as the format requires (`\\`, `\"`, `\n`).
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// The routes counted by name (issue 24's; all are fixed paths); any other path is counted as
/// `unmatched`, so clients cannot grow the label set.
pub const ROUTES: [&str; 8] = [
    "/health",
    "/metrics",
    "/openapi.json",
    "/v1/models",
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/messages",
    "/v1/messages/count_tokens",
];

/// The `route` label of a request path.
pub fn route_label(path: &str) -> &'static str {
    ROUTES.iter().find(|r| **r == path).copied().unwrap_or("unmatched")
}

/// Middleware: counts every answer by route and status.
pub async fn count(State(metrics): State<Arc<Metrics>>, req: Request, next: Next) -> Response {
    let route = route_label(req.uri().path());
    let res = next.run(req).await;
    metrics.count_request(route, res.status().as_u16());
    res
}

/// `GET /metrics`.
pub async fn handler(State(st): State<Arc<AppState>>) -> Response {
    let jobs = &st.model.jobs;
    let capacity = jobs.max_capacity();
    let queued = capacity.saturating_sub(jobs.capacity());
    let budget = st.budget.to_string();
    let info = [
        ("model", st.model.id.as_str()),
        ("mode", st.mode.name()),
        ("budget", budget.as_str()),
        ("backend", if st.model.gpu { "gpu" } else { "cpu" }),
    ];
    let body = st.model.metrics.render(queued, capacity, &info);
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], body).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(prompt: usize, reused: usize, completion: usize, rounds: usize, secs: f64) -> Outcome {
        Outcome {
            finish: "stop",
            prompt_tokens: prompt,
            reused_tokens: reused,
            completion_tokens: completion,
            tokens_per_second: (completion - 1) as f64 / secs,
            acceptance_length: (completion - 1) as f64 / rounds as f64,
            rounds,
            decode_seconds: secs,
            stop_string: None,
        }
    }

    /// The value of the sample line starting with `name` (labels included) in `text`.
    fn sample(text: &str, name: &str) -> f64 {
        let line = text
            .lines()
            .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
            .unwrap_or_else(|| panic!("{name} in\n{text}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    }

    #[test]
    fn totals_are_ratios_of_sums_and_every_family_is_typed() {
        let m = Metrics::new();
        m.count_request("/v1/chat/completions", 200);
        m.count_request("/v1/chat/completions", 200);
        m.count_request(route_label("/nope/../x"), 404);
        m.record(Some(&outcome(10, 0, 9, 4, 2.0)));
        m.record(Some(&outcome(30, 19, 5, 4, 0.5)));
        m.record(None);
        let t = m.render(2, 16, &[("model", "a\"b"), ("mode", "tree")]);
        assert!(t.contains("flashtree_info{model=\"a\\\"b\",mode=\"tree\"} 1"), "{t}");
        assert_eq!(sample(&t, "flashtree_requests_total{route=\"/v1/chat/completions\",status=\"200\"}"), 2.0);
        assert_eq!(sample(&t, "flashtree_requests_total{route=\"unmatched\",status=\"404\"}"), 1.0);
        assert_eq!(sample(&t, "flashtree_generations_total{outcome=\"failed\"}"), 1.0);
        assert_eq!(sample(&t, "flashtree_prompt_tokens_total"), 40.0);
        assert_eq!(sample(&t, "flashtree_reused_prompt_tokens_total"), 19.0);
        assert_eq!(sample(&t, "flashtree_prefilled_tokens_total"), 21.0);
        assert_eq!(sample(&t, "flashtree_completion_tokens_total"), 14.0);
        assert!((sample(&t, "flashtree_tokens_per_second") - 12.0 / 2.5).abs() < 1e-9);
        assert!((sample(&t, "flashtree_acceptance_length") - 12.0 / 8.0).abs() < 1e-9);
        assert!((sample(&t, "flashtree_last_tokens_per_second") - 8.0).abs() < 1e-9);
        assert_eq!(sample(&t, "flashtree_last_acceptance_length"), 1.0);
        assert_eq!(sample(&t, "flashtree_queue_depth"), 2.0);
        assert_eq!(sample(&t, "flashtree_queue_capacity"), 16.0);
        // Every sample's family has HELP and TYPE lines before it.
        for line in t.lines().filter(|l| !l.starts_with('#')) {
            let name = line.split(['{', ' ']).next().unwrap();
            assert!(t.contains(&format!("# TYPE {name} ")), "{name}");
            assert!(t.contains(&format!("# HELP {name} ")), "{name}");
        }
    }
}
