//! Prefix reuse across turns in `flashtree serve` (`flashtree::serve::history`), over HTTP on a
//! `synth --preset tiny` pair (CPU): a second turn whose first reply re-tokenises to other
//! tokens than the model generated still reuses the whole first turn, through
//! `/v1/chat/completions` and `/v1/messages`, and answers what a cold run of the same *tokens*
//! gives; a conversation that does not continue the session's (an edited message, another
//! conversation run in between) is prefilled whole and answers what a cold run of its plain
//! tokenisation gives.
//!
//! The reference ([`cold`]) is the same pair loaded in-process (`cli::pair::with_pair`, CPU,
//! tree mode, budget 22 as the server) running one `Session` turn from empty caches
//! (`Session::reset` before each) on a given token sequence: that is what a server whose session
//! holds nothing would run for those tokens. Each test starts its own server, so no other
//! test's request comes between its turns.
//!
//! With the Qwen3.5 template (thinking on), turn 2 re-renders turn 1's reply without its
//! reasoning, so its text leaves turn 1's right after turn 1's generation prompt starts: the
//! session goes back to the snapshot saved there and prefills only the rest (`cached_tokens` =
//! the tokens of the conversation before that generation prompt), and the answer is a cold
//! run's.

use flashtree::cli::pair_args::PairArgs;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};

use flashtree::chat::{ChatTemplate, Message, RenderOptions};
use flashtree::cli::backend::BackendArg;
use flashtree::cli::generate::ModeArg;
use flashtree::cli::pair::{with_pair, PairInfo, PairRunner, PairSpec};
use flashtree::cli::serve::ServeArgs;
use flashtree::spec::{DecodingRule, Draft, GenerateConfig, Mode, Session, Target};
use flashtree::tokenizer::gguf::{from_gguf, GgufTokenizer};
use flashtree_tests::serve::{local, start};
use serde_json::{json, Value};

const BUDGET: usize = 22;

use flashtree_tests::tiny::tiny_pair as tiny;

/// A new server on the tiny pair (its own session).
fn new_server() -> String {
    new_server_with(None)
}

/// A new server on the tiny pair with `--chat-template` `template`.
fn new_server_with(template: Option<&str>) -> String {
    let (model, draft) = tiny().clone();
    start(ServeArgs {
        chat_template: template.map(PathBuf::from),
        ..local(PairArgs { model, draft: Some(draft), backend: BackendArg::Cpu, mode: ModeArg::Tree, budget: BUDGET })
    })
}

/// The tiny model's tokenizer and chat template (its bare ChatML one, as the server renders).
fn tk() -> &'static (GgufTokenizer, ChatTemplate) {
    static TK: OnceLock<(GgufTokenizer, ChatTemplate)> = OnceLock::new();
    TK.get_or_init(|| {
        let file = flashtree::gguf::Gguf::open(&tiny().0).unwrap();
        let tk = from_gguf(&file).unwrap();
        let template = ChatTemplate::new(tk.chat_template.as_deref().expect("the tiny GGUF has a template")).unwrap();
        (tk, template)
    })
}

/// The server's rendering of `messages` (`(role, content)`), generation prompt added.
fn render(messages: &[(&str, &str)]) -> String {
    let msgs: Vec<Message> = messages.iter().map(|(r, c)| Message::new(r, c)).collect();
    tk().1.render(&msgs, RenderOptions { add_generation_prompt: true, enable_thinking: true }).unwrap()
}

fn encode(text: &str) -> Vec<u32> {
    tk().0.tokenizer.encode(text).unwrap()
}

/// The exact text of `ids` (their bytes concatenated).
fn bytes_text(ids: &[u32]) -> String {
    let bytes: Vec<u8> = ids.iter().flat_map(|&id| tk().0.tokenizer.token_bytes(id).unwrap().to_vec()).collect();
    String::from_utf8(bytes).expect("valid UTF-8")
}

/// The text the server sends for generated `ids` (EOS not included; broken UTF-8 as U+FFFD).
fn reply_text(ids: &[u32]) -> String {
    let mut dec = flashtree::tokenizer::StreamDecoder::new();
    let mut text = String::new();
    for &id in ids.iter().filter(|id| !tk().0.stop_ids.contains(id)) {
        text.push_str(&dec.push(tk().0.tokenizer.token_bytes(id).unwrap()));
    }
    text + &dec.finish()
}

/// One cold turn: prompt tokens and most tokens in; generated tokens and the number of tokens
/// the caches hold afterwards out.
type ColdJob = (Vec<u32>, usize, mpsc::Sender<(Vec<u32>, usize)>);

struct ColdRunner(mpsc::Receiver<ColdJob>);

impl PairRunner for ColdRunner {
    type Output = ();

    fn run<T, D>(self, mut session: Session<T, D>, info: &PairInfo) -> anyhow::Result<()>
    where
        T: Target,
        D: Draft<Features = T::Features>,
    {
        for (prompt, max_tokens, reply) in self.0 {
            session.reset().map_err(|e| anyhow::anyhow!(e))?;
            let cfg = GenerateConfig {
                mode: Mode::Tree,
                budget: BUDGET,
                max_tokens,
                eos: info.tk.stop_ids.clone(),
                rule: DecodingRule::Greedy,
            };
            let (out, _) =
                session.generate(&prompt, &cfg, |_| ControlFlow::Continue(())).map_err(|e| anyhow::anyhow!(e))?;
            let _ = reply.send((out, session.committed_tokens().len()));
        }
        Ok(())
    }
}

/// Generates after `prompt` from empty caches (what a server holding nothing runs for these
/// tokens): the generated tokens and how many tokens the caches hold afterwards.
fn cold(prompt: &[u32], max_tokens: usize) -> (Vec<u32>, usize) {
    static TX: OnceLock<Mutex<mpsc::Sender<ColdJob>>> = OnceLock::new();
    let tx = TX.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<ColdJob>();
        std::thread::spawn(move || {
            let (model, draft) = tiny().clone();
            let spec = PairSpec {
                model,
                draft: Some(draft),
                backend: BackendArg::Cpu,
                ctx: None,
                budget: BUDGET,
                verbose: false,
            };
            with_pair(&spec, ColdRunner(rx)).unwrap();
        });
        Mutex::new(tx)
    });
    let (rtx, rrx) = mpsc::channel();
    tx.lock().unwrap().send((prompt.to_vec(), max_tokens, rtx)).unwrap();
    rrx.recv().expect("the reference pair failed")
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

async fn post(url: &str, path: &str, body: &Value) -> Value {
    let r = reqwest::Client::new().post(format!("{url}{path}")).json(body).send().await.unwrap();
    let status = r.status().as_u16();
    let v: Value = r.json().await.unwrap();
    assert_eq!(status, 200, "{v}");
    v
}

async fn metric(url: &str, name: &str) -> u64 {
    let text = reqwest::get(format!("{url}/metrics")).await.unwrap().text().await.unwrap();
    let line = text.lines().find(|l| l.starts_with(&format!("{name} "))).unwrap_or_else(|| panic!("{name}: {text}"));
    line.split_whitespace().last().unwrap().parse().unwrap()
}

/// A first message whose greedy 16-token reply is valid UTF-8 and re-tokenises to other tokens
/// (most of the tiny model's replies are not valid UTF-8: their text then cannot be continued,
/// see `flashtree::serve::history`); found by trying `hello there {i}` for i in 0..60.
const USER1: &str = "hello there 55";
const USER2: &str = "and again";
const MAX1: usize = 16;
const MAX2: usize = 12;

/// The first turn run cold, and the second turn's token sequence: the first turn's prompt and
/// output as generated, then the rest of the rendered conversation tokenised.
struct Turns {
    prompt1: Vec<u32>,
    out1: Vec<u32>,
    /// Tokens the caches hold after turn 1 (its prompt and output but a pending last token).
    held1: usize,
    reply1: String,
    /// The rendered second turn.
    text2: String,
    prompt2: Vec<u32>,
}

fn turns() -> &'static Turns {
    static T: OnceLock<Turns> = OnceLock::new();
    T.get_or_init(|| {
        let prompt1 = encode(&render(&[("user", USER1)]));
        let (out1, held1) = cold(&prompt1, MAX1);
        let reply1 = reply_text(&out1);
        let text2 = render(&[("user", USER1), ("assistant", &reply1), ("user", USER2)]);
        let history: Vec<u32> = prompt1.iter().chain(&out1).copied().collect();
        let rest = text2.strip_prefix(bytes_text(&history).as_str()).expect("turn 2 continues turn 1's text");
        let prompt2 = history.iter().copied().chain(encode(rest)).collect();
        Turns { prompt1, out1, held1, reply1, text2, prompt2 }
    })
}

/// The premise of the reuse tests: the first reply is long, its text re-tokenises to other
/// tokens, so the plain tokenisation of turn 2 does not extend turn 1's tokens.
#[test]
fn the_first_reply_re_tokenises_to_other_tokens() {
    let t = turns();
    let gen: Vec<u32> = t.out1.iter().copied().filter(|id| !tk().0.stop_ids.contains(id)).collect();
    assert!(gen.len() >= 12, "the first reply has {} tokens: {:?}", gen.len(), t.reply1);
    assert_ne!(encode(&t.reply1), gen, "the reply's text re-tokenises to the same tokens: {:?}", t.reply1);
    let history: Vec<u32> = t.prompt1.iter().chain(&t.out1).copied().collect();
    assert!(!encode(&t.text2).starts_with(&history[..t.held1]), "plain tokenisation still extends the caches");
    assert!(t.held1 + 1 >= history.len() && history.starts_with(&t.prompt1));
}

#[test]
fn chat_second_turn_reuses_the_first_turn_as_generated_and_answers_as_a_cold_run_of_its_tokens() {
    let t = turns();
    let (out2, _) = cold(&t.prompt2, MAX2);
    let url = new_server();
    rt().block_on(async {
        let v = post(
            &url,
            "/v1/chat/completions",
            &json!({
            "messages": [{ "role": "user", "content": USER1 }], "max_tokens": MAX1 }),
        )
        .await;
        assert_eq!(v["choices"][0]["message"]["content"], t.reply1.as_str(), "{v}");
        assert_eq!(v["usage"]["prompt_tokens"].as_u64(), Some(t.prompt1.len() as u64), "{v}");
        assert_eq!(v["usage"]["completion_tokens"].as_u64(), Some(t.out1.len() as u64), "{v}");
        assert_eq!(v["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
        let reused_before = metric(&url, "flashtree_reused_prompt_tokens_total").await;

        let v = post(
            &url,
            "/v1/chat/completions",
            &json!({ "messages": [
            { "role": "user", "content": USER1 },
            { "role": "assistant", "content": t.reply1 },
            { "role": "user", "content": USER2 },
        ], "max_tokens": MAX2 }),
        )
        .await;
        let cached = v["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap() as usize;
        // Everything of turn 1 but a pending last token (chosen, not yet run through the target).
        assert_eq!(cached, t.held1, "{v}");
        assert!(cached + 1 >= t.prompt1.len() + t.out1.len(), "{v}");
        assert_eq!(v["usage"]["prompt_tokens"].as_u64(), Some(t.prompt2.len() as u64), "{v}");
        assert_eq!(v["choices"][0]["message"]["content"], reply_text(&out2).as_str(), "{v}");
        assert_eq!(v["usage"]["completion_tokens"].as_u64(), Some(out2.len() as u64), "{v}");
        let reused = metric(&url, "flashtree_reused_prompt_tokens_total").await;
        assert_eq!(reused - reused_before, cached as u64);
    });
}

#[test]
fn messages_second_turn_reuses_the_first_turn_and_count_tokens_is_the_cold_prefill() {
    let t = turns();
    let (out2, _) = cold(&t.prompt2, MAX2);
    let url = new_server();
    let second = json!({ "max_tokens": MAX2, "messages": [
        { "role": "user", "content": USER1 },
        { "role": "assistant", "content": t.reply1 },
        { "role": "user", "content": USER2 },
    ] });
    rt().block_on(async {
        let v = post(
            &url,
            "/v1/messages",
            &json!({
            "max_tokens": MAX1, "messages": [{ "role": "user", "content": USER1 }] }),
        )
        .await;
        assert_eq!(v["content"][0]["text"], t.reply1.as_str(), "{v}");
        assert_eq!(v["usage"]["input_tokens"].as_u64(), Some(t.prompt1.len() as u64), "{v}");
        assert_eq!(v["usage"]["cache_read_input_tokens"], 0, "{v}");

        let count = post(&url, "/v1/messages/count_tokens", &second).await;
        let count = count["input_tokens"].as_u64().unwrap() as usize;
        assert_eq!(count, encode(&t.text2).len(), "count_tokens is the plain tokenisation");

        let v = post(&url, "/v1/messages", &second).await;
        let (input, read) = (
            v["usage"]["input_tokens"].as_u64().unwrap() as usize,
            v["usage"]["cache_read_input_tokens"].as_u64().unwrap() as usize,
        );
        assert_eq!(read, t.held1, "{v}");
        assert_eq!(input + read, t.prompt2.len(), "{v}");
        assert_eq!(v["content"][0]["text"], reply_text(&out2).as_str(), "{v}");

        // Cold (a server whose session holds nothing), the same request prefills `count` tokens.
        let fresh = new_server();
        let v = post(&fresh, "/v1/messages", &second).await;
        assert_eq!(v["usage"]["cache_read_input_tokens"], 0, "{v}");
        assert_eq!(v["usage"]["input_tokens"].as_u64(), Some(count as u64), "{v}");
        let (plain_out, _) = cold(&encode(&t.text2), MAX2);
        assert_eq!(v["content"][0]["text"], reply_text(&plain_out).as_str(), "{v}");
    });
}

#[test]
fn an_edited_earlier_message_is_prefilled_whole_and_answers_as_a_cold_run() {
    let t = turns();
    let edited = render(&[("user", "hello, there"), ("assistant", &t.reply1), ("user", USER2)]);
    let (want, _) = cold(&encode(&edited), MAX2);
    let url = new_server();
    rt().block_on(async {
        post(
            &url,
            "/v1/chat/completions",
            &json!({
            "messages": [{ "role": "user", "content": USER1 }], "max_tokens": MAX1 }),
        )
        .await;
        let v = post(
            &url,
            "/v1/chat/completions",
            &json!({ "messages": [
            { "role": "user", "content": "hello, there" },
            { "role": "assistant", "content": t.reply1 },
            { "role": "user", "content": USER2 },
        ], "max_tokens": MAX2 }),
        )
        .await;
        assert_eq!(v["usage"]["prompt_tokens_details"]["cached_tokens"], 0, "{v}");
        assert_eq!(v["usage"]["prompt_tokens"].as_u64(), Some(encode(&edited).len() as u64), "{v}");
        assert_eq!(v["choices"][0]["message"]["content"], reply_text(&want).as_str(), "{v}");
    });
}

/// The history is matched when the job starts, not when the request arrives: a second turn sent
/// while another conversation runs finds that conversation in the caches, so it runs its plain
/// tokenisation (matching on arrival would have picked turn 1's tokens, which the caches no
/// longer hold).
#[test]
fn a_turn_queued_behind_another_conversation_is_prefilled_whole() {
    let t = turns();
    let (want, _) = cold(&encode(&t.text2), MAX2);
    assert_ne!(encode(&t.text2), t.prompt2, "the two tokenisations must differ for this test to tell them apart");
    let url = new_server();
    rt().block_on(async {
        post(
            &url,
            "/v1/chat/completions",
            &json!({
            "messages": [{ "role": "user", "content": USER1 }], "max_tokens": MAX1 }),
        )
        .await;
        // Another conversation, long enough to be running when turn 2 arrives.
        let other = json!({ "messages": [{ "role": "user", "content": "something else" }],
                            "max_tokens": 400, "ignore_eos": true, "stream": true });
        let mut r =
            reqwest::Client::new().post(format!("{url}/v1/chat/completions")).json(&other).send().await.unwrap();
        assert_eq!(r.status().as_u16(), 200);
        let first = r.chunk().await.unwrap().expect("a first chunk");
        assert!(!first.is_empty());
        let second = json!({ "messages": [
            { "role": "user", "content": USER1 },
            { "role": "assistant", "content": t.reply1 },
            { "role": "user", "content": USER2 },
        ], "max_tokens": MAX2 });
        let url2 = url.clone();
        let turn2 = tokio::spawn(async move { post(&url2, "/v1/chat/completions", &second).await });
        let mut rest = Vec::new();
        while let Some(c) = r.chunk().await.unwrap() {
            rest.extend_from_slice(&c);
        }
        assert!(String::from_utf8_lossy(&rest).contains("[DONE]"));
        let v = turn2.await.unwrap();
        assert_eq!(v["usage"]["prompt_tokens_details"]["cached_tokens"], 0, "{v}");
        assert_eq!(v["usage"]["prompt_tokens"].as_u64(), Some(encode(&t.text2).len() as u64), "{v}");
        assert_eq!(v["choices"][0]["message"]["content"], reply_text(&want).as_str(), "{v}");
    });
}

/// The Qwen3.5 template's rendering of `messages`, with or without the generation prompt.
fn render_qwen(messages: &[(&str, &str)], add_generation_prompt: bool) -> String {
    let msgs: Vec<Message> = messages.iter().map(|(r, c)| Message::new(r, c)).collect();
    ChatTemplate::qwen35().render(&msgs, RenderOptions { add_generation_prompt, enable_thinking: true }).unwrap()
}

/// The tokens before the generation prompt of `messages` rendered by the Qwen3.5 template, and
/// the whole prompt's tokens (the first are a prefix of the second: the tokenizer splits at the
/// special `<|im_start|>`).
fn qwen_turn(messages: &[(&str, &str)]) -> (usize, Vec<u32>) {
    let base = encode(&render_qwen(messages, false));
    let prompt = encode(&render_qwen(messages, true));
    assert!(prompt.starts_with(&base) && prompt.len() > base.len());
    (base.len(), prompt)
}

const THINK_Q1: &str = "what is two and two";
const THINK_Q2: &str = "and three and three";
const THINK_Q3: &str = "thanks";

/// Chat completions through the Qwen3.5 template: turns 2 and 3 send the earlier replies back
/// without their reasoning; each reuses exactly the conversation before the previous turn's
/// generation prompt (the snapshot), prefills the rest, and answers what a server that holds
/// nothing answers (the same tokens: a cold run); `/metrics` counts the reused tokens.
#[test]
fn chat_turns_that_drop_the_reasoning_reuse_everything_before_the_last_generation_prompt() {
    let url = new_server_with(Some("qwen35"));
    let turn = |msgs: &[(&str, &str)]| {
        let messages: Vec<Value> = msgs.iter().map(|(r, c)| json!({ "role": r, "content": c })).collect();
        json!({ "messages": messages, "max_tokens": MAX2, "ignore_eos": true })
    };
    let convs: [&[(&str, &str)]; 3] = [
        &[("user", THINK_Q1)],
        &[("user", THINK_Q1), ("assistant", "4"), ("user", THINK_Q2)],
        &[("user", THINK_Q1), ("assistant", "4"), ("user", THINK_Q2), ("assistant", "6"), ("user", THINK_Q3)],
    ];
    rt().block_on(async {
        let mut reused_total = 0;
        for (t, conv) in convs.iter().enumerate() {
            let (_, prompt) = qwen_turn(conv);
            let v = post(&url, "/v1/chat/completions", &turn(conv)).await;
            // The snapshot of the turn before: the conversation before its generation prompt.
            let want_cached = if t == 0 { 0 } else { qwen_turn(convs[t - 1]).0 };
            let cached = v["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap() as usize;
            assert_eq!(cached, want_cached, "turn {}: {v}", t + 1);
            assert_eq!(v["usage"]["prompt_tokens"].as_u64(), Some(prompt.len() as u64), "turn {}: {v}", t + 1);
            assert_eq!(v["usage"]["completion_tokens"].as_u64(), Some(MAX2 as u64), "turn {}: {v}", t + 1);
            reused_total += cached as u64;
            assert_eq!(metric(&url, "flashtree_reused_prompt_tokens_total").await, reused_total);
            // A cold run of the same tokens: a server that holds nothing.
            if t > 0 {
                let fresh = new_server_with(Some("qwen35"));
                let c = post(&fresh, "/v1/chat/completions", &turn(conv)).await;
                assert_eq!(c["usage"]["prompt_tokens_details"]["cached_tokens"], 0, "{c}");
                assert_eq!(v["choices"][0]["message"], c["choices"][0]["message"], "turn {}", t + 1);
                assert_eq!(v["usage"]["completion_tokens"], c["usage"]["completion_tokens"]);
            }
        }
    });
}

/// The same through `/v1/messages` (Anthropic clients send thinking blocks back or not; here
/// not): `cache_read_input_tokens` is the conversation before turn 1's generation prompt,
/// `input_tokens` the rest, and the answer is a cold server's.
#[test]
fn messages_turn_that_drops_the_thinking_reuses_the_conversation_before_it() {
    let url = new_server_with(Some("qwen35"));
    let first: &[(&str, &str)] = &[("user", THINK_Q1)];
    let second: &[(&str, &str)] = &[("user", THINK_Q1), ("assistant", "4"), ("user", THINK_Q2)];
    let body = |msgs: &[(&str, &str)]| {
        let messages: Vec<Value> = msgs.iter().map(|(r, c)| json!({ "role": r, "content": c })).collect();
        json!({ "messages": messages, "max_tokens": MAX2 })
    };
    let (s1, _) = qwen_turn(first);
    let (_, prompt2) = qwen_turn(second);
    rt().block_on(async {
        let v = post(&url, "/v1/messages", &body(first)).await;
        assert_eq!(v["usage"]["cache_read_input_tokens"], 0, "{v}");
        let v = post(&url, "/v1/messages", &body(second)).await;
        let (input, read) = (
            v["usage"]["input_tokens"].as_u64().unwrap() as usize,
            v["usage"]["cache_read_input_tokens"].as_u64().unwrap() as usize,
        );
        assert_eq!((read, input + read), (s1, prompt2.len()), "{v}");
        let fresh = new_server_with(Some("qwen35"));
        let c = post(&fresh, "/v1/messages", &body(second)).await;
        assert_eq!(c["usage"]["cache_read_input_tokens"], 0, "{c}");
        assert_eq!(v["content"], c["content"]);
        assert_eq!(v["usage"]["output_tokens"], c["usage"]["output_tokens"]);
    });
}
