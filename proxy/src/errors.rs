//! Errors the proxy returns to callers of its Rust API, and the error bodies it sends to clients
//! in each API's own shape.

use axum::body::Body;
use http::{HeaderValue, Response, StatusCode};
use serde_json::json;

use crate::config::ApiKind;

#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("invalid upstream URL {0:?}")]
    Upstream(String),
    #[error("cannot build the upstream HTTP client: {0}")]
    Client(String),
    #[error("cannot listen on {what}: {source}")]
    Listen {
        what: String,
        source: std::io::Error,
    },
    #[error("attempt {0:?} is already registered")]
    Duplicate(String),
    #[error("attempt {0:?} is not registered")]
    UnknownAttempt(String),
    #[error("attempt {attempt:?} has no {role} role")]
    NoRole { attempt: String, role: &'static str },
    #[error("the proxy has no TCP listener for token attempts (set ProxyConfig::tcp_listen)")]
    NoTcpListener,
    #[error("cannot generate a random token: {0}")]
    Random(String),
    #[error("the oracle call failed: {0}")]
    Oracle(String),
}

/// An error response in the API's own shape. `code` is a stable machine-readable reason.
pub(crate) fn api_error(
    api: ApiKind,
    status: StatusCode,
    code: &str,
    message: &str,
) -> Response<Body> {
    let body = match api {
        ApiKind::OpenAiChat => json!({
            "error": {
                "message": message,
                "type": openai_type(status),
                "param": null,
                "code": code,
            }
        }),
        ApiKind::AnthropicMessages => json!({
            "type": "error",
            "error": { "type": anthropic_type(status), "message": message, "code": code }
        }),
    };
    let mut resp = Response::new(Body::from(body.to_string()));
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    h.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    // Official SDKs retry 429/5xx unless told otherwise; a refused contract or spent budget will
    // not change on retry.
    if matches!(code, "contract_violation" | "budget_exhausted") {
        h.insert("x-should-retry", HeaderValue::from_static("false"));
    }
    resp
}

fn openai_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        429 => "rate_limit_error",
        400..=499 => "invalid_request_error",
        _ => "api_error",
    }
}

fn anthropic_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        400..=499 => "invalid_request_error",
        _ => "api_error",
    }
}
