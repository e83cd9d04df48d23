//! The embedded fixture upstream: a deterministic, OpenAI-compatible model server on
//! `127.0.0.1:0` so the whole pipeline runs without a real key.
//!
//! - `POST /v1/chat/completions` (and `/chat/completions`), streaming (SSE) and not;
//!   `GET /v1/models`.
//! - Requires `Authorization: Bearer <key>` with a random key the controller generated for this
//!   run, so key injection by the proxy is exercised end to end (a request with any other key
//!   gets 401).
//! - Answers come from [`answer`] (a pure function of the request, wrapping the runtimes crate's
//!   fixture model); `usage` is honest (it counts what was actually sent and answered), and the
//!   server keeps its own tally ([`FixtureTally`]) so tests can cross-check the proxy's meter.
//! - Every response carries `"system_fingerprint": "eval-fixture"` and the header
//!   `x-eval-fixture: 1`: nothing it produces can pass for a real model's output.
//!
//! This module is the controller's one door to the fixture model (`eval_runtimes::fixture_model`):
//! the demo and `--upstream fixture` run it on purpose; no other production module may use it
//! (a test below reads the sources to keep it so).

use crate::key::FixtureKey;
use crate::loopback::{self, ChatFlags, Completion, LoopbackServer};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde::Serialize;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};

/// The fixture upstream's own count of what it served.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct FixtureTally {
    pub calls: u64,
    pub stream_calls: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub rejected_unauthorized: u64,
}

struct Shared {
    key: FixtureKey,
    tally: Mutex<FixtureTally>,
}

/// A running fixture upstream. Dropping it does not stop it; call [`FixtureUpstream::shutdown`].
pub struct FixtureUpstream {
    server: LoopbackServer,
    shared: Arc<Shared>,
}

impl FixtureUpstream {
    /// Binds `127.0.0.1:0` and serves until [`Self::shutdown`].
    pub async fn start(key: FixtureKey) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            key,
            tally: Mutex::new(FixtureTally::default()),
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

    pub fn tally(&self) -> FixtureTally {
        self.shared
            .tally
            .lock()
            .map(|t| t.clone())
            .unwrap_or_default()
    }

    pub async fn shutdown(self) {
        self.server.shutdown().await;
    }
}

const MARKER: &str = "x-eval-fixture";

async fn models(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    if !loopback::bearer_matches(&shared.key, &headers) {
        return loopback::unauthorized(MARKER);
    }
    loopback::model_list("fixture", "eval-fixture")
}

/// What the fixture model says to one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FixtureAnswer {
    pub content: String,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

/// The fixture model: a pure function of the request body.
pub fn answer(request: &Value) -> Result<FixtureAnswer, String> {
    fixture_model_adapter::respond(request)
}

/// Thin adapter over `eval_runtimes::fixture_model`, so a change of its signature stays here.
mod fixture_model_adapter {
    use super::FixtureAnswer;
    use serde_json::Value;

    pub fn respond(request: &Value) -> Result<FixtureAnswer, String> {
        let a = eval_runtimes::fixture_model::respond(request).map_err(|e| e.to_string())?;
        Ok(FixtureAnswer {
            content: a.content,
            prompt_tokens: a.usage.prompt_tokens,
            completion_tokens: a.usage.completion_tokens,
        })
    }
}

async fn chat(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: bytes::Bytes,
) -> Response {
    if !loopback::bearer_matches(&shared.key, &headers) {
        if let Ok(mut t) = shared.tally.lock() {
            t.rejected_unauthorized += 1;
        }
        return loopback::unauthorized(MARKER);
    }
    let (request, model) = match loopback::chat_request(MARKER, &body) {
        Ok(parsed) => parsed,
        Err(refusal) => return *refusal,
    };
    let ans = match answer(&request) {
        Ok(a) => a,
        Err(e) => {
            return loopback::openai_error(
                MARKER,
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                &e,
            );
        }
    };
    let flags = ChatFlags::of(&request);
    if let Ok(mut t) = shared.tally.lock() {
        t.calls += 1;
        if flags.stream {
            t.stream_calls += 1;
        }
        t.prompt_tokens += ans.prompt_tokens;
        t.completion_tokens += ans.completion_tokens;
    }
    Completion {
        marker: MARKER,
        fingerprint: "eval-fixture",
        id: Completion::id("fixture", &body),
        model: &model,
        content: &ans.content,
        piece_bytes: 64,
        usage: json!({
            "prompt_tokens": ans.prompt_tokens,
            "completion_tokens": ans.completion_tokens,
            "total_tokens": ans.prompt_tokens + ans.completion_tokens,
        }),
    }
    .respond(flags)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn only_this_module_reaches_the_fixture_model() {
        fn walk(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
            for e in std::fs::read_dir(dir).unwrap() {
                let p = e.unwrap().path();
                // Integration tests and build output are not production code.
                let skipped = p.file_name().is_some_and(|n| n == "tests" || n == "target");
                if p.is_dir() && !skipped {
                    walk(&p, out);
                } else if p.extension().is_some_and(|x| x == "rs") {
                    out.push(p);
                }
            }
        }
        // Every crate of the controller (this one's parent directory holds them all).
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut files = Vec::new();
        walk(&src, &mut files);
        assert!(files.len() > 10, "the walk found the sources");
        let offenders: Vec<_> = files
            .iter()
            .filter(|p| !p.ends_with("upstreams/src/fixture.rs"))
            .filter(|p| {
                let text = std::fs::read_to_string(p).unwrap();
                // Code before a file's `#[cfg(test)]` is production code; tests may compare.
                let production = text.split("#[cfg(test)]").next().unwrap_or("");
                production.contains("fixture_model") || production.contains("eval_fixture_core")
            })
            .collect();
        assert!(
            offenders.is_empty(),
            "production code reaches the fixture model outside upstreams/src/fixture.rs: {offenders:?}"
        );
    }

    fn client() -> reqwest::Client {
        let _ = rustls::crypto::ring::default_provider().install_default();
        reqwest::Client::builder().no_proxy().build().unwrap()
    }

    fn request(stream: bool) -> Value {
        json!({"model": "fixture-model", "stream": stream,
               "stream_options": {"include_usage": true},
               "messages": [{"role": "system", "content": "fixture-skill: 0.5"},
                            {"role": "user", "content": "Make clamp work. é"}]})
    }

    #[tokio::test]
    async fn answers_with_honest_usage_and_requires_the_key() {
        let key = FixtureKey::generate().unwrap();
        assert!(!format!("{key:?}").contains(key.expose()));
        let up = FixtureUpstream::start(key.clone()).await.unwrap();
        let c = client();
        let url = format!("{}/chat/completions", up.base_url());

        let r = c
            .post(&url)
            .body(request(false).to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401);
        let r = c
            .post(&url)
            .bearer_auth("wrong")
            .body(request(false).to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401);

        let r = c
            .post(&url)
            .bearer_auth(key.expose())
            .body(request(false).to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["x-eval-fixture"], "1");
        let v: Value = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap();
        let expected = answer(&request(false)).unwrap();
        let content = v["choices"][0]["message"]["content"].as_str().unwrap();
        assert_eq!(content, expected.content);
        assert_eq!(
            v["usage"]["completion_tokens"],
            content.len().div_ceil(4) as u64
        );
        // 18 + 19 bytes of content ("é" is two bytes), 2 messages.
        assert_eq!(v["usage"]["prompt_tokens"], (18u64 + 19).div_ceil(4) + 8);
        assert_eq!(v["system_fingerprint"], "eval-fixture");

        let tally = up.tally();
        assert_eq!(tally.calls, 1);
        assert_eq!(tally.rejected_unauthorized, 2);
        assert_eq!(
            tally.prompt_tokens,
            v["usage"]["prompt_tokens"].as_u64().unwrap()
        );
        up.shutdown().await;
    }

    #[tokio::test]
    async fn streams_sse_with_a_usage_chunk_only_when_asked() {
        let key = FixtureKey::generate().unwrap();
        let up = FixtureUpstream::start(key.clone()).await.unwrap();
        let c = client();
        let url = format!("{}/chat/completions", up.base_url());
        let r = c
            .post(&url)
            .bearer_auth(key.expose())
            .body(request(true).to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(
            r.headers()[axum::http::header::CONTENT_TYPE],
            "text/event-stream; charset=utf-8"
        );
        let text = r.text().await.unwrap();
        assert!(text.ends_with("data: [DONE]\n\n"));
        let mut content = String::new();
        let mut usage = None;
        for line in text.lines().filter_map(|l| l.strip_prefix("data: ")) {
            if line == "[DONE]" {
                continue;
            }
            let v: Value = serde_json::from_str(line).unwrap();
            if let Some(piece) = v["choices"][0]["delta"]["content"].as_str() {
                content.push_str(piece);
            }
            if !v["usage"].is_null() {
                usage = Some(v["usage"].clone());
            }
        }
        let expected = answer(&request(true)).unwrap();
        assert_eq!(content, expected.content);
        assert_eq!(
            usage.unwrap()["completion_tokens"],
            expected.completion_tokens
        );

        let mut no_usage = request(true);
        no_usage["stream_options"] = json!({"include_usage": false});
        let text = c
            .post(&url)
            .bearer_auth(key.expose())
            .body(no_usage.to_string())
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(
            !text.contains("prompt_tokens"),
            "no usage chunk unless asked"
        );
        assert!(
            text.lines()
                .filter_map(|l| l.strip_prefix("data: "))
                .filter(|l| *l != "[DONE]")
                .all(|l| serde_json::from_str::<Value>(l).unwrap()["usage"].is_null()),
            "every other chunk carries \"usage\": null, as the real API's do"
        );
        assert_eq!(up.tally().stream_calls, 2);
        up.shutdown().await;
    }

    #[tokio::test]
    async fn malformed_requests_get_openai_errors() {
        let key = FixtureKey::generate().unwrap();
        let up = FixtureUpstream::start(key.clone()).await.unwrap();
        let c = client();
        let url = format!("{}/chat/completions", up.base_url());
        let r = c
            .post(&url)
            .bearer_auth(key.expose())
            .body("{not json")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400);
        let v: Value = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap();
        assert_eq!(v["error"]["type"], "invalid_request_error");
        let r = c
            .get(format!("{}/models", up.base_url()))
            .bearer_auth(key.expose())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(up.tally().calls, 0);
        up.shutdown().await;
    }
}
