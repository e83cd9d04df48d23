//! The streamed calls' upstream client (`proxy/src/upstream.rs`): HTTP/1.1 connections driven by
//! the answer's body, pooled between calls. The upstream here is a raw HTTP/1.1 server written
//! from RFC 9112 (request head and `content-length` body in; `transfer-encoding: chunked` SSE
//! out, one chunk per event, the shape DeepSeek streams in, `../shared/DEEPSEEK-WIRE.md`), so the
//! test controls each connection: how many were opened, and when one is closed.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::support::*;
use eval_proxy::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, watch};

struct RawUpstream {
    url: String,
    /// Connections accepted.
    accepted: Arc<AtomicUsize>,
    /// Requests answered.
    answered: Arc<AtomicUsize>,
    /// Bumped to make every idle connection close.
    close: watch::Sender<u32>,
    /// One message per connection closed on `close`, sent after its socket was dropped.
    closed: mpsc::UnboundedReceiver<()>,
}

/// The events of one streamed answer, each its own chunk: three content deltas, the usage chunk
/// (`choices: []`, as `stream_options.include_usage` asks), `[DONE]`.
fn events() -> Vec<String> {
    let mut ev: Vec<String> = ["Hel", "lo", "!"]
        .iter()
        .map(|t| {
            format!(
                "data: {}\n\n",
                serde_json::json!({"id":"r","object":"chat.completion.chunk","model":MODEL,
                    "choices":[{"index":0,"delta":{"content":t},"finish_reason":null}]})
            )
        })
        .collect();
    ev.push(format!(
        "data: {}\n\n",
        serde_json::json!({"id":"r","object":"chat.completion.chunk","model":MODEL,"choices":[],
            "usage":{"prompt_tokens":9,"completion_tokens":3,"total_tokens":12,
                     "prompt_cache_hit_tokens":0,"prompt_cache_miss_tokens":9}})
    ));
    ev.push("data: [DONE]\n\n".into());
    ev
}

/// Reads one request (head, then `content-length` bytes); `None` at a clean EOF.
async fn read_request(s: &mut tokio::net::TcpStream, buf: &mut Vec<u8>) -> Option<()> {
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map(|v| v.trim().parse().unwrap())
                .unwrap_or(0);
            while buf.len() < end + 4 + len {
                let mut b = [0u8; 4096];
                let n = s.read(&mut b).await.ok()?;
                if n == 0 {
                    return None;
                }
                buf.extend_from_slice(&b[..n]);
            }
            buf.drain(..end + 4 + len);
            return Some(());
        }
        let mut b = [0u8; 4096];
        let n = s.read(&mut b).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&b[..n]);
    }
}

async fn raw_upstream() -> RawUpstream {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    let accepted = Arc::new(AtomicUsize::new(0));
    let answered = Arc::new(AtomicUsize::new(0));
    let (close, close_rx) = watch::channel(0u32);
    let (closed_tx, closed) = mpsc::unbounded_channel();
    let (acc, ans) = (accepted.clone(), answered.clone());
    tokio::spawn(async move {
        loop {
            let (mut s, _) = l.accept().await.unwrap();
            acc.fetch_add(1, Ordering::SeqCst);
            let ans = ans.clone();
            let mut close_rx = close_rx.clone();
            close_rx.mark_unchanged();
            let closed_tx = closed_tx.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                loop {
                    tokio::select! {
                        r = read_request(&mut s, &mut buf) => {
                            if r.is_none() {
                                return;
                            }
                        }
                        _ = close_rx.changed() => {
                            drop(s);
                            let _ = closed_tx.send(());
                            return;
                        }
                    }
                    let mut out = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                        transfer-encoding: chunked\r\n\r\n"
                        .to_vec();
                    for e in events() {
                        out.extend_from_slice(format!("{:x}\r\n{e}\r\n", e.len()).as_bytes());
                    }
                    out.extend_from_slice(b"0\r\n\r\n");
                    s.write_all(&out).await.unwrap();
                    ans.fetch_add(1, Ordering::SeqCst);
                }
            });
        }
    });
    RawUpstream {
        url,
        accepted,
        answered,
        close,
        closed,
    }
}

/// Streamed calls reuse one upstream connection; one the upstream closed while it was idle is
/// dropped at checkout (its FIN seen), never used, so the next call is answered in full on a
/// fresh connection instead of failing with a request lost on a dead socket.
#[tokio::test]
async fn streamed_calls_reuse_a_connection_and_never_use_one_the_upstream_closed() {
    let mut up = raw_upstream().await;
    let sink = sink();
    let key = SecretKey::from_value_for_tests(KEY).unwrap();
    let mut cfg = ProxyConfig::new(&up.url, ApiKind::OpenAiChat, key, sink.clone());
    cfg.timeouts.first_byte = Duration::from_secs(20);
    let (proxy, _dir, sock) = one_attempt(cfg, "s1", Contract::model_only(MODEL)).await;
    let want: String = events().concat();
    // Asking for usage, as the Harness does: the client gets the upstream's bytes unchanged.
    let mut body = chat("hi", true);
    body["stream_options"] = serde_json::json!({"include_usage": true});

    for _ in 0..2 {
        let r = post(&sock, "raw", &body).await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.text(), want, "every event, in order");
    }
    assert_eq!(up.answered.load(Ordering::SeqCst), 2);
    assert_eq!(
        up.accepted.load(Ordering::SeqCst),
        1,
        "the second stream did not reuse the first one's connection"
    );

    // The upstream closes the idle connection; the proxy learns of it only from the socket.
    up.close.send_modify(|g| *g += 1);
    up.closed.recv().await.unwrap();
    let r = post(&sock, "raw", &body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.text(), want);
    assert_eq!(up.accepted.load(Ordering::SeqCst), 2, "a fresh connection");
    assert_eq!(up.answered.load(Ordering::SeqCst), 3);

    let m = proxy
        .close_attempt_and_wait("s1", Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(m.roles[&Role::Agent].turns, 3);
    let recs = sink.records();
    assert_eq!(recs.len(), 3);
    for r in &recs {
        assert_eq!(r.outcome, CallOutcome::Ok, "{r:?}");
        assert!(!r.incomplete, "{r:?}");
        assert_eq!(
            r.usage.as_ref().map(|u| (u.input_tokens, u.output_tokens)),
            Some((9, 3)),
            "{r:?}"
        );
    }
    proxy.shutdown(Duration::from_secs(5)).await;
}
