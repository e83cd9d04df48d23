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
//! boundary like the proxied one, and the proxy's peak RSS is its own. Run with
//! `cargo bench -p eval-proxy --bench proxy`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::Response;
use bytes::Bytes;
use futures_util::StreamExt;
use http_body_util::BodyExt;
use tokio::io::AsyncBufReadExt;
use tokio::sync::watch;

const MODEL: &str = "bench-model";

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
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

/// The proxy under test, alone in its process.
async fn child(upstream: String) {
    use eval_proxy::*;
    let key = SecretKey::from_env("EVAL_PROXY_BENCH_KEY").unwrap();
    let meter = std::env::temp_dir().join(format!("eval-proxy-bench-{}.jsonl", std::process::id()));
    let sink = Arc::new(JsonlSink::open(&meter).unwrap());
    let mut cfg = ProxyConfig::new(&upstream, ApiKind::OpenAiChat, key, sink);
    cfg.tcp_listen = Some("127.0.0.1:0".parse().unwrap());
    let proxy = Proxy::start(cfg).await.unwrap();
    let mut roles = std::collections::BTreeMap::new();
    roles.insert(
        Role::Agent,
        RoleSpec {
            contract: Contract::model_only(MODEL),
            budget: Budget::default(),
        },
    );
    let reg = proxy
        .register_attempt(AttemptSpec {
            attempt_id: "bench".into(),
            arm: "bench".into(),
            session_id: "bench".into(),
            listen: Listen::Token,
            roles,
        })
        .await
        .unwrap();
    println!("{} {}", reg.tcp_addr.unwrap(), reg.token.unwrap());
    // Serve until the parent closes our stdin.
    let mut line = String::new();
    let mut stdin = tokio::io::BufReader::new(tokio::io::stdin());
    let _ = stdin.read_line(&mut line).await;
    proxy.shutdown(Duration::from_secs(2)).await;
    let _ = std::fs::remove_file(meter);
}

/// The scripted upstream, in its own process like a real one: prints its address, releases
/// held streams when a line arrives on stdin, exits when stdin closes.
async fn upstream_process() {
    let (release_tx, release_rx) = watch::channel(false);
    let up = Arc::new(Up {
        release: release_rx,
    });
    let app = Router::new().fallback(upstream_handler).with_state(up);
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    println!("{}", l.local_addr().unwrap());
    tokio::spawn(async move {
        use axum::serve::ListenerExt;
        let l = l.tap_io(|s| {
            let _ = s.set_nodelay(true);
        });
        axum::serve(l, app).await.unwrap()
    });
    let mut stdin = tokio::io::BufReader::new(tokio::io::stdin());
    loop {
        let mut line = String::new();
        match stdin.read_line(&mut line).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {
                let _ = release_tx.send(true);
            }
        }
    }
}

struct Up {
    release: watch::Receiver<bool>,
}

fn completion_json() -> String {
    let content = "x".repeat(600);
    serde_json::json!({"id":"chatcmpl-1","object":"chat.completion","created":1,"model":MODEL,
        "choices":[{"index":0,"message":{"role":"assistant","content":content},"finish_reason":"stop"}],
        "usage":{"prompt_tokens":120,"completion_tokens":150,"total_tokens":270}})
    .to_string()
}

async fn upstream_handler(State(up): State<Arc<Up>>, req: Request) -> Response {
    let hold = req.headers().contains_key("x-bench-hold");
    let body = req.into_body().collect().await.unwrap().to_bytes();
    let stream = body.windows(13).any(|w| w == b"\"stream\":true");
    if !stream {
        return Response::builder()
            .header("content-type", "application/json")
            .body(Body::from(completion_json()))
            .unwrap();
    }
    let mut release = up.release.clone();
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(32);
    tokio::spawn(async move {
        for i in 0..20 {
            let ev = serde_json::json!({"id":"c","object":"chat.completion.chunk","model":MODEL,
                "choices":[{"index":0,"delta":{"content":format!("token{i} ")},"finish_reason":null}]});
            if tx
                .send(Ok(Bytes::from(format!("data: {ev}\n\n"))))
                .await
                .is_err()
            {
                return;
            }
            if i == 0 && hold {
                let _ = release.wait_for(|r| *r).await;
            }
        }
        let u = serde_json::json!({"id":"c","object":"chat.completion.chunk","model":MODEL,"choices":[],
            "usage":{"prompt_tokens":120,"completion_tokens":20,"total_tokens":140}});
        let _ = tx
            .send(Ok(Bytes::from(format!("data: {u}\n\ndata: [DONE]\n\n"))))
            .await;
    });
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(futures_util::stream::poll_fn(
            move |cx| rx.poll_recv(cx),
        )))
        .unwrap()
}

#[derive(Clone)]
struct Target {
    url: String,
    token: Option<String>,
}

struct Sample {
    total: Duration,
    ttfb: Duration,
}

async fn one(client: &reqwest::Client, t: &Target, stream: bool, hold: bool) -> Sample {
    let body = if stream {
        format!(
            "{{\"model\":\"{MODEL}\",\"messages\":[{{\"role\":\"user\",\"content\":\"hello there, a short prompt\"}}],\"stream\":true}}"
        )
    } else {
        format!(
            "{{\"model\":\"{MODEL}\",\"messages\":[{{\"role\":\"user\",\"content\":\"hello there, a short prompt\"}}]}}"
        )
    };
    let start = Instant::now();
    let mut rb = client
        .post(&t.url)
        .header("content-type", "application/json")
        .body(body);
    if let Some(tok) = &t.token {
        rb = rb.bearer_auth(tok);
    }
    if hold {
        rb = rb.header("x-bench-hold", "1");
    }
    let resp = rb.send().await.unwrap();
    assert!(resp.status().is_success(), "status {}", resp.status());
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

async fn load(
    client: &reqwest::Client,
    t: &Target,
    stream: bool,
    concurrency: usize,
    n: usize,
) -> (Vec<Sample>, Duration) {
    let start = Instant::now();
    let per = n / concurrency;
    let mut tasks = vec![];
    for _ in 0..concurrency {
        let client = client.clone();
        let t = t.clone();
        tasks.push(tokio::spawn(async move {
            let mut v = Vec::with_capacity(per);
            for _ in 0..per {
                v.push(one(&client, &t, stream, false).await);
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
    let mut child = tokio::process::Command::new(&exe)
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

    let direct = Target {
        url: format!("http://{up_addr}/v1/chat/completions"),
        token: None,
    };
    let through = Target {
        url: format!("http://{proxy_addr}/v1/chat/completions"),
        token: Some(token),
    };
    let client = reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(2000)
        .build()
        .unwrap();

    // Warm up both paths (connections, allocator, page cache).
    load(&client, &direct, false, 4, 400).await;
    load(&client, &through, false, 4, 400).await;

    println!(
        "eval-proxy benchmark: load generator, upstream and proxy each in their own process (2 worker threads each), loopback TCP"
    );
    for (label, stream, n, conc) in [
        ("non-streaming", false, 2000, 1),
        ("non-streaming", false, 4000, 4),
        ("streaming (22 events)", true, 1000, 1),
        ("streaming (22 events)", true, 2000, 4),
    ] {
        let mut d_total = vec![];
        let mut t_total = vec![];
        let mut d_ttfb = vec![];
        let mut t_ttfb = vec![];
        // Alternate rounds so drift hits both sides alike.
        for _ in 0..4 {
            let (d, _) = load(&client, &direct, stream, conc, n / 4).await;
            let (t, _) = load(&client, &through, stream, conc, n / 4).await;
            d_total.extend(d.iter().map(|s| ms(s.total)));
            d_ttfb.extend(d.iter().map(|s| ms(s.ttfb)));
            t_total.extend(t.iter().map(|s| ms(s.total)));
            t_ttfb.extend(t.iter().map(|s| ms(s.ttfb)));
        }
        let (d50, d99) = (pct(&mut d_total, 0.5), pct(&mut d_total, 0.99));
        let (t50, t99) = (pct(&mut t_total, 0.5), pct(&mut t_total, 0.99));
        println!("\n[{label}] concurrency {conc}, {n} requests per side");
        println!("  latency  direct p50 {d50:.3} ms  p99 {d99:.3} ms");
        println!("  latency  proxy  p50 {t50:.3} ms  p99 {t99:.3} ms");
        println!(
            "  ADDED    p50 {:.3} ms  p99 {:.3} ms   (targets: < 0.3 / < 1 ms)",
            t50 - d50,
            t99 - d99
        );
        if stream {
            let (a, b) = (pct(&mut d_ttfb, 0.5), pct(&mut t_ttfb, 0.5));
            println!(
                "  TTFB     direct p50 {a:.3} ms  proxy p50 {b:.3} ms  ADDED {:.3} ms",
                b - a
            );
        }
    }

    for (label, stream) in [("non-streaming", false), ("streaming", true)] {
        let n = 6000;
        let (_, d) = load(&client, &direct, stream, 32, n).await;
        let (_, t) = load(&client, &through, stream, 32, n).await;
        let (dr, tr) = (n as f64 / d.as_secs_f64(), n as f64 / t.as_secs_f64());
        println!("\n[throughput, {label}] concurrency 32, {n} requests");
        println!(
            "  direct {dr:.0} req/s, proxy {tr:.0} req/s, ratio {:.2} (target >= 0.50)",
            tr / dr
        );
    }

    let rss_before = status_kb(pid, "VmRSS:");
    let open = 1000;
    let (first_tx, mut first_rx) = tokio::sync::mpsc::channel::<()>(open);
    let mut tasks = vec![];
    for _ in 0..open {
        let client = client.clone();
        let t = through.clone();
        let first_tx = first_tx.clone();
        tasks.push(tokio::spawn(async move {
            let mut rb = client.post(&t.url).header("content-type", "application/json").header("x-bench-hold", "1");
            rb = rb.bearer_auth(t.token.as_ref().unwrap());
            let body = format!("{{\"model\":\"{MODEL}\",\"messages\":[{{\"role\":\"user\",\"content\":\"hold\"}}],\"stream\":true}}");
            let resp = rb.body(body).send().await.unwrap();
            let mut s = resp.bytes_stream();
            let _ = s.next().await;
            first_tx.send(()).await.unwrap();
            while let Some(c) = s.next().await {
                c.unwrap();
            }
        }));
    }
    for _ in 0..open {
        first_rx.recv().await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let rss_open = status_kb(pid, "VmRSS:");
    {
        use tokio::io::AsyncWriteExt;
        up_stdin.write_all(b"release\n").await.unwrap();
        up_stdin.flush().await.unwrap();
    }
    for t in tasks {
        t.await.unwrap();
    }
    let hwm = status_kb(pid, "VmHWM:");
    println!("\n[memory] proxy process with {open} concurrent open streams");
    println!(
        "  RSS idle after load {:.1} MB, with {open} open streams {:.1} MB, peak (VmHWM over the whole run) {:.1} MB (target < 150 MB)",
        rss_before as f64 / 1024.0,
        rss_open as f64 / 1024.0,
        hwm as f64 / 1024.0
    );
    drop(child.stdin.take());
    drop(up_stdin);
    let _ = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
    let _ = tokio::time::timeout(Duration::from_secs(5), upstream_child.wait()).await;
}
