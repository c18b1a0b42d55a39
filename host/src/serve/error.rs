//! Errors answered in OpenAI's shape: `{"error":{"message","type","param","code"}}` with the
//! HTTP status that goes with them (400 bad input, 401 missing key, 404, 413 body too large,
//! 429 queue full with `Retry-After`, 500/503 when the worker failed or is gone).

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

/// One error answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// OpenAI's `error.type` (`invalid_request_error`, `authentication_error`, …).
    pub kind: &'static str,
    /// OpenAI's `error.code`, when a client may recognise it (`context_length_exceeded`).
    pub code: Option<&'static str>,
    /// Human-readable cause; names the field and what was expected.
    pub message: String,
    /// Seconds for a `Retry-After` header (queue full).
    pub retry_after: Option<u64>,
}

impl ApiError {
    /// 400 `invalid_request_error`.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
    }

    /// An error of `status` and `kind`.
    pub fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        Self { status, kind, code: None, message: message.into(), retry_after: None }
    }

    /// The same error with OpenAI's `code`.
    pub fn with_code(mut self, code: &'static str) -> Self {
        self.code = Some(code);
        self
    }

    /// The JSON body.
    pub fn body(&self) -> serde_json::Value {
        serde_json::json!({
            "error": { "message": self.message, "type": self.kind, "param": null, "code": self.code }
        })
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut r = (self.status, Json(self.body())).into_response();
        if let Some(s) = self.retry_after {
            r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        r
    }
}
