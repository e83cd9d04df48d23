//! What the controller's two built-in upstreams (`fixture_upstream`, `model_free_upstream`)
//! share: serving an axum app on `127.0.0.1:0` until shut down, the constant-time bearer check
//! against the run's in-memory key, and the OpenAI-shaped error body. Each upstream keeps its own
//! routes and answers; only the server skeleton lives here, so both stop, authorize and refuse the
//! same way.

use crate::fixture_upstream::FixtureKey;
use axum::Router;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::net::SocketAddr;
use tokio_util::sync::CancellationToken;

/// A server on a loopback port. Dropping it does not stop it; call [`Self::shutdown`].
pub struct LoopbackServer {
    addr: SocketAddr,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl LoopbackServer {
    /// Binds `127.0.0.1:0` and serves `app` until [`Self::shutdown`].
    pub async fn serve(app: Router) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        #[allow(
            clippy::disallowed_methods,
            reason = "not detached: the handle is kept and awaited by LoopbackServer::shutdown"
        )]
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move { stopped.cancelled().await })
                .await;
        });
        Ok(Self { addr, stop, task })
    }

    /// Base URL for an OpenAI-compatible client: `http://127.0.0.1:PORT/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Stops accepting, lets in-flight requests finish, and waits for the server task.
    pub async fn shutdown(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}

/// Whether the request carries `Authorization: Bearer <key>`, compared in constant time (the
/// proxy injects the key; a request that reaches an upstream with any other value is refused).
pub fn bearer_matches(key: &FixtureKey, headers: &HeaderMap) -> bool {
    let expected = format!("Bearer {}", key.expose());
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| constant_time_eq(v.as_bytes(), expected.as_bytes()))
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// An error in the OpenAI API's shape, carrying the upstream's marker header (`x-eval-fixture`,
/// `x-eval-model-free`) so it can never pass for a real provider's.
pub fn openai_error(
    marker: &'static str,
    status: StatusCode,
    kind: &str,
    message: &str,
) -> Response {
    (
        status,
        [(marker, "1")],
        axum::Json(json!({"error": {"message": message, "type": kind, "code": kind}})),
    )
        .into_response()
}

/// A chat-completion body parsed as both upstreams require it: JSON with a non-empty `model`.
/// The refusal is the 400 the upstream sends as it is (boxed: a `Response` is large).
pub fn chat_request(marker: &'static str, body: &[u8]) -> Result<(Value, String), Box<Response>> {
    let request: Value = serde_json::from_slice(body).map_err(|e| {
        Box::new(openai_error(
            marker,
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            &format!("body is not JSON: {e}"),
        ))
    })?;
    let model = request
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    if model.is_empty() {
        return Err(Box::new(openai_error(
            marker,
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "`model` is required",
        )));
    }
    Ok((request, model))
}
