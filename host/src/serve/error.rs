//! Errors answered in OpenAI's shape: `{"error":{"message","type","param","code"}}` with the
//! HTTP status that goes with them (400 bad input, 401 missing key, 404, 413 body too large,
//! 429 queue full with `Retry-After`, 500/503 when the worker failed or is gone) — or, for the
//! Anthropic routes, in Anthropic's: `{"type":"error","error":{"type","message"}}` with its
//! type names (`invalid_request_error`, `authentication_error`, `not_found_error`,
//! `request_too_large`, `rate_limit_error`, `api_error`, `overloaded_error`).

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
    /// Answer in Anthropic's shape.
    pub anthropic: bool,
}

impl ApiError {
    /// 400 `invalid_request_error`.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
    }

    /// An error of `status` and `kind`.
    pub fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        Self { status, kind, code: None, message: message.into(), retry_after: None, anthropic: false }
    }

    /// The same error with OpenAI's `code`.
    pub fn with_code(mut self, code: &'static str) -> Self {
        self.code = Some(code);
        self
    }

    /// The same error in Anthropic's shape.
    pub fn anthropic(mut self) -> Self {
        self.anthropic = true;
        self
    }

    /// The same error in the shape of the API that `path` belongs to (`/v1/messages…` is
    /// Anthropic's).
    pub fn shaped_for(self, path: &str) -> Self {
        if path.starts_with("/v1/messages") {
            self.anthropic()
        } else {
            self
        }
    }

    /// Anthropic's `error.type` for this error.
    pub fn anthropic_kind(&self) -> &'static str {
        match self.status.as_u16() {
            401 => "authentication_error",
            403 => "permission_error",
            404 => "not_found_error",
            413 => "request_too_large",
            429 => "rate_limit_error",
            503 => "overloaded_error",
            500..=599 => "api_error",
            _ => "invalid_request_error",
        }
    }

    /// The JSON body.
    pub fn body(&self) -> serde_json::Value {
        if self.anthropic {
            return serde_json::json!({
                "type": "error", "error": { "type": self.anthropic_kind(), "message": self.message }
            });
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anthropic_errors_have_anthropics_shape_and_type_names() {
        let e = ApiError::new(StatusCode::TOO_MANY_REQUESTS, "rate_limit_error", "full").shaped_for("/v1/messages");
        assert_eq!(
            e.body(),
            serde_json::json!({ "type": "error", "error": { "type": "rate_limit_error", "message": "full" } })
        );
        let kind = |s: u16| ApiError::new(StatusCode::from_u16(s).unwrap(), "x", "m").anthropic_kind();
        assert_eq!(
            [400, 401, 404, 413, 500, 503].map(kind),
            [
                "invalid_request_error",
                "authentication_error",
                "not_found_error",
                "request_too_large",
                "api_error",
                "overloaded_error"
            ]
        );
        // Other paths keep OpenAI's shape.
        let e = ApiError::bad_request("m").shaped_for("/v1/chat/completions");
        assert_eq!(e.body()["error"]["type"], "invalid_request_error");
        assert!(e.body().get("type").is_none());
    }
}
