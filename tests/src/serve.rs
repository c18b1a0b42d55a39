//! Helpers of the `flashtree serve` tests: a server on an ephemeral port in-process, and the
//! text `generate` gives for the same prompt (the reference the server's text must equal).

use flashtree::cli::generate::{run_to, GenerateArgs};
use flashtree::cli::pair_args::PairArgs;
use flashtree::cli::sampling::OutputFormat;
use flashtree::cli::serve::ServeArgs;

/// Serve arguments for `pair` on 127.0.0.1 (any free port), as the tests use them unless they set a
/// field: no API key, the model's context, a queue of 16, 1 MiB bodies, the file's chat template,
/// no script.
pub fn local(pair: PairArgs) -> ServeArgs {
    ServeArgs {
        pair,
        host: "127.0.0.1".parse().unwrap(),
        port: 0,
        api_key: None,
        ctx: None,
        queue: 16,
        max_body_bytes: 1 << 20,
        chat_template: None,
        script: None,
    }
}

/// Loads the pair of `args` and serves it on 127.0.0.1 (any free port) on its own runtime
/// thread for the rest of the process; returns the base URL (`http://127.0.0.1:PORT`).
pub fn start(args: ServeArgs) -> String {
    let app = flashtree::serve::app(&args).expect("loading the pair");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        rt.block_on(async move {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(l.local_addr().unwrap()).unwrap();
            flashtree::serve::serve(l, app, std::future::pending()).await.unwrap();
        });
    });
    format!("http://{}", rx.recv().unwrap())
}

/// The text `generate` streams for `args` (text output), without the EOS token's text when it
/// ended there (the server never sends it).
pub fn generate_text(args: &GenerateArgs) -> String {
    let mut a = args.clone();
    a.output_format = OutputFormat::Text;
    let (mut out, mut err) = (Vec::new(), Vec::new());
    run_to(&a, &mut out, &mut err).unwrap();
    let text = String::from_utf8(out).unwrap();
    let text = text.strip_suffix('\n').unwrap().to_string();
    a.output_format = OutputFormat::Ids;
    let mut ids = Vec::new();
    run_to(&a, &mut ids, &mut err).unwrap();
    let last: Option<u32> = String::from_utf8(ids).unwrap().split_whitespace().last().map(|s| s.parse().unwrap());
    let file = flashtree::gguf::Gguf::open(&a.pair.model).unwrap();
    let tk = flashtree::tokenizer::gguf::from_gguf(&file).unwrap();
    match last.filter(|id| tk.stop_ids.contains(id)) {
        Some(eos) => {
            let piece = String::from_utf8(tk.tokenizer.token_bytes(eos).unwrap().to_vec()).unwrap();
            text.strip_suffix(piece.as_str()).unwrap().to_string()
        }
        None => text,
    }
}
