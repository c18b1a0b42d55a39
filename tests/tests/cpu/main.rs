//! The CPU suite in one test binary (one link instead of one per file): the reference against its
//! fixtures, lossless decoding, the CLI, the server, robustness. `generate_cli` stays a binary of its
//! own: it bounds the peak resident memory of its whole process.

mod bench_suite;
mod chat;
mod chat_fuzz_findings;
mod convert;
mod convert_output;
mod ddtree;
mod demo_pair;
mod gguf;
mod hostile_configs;
mod inspect;
mod llamacpp_gguf;
mod model_fixtures;
mod quant_fixtures;
mod quant_roundtrip;
mod reference_bits;
mod robustness;
mod serve;
mod serve_api;
mod serve_budget;
mod serve_metrics;
mod serve_reuse;
mod serve_schemathesis;
mod serve_sdk;
mod spec_cpu;
mod spec_lossless;
mod spec_sampling;
mod spec_session;
mod spec_snapshot;
mod synth;
mod tokenizer;
