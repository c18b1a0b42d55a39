//! `GET /openapi.json`: the server's routes as an OpenAPI 3.1 document, written by hand with
//! `serde_json` (the bodies are parsed by hand-written serde structs, so a derive-based generator
//! would describe them no better). It lists every route of issue 24 — the OpenAI routes
//! (`/v1/models`, `/v1/chat/completions`, `/v1/completions`), the Anthropic ones
//! (`/v1/messages`, `/v1/messages/count_tokens`), `/health`, `/metrics` and itself — with the
//! request fields the server reads (unknown fields are accepted and ignored, hence
//! `additionalProperties` left open) and the answers' shapes, errors included in each API's own
//! shape. Schemathesis runs against it in CI (`tests/tests/cpu/serve_schemathesis.rs`).

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};

use super::routes::AppState;

/// `GET /openapi.json`.
pub async fn handler(State(st): State<Arc<AppState>>) -> Json<Value> {
    Json(document(&st.model.id))
}

fn schema_ref(name: &str) -> Value {
    json!({ "$ref": format!("#/components/schemas/{name}") })
}

fn json_body(schema: &str) -> Value {
    json!({ "required": true, "content": { "application/json": { "schema": schema_ref(schema) } } })
}

fn answer(description: &str, schema: &str) -> Value {
    json!({ "description": description, "content": { "application/json": { "schema": schema_ref(schema) } } })
}

/// The error answers of an API whose error body is `error_schema`.
fn errors(error_schema: &str, generates: bool) -> serde_json::Map<String, Value> {
    let mut m = serde_json::Map::new();
    let mut add = |code: &str, what: &str| {
        m.insert(code.into(), answer(what, error_schema));
    };
    add("400", "Malformed JSON, a wrong type, a value out of range, a refused parameter, or a prompt longer than the context (code `context_length_exceeded`).");
    add("401", "A key is required (`--api-key`) and the request has none or a wrong one.");
    add("404", "No such route.");
    add("413", "The body is larger than `--max-body-bytes`.");
    if generates {
        add("429", "The request queue is full; `Retry-After` says when to retry.");
        add("500", "Generation failed inside the server (the server keeps serving).");
        add("503", "The generation worker has stopped.");
    }
    m
}

/// A POST operation that generates, with its JSON answer and, with `stream`, server-sent events.
fn generating_post(summary: &str, request: &str, response: &str, error_schema: &str, sse: &str) -> Value {
    let mut responses = errors(error_schema, true);
    responses.insert(
        "200".into(),
        json!({
            "description": format!("The answer: JSON, or with `stream: true` server-sent events ({sse})."),
            "content": {
                "application/json": { "schema": schema_ref(response) },
                "text/event-stream": { "schema": { "type": "string" } },
            },
        }),
    );
    json!({ "post": { "summary": summary, "requestBody": json_body(request), "responses": responses } })
}

/// The OpenAPI document (`model_id`: the served model's name, given as the example).
pub fn document(model_id: &str) -> Value {
    let mut count_responses = errors("AnthropicError", false);
    count_responses.insert(
        "200".into(),
        answer(
            "The prompt tokens the same `/v1/messages` request would prefill cold (the rendered prompt \
             tokenised whole; a request that continues the server's conversation reuses its replies' tokens \
             as generated, which may count differently).",
            "CountTokensResponse",
        ),
    );
    let mut models_responses = errors("OpenAIError", false);
    models_responses.insert(
        "200".into(),
        answer("The served model (any `model` value is accepted by the other routes).", "ModelList"),
    );
    let mut metrics_responses = errors("OpenAIError", false);
    metrics_responses.insert(
        "200".into(),
        json!({
            "description": "Prometheus text exposition (0.0.4): requests by route and status, prompt / completion / reused tokens, tok/s and acceptance length (last and totals), queue depth.",
            "content": { "text/plain": { "schema": { "type": "string" } } },
        }),
    );
    let mut openapi_responses = errors("OpenAIError", false);
    openapi_responses.insert(
        "200".into(),
        json!({ "description": "This document.", "content": { "application/json": { "schema": { "type": "object" } } } }),
    );
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "flashtree serve",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "OpenAI- and Anthropic-compatible endpoints over one model pair (speculative DFlash + DDTree decoding, greedy output equal to autoregressive decoding). Requests run one at a time from a bounded queue. With `--api-key`, every route but `/health` needs `Authorization: Bearer KEY` or `x-api-key: KEY`.",
        },
        "servers": [{ "url": "/" }],
        "security": [{}, { "bearer": [] }, { "apiKey": [] }],
        "paths": {
            "/health": {
                "get": {
                    "summary": "Liveness (never needs the key).",
                    "security": [],
                    "responses": { "200": answer("The server is up.", "Health") },
                },
            },
            "/metrics": { "get": { "summary": "Prometheus metrics.", "responses": metrics_responses } },
            "/openapi.json": { "get": { "summary": "This OpenAPI document.", "responses": openapi_responses } },
            "/v1/models": { "get": { "summary": "OpenAI: the served model.", "responses": models_responses } },
            "/v1/chat/completions": generating_post(
                "OpenAI chat completions.",
                "ChatCompletionRequest",
                "ChatCompletion",
                "OpenAIError",
                "`chat.completion.chunk` objects (tool calls as `delta.tool_calls`: id and name first, then \
                 `arguments` fragments as generated), a usage chunk with `stream_options.include_usage`, then `[DONE]`",
            ),
            "/v1/completions": generating_post(
                "OpenAI (legacy) text completions.",
                "CompletionRequest",
                "Completion",
                "OpenAIError",
                "`text_completion` objects, then `[DONE]`",
            ),
            "/v1/messages": generating_post(
                "Anthropic Messages.",
                "MessagesRequest",
                "Message",
                "AnthropicError",
                "`message_start`, per block `content_block_start` / `content_block_delta`… / `content_block_stop` \
                 (`tool_use` input as `input_json_delta` fragments as generated), `message_delta`, `message_stop`",
            ),
            "/v1/messages/count_tokens": {
                "post": {
                    "summary": "Anthropic: the prompt tokens a Messages request would prefill (system and tools included).",
                    "requestBody": json_body("CountTokensRequest"),
                    "responses": count_responses,
                },
            },
        },
        "components": {
            "securitySchemes": {
                "bearer": { "type": "http", "scheme": "bearer" },
                "apiKey": { "type": "apiKey", "in": "header", "name": "x-api-key" },
            },
            "schemas": schemas(model_id),
        },
    })
}

/// The component schemas.
fn schemas(model_id: &str) -> Value {
    let stop = json!({
        "description": "Up to four stop strings; the text ends before the first found.",
        "oneOf": [
            { "type": "string" },
            { "type": "array", "items": { "type": "string" }, "maxItems": 4 },
            { "type": "null" },
        ],
    });
    let sampling = json!({
        "temperature": { "type": ["number", "null"], "minimum": 0, "maximum": 2, "description": "0 (or absent) = greedy. T > 0 samples (top_k, top_p, min_p, seed) on either backend." },
        "top_p": { "type": ["number", "null"], "exclusiveMinimum": 0, "maximum": 1 },
        "top_k": { "type": ["integer", "null"], "minimum": 0, "description": "0 = no limit (extension)." },
        "min_p": { "type": ["number", "null"], "minimum": 0, "maximum": 1, "description": "Extension." },
        "seed": { "type": ["integer", "null"], "minimum": 0, "maximum": u64::MAX },
    });
    let with_sampling = |mut props: Value| {
        for (k, v) in sampling.as_object().into_iter().flatten() {
            props[k] = v.clone();
        }
        props
    };
    let usage = json!({
        "type": "object",
        "required": ["prompt_tokens", "completion_tokens", "total_tokens"],
        "properties": {
            "prompt_tokens": { "type": "integer" },
            "completion_tokens": { "type": "integer" },
            "total_tokens": { "type": "integer" },
            "prompt_tokens_details": {
                "type": "object",
                "properties": { "cached_tokens": { "type": "integer", "description": "Prompt tokens reused from the previous request's caches." } },
            },
        },
    });
    let openai_tool = json!({
        "type": "object",
        "required": ["type", "function"],
        "properties": {
            "type": { "const": "function" },
            "function": {
                "type": "object",
                "required": ["name"],
                "properties": {
                    "name": { "type": "string" },
                    "description": { "type": "string" },
                    "parameters": { "type": "object" },
                },
            },
        },
    });
    let anthropic_text_block = json!({
        "type": "object",
        "required": ["type", "text"],
        "properties": { "type": { "const": "text" }, "text": { "type": "string" } },
    });
    let anthropic_block = json!({
        "type": "object",
        "required": ["type"],
        "description": "A content block: `text`, `image`, `tool_use` (assistant), `tool_result` (user), `thinking` (assistant).",
        "properties": {
            "type": { "enum": ["text", "image", "tool_use", "tool_result", "thinking", "redacted_thinking"] },
            "text": { "type": "string" },
            "id": { "type": "string" },
            "name": { "type": "string" },
            "input": { "type": "object" },
            "tool_use_id": { "type": "string" },
            "content": { "oneOf": [{ "type": "string" }, { "type": "array", "items": { "type": "object" } }] },
            "is_error": { "type": "boolean" },
            "thinking": { "type": "string" },
            "signature": { "type": "string" },
        },
    });
    let anthropic_tool = json!({
        "type": "object",
        "required": ["name", "input_schema"],
        "properties": {
            "name": { "type": "string" },
            "description": { "type": "string" },
            "input_schema": { "type": "object" },
        },
    });
    let anthropic_messages = json!({
        "type": "array",
        "minItems": 1,
        "items": {
            "type": "object",
            "required": ["role", "content"],
            "properties": {
                "role": { "enum": ["user", "assistant"] },
                "content": { "oneOf": [{ "type": "string" }, { "type": "array", "items": schema_ref("AnthropicContentBlock") }] },
            },
        },
    });
    let anthropic_system = json!({
        "oneOf": [{ "type": "string" }, { "type": "array", "items": anthropic_text_block.clone() }],
        "description": "The system prompt: text, or a list of text blocks.",
    });
    let tool_choice_anthropic = json!({
        "type": "object",
        "required": ["type"],
        "properties": { "type": { "enum": ["auto", "any", "tool", "none"] }, "name": { "type": "string" } },
    });
    json!({
        "Health": {
            "type": "object",
            "required": ["status"],
            "properties": { "status": { "const": "ok" } },
        },
        "ModelList": {
            "type": "object",
            "required": ["object", "data"],
            "properties": {
                "object": { "const": "list" },
                "data": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["id", "object"],
                        "properties": {
                            "id": { "type": "string", "examples": [model_id] },
                            "object": { "const": "model" },
                            "created": { "type": "integer" },
                            "owned_by": { "type": "string" },
                        },
                    },
                },
            },
        },
        "OpenAIError": {
            "type": "object",
            "required": ["error"],
            "properties": {
                "error": {
                    "type": "object",
                    "required": ["message", "type"],
                    "properties": {
                        "message": { "type": "string" },
                        "type": { "type": "string" },
                        "param": { "type": ["string", "null"] },
                        "code": { "type": ["string", "null"] },
                    },
                },
            },
        },
        "AnthropicError": {
            "type": "object",
            "required": ["type", "error"],
            "properties": {
                "type": { "const": "error" },
                "error": {
                    "type": "object",
                    "required": ["type", "message"],
                    "properties": { "type": { "type": "string" }, "message": { "type": "string" } },
                },
            },
        },
        "ChatMessage": {
            "type": "object",
            "required": ["role"],
            "properties": {
                "role": { "enum": ["system", "developer", "user", "assistant", "tool"] },
                "content": {
                    "oneOf": [
                        { "type": "string" },
                        { "type": "null" },
                        {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "required": ["type"],
                                "properties": { "type": { "const": "text" }, "text": { "type": "string" } },
                            },
                        },
                    ],
                },
                "reasoning_content": { "type": ["string", "null"] },
                "name": { "type": "string" },
                "tool_calls": { "type": "array", "items": { "type": "object" } },
                "tool_call_id": { "type": "string" },
            },
        },
        "ChatCompletionRequest": {
            "type": "object",
            "required": ["messages"],
            "properties": with_sampling(json!({
                "model": { "type": ["string", "null"], "description": "Any value; echoed back.", "examples": [model_id] },
                "messages": { "type": "array", "minItems": 1, "items": schema_ref("ChatMessage") },
                "stream": { "type": ["boolean", "null"] },
                "stream_options": {
                    "type": ["object", "null"],
                    "properties": { "include_usage": { "type": ["boolean", "null"] } },
                },
                "max_tokens": { "type": ["integer", "null"], "minimum": 0, "description": "Deprecated name of `max_completion_tokens`." },
                "max_completion_tokens": { "type": ["integer", "null"], "minimum": 0, "description": "Clamped to what the context leaves; default: all of it." },
                "stop": stop.clone(),
                "n": { "type": ["integer", "null"], "minimum": 1, "description": "Only 1 is served." },
                "logprobs": { "type": ["boolean", "null"] },
                "tools": { "type": ["array", "null"], "items": openai_tool },
                "tool_choice": {
                    "oneOf": [
                        { "enum": ["none", "auto", "required"] },
                        { "type": "object", "properties": { "type": { "const": "function" }, "function": { "type": "object", "properties": { "name": { "type": "string" } } } } },
                    ],
                },
                "parallel_tool_calls": { "type": ["boolean", "null"] },
                "ignore_eos": { "type": ["boolean", "null"], "description": "Keep generating after EOS (vLLM's extension)." },
                "chat_template_kwargs": {
                    "type": ["object", "null"],
                    "properties": { "enable_thinking": { "type": ["boolean", "null"] } },
                },
                "reasoning_effort": { "type": ["string", "null"] },
            })),
        },
        "ChatCompletion": {
            "type": "object",
            "required": ["id", "object", "created", "model", "choices"],
            "properties": {
                "id": { "type": "string" },
                "object": { "const": "chat.completion" },
                "created": { "type": "integer" },
                "model": { "type": "string" },
                "choices": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["index", "message", "finish_reason"],
                        "properties": {
                            "index": { "type": "integer" },
                            "message": {
                                "type": "object",
                                "required": ["role"],
                                "properties": {
                                    "role": { "const": "assistant" },
                                    "content": { "type": ["string", "null"] },
                                    "reasoning_content": { "type": ["string", "null"] },
                                    "tool_calls": { "type": "array", "items": { "type": "object" } },
                                },
                            },
                            "finish_reason": { "enum": ["stop", "length", "tool_calls"] },
                        },
                    },
                },
                "usage": usage.clone(),
            },
        },
        "CompletionRequest": {
            "type": "object",
            "required": ["prompt"],
            "properties": with_sampling(json!({
                "model": { "type": ["string", "null"], "examples": [model_id] },
                "prompt": { "oneOf": [{ "type": "string" }, { "type": "array", "items": { "type": "string" }, "minItems": 1, "maxItems": 1 }] },
                "stream": { "type": ["boolean", "null"] },
                "stream_options": {
                    "type": ["object", "null"],
                    "properties": { "include_usage": { "type": ["boolean", "null"] } },
                },
                "max_tokens": { "type": ["integer", "null"], "minimum": 0 },
                "stop": stop.clone(),
                "n": { "type": ["integer", "null"], "minimum": 1 },
                "echo": { "type": ["boolean", "null"] },
                "ignore_eos": { "type": ["boolean", "null"] },
            })),
        },
        "Completion": {
            "type": "object",
            "required": ["id", "object", "created", "model", "choices"],
            "properties": {
                "id": { "type": "string" },
                "object": { "const": "text_completion" },
                "created": { "type": "integer" },
                "model": { "type": "string" },
                "choices": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["index", "text", "finish_reason"],
                        "properties": {
                            "index": { "type": "integer" },
                            "text": { "type": "string" },
                            "finish_reason": { "enum": ["stop", "length"] },
                        },
                    },
                },
                "usage": usage,
            },
        },
        "AnthropicContentBlock": anthropic_block,
        "MessagesRequest": {
            "type": "object",
            "required": ["model", "max_tokens", "messages"],
            "properties": {
                "model": { "type": "string", "description": "Any value; echoed back.", "examples": [model_id] },
                "max_tokens": { "type": "integer", "minimum": 1, "description": "Clamped to what the context leaves." },
                "messages": anthropic_messages.clone(),
                "system": anthropic_system.clone(),
                "stop_sequences": { "type": "array", "items": { "type": "string" } },
                "stream": { "type": "boolean" },
                "temperature": { "type": "number", "minimum": 0, "maximum": 1 },
                "top_p": { "type": "number", "exclusiveMinimum": 0, "maximum": 1 },
                "top_k": { "type": "integer", "minimum": 0 },
                "tools": { "type": "array", "items": anthropic_tool.clone() },
                "tool_choice": tool_choice_anthropic.clone(),
                "thinking": {
                    "type": "object",
                    "required": ["type"],
                    "properties": {
                        "type": { "enum": ["enabled", "adaptive", "disabled"] },
                        "budget_tokens": { "type": "integer", "minimum": 1024, "description":
                            "Required with `enabled`, less than `max_tokens`: after this many thinking tokens the \
                             server closes the thinking and the model answers (`max_tokens` bounds the whole)." },
                    },
                },
                "metadata": { "type": "object" },
            },
        },
        "Message": {
            "type": "object",
            "required": ["id", "type", "role", "content", "model", "stop_reason", "usage"],
            "properties": {
                "id": { "type": "string" },
                "type": { "const": "message" },
                "role": { "const": "assistant" },
                "content": { "type": "array", "items": schema_ref("AnthropicContentBlock") },
                "model": { "type": "string", "description": "The requested model name." },
                "stop_reason": { "enum": ["end_turn", "max_tokens", "stop_sequence", "tool_use", null] },
                "stop_sequence": { "type": ["string", "null"] },
                "usage": {
                    "type": "object",
                    "required": ["input_tokens", "output_tokens"],
                    "properties": {
                        "input_tokens": { "type": "integer" },
                        "output_tokens": { "type": "integer" },
                        "cache_read_input_tokens": { "type": ["integer", "null"] },
                    },
                },
            },
        },
        "CountTokensRequest": {
            "type": "object",
            "required": ["model", "messages"],
            "properties": {
                "model": { "type": "string", "examples": [model_id] },
                "messages": anthropic_messages,
                "system": anthropic_system,
                "tools": { "type": "array", "items": anthropic_tool },
                "tool_choice": tool_choice_anthropic,
                "thinking": { "type": "object" },
            },
        },
        "CountTokensResponse": {
            "type": "object",
            "required": ["input_tokens"],
            "properties": { "input_tokens": { "type": "integer" } },
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `$ref` of `v` (recursively).
    fn refs(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                if let Some(Value::String(r)) = m.get("$ref") {
                    out.push(r.clone());
                }
                m.values().for_each(|x| refs(x, out));
            }
            Value::Array(a) => a.iter().for_each(|x| refs(x, out)),
            _ => {}
        }
    }

    #[test]
    fn every_route_is_described_and_every_reference_resolves() {
        let d = document("m");
        assert_eq!(d["openapi"], "3.1.0");
        for (path, method) in [
            ("/health", "get"),
            ("/metrics", "get"),
            ("/openapi.json", "get"),
            ("/v1/models", "get"),
            ("/v1/chat/completions", "post"),
            ("/v1/completions", "post"),
            ("/v1/messages", "post"),
            ("/v1/messages/count_tokens", "post"),
        ] {
            let op = &d["paths"][path][method];
            assert!(op.is_object(), "{method} {path}");
            assert!(op["responses"]["200"].is_object(), "{method} {path}");
            if method == "post" {
                assert!(op["requestBody"]["content"]["application/json"]["schema"].is_object(), "{path}");
                assert!(op["responses"]["400"].is_object(), "{path}");
            }
        }
        let mut all = Vec::new();
        refs(&d, &mut all);
        assert!(all.len() > 10);
        for r in all {
            let name = r.strip_prefix("#/components/schemas/").unwrap();
            assert!(d["components"]["schemas"][name].is_object(), "{r} does not resolve");
        }
    }
}
