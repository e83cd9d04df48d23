//! A scripted upstream (axum on 127.0.0.1:0) and small clients for Unix sockets and TCP.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::Response;
use bytes::Bytes;
use eval_proxy::*;
use http_body_util::BodyExt;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::sync::Notify;

pub const KEY: &str = "sk-test-UPSTREAM-KEY-7f3a9c1e55d04b2a";
pub const MODEL: &str = "deepseek-v4-flash";

#[derive(Debug, Clone)]
pub struct Seen {
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Default)]
pub struct UpstreamState {
    pub seen: Mutex<Vec<Seen>>,
    pub chunk2_sent: AtomicBool,
    pub go_on: Notify,
    pub finished_streams: std::sync::atomic::AtomicUsize,
}

pub struct Upstream {
    pub url: String,
    pub state: Arc<UpstreamState>,
    stop: tokio_util::sync::CancellationToken,
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl Upstream {
    pub fn seen(&self) -> Vec<Seen> {
        self.state.seen.lock().unwrap().clone()
    }
}

pub async fn upstream() -> Upstream {
    let state = Arc::new(UpstreamState::default());
    let app = Router::new().fallback(script).with_state(state.clone());
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    let stop = tokio_util::sync::CancellationToken::new();
    let s = stop.clone();
    tokio::spawn(async move {
        axum::serve(l, app)
            .with_graceful_shutdown(s.cancelled_owned())
            .await
            .unwrap();
    });
    Upstream { url, state, stop }
}

/// The same scripted upstream over HTTPS, serving `cert_der` (signed by a test CA) with
/// `key_der` (PKCS#8). A client that aborts the handshake is dropped and the next one accepted.
pub async fn tls_upstream(cert_der: Vec<u8>, key_der: Vec<u8>) -> Upstream {
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
    let cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(
        vec![CertificateDer::from(cert_der)],
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key_der)),
    )
    .unwrap();
    let state = Arc::new(UpstreamState::default());
    let app = Router::new().fallback(script).with_state(state.clone());
    let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("https://127.0.0.1:{}", tcp.local_addr().unwrap().port());
    let listener = TlsListener {
        tcp,
        acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(cfg)),
    };
    let stop = tokio_util::sync::CancellationToken::new();
    let s = stop.clone();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(s.cancelled_owned())
            .await;
    });
    Upstream { url, state, stop }
}

/// Accepts TCP connections and completes the TLS handshake; one the client aborts is dropped.
struct TlsListener {
    tcp: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Ok((tcp, addr)) = self.tcp.accept().await else {
                continue;
            };
            if let Ok(tls) = self.acceptor.accept(tcp).await {
                return (tls, addr);
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}

fn json_response(status: u16, v: Value) -> Response {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Body::from(v.to_string()))
        .unwrap()
}

fn sse_response(chunks: Vec<(u64, String)>, state: Arc<UpstreamState>) -> Response {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(4);
    tokio::spawn(async move {
        for (delay, c) in chunks {
            if delay > 0 {
                tokio::time::sleep(Duration::from_millis(delay)).await;
            }
            if tx.send(Ok(Bytes::from(c))).await.is_err() {
                break;
            }
        }
        state.finished_streams.fetch_add(1, Ordering::SeqCst);
    });
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(futures_util::stream::poll_fn(
            move |cx| rx.poll_recv(cx),
        )))
        .unwrap()
}

/// Usage a request asks the upstream to report: `{"prompt": n, "completion": m}` in the first
/// message's content as `usage:P:C`, else 11/7.
fn wanted_usage(body: &Value) -> (u64, u64) {
    let content = body
        .pointer("/messages/0/content")
        .and_then(Value::as_str)
        .unwrap_or("");
    if let Some(rest) = content.split("usage:").nth(1) {
        let mut it = rest.split(':').map(|x| {
            x.trim_end_matches(|c: char| !c.is_ascii_digit())
                .parse::<u64>()
                .unwrap_or(0)
        });
        return (it.next().unwrap_or(0), it.next().unwrap_or(0));
    }
    (11, 7)
}

async fn script(State(state): State<Arc<UpstreamState>>, req: Request) -> Response {
    let path = req.uri().path().to_owned();
    let headers: Vec<(String, String)> = req
        .headers()
        .iter()
        .map(|(n, v)| (n.as_str().to_owned(), v.to_str().unwrap_or("").to_owned()))
        .collect();
    let script = req
        .headers()
        .get("x-test-script")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("openai-json")
        .to_owned();
    let auth = req
        .headers()
        .get("authorization")
        .or(req.headers().get("x-api-key"))
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let body = req.into_body().collect().await.unwrap().to_bytes();
    state.seen.lock().unwrap().push(Seen {
        path: path.clone(),
        headers,
        body: body.clone(),
    });
    let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let (p, c) = wanted_usage(&v);
    let echo = v
        .pointer("/messages/0/content")
        .cloned()
        .unwrap_or(Value::Null);
    let include_usage = v.pointer("/stream_options/include_usage") == Some(&Value::Bool(true));
    match script.as_str() {
        "models" => json_response(
            200,
            json!({"object":"list","data":[{"id": MODEL, "object":"model"}]}),
        ),
        "openai-json" => json_response(
            200,
            json!({
                "id":"c1","object":"chat.completion","model": MODEL,
                "choices":[{"index":0,"message":{"role":"assistant","content": echo},"finish_reason":"stop"}],
                "usage":{"prompt_tokens":p,"completion_tokens":c,"total_tokens":p+c,
                         "prompt_tokens_details":{"cached_tokens":3},
                         "completion_tokens_details":{"reasoning_tokens":2}}
            }),
        ),
        "deepseek-json" => json_response(
            200,
            json!({
                "id":"c1","object":"chat.completion","model": MODEL,
                "choices":[{"index":0,"message":{"role":"assistant","content":"ok","reasoning_content":"hm"},"finish_reason":"stop"}],
                "usage":{"prompt_tokens":100,"completion_tokens":40,"total_tokens":140,
                         "prompt_cache_hit_tokens":64,"prompt_cache_miss_tokens":36,
                         "completion_tokens_details":{"reasoning_tokens":25}}
            }),
        ),
        "delay-json" => {
            tokio::time::sleep(Duration::from_millis(300)).await;
            json_response(
                200,
                json!({"id":"c","object":"chat.completion","model":MODEL,"choices":[],
                "usage":{"prompt_tokens":p,"completion_tokens":c,"total_tokens":p+c}}),
            )
        }
        "openai-stream" | "openai-stream-crlf" => {
            let nl = if script.ends_with("crlf") {
                "\r\n"
            } else {
                "\n"
            };
            let mut chunks = vec![];
            for (i, piece) in ["Hel", "lo ", "there"].iter().enumerate() {
                let ev = json!({"id":"c","object":"chat.completion.chunk","model":MODEL,
                    "choices":[{"index":0,"delta":{"content": format!("{piece}{}", if i == 0 { echo.as_str().unwrap_or("") } else { "" })},"finish_reason":null}]});
                chunks.push((0, format!(": comment{nl}data: {ev}{nl}{nl}")));
            }
            if include_usage {
                let ev = json!({"id":"c","object":"chat.completion.chunk","model":MODEL,"choices":[],
                    "usage":{"prompt_tokens":p,"completion_tokens":c,"total_tokens":p+c,
                             "prompt_cache_hit_tokens":5,"prompt_cache_miss_tokens":p.saturating_sub(5),
                             "completion_tokens_details":{"reasoning_tokens":4}}});
                // split across chunks at an awkward byte
                let s = format!("data: {ev}{nl}{nl}");
                let (a, b) = s.split_at(17);
                chunks.push((0, a.to_owned()));
                chunks.push((5, b.to_owned()));
            }
            chunks.push((0, format!("data: [DONE]{nl}{nl}")));
            sse_response(chunks, state)
        }
        "endless-stream" => {
            // Trickles forever, until the proxy stops reading.
            let (tx, mut rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(1);
            tokio::spawn(async move {
                let ev = json!({"choices":[{"index":0,"delta":{"content":"more"}}]});
                while tx
                    .send(Ok(Bytes::from(format!("data: {ev}\n\n"))))
                    .await
                    .is_ok()
                {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            });
            Response::builder()
                .header("content-type", "text/event-stream")
                .body(Body::from_stream(futures_util::stream::poll_fn(
                    move |cx| rx.poll_recv(cx),
                )))
                .unwrap()
        }
        "usage-then-eof" => {
            // DeepSeek's finish chunk carries the usage; the connection then closes cleanly
            // without the trailing chunk or `[DONE]` (a cut the DeepSeek Harness reports as
            // STREAM_CLOSED and writes no usage for).
            let ev = json!({"id":"c","object":"chat.completion.chunk","model":MODEL,
                "choices":[{"index":0,"delta":{"content":"done"},"finish_reason":"stop"}],
                "usage":{"prompt_tokens":p,"completion_tokens":c,"total_tokens":p+c}});
            sse_response(vec![(0, format!("data: {ev}\n\n"))], state)
        }
        "keepalive-forever" => {
            // One delta, then only `: keep-alive` comments, with the connection open (as the
            // API does under load); the pace is the fake's, never a synchronisation.
            let (tx, mut rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(1);
            tokio::spawn(async move {
                let ev = json!({"choices":[{"index":0,"delta":{"content":"thinking"}}]});
                let mut next = Bytes::from(format!(": keep-alive\n\ndata: {ev}\n\n"));
                while tx.send(Ok(next)).await.is_ok() {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    next = Bytes::from_static(b": keep-alive\n\n");
                }
            });
            Response::builder()
                .header("content-type", "text/event-stream")
                .body(Body::from_stream(futures_util::stream::poll_fn(
                    move |cx| rx.poll_recv(cx),
                )))
                .unwrap()
        }
        "stream-no-usage" => sse_response(
            vec![(
                0,
                "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}]}\n\n".into(),
            )],
            state,
        ),
        "slow-stream" => {
            let (tx, mut rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(4);
            let st = state.clone();
            tokio::spawn(async move {
                let first = json!({"choices":[{"index":0,"delta":{"content":"first"}}]});
                let _ = tx.send(Ok(Bytes::from(format!("data: {first}\n\n")))).await;
                // Every test using this script says when to go on; the minute only keeps a
                // test that failed first from leaving the stream open (a hang guard: a loaded
                // machine must not see chunk 2 early).
                let _ = tokio::time::timeout(Duration::from_secs(60), st.go_on.notified()).await;
                st.chunk2_sent.store(true, Ordering::SeqCst);
                let second = json!({"choices":[{"index":0,"delta":{"content":"second"}}]});
                let _ = tx
                    .send(Ok(Bytes::from(format!("data: {second}\n\n"))))
                    .await;
                tokio::time::sleep(Duration::from_millis(50)).await;
                let u = json!({"choices":[],"usage":{"prompt_tokens":p,"completion_tokens":c,"total_tokens":p+c}});
                let _ = tx
                    .send(Ok(Bytes::from(format!("data: {u}\n\ndata: [DONE]\n\n"))))
                    .await;
                st.finished_streams.fetch_add(1, Ordering::SeqCst);
            });
            Response::builder()
                .header("content-type", "text/event-stream")
                .body(Body::from_stream(futures_util::stream::poll_fn(
                    move |cx| rx.poll_recv(cx),
                )))
                .unwrap()
        }
        "anthropic-json" => json_response(
            200,
            json!({
                "id":"msg_1","type":"message","role":"assistant","model":MODEL,
                "content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn",
                "usage":{"input_tokens":21,"output_tokens":9,"cache_read_input_tokens":50,"cache_creation_input_tokens":8}
            }),
        ),
        "anthropic-stream" => {
            let evs = [
                (
                    "message_start",
                    json!({"type":"message_start","message":{"id":"m","type":"message","role":"assistant","model":MODEL,"content":[],
                    "usage":{"input_tokens":30,"output_tokens":1,"cache_read_input_tokens":12,"cache_creation_input_tokens":4}}}),
                ),
                (
                    "content_block_start",
                    json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
                ),
                (
                    "content_block_delta",
                    json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}),
                ),
                (
                    "message_delta",
                    json!({"type":"message_delta","delta":{"stop_reason":null},"usage":{"output_tokens":10}}),
                ),
                (
                    "message_delta",
                    json!({"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":15}}),
                ),
                ("message_stop", json!({"type":"message_stop"})),
            ];
            let chunks = evs
                .iter()
                .map(|(n, d)| (0, format!("event: {n}\r\ndata: {d}\r\n\r\n")))
                .collect();
            sse_response(chunks, state)
        }
        "echo-key-json" => json_response(
            200,
            json!({
                "id":"c","object":"chat.completion","model":MODEL,
                "choices":[{"index":0,"message":{"role":"assistant","content": format!("you sent {auth}")},"finish_reason":"stop"}],
                "usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}
            }),
        ),
        "echo-key-stream" => {
            let ev = json!({"choices":[{"index":0,"delta":{"content": format!("key={auth}!")}}]});
            let s = format!("data: {ev}\n\n");
            let at = s.find("UPSTREAM").unwrap();
            let chunks = vec![
                (0, s[..at].to_owned()),
                (20, s[at..at + 3].to_owned()),
                (20, s[at + 3..].to_owned()),
                (0, "data: [DONE]\n\n".to_owned()),
            ];
            sse_response(chunks, state)
        }
        "burst-stream" => {
            // BURST_EVENTS token-sized events, each its own frame and all ready at once (an
            // upstream that got ahead of the proxy), with the credential the proxy sent split
            // across two of them, then the usage chunk and `[DONE]`.
            let mut frames = vec![];
            for i in 0..BURST_EVENTS {
                let ev = json!({"choices":[{"index":0,"delta":{"content": format!("t{i} ")}}],"usage":null});
                frames.push(format!("data: {ev}\n\n"));
            }
            let ev = json!({"choices":[{"index":0,"delta":{"content": format!("key={auth}!")}}],"usage":null});
            let s = format!("data: {ev}\n\n");
            let at = s.find("UPSTREAM").unwrap() + 4;
            frames.insert(BURST_EVENTS / 2, s[..at].to_owned());
            frames.insert(BURST_EVENTS / 2 + 1, s[at..].to_owned());
            let u = json!({"choices":[],"usage":{"prompt_tokens":p,"completion_tokens":c,"total_tokens":p+c}});
            frames.push(format!("data: {u}\n\ndata: [DONE]\n\n"));
            state.finished_streams.fetch_add(1, Ordering::SeqCst);
            Response::builder()
                .header("content-type", "text/event-stream")
                .body(Body::from_stream(futures_util::stream::iter(
                    frames
                        .into_iter()
                        .map(|f| Ok::<_, std::io::Error>(Bytes::from(f))),
                )))
                .unwrap()
        }
        "echo-key-encoded-json" | "echo-key-encoded-stream" => {
            // The credential the proxy sent, reflected in every common encoding; the JSON body
            // is written by hand so its `\u` escapes are the wire form.
            let forms = key_encodings(&auth);
            let content = forms.join(" | ");
            if script.ends_with("json") {
                let body = format!(
                    "{{\"id\":\"c\",\"object\":\"chat.completion\",\"model\":\"{MODEL}\",\"choices\":[{{\"index\":0,\"message\":{{\"role\":\"assistant\",\"content\":\"{content}\"}},\"finish_reason\":\"stop\"}}],\"usage\":{{\"prompt_tokens\":1,\"completion_tokens\":1,\"total_tokens\":2}}}}"
                );
                Response::builder()
                    .status(200)
                    .header("content-type", "application/json")
                    .body(Body::from(body))
                    .unwrap()
            } else {
                let s = format!(
                    "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{content}\"}}}}]}}\n\ndata: [DONE]\n\n"
                );
                // Seven-byte chunks: every form crosses chunk boundaries.
                let chunks = s
                    .as_bytes()
                    .chunks(7)
                    .map(|c| (0, String::from_utf8(c.to_vec()).unwrap()))
                    .collect();
                sse_response(chunks, state)
            }
        }
        "auth-401" => json_response(401, json!({"error":{"message": format!("bad key {auth}")}})),
        "error-400" => json_response(
            400,
            json!({"error":{"message":"bad parameter","type":"invalid_request_error"}}),
        ),
        // DeepSeek's documented error bodies (api-docs "error codes").
        "deepseek-402" => json_response(
            402,
            json!({"error":{"message":"Insufficient Balance","type":"unknown_error","param":null,"code":"invalid_request_error"}}),
        ),
        "deepseek-429-retry-after" => Response::builder()
            .status(429)
            .header("content-type", "application/json")
            .header("retry-after", "7")
            .body(Body::from(
                json!({"error":{"message":"Rate Limit Reached","type":"rate_limit_error","param":null,"code":"rate_limit_exceeded"}}).to_string(),
            ))
            .unwrap(),
        "keepalive-close" => sse_response(
            vec![(0, ": keep-alive\n\n".into()), (0, ": keep-alive\n\n".into())],
            state,
        ),
        "insufficient-resource" => {
            let ev = json!({"id":"c","object":"chat.completion.chunk","model":MODEL,
                "choices":[{"index":0,"delta":{"content":""},"finish_reason":"insufficient_system_resource"}],
                "usage":{"prompt_tokens":p,"completion_tokens":c,"total_tokens":p+c}});
            sse_response(vec![(0, format!("data: {ev}\n\ndata: [DONE]\n\n"))], state)
        }
        "error-429" => json_response(
            429,
            json!({"error":{"message":"slow down","type":"rate_limit_error"}}),
        ),
        "error-500" => json_response(
            500,
            json!({"error":{"message":"internal trouble","type":"server_error"}}),
        ),
        "garbage" => Response::builder()
            .status(200)
            .header("content-type", "application/json")
            .body(Body::from("<<<not json>>>"))
            .unwrap(),
        "held-json" => {
            // Answers once the test says so (the minute is a hang guard, as in slow-stream).
            let _ = tokio::time::timeout(Duration::from_secs(60), state.go_on.notified()).await;
            json_response(
                200,
                json!({"id":"c","object":"chat.completion","model":MODEL,
                "choices":[{"index":0,"message":{"role":"assistant","content":"late"},"finish_reason":"stop"}],
                "usage":{"prompt_tokens":p,"completion_tokens":c,"total_tokens":p+c}}),
            )
        }
        "hang" => {
            tokio::time::sleep(Duration::from_secs(30)).await;
            json_response(200, json!({}))
        }
        other => json_response(400, json!({"error": format!("unknown script {other}")})),
    }
}

fn b64(data: &[u8], alphabet: &[u8; 64]) -> String {
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(alphabet[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// `text` (an `Authorization` value or a bare key) in the encodings an upstream might reflect.
pub fn key_encodings(text: &str) -> Vec<String> {
    const STD: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const URL: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let key = text.strip_prefix("Bearer ").unwrap_or(text);
    vec![
        format!("raw={key}"),
        format!("b64={}", b64(text.as_bytes(), STD)),
        format!("b64key={}", b64(key.as_bytes(), STD)),
        format!(
            "b64url={}",
            b64(format!("u:{key}").as_bytes(), URL).trim_end_matches('=')
        ),
        format!(
            "json={}",
            key.bytes()
                .enumerate()
                .map(|(i, b)| if i % 2 == 0 {
                    format!("\\u{b:04X}")
                } else {
                    format!("\\u{b:04x}")
                })
                .collect::<String>()
        ),
        format!(
            "mixed={}",
            key.bytes()
                .enumerate()
                .map(|(i, b)| if i % 3 == 0 {
                    format!("\\u{b:04x}")
                } else {
                    (b as char).to_string()
                })
                .collect::<String>()
        ),
        format!(
            "pct={}",
            key.bytes().map(|b| format!("%{b:02X}")).collect::<String>()
        ),
        format!(
            "pctlow={}",
            key.bytes().map(|b| format!("%{b:02x}")).collect::<String>()
        ),
    ]
}

/// Token events in the `burst-stream` script (the key's two halves come on top).
pub const BURST_EVENTS: usize = 400;

pub fn sink() -> Arc<MemorySink> {
    Arc::new(MemorySink::new())
}

pub fn config(up: &Upstream, api: ApiKind, sink: Arc<dyn RecordSink>) -> ProxyConfig {
    let key = SecretKey::from_value_for_tests(KEY).unwrap();
    let mut c = ProxyConfig::new(&up.url, api, key, sink);
    c.timeouts.first_byte = Duration::from_secs(20);
    c.timeouts.idle = Duration::from_secs(5);
    c
}

/// The contract as the scripted upstream needs it: `x-test-script` (which picks the script) is
/// let through on top of the contract's header list, or the defaults of both APIs.
pub fn scriptable(mut contract: Contract) -> Contract {
    let list = contract.allowed_headers.get_or_insert_with(|| {
        ["accept", "user-agent", "anthropic-version"]
            .iter()
            .map(|s| s.to_string())
            .collect()
    });
    list.insert("x-test-script".into());
    contract
}

/// The contract with these body parameters allowed on top of the chat defaults.
pub fn allowing(mut contract: Contract, params: &[&str]) -> Contract {
    let mut list: std::collections::BTreeSet<String> =
        Contract::default_allowed_params(ApiKind::OpenAiChat)
            .iter()
            .map(|s| s.to_string())
            .collect();
    list.extend(params.iter().map(|s| s.to_string()));
    contract.allowed_params = Some(list);
    contract
}

pub fn spec(id: &str, listen: Listen, contract: Contract, budget: Budget) -> AttemptSpec {
    let contract = scriptable(contract);
    let mut roles = BTreeMap::new();
    roles.insert(Role::Agent, RoleSpec { contract, budget });
    AttemptSpec {
        attempt_id: id.to_owned(),
        arm: "native".to_owned(),
        session_id: format!("session-{id}"),
        listen,
        roles,
    }
}

/// The set-up most proxy tests begin with: a proxy started with `cfg`, serving one attempt `id`
/// under `contract` (default budget) on a Unix socket in a temporary directory of its own.
/// Bind the directory (`_dir`, not `_`) so that the socket outlives the call.
pub async fn one_attempt(
    cfg: ProxyConfig,
    id: &str,
    contract: Contract,
) -> (ProxyHandle, tempfile::TempDir, std::path::PathBuf) {
    let proxy = Proxy::start(cfg).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join(format!("{id}.sock"));
    proxy
        .register_attempt(spec(
            id,
            Listen::Unix(sock.clone()),
            contract,
            Budget::default(),
        ))
        .await
        .unwrap();
    (proxy, dir, sock)
}

pub struct Reply {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

impl Reply {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Opens an HTTP/1 connection on a Unix socket and sends one request; returns the response head
/// with its body still streaming.
pub async fn unix_send(
    path: &Path,
    method: &str,
    uri: &str,
    headers: &[(&str, &str)],
    body: impl Into<Bytes>,
) -> http::Response<hyper::body::Incoming> {
    let stream = tokio::net::UnixStream::connect(path).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let mut b = http::Request::builder()
        .method(method)
        .uri(uri)
        .header("host", "localhost");
    for (n, v) in headers {
        b = b.header(*n, *v);
    }
    let body: Bytes = body.into();
    let req = b.body(http_body_util::Full::new(body)).unwrap();
    sender.send_request(req).await.unwrap()
}

pub async fn unix_call(
    path: &Path,
    method: &str,
    uri: &str,
    headers: &[(&str, &str)],
    body: impl Into<Bytes>,
) -> Reply {
    let r = unix_send(path, method, uri, headers, body).await;
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    let body = r.into_body().collect().await.unwrap().to_bytes();
    Reply {
        status,
        headers,
        body,
    }
}

pub async fn post(path: &Path, script: &str, body: &Value) -> Reply {
    unix_call(
        path,
        "POST",
        "/v1/chat/completions",
        &[
            ("content-type", "application/json"),
            ("x-test-script", script),
            ("authorization", "Bearer client-own-key"),
        ],
        body.to_string(),
    )
    .await
}

pub fn chat(content: &str, stream: bool) -> Value {
    json!({"model": MODEL, "messages":[{"role":"user","content": content}], "stream": stream})
}

/// Every file under `dir`, read whole.
pub fn read_tree(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = vec![];
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let p = e.path();
        if p.is_dir() {
            out.extend(read_tree(&p));
        } else if p.is_file() {
            out.push((p.display().to_string(), std::fs::read(&p).unwrap()));
        }
    }
    out
}

pub fn contains(h: &[u8], needle: &str) -> bool {
    h.windows(needle.len()).any(|w| w == needle.as_bytes())
}
