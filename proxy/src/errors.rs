//! Errors the proxy returns to callers of its Rust API, and the error bodies it sends to clients
//! in each API's own shape.

use axum::body::Body;
use http::{HeaderValue, Response, StatusCode};
use serde_json::json;

use crate::config::ApiKind;

/// Why the proxy could not start, register an attempt or make an oracle call. Never contains
/// the key.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// The configured upstream URL does not parse.
    #[error("invalid upstream URL {0:?}")]
    Upstream(String),
    /// The upstream HTTP client could not be built.
    #[error("cannot build the upstream HTTP client: {0}")]
    Client(String),
    /// A socket or port could not be bound.
    #[error("cannot listen on {what}: {source}")]
    Listen {
        /// The socket path or address.
        what: String,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// An attempt id registered twice.
    #[error("attempt {0:?} is already registered")]
    Duplicate(String),
    /// An operation on an attempt that is not registered.
    #[error("attempt {0:?} is not registered")]
    UnknownAttempt(String),
    /// An oracle call for an attempt registered without the oracle role.
    #[error("attempt {attempt:?} has no {role} role")]
    NoRole {
        /// The attempt id.
        attempt: String,
        /// The role asked for.
        role: &'static str,
    },
    /// A token attempt on a proxy started without `tcp_listen`.
    #[error("the proxy has no TCP listener for token attempts (set ProxyConfig::tcp_listen)")]
    NoTcpListener,
    /// The operating system's random source failed.
    #[error("cannot generate a random token: {0}")]
    Random(String),
    /// The oracle call did not produce an answer.
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

/// An error and its sources, joined with `: `.
pub(crate) fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}
