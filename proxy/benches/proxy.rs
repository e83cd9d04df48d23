#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout,
    clippy::print_stderr
)]
//! Direct vs through-the-proxy, same load generator, same payloads, in one run.
//!
//! The proxy and the scripted upstream each run as a child process (this binary re-executed with
//! `EVAL_PROXY_BENCH_CHILD` / `EVAL_PROXY_BENCH_UPSTREAM`), so the direct path crosses a process
//! boundary like the proxied one, and the proxy's RSS and allocations are its own. The proxy runs
//! with its production listener limits (`ListenerLimits::default()`: 32 open connections per
//! listener); the load generator stays within them (at most 16 connections per target), and one
//! phase of its own exceeds them on purpose to show what such a client gets. Every figure is
//! printed beside its yardstick from the same run: the same load sent straight to the upstream.
//! Run with `cargo bench -p eval-proxy --bench proxy`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::Response;
use bytes::Bytes;
use futures_util::{FutureExt, StreamExt};
use http_body_util::BodyExt;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

const MODEL: &str = "bench-model";
/// Events per token-sized stream (one per token, as DeepSeek sends them).
const TOKEN_EVENTS: usize = 1000;
/// Open streams held at once in the memory phase, spread over Unix-socket attempts so that no
/// listener exceeds its production cap.
const OPEN_STREAMS: usize = 1000;
const STREAMS_PER_SOCKET: usize = 25;
/// The production cap of open connections per listener (`ListenerLimits::default()`).
const CAP: usize = 32;
/// Token streams counted under callgrind (`EVAL_PROXY_BENCH_CALLGRIND`).
const CALLGRIND_STREAMS: usize = 10;
/// Non-stream calls counted under callgrind (the second dump).
const CALLGRIND_CALLS: usize = 200;

/// Counts the allocations of this process (each of the three processes has its own count).
/// The only `unsafe` in the workspace, in a benchmark binary (no library): an allocator that
/// forwards to the system allocator and counts.
#[allow(
    unsafe_code,
    reason = "a GlobalAlloc impl is unsafe by definition; it only forwards"
)]
mod counting {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::sync::atomic::{AtomicU64, Ordering};

    pub struct Counting;
    pub static ALLOCS: AtomicU64 = AtomicU64::new(0);
    pub static ALLOC_BYTES: AtomicU64 = AtomicU64::new(0);

    // SAFETY: every call is forwarded unchanged to `System`, which upholds the contract.
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, l: Layout) -> *mut u8 {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
            ALLOC_BYTES.fetch_add(l.size() as u64, Ordering::Relaxed);
            // SAFETY: the caller's layout, as `GlobalAlloc::alloc` requires.
            unsafe { System.alloc(l) }
        }
        unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
            // SAFETY: `p` came from `System` with this layout.
            unsafe { System.dealloc(p, l) }
        }
        unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
            ALLOC_BYTES.fetch_add(n as u64, Ordering::Relaxed);
            // SAFETY: `p` came from `System` with layout `l`.
            unsafe { System.realloc(p, l, n) }
        }
    }

    #[global_allocator]
    static GLOBAL: Counting = Counting;
}
use counting::{ALLOC_BYTES, ALLOCS};

fn main() {
    // EVAL_PROXY_BENCH_WORKERS sets the worker threads of every process (default 2, the cores).
    let workers = std::env::var("EVAL_PROXY_BENCH_WORKERS")
        .ok()
        .and_then(|w| w.parse().ok())
        .unwrap_or(2);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .unwrap();
    if let Ok(upstream) = std::env::var("EVAL_PROXY_BENCH_CHILD") {
        rt.block_on(child(upstream));
    } else if std::env::var("EVAL_PROXY_BENCH_UPSTREAM").is_ok() {
        rt.block_on(upstream_process());
    } else {
        rt.block_on(parent());
    }
}

fn attempt_spec(id: String, listen: eval_proxy::Listen) -> eval_proxy::AttemptSpec {
    use eval_proxy::*;
    let mut roles = std::collections::BTreeMap::new();
    roles.insert(
        Role::Agent,
        RoleSpec {
            contract: Contract::model_only(MODEL),
            budget: Budget::default(),
        },
    );
    AttemptSpec {
        attempt_id: id.clone(),
        arm: "bench".into(),
        session_id: id,
        listen,
        roles,
    }
}

/// The proxy under test, alone in its process, with the production listener limits. Prints its
/// TCP address, the token attempt's token and the socket directory; then answers `stats` lines
/// on stdin with its allocation counters, and shuts down when stdin closes.
async fn child(upstream: String) {
    use eval_proxy::*;
    let key = SecretKey::from_env("EVAL_PROXY_BENCH_KEY").unwrap();
    let meter = std::env::temp_dir().join(format!("eval-proxy-bench-{}.jsonl", std::process::id()));
    let sink = Arc::new(JsonlSink::open(&meter).unwrap());
    let mut cfg = ProxyConfig::new(&upstream, ApiKind::OpenAiChat, key, sink);
    cfg.tcp_listen = Some("127.0.0.1:0".parse().unwrap());
    assert_eq!(cfg.listener.max_connections, CAP, "the production cap");
    let proxy = Proxy::start(cfg).await.unwrap();
    let reg = proxy
        .register_attempt(attempt_spec("bench".into(), Listen::Token))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    for i in 0..OPEN_STREAMS.div_ceil(STREAMS_PER_SOCKET) {
        proxy
            .register_attempt(attempt_spec(
                format!("hold-{i}"),
                Listen::Unix(dir.path().join(format!("{i}.sock"))),
            ))
            .await
            .unwrap();
    }
    println!(
        "{} {} {}",
        reg.tcp_addr.unwrap(),
        reg.token.unwrap(),
        dir.path().display()
    );
    let mut stdin = tokio::io::BufReader::new(tokio::io::stdin());
    loop {
        let mut line = String::new();
        match stdin.read_line(&mut line).await {
            Ok(0) | Err(_) => break,
            Ok(_) => println!(
                "{} {}",
                ALLOCS.load(Ordering::Relaxed),
                ALLOC_BYTES.load(Ordering::Relaxed)
            ),
        }
    }
    proxy.shutdown(Duration::from_secs(2)).await;
    let _ = std::fs::remove_file(meter);
}

/// The scripted upstream, in its own process like a real one: prints its address; each line on
/// stdin releases the streams held so far; exits when stdin closes.
async fn upstream_process() {
    let (release_tx, release_rx) = watch::channel(0u64);
    let up = Arc::new(Up {
        release: release_rx,
        token_stream: token_stream_events(),
    });
    let app = Router::new().fallback(upstream_handler).with_state(up);
    // scripts/bench-peers.sh fixes the port, so the peers it starts can be pointed at it.
    let port = std::env::var("EVAL_PROXY_BENCH_UPSTREAM_PORT").unwrap_or_else(|_| "0".into());
    let l = tokio::net::TcpListener::bind(format!("127.0.0.1:{port}"))
        .await
        .unwrap();
    println!("{}", l.local_addr().unwrap());
    tokio::spawn(async move {
        use axum::serve::ListenerExt;
        let l = l.tap_io(|s| {
            let _ = s.set_nodelay(true);
        });
        axum::serve(l, app).await.unwrap()
    });
    let mut stdin = tokio::io::BufReader::new(tokio::io::stdin());
    let mut generation = 0;
    loop {
        let mut line = String::new();
        match stdin.read_line(&mut line).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {
                generation += 1;
                let _ = release_tx.send(generation);
            }
        }
    }
}

struct Up {
    release: watch::Receiver<u64>,
    token_stream: Vec<Bytes>,
}

fn completion_json() -> String {
    let content = "x".repeat(600);
    serde_json::json!({"id":"chatcmpl-1","object":"chat.completion","created":1,"model":MODEL,
        "choices":[{"index":0,"message":{"role":"assistant","content":content},"finish_reason":"stop"}],
        "usage":{"prompt_tokens":120,"completion_tokens":150,"total_tokens":270}})
    .to_string()
}

/// A DeepSeek thinking-mode stream as the real API sends it (../shared/DEEPSEEK-WIRE.md): a
/// keep-alive comment, the role chunk with an empty `reasoning_content`, one event per token of
/// `reasoning_content` then of `content` (every chunk with `"usage":null`), the finish chunk
/// carrying the usage, the trailing usage-only chunk, `[DONE]`. Each event is its own write.
fn token_stream_events() -> Vec<Bytes> {
    let chunk = |delta: serde_json::Value, finish: serde_json::Value, usage: serde_json::Value| {
        let ev = serde_json::json!({"id":"6f0c2a8e-bench","object":"chat.completion.chunk",
            "created":1733011200,"model":"deepseek-reasoner","system_fingerprint":"fp_bench_prod0820",
            "choices":[{"index":0,"delta":delta,"logprobs":null,"finish_reason":finish}],"usage":usage});
        Bytes::from(format!("data: {ev}\n\n"))
    };
    let null = serde_json::Value::Null;
    let words = [
        "The", " answer", " is", " 42", ",", " because", " of", " this", ".",
    ];
    let mut v = vec![Bytes::from_static(b": keep-alive\n\n")];
    v.push(chunk(
        serde_json::json!({"role":"assistant","content":null,"reasoning_content":""}),
        null.clone(),
        null.clone(),
    ));
    let reasoning = TOKEN_EVENTS * 6 / 10;
    let content = TOKEN_EVENTS - reasoning - 4;
    for i in 0..reasoning {
        let w = words[i % words.len()];
        v.push(chunk(
            serde_json::json!({"content":null,"reasoning_content":w}),
            null.clone(),
            null.clone(),
        ));
    }
    for i in 0..content {
        let w = words[i % words.len()];
        v.push(chunk(
            serde_json::json!({"content":w,"reasoning_content":null}),
            null.clone(),
            null.clone(),
        ));
    }
    let usage = serde_json::json!({"prompt_tokens":283,"completion_tokens":TOKEN_EVENTS,
        "total_tokens":283 + TOKEN_EVENTS,"prompt_tokens_details":{"cached_tokens":256},
        "completion_tokens_details":{"reasoning_tokens":reasoning},
        "prompt_cache_hit_tokens":256,"prompt_cache_miss_tokens":27});
    v.push(chunk(
        serde_json::json!({"content":"","reasoning_content":null}),
        "stop".into(),
        usage.clone(),
    ));
    let trailing = serde_json::json!({"id":"6f0c2a8e-bench","object":"chat.completion.chunk",
        "created":1733011200,"model":"deepseek-reasoner","system_fingerprint":"fp_bench_prod0820",
        "choices":[],"usage":usage});
    v.push(Bytes::from(format!("data: {trailing}\n\n")));
    v.push(Bytes::from_static(b"data: [DONE]\n\n"));
    assert_eq!(
        v.len(),
        TOKEN_EVENTS + 1,
        "a comment and {TOKEN_EVENTS} events"
    );
    v
}

/// The 22-event stream of the latency phases (20 content events, usage, `[DONE]`).
fn small_stream_events(model: &str) -> Vec<Bytes> {
    let mut v = vec![];
    for i in 0..20 {
        let ev = serde_json::json!({"id":"c","object":"chat.completion.chunk","model":model,
            "choices":[{"index":0,"delta":{"content":format!("token{i} ")},"finish_reason":null}]});
        v.push(Bytes::from(format!("data: {ev}\n\n")));
    }
    let u = serde_json::json!({"id":"c","object":"chat.completion.chunk","model":model,"choices":[],
        "usage":{"prompt_tokens":120,"completion_tokens":20,"total_tokens":140}});
    v.push(Bytes::from(format!("data: {u}\n\ndata: [DONE]\n\n")));
    v
}

async fn upstream_handler(State(up): State<Arc<Up>>, req: Request) -> Response {
    let body = req.into_body().collect().await.unwrap().to_bytes();
    let has = |needle: &[u8]| body.windows(needle.len()).any(|w| w == needle);
    let stream = has(b"\"stream\":true");
    if !stream {
        return Response::builder()
            .header("content-type", "application/json")
            .body(Body::from(completion_json()))
            .unwrap();
    }
    // The user message says which stream to send (headers outside the allow-list never reach
    // the upstream, the message always does).
    let hold = has(b"HOLD-STREAM");
    let events = if has(b"TOKEN-STREAM") {
        up.token_stream.clone()
    } else {
        small_stream_events(MODEL)
    };
    let mut release = up.release.clone();
    let seen = *release.borrow_and_update();
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(64);
    tokio::spawn(async move {
        for (i, ev) in events.into_iter().enumerate() {
            if tx.send(Ok(ev)).await.is_err() {
                return;
            }
            if i == 0 && hold {
                let _ = release.wait_for(|g| *g > seen).await;
            }
        }
    });
    Response::builder()
        .header("content-type", "text/event-stream; charset=utf-8")
        .body(Body::from_stream(futures_util::stream::poll_fn(
            move |cx| rx.poll_recv(cx),
        )))
        .unwrap()
}

#[derive(Clone)]
struct Target {
    url: String,
    token: Option<String>,
    /// Extra request headers (a peer gateway's routing headers).
    headers: Vec<(String, String)>,
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Whole,
    Stream,
    Tokens,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Whole => "non-stream",
            Kind::Stream => "22-event stream",
            Kind::Tokens => "1,000-event stream",
        }
    }

    fn body(self) -> String {
        let (content, stream) = match self {
            Kind::Whole => ("hello there, a short prompt", false),
            Kind::Stream => ("hello there, a short prompt", true),
            Kind::Tokens => ("TOKEN-STREAM please", true),
        };
        if stream {
            // As the Harness sends it: usage asked for, so the proxy hides nothing.
            format!(
                "{{\"model\":\"{MODEL}\",\"messages\":[{{\"role\":\"user\",\"content\":\"{content}\"}}],\"stream\":true,\"stream_options\":{{\"include_usage\":true}}}}"
            )
        } else {
            format!(
                "{{\"model\":\"{MODEL}\",\"messages\":[{{\"role\":\"user\",\"content\":\"{content}\"}}]}}"
            )
        }
    }
}

struct Sample {
    total: Duration,
    ttfb: Duration,
}

async fn one(client: &reqwest::Client, t: &Target, kind: Kind) -> Sample {
    let start = Instant::now();
    let mut rb = client
        .post(&t.url)
        .header("content-type", "application/json")
        .body(kind.body());
    if let Some(tok) = &t.token {
        rb = rb.bearer_auth(tok);
    }
    for (k, v) in &t.headers {
        rb = rb.header(k, v);
    }
    let resp = rb.send().await.unwrap();
    if !resp.status().is_success() {
        let status = resp.status();
        let body = resp.text().await.unwrap_or_default();
        panic!("{} answered {status}: {body}", t.url);
    }
    let mut s = resp.bytes_stream();
    let mut ttfb = None;
    while let Some(c) = s.next().await {
        c.unwrap();
        if ttfb.is_none() {
            ttfb = Some(start.elapsed());
        }
    }
    Sample {
        total: start.elapsed(),
        ttfb: ttfb.unwrap_or_default(),
    }
}

/// One call of the kind, read to the end; the answer's status and body when it is not a success.
async fn probe(client: &reqwest::Client, t: &Target, kind: Kind) -> Result<(), String> {
    let mut rb = client
        .post(&t.url)
        .header("content-type", "application/json")
        .body(kind.body());
    for (k, v) in &t.headers {
        rb = rb.header(k, v);
    }
    if let Some(tok) = &t.token {
        rb = rb.bearer_auth(tok);
    }
    let resp = rb.send().await.map_err(|e| e.to_string())?;
    let status = resp.status();
    let body = resp.bytes().await.map_err(|e| e.to_string())?;
    if status.is_success() {
        Ok(())
    } else {
        Err(format!("{status}: {}", String::from_utf8_lossy(&body)))
    }
}

async fn load(
    client: &reqwest::Client,
    t: &Target,
    kind: Kind,
    concurrency: usize,
    n: usize,
) -> (Vec<Sample>, Duration) {
    assert!(
        concurrency <= CAP / 2,
        "the load generator stays within the cap"
    );
    let start = Instant::now();
    let per = n / concurrency;
    let mut tasks = vec![];
    for _ in 0..concurrency {
        let client = client.clone();
        let t = t.clone();
        tasks.push(tokio::spawn(async move {
            let mut v = Vec::with_capacity(per);
            for _ in 0..per {
                v.push(one(&client, &t, kind).await);
            }
            v
        }));
    }
    let mut all = vec![];
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    (all, start.elapsed())
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let rank = p * (v.len() - 1) as f64;
    let lo = rank.floor() as usize;
    let hi = rank.ceil() as usize;
    v[lo] + (v[hi] - v[lo]) * (rank - lo as f64)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn status_kb(pid: u32, field: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// The proxy process's allocation counters, asked over its stdin.
struct ChildStats {
    stdin: tokio::process::ChildStdin,
    stdout: tokio::io::BufReader<tokio::process::ChildStdout>,
}

impl ChildStats {
    async fn allocs(&mut self) -> (u64, u64) {
        self.stdin.write_all(b"stats\n").await.unwrap();
        self.stdin.flush().await.unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).await.unwrap();
        let mut p = line.split_whitespace().map(|n| n.parse::<u64>().unwrap());
        (p.next().unwrap(), p.next().unwrap())
    }
}

/// Samples the proxy's RSS every 20 ms while a phase runs; returns the largest value in KiB.
fn rss_sampler(pid: u32) -> (Arc<AtomicBool>, tokio::task::JoinHandle<u64>) {
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let h = tokio::spawn(async move {
        let mut max = 0;
        while !s.load(Ordering::Relaxed) {
            max = max.max(status_kb(pid, "VmRSS:"));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        max.max(status_kb(pid, "VmRSS:"))
    });
    (stop, h)
}

/// One raw HTTP/1.1 request with `connection: close`; returns the status line's code (0 when
/// the connection broke before a status line: a reset or an unanswered close) and the whole
/// answer. `after_head` runs once the first bytes arrived.
async fn raw_request<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    mut s: S,
    token: Option<&str>,
    content: &str,
    first: Option<tokio::sync::mpsc::Sender<u16>>,
) -> (u16, Result<Vec<u8>, std::io::Error>) {
    let body = format!(
        "{{\"model\":\"{MODEL}\",\"messages\":[{{\"role\":\"user\",\"content\":\"{content}\"}}],\"stream\":true,\"stream_options\":{{\"include_usage\":true}}}}"
    );
    let auth = token
        .map(|t| format!("authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: bench\r\n{auth}content-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    if let Err(e) = s.write_all(head.as_bytes()).await {
        return (0, Err(e));
    }
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    let mut status = 0;
    loop {
        match s.read(&mut buf).await {
            Ok(0) => return (status, Ok(out)),
            Ok(n) => {
                out.extend_from_slice(&buf[..n]);
                if status == 0 && out.len() >= 12 {
                    status = std::str::from_utf8(&out[9..12])
                        .ok()
                        .and_then(|c| c.parse().ok())
                        .unwrap_or(0);
                    if let Some(tx) = &first {
                        tx.send(status).await.unwrap();
                    }
                }
            }
            Err(e) => return (status, Err(e)),
        }
    }
}

struct Row {
    phase: String,
    direct: String,
    proxy: String,
    added: String,
    goal: String,
    ok: Option<bool>,
}

async fn parent() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let exe = std::env::current_exe().unwrap();
    let mut upstream_child = tokio::process::Command::new(&exe)
        .env("EVAL_PROXY_BENCH_UPSTREAM", "1")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut up_out = tokio::io::BufReader::new(upstream_child.stdout.take().unwrap());
    let mut up_line = String::new();
    up_out.read_line(&mut up_line).await.unwrap();
    let up_addr = up_line.trim().to_owned();
    let mut up_stdin = upstream_child.stdin.take().unwrap();
    // EVAL_PROXY_BENCH_CALLGRIND=1 runs the proxy under `valgrind --tool=callgrind`; the cost
    // phase zeroes the counters before its workload and dumps them after, so the dump holds the
    // proxy's user-space instructions for exactly that workload (a yardstick no other load moves).
    let callgrind_out = std::env::var_os("EVAL_PROXY_BENCH_CALLGRIND").map(|_| {
        std::env::temp_dir().join(format!("eval-proxy-bench-{}.callgrind", std::process::id()))
    });
    let mut proxy_cmd = match &callgrind_out {
        Some(out) => {
            let mut c = tokio::process::Command::new("valgrind");
            c.arg("--tool=callgrind")
                .arg(format!("--callgrind-out-file={}", out.display()))
                .arg(&exe);
            c
        }
        None => tokio::process::Command::new(&exe),
    };
    let mut child = proxy_cmd
        .env("EVAL_PROXY_BENCH_CHILD", format!("http://{up_addr}"))
        .env("EVAL_PROXY_BENCH_KEY", "sk-bench-0123456789abcdef")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let pid = child.id().unwrap();
    let mut out = tokio::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).await.unwrap();
    let mut parts = line.split_whitespace();
    let proxy_addr = parts.next().unwrap().to_owned();
    let token = parts.next().unwrap().to_owned();
    let sock_dir = std::path::PathBuf::from(parts.next().unwrap());
    let mut stats = ChildStats {
        stdin: child.stdin.take().unwrap(),
        stdout: out,
    };

    let direct = Target {
        url: format!("http://{up_addr}/v1/chat/completions"),
        token: None,
        headers: vec![],
    };
    let through = Target {
        url: format!("http://{proxy_addr}/v1/chat/completions"),
        token: Some(token.clone()),
        headers: vec![],
    };
    // At most 16 requests in flight per target and as many idle connections kept: within the
    // proxy's cap of 32 even while the previous phase's connections are still closing.
    let client = reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(CAP / 2)
        .build()
        .unwrap();
    let mut rows: Vec<Row> = vec![];
    if let Ok(spec) = std::env::var("EVAL_PROXY_BENCH_PEERS") {
        peers(&client, &direct, &through, &spec).await;
        drop(stats);
        drop(up_stdin);
        let _ = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
        let _ = tokio::time::timeout(Duration::from_secs(5), upstream_child.wait()).await;
        return;
    }

    // Warm up both paths (connections, allocator, page cache).
    load(&client, &direct, Kind::Whole, 4, 400).await;
    load(&client, &through, Kind::Whole, 4, 400).await;
    load(&client, &through, Kind::Tokens, 4, 8).await;

    let up_pid = upstream_child.id().unwrap();
    if std::env::var("EVAL_PROXY_BENCH_ONLY").as_deref() == Ok("cost") {
        cost_phase(
            &client,
            &direct,
            &through,
            pid,
            up_pid,
            callgrind_out.is_some(),
            &mut stats,
        )
        .await;
        drop(stats);
        drop(up_stdin);
        let _ = tokio::time::timeout(Duration::from_secs(60), child.wait()).await;
        if let Some(out) = &callgrind_out {
            print_callgrind(out, 1, CALLGRIND_STREAMS * TOKEN_EVENTS, "event");
            print_callgrind(out, 2, CALLGRIND_CALLS, "call");
        }
        let _ = tokio::time::timeout(Duration::from_secs(5), upstream_child.wait()).await;
        return;
    }
    println!(
        "eval-proxy benchmark: load generator, upstream and proxy each in their own process (2 worker threads each), loopback TCP, production listener cap {CAP}"
    );
    rows.extend(cost_phase(&client, &direct, &through, pid, up_pid, false, &mut stats).await);
    println!(
        "every figure beside its yardstick from this run: the same load sent straight to the upstream"
    );
    for (label, kind, n, conc) in [
        ("non-stream", Kind::Whole, 2000, 1),
        ("non-stream", Kind::Whole, 4000, 4),
        ("stream (22 events)", Kind::Stream, 1000, 1),
        ("stream (22 events)", Kind::Stream, 2000, 4),
    ] {
        let mut d_total = vec![];
        let mut t_total = vec![];
        let mut d_ttfb = vec![];
        let mut t_ttfb = vec![];
        // Alternate rounds so drift hits both sides alike.
        for _ in 0..4 {
            let (d, _) = load(&client, &direct, kind, conc, n / 4).await;
            let (t, _) = load(&client, &through, kind, conc, n / 4).await;
            d_total.extend(d.iter().map(|s| ms(s.total)));
            d_ttfb.extend(d.iter().map(|s| ms(s.ttfb)));
            t_total.extend(t.iter().map(|s| ms(s.total)));
            t_ttfb.extend(t.iter().map(|s| ms(s.ttfb)));
        }
        let (d50, d99) = (pct(&mut d_total, 0.5), pct(&mut d_total, 0.99));
        let (t50, t99) = (pct(&mut t_total, 0.5), pct(&mut t_total, 0.99));
        println!("\n[{label}] {conc} connection(s), {n} requests per side");
        println!("  latency  direct p50 {d50:.3} ms  p99 {d99:.3} ms");
        println!("  latency  proxy  p50 {t50:.3} ms  p99 {t99:.3} ms");
        println!(
            "  ADDED    p50 {:.3} ms  p99 {:.3} ms   (goals: < 0.3 / < 1 ms)",
            t50 - d50,
            t99 - d99
        );
        if kind == Kind::Stream {
            let (a, b) = (pct(&mut d_ttfb, 0.5), pct(&mut t_ttfb, 0.5));
            println!(
                "  TTFB     direct p50 {a:.3} ms  proxy p50 {b:.3} ms  ADDED {:.3} ms",
                b - a
            );
        }
        rows.push(Row {
            phase: format!("{label}, {conc} conn"),
            direct: format!("{d50:.3} / {d99:.3} ms"),
            proxy: format!("{t50:.3} / {t99:.3} ms"),
            added: format!("{:.3} / {:.3} ms", t50 - d50, t99 - d99),
            goal: "added < 0.3 / < 1 ms".into(),
            ok: Some(t50 - d50 < 0.3 && t99 - d99 < 1.0),
        });
    }

    // Per-event cost: streams of token-sized events, one connection, alternating rounds.
    {
        let n = 40;
        let mut d_total = vec![];
        let mut t_total = vec![];
        for _ in 0..4 {
            let (d, _) = load(&client, &direct, Kind::Tokens, 1, n / 4).await;
            let (t, _) = load(&client, &through, Kind::Tokens, 1, n / 4).await;
            d_total.extend(d.iter().map(|s| ms(s.total)));
            t_total.extend(t.iter().map(|s| ms(s.total)));
        }
        let (d50, d99) = (pct(&mut d_total, 0.5), pct(&mut d_total, 0.99));
        let (t50, t99) = (pct(&mut t_total, 0.5), pct(&mut t_total, 0.99));
        let per_event_us = (t50 - d50) * 1e3 / TOKEN_EVENTS as f64;
        println!(
            "\n[per event] streams of {TOKEN_EVENTS} token-sized events (reasoning_content then content, DeepSeek's chunk shape), 1 connection, {n} streams per side"
        );
        println!("  stream   direct p50 {d50:.3} ms  p99 {d99:.3} ms");
        println!("  stream   proxy  p50 {t50:.3} ms  p99 {t99:.3} ms");
        println!("  PER-EVENT proxy cost (added p50 / {TOKEN_EVENTS}) {per_event_us:.2} µs");
        rows.push(Row {
            phase: format!("{TOKEN_EVENTS}-event stream, 1 conn"),
            direct: format!("{d50:.3} / {d99:.3} ms"),
            proxy: format!("{t50:.3} / {t99:.3} ms"),
            added: format!("{per_event_us:.2} µs per event"),
            goal: "reported".into(),
            ok: None,
        });
    }

    // Allocations in the proxy: the marginal allocations of one more event, from the difference
    // between 1,000-event and 22-event streams (per-call allocations cancel out).
    {
        let calls = 50u64;
        let (a0, _) = stats.allocs().await;
        load(&client, &through, Kind::Stream, 1, calls as usize).await;
        let (a1, _) = stats.allocs().await;
        load(&client, &through, Kind::Tokens, 1, calls as usize).await;
        let (a2, _) = stats.allocs().await;
        let small = (a1 - a0) as f64 / calls as f64;
        let big = (a2 - a1) as f64 / calls as f64;
        let per_event = (big - small) / (TOKEN_EVENTS - 22) as f64;
        println!("\n[allocations] proxy process, counting global allocator, {calls} calls each");
        println!(
            "  per 22-event stream call {small:.0}, per {TOKEN_EVENTS}-event stream call {big:.0}, per event (marginal) {per_event:.2}"
        );
        rows.push(Row {
            phase: "allocations in the proxy".into(),
            direct: "-".into(),
            proxy: format!("{small:.0} per call, {big:.0} per {TOKEN_EVENTS}-event call"),
            added: format!("{per_event:.2} per event"),
            // Below one per event: what remains are the HTTP libraries' read and write buffer
            // refills, which come per few KiB of stream, not per event.
            goal: "no per-event allocation (< 0.5 per event)".into(),
            ok: Some(per_event < 0.5),
        });
    }

    // Throughput at 16 connections (half the cap), with the proxy's RSS sampled under load.
    let mut rss_load_max = 0;
    for (label, kind, n) in [
        ("non-stream", Kind::Whole, 6000),
        ("stream (22 events)", Kind::Stream, 3000),
        ("token stream (1,000 events)", Kind::Tokens, 160),
    ] {
        let conc = 16;
        let (_, d) = load(&client, &direct, kind, conc, n).await;
        let (stop, sampler) = rss_sampler(pid);
        let (_, t) = load(&client, &through, kind, conc, n).await;
        stop.store(true, Ordering::Relaxed);
        let rss = sampler.await.unwrap();
        rss_load_max = rss_load_max.max(rss);
        let (dr, tr) = (n as f64 / d.as_secs_f64(), n as f64 / t.as_secs_f64());
        let ratio = tr / dr;
        println!("\n[throughput, {label}] {conc} connections, {n} requests per side");
        println!(
            "  direct {dr:.0} req/s, proxy {tr:.0} req/s, ratio {ratio:.2}; proxy RSS max {:.1} MB",
            rss as f64 / 1024.0
        );
        let (goal, ok) = if kind == Kind::Tokens {
            ("ratio >= 0.6".to_owned(), Some(ratio >= 0.6))
        } else {
            ("reported".to_owned(), None)
        };
        let unit = if kind == Kind::Tokens {
            format!(
                " ({:.0} / {:.0} events/s)",
                dr * TOKEN_EVENTS as f64,
                tr * TOKEN_EVENTS as f64
            )
        } else {
            String::new()
        };
        rows.push(Row {
            phase: format!("throughput {label}, {conc} conns"),
            direct: format!("{dr:.0} req/s"),
            proxy: format!("{tr:.0} req/s{unit}"),
            added: format!("ratio {ratio:.2}"),
            goal,
            ok,
        });
    }
    println!(
        "\n[memory under load] proxy RSS max over the throughput phases {:.1} MB (goal < 30 MB)",
        rss_load_max as f64 / 1024.0
    );
    rows.push(Row {
        phase: "proxy RSS under load (16 conns)".into(),
        direct: "-".into(),
        proxy: format!("{:.1} MB", rss_load_max as f64 / 1024.0),
        added: "-".into(),
        goal: "< 30 MB".into(),
        ok: Some(rss_load_max < 30 * 1024),
    });
    drop(client);

    // 1,000 open streams, 25 per attempt socket (each socket has the production cap).
    let rss_before = status_kb(pid, "VmRSS:");
    let (first_tx, mut first_rx) = tokio::sync::mpsc::channel::<u16>(OPEN_STREAMS);
    let mut tasks = vec![];
    for i in 0..OPEN_STREAMS {
        let path = sock_dir.join(format!("{}.sock", i / STREAMS_PER_SOCKET));
        let first_tx = first_tx.clone();
        tasks.push(tokio::spawn(async move {
            let s = tokio::net::UnixStream::connect(&path).await.unwrap();
            raw_request(s, None, "HOLD-STREAM", Some(first_tx)).await
        }));
    }
    for _ in 0..OPEN_STREAMS {
        assert_eq!(
            first_rx.recv().await.unwrap(),
            200,
            "a held stream was refused"
        );
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let rss_open = status_kb(pid, "VmRSS:");
    up_stdin.write_all(b"release\n").await.unwrap();
    up_stdin.flush().await.unwrap();
    for t in tasks {
        let (status, body) = t.await.unwrap();
        assert_eq!(status, 200);
        let body = body.unwrap();
        assert!(
            body.windows(12).any(|w| w == b"data: [DONE]"),
            "a held stream did not end"
        );
    }
    println!("\n[memory, {OPEN_STREAMS} open streams] {STREAMS_PER_SOCKET} per attempt socket");
    println!(
        "  proxy RSS idle before {:.1} MB, with {OPEN_STREAMS} open streams {:.1} MB (goal < 150 MB)",
        rss_before as f64 / 1024.0,
        rss_open as f64 / 1024.0
    );
    rows.push(Row {
        phase: format!("proxy RSS, {OPEN_STREAMS} open streams"),
        direct: "-".into(),
        proxy: format!("{:.1} MB", rss_open as f64 / 1024.0),
        added: format!("idle before {:.1} MB", rss_before as f64 / 1024.0),
        goal: "< 150 MB".into(),
        ok: Some(rss_open < 150 * 1024),
    });

    // A client over the cap: it holds every slot of the token listener with open streams, then
    // opens more connections. Each extra one must get a refusal it can read.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let extra = 16;
    let (first_tx, mut first_rx) = tokio::sync::mpsc::channel::<u16>(CAP + extra);
    let mut holders = vec![];
    for _ in 0..CAP {
        let tok = token.clone();
        let addr = proxy_addr.clone();
        let first_tx = first_tx.clone();
        holders.push(tokio::spawn(async move {
            let s = tokio::net::TcpStream::connect(addr).await.unwrap();
            raw_request(s, Some(&tok), "HOLD-STREAM", Some(first_tx)).await
        }));
    }
    let mut held_ok = 0;
    for _ in 0..CAP {
        if first_rx.recv().await.unwrap() == 200 {
            held_ok += 1;
        }
    }
    let mut over = vec![];
    for _ in 0..extra {
        let tok = token.clone();
        let addr = proxy_addr.clone();
        over.push(tokio::spawn(async move {
            let s = tokio::net::TcpStream::connect(addr).await.unwrap();
            raw_request(s, Some(&tok), "over the cap", None).await
        }));
    }
    let (mut readable, mut broken) = (0, 0);
    for t in over {
        match t.await.unwrap() {
            (503, Ok(b)) if b.windows(20).any(|w| w == b"too_many_connections") => readable += 1,
            _ => broken += 1,
        }
    }
    up_stdin.write_all(b"release\n").await.unwrap();
    up_stdin.flush().await.unwrap();
    for t in holders {
        let _ = t.await.unwrap();
    }
    println!(
        "\n[over the cap] {CAP} streams hold the token listener's slots ({held_ok} served), then {extra} more connections"
    );
    println!(
        "  {readable} of {extra} got a readable 503 too_many_connections, {broken} a reset or no answer"
    );
    rows.push(Row {
        phase: format!("over the cap: {extra} connections past {CAP}"),
        direct: "-".into(),
        proxy: format!("{readable} readable 503, {broken} reset/none"),
        added: "-".into(),
        goal: "all readable, none reset".into(),
        ok: Some(readable == extra && broken == 0),
    });

    let hwm = status_kb(pid, "VmHWM:");
    println!(
        "\n## summary (one run; proxy peak RSS over the whole run {:.1} MB)\n",
        hwm as f64 / 1024.0
    );
    println!("| phase | direct | through the proxy | added / ratio | goal | met |");
    println!("| --- | --- | --- | --- | --- | --- |");
    for r in &rows {
        let met = match r.ok {
            Some(true) => "yes",
            Some(false) => "NO",
            None => "-",
        };
        println!(
            "| {} | {} | {} | {} | {} | {met} |",
            r.phase, r.direct, r.proxy, r.added, r.goal
        );
    }
    drop(stats);
    drop(up_stdin);
    let _ = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
    let _ = tokio::time::timeout(Duration::from_secs(5), upstream_child.wait()).await;
}

/// What one process did over a workload, from `perf stat`: software events and the syscall
/// tracepoints only, so it needs no hardware counters (this machine kind is a VM without them).
#[derive(Default, Clone, Copy)]
struct Counts {
    cpu_ms: f64,
    ctx: f64,
    syscalls: f64,
    writes: f64,
    reads: f64,
    /// `writev`: the HTTP writes of a connection (hyper writes its queued buffers with writev);
    /// a plain `write` is mostly a runtime waking a parked worker through its eventfd.
    writev: f64,
    futex: f64,
    epoll: f64,
}

const PERF_EVENTS: &str = "task-clock,context-switches,raw_syscalls:sys_enter,syscalls:sys_enter_write,syscalls:sys_enter_writev,syscalls:sys_enter_sendto,syscalls:sys_enter_read,syscalls:sys_enter_recvfrom,syscalls:sys_enter_futex,syscalls:sys_enter_epoll_wait";

/// Runs `work` with `perf stat` attached to the processes `pids`; `None` when perf cannot attach.
async fn perf_counts<F: std::future::Future<Output = ()>>(pids: &[u32], work: F) -> Option<Counts> {
    let list = pids
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let mut perf = tokio::process::Command::new("perf")
        .args(["stat", "-x", ",", "-e", PERF_EVENTS, "-p", &list])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .ok()?;
    // perf says nothing when it has attached; give it a moment (the bench, not a test).
    tokio::time::sleep(Duration::from_millis(300)).await;
    work.await;
    let perf_pid = perf.id()?;
    std::process::Command::new("kill")
        .args(["-INT", &perf_pid.to_string()])
        .status()
        .ok()?;
    let mut err = String::new();
    perf.stderr.take()?.read_to_string(&mut err).await.ok()?;
    let _ = perf.wait().await;
    let mut c = Counts::default();
    let mut seen = 0;
    for line in err.lines() {
        let f: Vec<&str> = line.split(',').collect();
        let (Some(v), Some(ev)) = (f.first().and_then(|v| v.parse::<f64>().ok()), f.get(2)) else {
            continue;
        };
        seen += 1;
        match *ev {
            "task-clock" => c.cpu_ms = v,
            "context-switches" => c.ctx = v,
            "raw_syscalls:sys_enter" => c.syscalls = v,
            "syscalls:sys_enter_write" | "syscalls:sys_enter_sendto" => c.writes += v,
            "syscalls:sys_enter_writev" => {
                c.writes += v;
                c.writev = v;
            }
            "syscalls:sys_enter_futex" => c.futex = v,
            "syscalls:sys_enter_epoll_wait" => c.epoll = v,
            "syscalls:sys_enter_read" | "syscalls:sys_enter_recvfrom" => c.reads += v,
            _ => {}
        }
    }
    (seen > 0).then_some(c)
}

fn callgrind_control(pid: u32, arg: &str) {
    let ok = std::process::Command::new("callgrind_control")
        .args([arg, &pid.to_string()])
        .stdout(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "callgrind_control {arg} {pid} failed");
}

/// The instruction count (`Ir`) of the callgrind dump `<out>.<part>` (one workload), per unit,
/// with the share of SHA-256 (the response digest) apart: valgrind does not emulate the SHA
/// extensions, so under callgrind the `sha2` crate takes its software path (about ten times the
/// instructions of the SHA-NI path the proxy runs natively on this machine kind).
fn print_callgrind(out: &std::path::Path, part: usize, units: usize, unit: &str) {
    let out = &std::path::PathBuf::from(format!("{}.{part}", out.display()));
    let Ok(text) = std::fs::read_to_string(out) else {
        println!("  callgrind: no dump at {}", out.display());
        return;
    };
    let total = text
        .lines()
        .find_map(|l| {
            l.strip_prefix("summary: ")
                .or_else(|| l.strip_prefix("totals: "))
        })
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(f64::NAN);
    let sha = self_cost(&text, |f| f.starts_with("sha2::sha256::"));
    let u = units as f64;
    println!(
        "  callgrind: proxy user-space instructions per {unit} {:.0} ({total:.0} over {units}); of them SHA-256 {:.0} (software under valgrind), the rest {:.0} (dump {})",
        total / u,
        sha / u,
        (total - sha) / u,
        out.display()
    );
}

/// The self cost (instructions inside the function itself, not its callees) of the functions
/// whose name `pick` accepts, read from a callgrind dump (name compression: `fn=(id) name`
/// defines an id, `fn=(id)` reuses it; the cost line after a `calls=` line is a callee's).
fn self_cost(text: &str, pick: impl Fn(&str) -> bool) -> f64 {
    let mut names: std::collections::HashMap<String, String> = Default::default();
    let mut name_of = |spec: &str| -> String {
        let spec = spec.trim();
        match spec.strip_prefix('(').and_then(|r| r.split_once(')')) {
            Some((id, rest)) => {
                let rest = rest.trim();
                if !rest.is_empty() {
                    names.insert(id.to_owned(), rest.to_owned());
                }
                names.get(id).cloned().unwrap_or_default()
            }
            None => spec.to_owned(),
        }
    };
    let (mut picked, mut callee_line, mut sum) = (false, false, 0.0);
    for line in text.lines() {
        if let Some(f) = line.strip_prefix("fn=") {
            picked = pick(&name_of(f));
        } else if let Some(f) = line.strip_prefix("cfn=") {
            name_of(f);
        } else if line.starts_with("calls=") {
            callee_line = true;
        } else if line
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_digit() || b == b'+' || b == b'-' || b == b'*')
        {
            if std::mem::take(&mut callee_line) {
                continue;
            }
            if picked
                && let Some(c) = line
                    .split_whitespace()
                    .nth(1)
                    .and_then(|c| c.parse::<f64>().ok())
            {
                sum += c;
            }
        }
    }
    sum
}

/// The load-independent yardstick: what each side spends per call and per event on a fixed
/// workload, counted rather than timed. Through the proxy, the proxy's counts; direct, the
/// upstream's for the same calls (the work a server of these streams does at all). With
/// `callgrind`, only the token-stream workload runs through the proxy, with instruction counting
/// on, and nothing is timed.
async fn cost_phase(
    client: &reqwest::Client,
    direct: &Target,
    through: &Target,
    proxy_pid: u32,
    up_pid: u32,
    callgrind: bool,
    stats: &mut ChildStats,
) -> Vec<Row> {
    let me = std::process::id();
    let mut rows = vec![];
    if callgrind {
        let streams = CALLGRIND_STREAMS;
        // Warm the proxy's connections and allocator before counting.
        load(client, through, Kind::Tokens, 1, 2).await;
        let (a0, _) = stats.allocs().await;
        callgrind_control(proxy_pid, "-z");
        load(client, through, Kind::Tokens, 1, streams).await;
        callgrind_control(proxy_pid, "-d");
        let (a1, _) = stats.allocs().await;
        println!(
            "\n[cost, callgrind] {streams} streams of {TOKEN_EVENTS} token-sized events through the proxy, 1 connection; allocations per event {:.2} (per call included)",
            (a1 - a0) as f64 / (streams * TOKEN_EVENTS) as f64
        );
        // The second dump: non-stream calls alone.
        load(client, through, Kind::Whole, 1, 20).await;
        let (a0, _) = stats.allocs().await;
        callgrind_control(proxy_pid, "-z");
        load(client, through, Kind::Whole, 1, CALLGRIND_CALLS).await;
        callgrind_control(proxy_pid, "-d");
        let (a1, _) = stats.allocs().await;
        println!(
            "[cost, callgrind] {CALLGRIND_CALLS} non-stream calls through the proxy, 1 connection; allocations per call {:.2}",
            (a1 - a0) as f64 / CALLGRIND_CALLS as f64
        );
        return rows;
    }
    println!(
        "\n[cost per event] counted, not timed: perf stat (software events and syscall tracepoints) on fixed workloads, one process at a time"
    );
    for (label, conc) in [
        ("non-stream", Kind::Whole, 400usize, 400usize, "call"),
        ("token stream", Kind::Tokens, 10, 10 * TOKEN_EVENTS, "event"),
        ("token stream", Kind::Tokens, 32, 32 * TOKEN_EVENTS, "event"),
    ]
    .into_iter()
    .zip([1, 1, 16])
    {
        let (label, kind, n, units, unit, conc) =
            (label.0, label.1, label.2, label.3, label.4, conc);
        let up = perf_counts(&[up_pid], load(client, direct, kind, conc, n).map(|_| ())).await;
        let dc = perf_counts(&[me], load(client, direct, kind, conc, n).map(|_| ())).await;
        let t = perf_counts(
            &[proxy_pid],
            load(client, through, kind, conc, n).map(|_| ()),
        )
        .await;
        let tc = perf_counts(&[me], load(client, through, kind, conc, n).map(|_| ())).await;
        let (a0, b0) = stats.allocs().await;
        load(client, through, kind, conc, n).await;
        let (a1, b1) = stats.allocs().await;
        let allocs = (a1 - a0) as f64 / units as f64;
        let alloc_bytes = (b1 - b0) as f64 / units as f64;
        let (Some(up), Some(dc), Some(t), Some(tc)) = (up, dc, t, tc) else {
            println!(
                "  {label}: perf stat could not attach (perf missing or not permitted); not counted"
            );
            continue;
        };
        let u = units as f64;
        println!(
            "  {label}, {conc} conn(s), {n} calls: per {unit}  proxy CPU {:.2} µs, syscalls {:.2} (writev {:.2}, other writes {:.2}, reads {:.2}, futex {:.2}, epoll_wait {:.2}), context switches {:.2}",
            t.cpu_ms * 1e3 / u,
            t.syscalls / u,
            t.writev / u,
            (t.writes - t.writev) / u,
            t.reads / u,
            t.futex / u,
            t.epoll / u,
            t.ctx / u
        );
        println!(
            "      yardstick, the upstream serving the same calls direct: CPU {:.2} µs, syscalls {:.2} (writev {:.2}, other writes {:.2}, reads {:.2}, futex {:.2}, epoll_wait {:.2}), context switches {:.2}",
            up.cpu_ms * 1e3 / u,
            up.syscalls / u,
            up.writev / u,
            (up.writes - up.writev) / u,
            up.reads / u,
            up.futex / u,
            up.epoll / u,
            up.ctx / u
        );
        println!(
            "      the load generator's reads per {unit}: direct {:.2}, through the proxy {:.2}",
            dc.reads / u,
            tc.reads / u
        );
        println!(
            "      proxy allocations per {unit} (counting allocator, per-call ones included): {allocs:.2}, {alloc_bytes:.0} bytes"
        );
        rows.push(Row {
            phase: format!("cost per {unit}, {label}, {conc} conn(s)"),
            direct: format!(
                "upstream {:.2} µs CPU, {:.2} syscalls",
                up.cpu_ms * 1e3 / u,
                up.syscalls / u
            ),
            proxy: format!(
                "{:.2} µs CPU, {:.2} syscalls, {:.2} writes, {:.2} futex, {allocs:.2} allocations",
                t.cpu_ms * 1e3 / u,
                t.syscalls / u,
                t.writes / u,
                t.futex / u
            ),
            added: format!("CPU {:.1}× the upstream's", t.cpu_ms / up.cpu_ms),
            goal: "reported (load-independent counts)".into(),
            ok: None,
        });
    }
    // The allocations of one more event: 1,000-event against 22-event streams, per-call ones
    // cancelling out (the full run's allocation phase, on the cost phase's fixed workload).
    let calls = 20;
    let (a0, _) = stats.allocs().await;
    load(client, through, Kind::Stream, 1, calls).await;
    let (a1, _) = stats.allocs().await;
    load(client, through, Kind::Tokens, 1, calls).await;
    let (a2, _) = stats.allocs().await;
    let (small, big) = (
        (a1 - a0) as f64 / calls as f64,
        (a2 - a1) as f64 / calls as f64,
    );
    println!(
        "  allocations per 22-event stream call {small:.0}, per {TOKEN_EVENTS}-event stream call {big:.0}: per event (marginal) {:.3}",
        (big - small) / (TOKEN_EVENTS - 22) as f64
    );
    rows
}

/// The peers table (scripts/bench-peers.sh): the same load against direct, this proxy and each
/// peer gateway the script started, rounds alternating over all targets so drift hits each alike.
/// `spec` is `name=url|header:value|header:value;name=url…`.
async fn peers(client: &reqwest::Client, direct: &Target, through: &Target, spec: &str) {
    let mut targets: Vec<(String, Target)> = vec![
        ("direct".into(), direct.clone()),
        ("eval proxy".into(), through.clone()),
    ];
    for entry in spec.split(';').filter(|e| !e.is_empty()) {
        let (name, rest) = entry.split_once('=').unwrap();
        let mut parts = rest.split('|');
        let url = parts.next().unwrap().to_owned();
        let headers = parts
            .map(|h| {
                let (k, v) = h.split_once(':').unwrap();
                (k.to_owned(), v.to_owned())
            })
            .collect();
        targets.push((
            name.to_owned(),
            Target {
                url,
                token: None,
                headers,
            },
        ));
    }
    // Every target is tried with each kind of call before anything is measured (which also
    // warms its connections); a kind a peer cannot serve is reported, not measured.
    let mut serves: Vec<Vec<Kind>> = vec![];
    for (name, t) in &targets {
        let mut ok = vec![];
        for kind in [Kind::Whole, Kind::Stream, Kind::Tokens] {
            match probe(client, t, kind).await {
                Ok(()) => {
                    ok.push(kind);
                    load(client, t, kind, 1, 3).await;
                }
                Err(e) => eprintln!(
                    "  {name} cannot serve a {} call, not measured: {e}",
                    kind.name()
                ),
            }
        }
        serves.push(ok);
    }
    println!(
        "eval-proxy peers benchmark: one upstream, the same load against each target, loopback TCP"
    );
    let phases = [
        ("non-stream, 1 conn", Kind::Whole, 400, 1),
        ("non-stream, 4 conns", Kind::Whole, 400, 4),
        ("stream (22 events), 1 conn", Kind::Stream, 200, 1),
        ("stream (22 events), 4 conns", Kind::Stream, 400, 4),
        ("1,000-event stream, 1 conn", Kind::Tokens, 20, 1),
    ];
    let mut table: Vec<(String, Vec<(f64, f64)>)> = vec![];
    for (label, kind, n, conc) in phases {
        let mut samples: Vec<Vec<f64>> = vec![vec![]; targets.len()];
        for _ in 0..4 {
            for (i, (_, t)) in targets.iter().enumerate() {
                if !serves[i].contains(&kind) {
                    continue;
                }
                let (v, _) = load(client, t, kind, conc, n / 4).await;
                samples[i].extend(v.iter().map(|s| ms(s.total)));
            }
        }
        let cells = samples
            .iter_mut()
            .map(|v| {
                if v.is_empty() {
                    (f64::NAN, f64::NAN)
                } else {
                    (pct(v, 0.5), pct(v, 0.99))
                }
            })
            .collect();
        table.push((label.to_owned(), cells));
        eprintln!("  measured: {label}");
    }
    println!("\n## medians (p50, ms) and p99, with the added p50 and the ratio to direct\n");
    let mut head = "| phase |".to_owned();
    let mut rule = "| --- |".to_owned();
    for (name, _) in &targets {
        head.push_str(&format!(" {name} p50 / p99 |"));
        rule.push_str(" --- |");
        if name != "direct" {
            head.push_str(&format!(" {name} added p50 (× direct) |"));
            rule.push_str(" --- |");
        }
    }
    println!("{head}\n{rule}");
    for (label, cells) in &table {
        let (d50, _) = cells[0];
        let mut row = format!("| {label} |");
        for (i, (p50, p99)) in cells.iter().enumerate() {
            if p50.is_nan() {
                row.push_str(if i > 0 {
                    " failed (see above) | - |"
                } else {
                    " - |"
                });
                continue;
            }
            row.push_str(&format!(" {p50:.3} / {p99:.3} |"));
            if i > 0 {
                row.push_str(&format!(" {:.3} ms ({:.1}×) |", p50 - d50, p50 / d50));
            }
        }
        println!("{row}");
    }
}
