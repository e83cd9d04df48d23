//! What the controller's two built-in upstreams (`fixture_upstream`, `model_free_upstream`)
//! share: serving the OpenAI routes on `127.0.0.1:0` until shut down, the constant-time bearer
//! check against the run's in-memory key, the OpenAI-shaped error body, and the wire of one
//! plain-stop completion, streamed in DeepSeek's shape or not ([`Completion`]). Each upstream
//! keeps only what it answers and what it counts, so both stop, authorize, refuse and frame the
//! same way.

use crate::key::FixtureKey;
use axum::Router;
use axum::body::Body;
use axum::handler::Handler;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
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

/// The routes both upstreams serve: chat completions and the model list, with and without the
/// `/v1` prefix (clients differ in whether their base URL carries it).
pub fn openai_app<S, C, CT, M, MT>(state: S, chat: C, models: M) -> Router
where
    S: Clone + Send + Sync + 'static,
    C: Handler<CT, S>,
    CT: 'static,
    M: Handler<MT, S>,
    MT: 'static,
{
    Router::new()
        .route("/v1/chat/completions", post(chat.clone()))
        .route("/chat/completions", post(chat))
        .route("/v1/models", get(models.clone()))
        .route("/models", get(models))
        .with_state(state)
}

/// The 401 of a request without the run's key.
pub fn unauthorized(marker: &'static str) -> Response {
    openai_error(
        marker,
        StatusCode::UNAUTHORIZED,
        "invalid_api_key",
        "invalid API key",
    )
}

/// `GET /models`: the one model an upstream serves.
pub fn model_list(id: &str, owned_by: &str) -> Response {
    axum::Json(
        json!({"object": "list", "data": [{"id": id, "object": "model", "owned_by": owned_by}]}),
    )
    .into_response()
}

/// Whether a chat request asks for a stream, and for the usage chunk at its end.
#[derive(Clone, Copy, Debug)]
pub struct ChatFlags {
    pub stream: bool,
    pub include_usage: bool,
}

impl ChatFlags {
    pub fn of(request: &Value) -> Self {
        let flag = |pointer: &str| {
            request
                .pointer(pointer)
                .and_then(Value::as_bool)
                .unwrap_or(false)
        };
        Self {
            stream: flag("/stream"),
            include_usage: flag("/stream_options/include_usage"),
        }
    }
}

/// One plain-stop completion (`finish_reason: "stop"`, no tool call) as the real API sends it:
/// a `chat.completion` object, or `data:` events — the role chunk, the content in pieces, the
/// finish chunk, each with `"usage": null`, then the `choices: []` usage chunk when asked, then
/// `[DONE]` — as `text/event-stream; charset=utf-8` (DEEPSEEK-WIRE.md, "Streamed responses").
pub struct Completion<'a> {
    /// The marker header (`x-eval-fixture`, `x-eval-model-free`) every response carries.
    pub marker: &'static str,
    /// The `system_fingerprint` that says which built-in upstream answered.
    pub fingerprint: &'static str,
    /// `<prefix>-<16 hex of the request body's SHA-256>`.
    pub id: String,
    /// The requested model, echoed.
    pub model: &'a str,
    pub content: &'a str,
    /// At most this many bytes of content per streamed event (on char boundaries).
    pub piece_bytes: usize,
    pub usage: Value,
}

impl Completion<'_> {
    /// The id of a completion answering `body`: stable for the same request bytes.
    pub fn id(prefix: &str, body: &[u8]) -> String {
        let digest = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(body));
        format!("{prefix}-{}", &digest[..16])
    }

    pub fn respond(&self, flags: ChatFlags) -> Response {
        if !flags.stream {
            let body = json!({
                "id": self.id, "object": "chat.completion", "created": 0, "model": self.model,
                "system_fingerprint": self.fingerprint,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": self.content},
                             "finish_reason": "stop"}],
                "usage": self.usage,
            });
            return ([(self.marker, "1")], axum::Json(body)).into_response();
        }
        let chunk = |delta: Value, finish: Value, usage: &Value| {
            let choices = if delta.is_null() {
                json!([])
            } else {
                json!([{"index": 0, "delta": delta, "finish_reason": finish}])
            };
            json!({"id": self.id, "object": "chat.completion.chunk", "created": 0,
                   "model": self.model, "system_fingerprint": self.fingerprint,
                   "choices": choices, "usage": usage})
        };
        let mut events = vec![chunk(
            json!({"role": "assistant", "content": ""}),
            Value::Null,
            &Value::Null,
        )];
        for piece in split_pieces(self.content, self.piece_bytes) {
            events.push(chunk(json!({"content": piece}), Value::Null, &Value::Null));
        }
        events.push(chunk(json!({}), json!("stop"), &Value::Null));
        if flags.include_usage {
            events.push(chunk(Value::Null, Value::Null, &self.usage));
        }
        let mut frames: Vec<Result<bytes::Bytes, std::io::Error>> = events
            .into_iter()
            .map(|e| Ok(bytes::Bytes::from(format!("data: {e}\n\n"))))
            .collect();
        frames.push(Ok(bytes::Bytes::from_static(b"data: [DONE]\n\n")));
        (
            [
                (header::CONTENT_TYPE, "text/event-stream; charset=utf-8"),
                (header::CACHE_CONTROL, "no-cache"),
            ],
            [(self.marker, "1")],
            Body::from_stream(futures_util::stream::iter(frames)),
        )
            .into_response()
    }
}

/// Splits text into pieces of at most `max` bytes on char boundaries (`max` ≥ 4 holds any char).
fn split_pieces(text: &str, max: usize) -> Vec<&str> {
    let max = max.max(4);
    let mut out = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let mut end = rest.len().min(max);
        while !rest.is_char_boundary(end) {
            end -= 1;
        }
        let (head, tail) = rest.split_at(end);
        out.push(head);
        rest = tail;
    }
    out
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
