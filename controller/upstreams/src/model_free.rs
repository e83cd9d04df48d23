//! The built-in model-free upstream (`eval run --upstream model-free`): an OpenAI-compatible
//! server on `127.0.0.1:0` that answers every chat completion with a plain stop — one fixed
//! sentence ([`ANSWER`]), `finish_reason: "stop"`, no tool call — so a harness ends its session
//! after its first request. The sentence is not empty because the DeepSeek Harness treats a
//! completed response without content as a fault (`EMPTY_RESPONSE`) and retries it five times. It is for protocols whose metrics read only what the harness sends
//! (the wire metrics): a router decides its route before the first request, which is all such a
//! protocol measures.
//!
//! - `POST /v1/chat/completions` (and `/chat/completions`), streaming (SSE, in DeepSeek's shape:
//!   a first chunk with `role`, a finish chunk, the `choices: []` usage chunk when
//!   `stream_options.include_usage`, then `[DONE]`) and not; `GET /v1/models`.
//! - Requires `Authorization: Bearer <key>` with a random key the controller generated for this
//!   run, so the proxy's key injection is exercised as in a paid run.
//! - `usage` is DeepSeek's (`prompt_cache_hit_tokens`/`_miss_tokens` beside `prompt_tokens`):
//!   the prompt is counted as a quarter of the request body's bytes (no tokenizer: nobody pays
//!   for these tokens, and the proxy meters whatever is reported), the answer as 0 tokens.
//! - Every response carries `"system_fingerprint": "eval-model-free"` and the header
//!   `x-eval-model-free: 1`: nothing it produces can pass for a real model's output.
//!
//! Its evidence is marked model-free in `run_started` (`model_free_evidence`), the report data and
//! every report format; only a protocol that declares `model_free = true` (which loading allows
//! only with wire metrics) may release on it (`eval_evidence::report::build`).

use crate::loopback::{self, ChatFlags, Completion, LoopbackServer};
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The `system_fingerprint` of every answer.
pub const FINGERPRINT: &str = "eval-model-free";

/// The content of every answer.
pub const ANSWER: &str = "(eval model-free upstream: no model answers here; the session ends.)";

struct Shared {
    key: crate::key::FixtureKey,
    calls: AtomicU64,
}

/// A running model-free upstream. Dropping it does not stop it; call [`Self::shutdown`].
pub struct ModelFreeUpstream {
    server: LoopbackServer,
    shared: Arc<Shared>,
}

impl ModelFreeUpstream {
    /// Binds `127.0.0.1:0` and serves until [`Self::shutdown`]. The key is a random in-memory
    /// key of the same kind as the fixture upstream's (`FixtureKey::generate`).
    pub async fn start(key: crate::key::FixtureKey) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            key,
            calls: AtomicU64::new(0),
        });
        let app = loopback::openai_app(shared.clone(), chat, models);
        Ok(Self {
            server: LoopbackServer::serve(app).await?,
            shared,
        })
    }

    /// Base URL for an OpenAI-compatible client: `http://127.0.0.1:PORT/v1`.
    pub fn base_url(&self) -> String {
        self.server.base_url()
    }

    /// Chat completions answered (authorized and well-formed).
    pub fn calls(&self) -> u64 {
        self.shared.calls.load(Ordering::Relaxed)
    }

    pub async fn shutdown(self) {
        self.server.shutdown().await;
    }
}

const MARKER: &str = "x-eval-model-free";

async fn models(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    if !loopback::bearer_matches(&shared.key, &headers) {
        return loopback::unauthorized(MARKER);
    }
    loopback::model_list("model-free", FINGERPRINT)
}

/// The usage of a plain stop to a request of `body_len` bytes, in DeepSeek's shape (the answer's
/// tokens counted as a quarter of its bytes, as the prompt's).
pub fn usage(body_len: usize) -> Value {
    let prompt = (body_len as u64).div_ceil(4);
    let answer = (ANSWER.len() as u64).div_ceil(4);
    json!({
        "prompt_tokens": prompt,
        "completion_tokens": answer,
        "total_tokens": prompt + answer,
        "prompt_cache_hit_tokens": 0,
        "prompt_cache_miss_tokens": prompt,
    })
}

async fn chat(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: bytes::Bytes,
) -> Response {
    if !loopback::bearer_matches(&shared.key, &headers) {
        return loopback::unauthorized(MARKER);
    }
    let (request, model) = match loopback::chat_request(MARKER, &body) {
        Ok(parsed) => parsed,
        Err(refusal) => return *refusal,
    };
    shared.calls.fetch_add(1, Ordering::Relaxed);
    Completion {
        marker: MARKER,
        fingerprint: FINGERPRINT,
        id: Completion::id("model-free", &body),
        model: &model,
        content: ANSWER,
        piece_bytes: ANSWER.len(),
        usage: usage(body.len()),
    }
    .respond(ChatFlags::of(&request))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::key::FixtureKey;

    fn client() -> reqwest::Client {
        let _ = rustls::crypto::ring::default_provider().install_default();
        reqwest::Client::builder().no_proxy().build().unwrap()
    }

    /// What the DeepSeek Harness sends (DEEPSEEK-WIRE.md, "Requests the Harness sends").
    fn request(stream: bool, include_usage: bool) -> Value {
        json!({"model": "deepseek-chat", "stream": stream,
               "stream_options": {"include_usage": include_usage},
               "thinking": {"type": "enabled"}, "max_tokens": 256000,
               "tools": [{"type": "function", "function": {"name": "read", "parameters": {}}}],
               "messages": [{"role": "system", "content": "You are a coding agent."},
                            {"role": "user", "content": "-h is a prompt, not an option"}]})
    }

    #[tokio::test]
    async fn answers_a_plain_stop_with_usage_and_requires_the_key() {
        let key = FixtureKey::generate().unwrap();
        let up = ModelFreeUpstream::start(key.clone()).await.unwrap();
        let c = client();
        let url = format!("{}/chat/completions", up.base_url());
        let body = request(false, false).to_string();
        let r = c
            .post(&url)
            .bearer_auth("wrong")
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401);
        let r = c
            .post(&url)
            .bearer_auth(key.expose())
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["x-eval-model-free"], "1");
        let v: Value = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap();
        assert_eq!(v["object"], "chat.completion");
        assert_eq!(v["model"], "deepseek-chat");
        assert_eq!(v["system_fingerprint"], FINGERPRINT);
        let choice = &v["choices"][0];
        assert_eq!(choice["finish_reason"], "stop");
        assert_eq!(choice["message"]["role"], "assistant");
        assert_eq!(choice["message"]["content"], ANSWER);
        assert!(choice["message"].get("tool_calls").is_none());
        let u = &v["usage"];
        assert_eq!(u["completion_tokens"], ANSWER.len().div_ceil(4) as u64);
        assert_eq!(u["prompt_tokens"], body.len().div_ceil(4) as u64);
        assert_eq!(
            u["total_tokens"].as_u64().unwrap(),
            u["prompt_tokens"].as_u64().unwrap() + u["completion_tokens"].as_u64().unwrap()
        );
        assert_eq!(
            u["prompt_cache_hit_tokens"].as_u64().unwrap()
                + u["prompt_cache_miss_tokens"].as_u64().unwrap(),
            u["prompt_tokens"].as_u64().unwrap()
        );
        assert_eq!(up.calls(), 1, "the refused call is not counted");
        up.shutdown().await;
    }

    /// Parses an SSE body into its `data:` payloads, checking the framing.
    fn events(text: &str) -> Vec<String> {
        assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
        text.split("\n\n")
            .filter(|e| !e.is_empty())
            .map(|e| e.strip_prefix("data: ").unwrap().to_owned())
            .collect()
    }

    #[tokio::test]
    async fn streams_a_plain_stop_with_the_usage_chunk_only_when_asked() {
        let key = FixtureKey::generate().unwrap();
        let up = ModelFreeUpstream::start(key.clone()).await.unwrap();
        let c = client();
        let url = format!("{}/chat/completions", up.base_url());
        let body = request(true, true).to_string();
        let r = c
            .post(&url)
            .bearer_auth(key.expose())
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert!(
            r.headers()[axum::http::header::CONTENT_TYPE]
                .to_str()
                .unwrap()
                .starts_with("text/event-stream")
        );
        let ev = events(&r.text().await.unwrap());
        assert_eq!(ev.len(), 5, "role, content, stop, usage, [DONE]: {ev:?}");
        let v: Vec<Value> = ev[..4]
            .iter()
            .map(|e| serde_json::from_str(e).unwrap())
            .collect();
        assert_eq!(v[0]["choices"][0]["delta"]["role"], "assistant");
        assert_eq!(v[1]["choices"][0]["delta"]["content"], ANSWER);
        assert_eq!(v[2]["choices"][0]["finish_reason"], "stop");
        assert!(
            v.iter()
                .all(|x| x["choices"][0]["delta"].get("tool_calls").is_none())
        );
        assert_eq!(v[3]["choices"], json!([]));
        assert_eq!(
            v[3]["usage"]["prompt_tokens"],
            body.len().div_ceil(4) as u64
        );
        assert_eq!(
            v[3]["usage"]["completion_tokens"],
            ANSWER.len().div_ceil(4) as u64
        );
        assert!(v[..3].iter().all(|x| x["usage"].is_null()));

        let text = c
            .post(&url)
            .bearer_auth(key.expose())
            .body(request(true, false).to_string())
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let ev = events(&text);
        assert_eq!(ev.len(), 4, "no usage chunk unless asked: {ev:?}");
        assert!(!text.contains("prompt_tokens"));
        up.shutdown().await;
    }
}
