use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::support::*;
use eval_proxy::*;
use futures_util::StreamExt;
use http_body_util::BodyExt;
use serde_json::{Value, json};

fn records_for<'a>(recs: &'a [CallRecord], attempt: &str) -> Vec<&'a CallRecord> {
    recs.iter()
        .filter(|r| r.attempt_id.as_deref() == Some(attempt))
        .collect()
}

/// The records once `n` have landed; the minute is a hang guard, not a speed assumption.
async fn settle_records(sink: &MemorySink, n: usize) -> Vec<CallRecord> {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while std::time::Instant::now() < deadline {
        let r = sink.records();
        if r.len() >= n {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    sink.records()
}

#[tokio::test]
async fn the_key_is_injected_and_never_leaks() {
    let up = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let meter_path = dir.path().join("meter.jsonl");
    let transcripts = dir.path().join("transcripts");
    std::fs::create_dir(&transcripts).unwrap();
    let jsonl: Arc<dyn RecordSink> = Arc::new(JsonlSink::open(&meter_path).unwrap());
    let mut cfg = config(&up, ApiKind::OpenAiChat, jsonl);
    cfg.transcript_dir = Some(transcripts.clone());
    cfg.admin_listen = Some("127.0.0.1:0".parse().unwrap());
    assert!(!format!("{cfg:?}").contains(KEY));
    let proxy = Proxy::start(cfg).await.unwrap();
    let sock = dir.path().join("a1/proxy.sock");
    proxy
        .register_attempt(spec(
            "a1",
            Listen::Unix(sock.clone()),
            Contract::model_only(MODEL),
            Budget::default(),
        ))
        .await
        .unwrap();

    let mut replies = vec![];
    for script in [
        "openai-json",
        "echo-key-json",
        "echo-key-stream",
        "auth-401",
        "openai-stream",
    ] {
        let stream = script.contains("stream");
        let r = post(&sock, script, &chat("hello", stream)).await;
        replies.push((script, r));
    }
    let seen = up.seen();
    assert_eq!(seen.len(), 5);
    for s in &seen {
        assert_eq!(
            s.header("authorization"),
            Some(format!("Bearer {KEY}").as_str())
        );
        assert!(
            !s.headers.iter().any(|(_, v)| v.contains("client-own-key")),
            "client credential forwarded"
        );
        assert_eq!(s.header("accept-encoding"), Some("identity"));
    }
    for (script, r) in &replies {
        assert!(!contains(&r.body, KEY), "{script}: key in body");
        assert!(
            !r.headers.iter().any(|(_, v)| contains(v.as_bytes(), KEY)),
            "{script}: key in header"
        );
    }
    let echoed = &replies[1].1;
    assert_eq!(echoed.status, 200);
    assert!(
        echoed.text().contains("you sent Bearer [REDACTED]"),
        "{}",
        echoed.text()
    );
    let streamed = &replies[2].1;
    assert!(
        streamed.text().contains("key=Bearer [REDACTED]!"),
        "{}",
        streamed.text()
    );
    let denied = &replies[3].1;
    assert_eq!(denied.status, 502);
    assert!(
        !denied.text().contains("bad key"),
        "upstream 401 body reached the client"
    );
    assert_eq!(denied.json()["error"]["code"], "upstream_auth_error");

    let admin = proxy.admin_addr().unwrap();
    let mut metrics = String::new();
    // Polled under a generous hang guard, not a count of tries that assumes a speed.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while std::time::Instant::now() < deadline {
        // Stream records are written when the upstream stream ends, just after the client's last byte.
        metrics = reqwest::get(format!("http://{admin}/metrics"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        if metrics.contains("outcome=\"ok\"} 3") && metrics.contains("outcome=\"unmetered\"} 1") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(metrics.contains("eval_proxy_requests_total{attempt=\"a1\",arm=\"native\",role=\"agent\",outcome=\"ok\"} 3"), "{metrics}");
    assert!(
        metrics.contains("eval_proxy_latency_ms_count{attempt=\"a1\",arm=\"native\"} 5"),
        "{metrics}"
    );
    assert!(!metrics.contains(KEY));
    proxy.shutdown(Duration::from_secs(5)).await;
    assert!(!sock.exists(), "socket left behind");

    let files = read_tree(dir.path());
    assert!(
        files.len() >= 6,
        "expected records and transcripts, got {}",
        files.len()
    );
    for (name, bytes) in &files {
        assert!(!contains(bytes, KEY), "key found in {name}");
    }
    let lines = std::fs::read_to_string(&meter_path).unwrap();
    let recs: Vec<CallRecord> = lines
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(recs.len(), 5);
    assert!(
        recs.iter()
            .any(|r| r.changes.contains(&Change::RedactedKey { count: 1 }))
    );
    assert!(
        recs.iter()
            .all(|r| r.changes.contains(&Change::DroppedHeader {
                name: "authorization".into()
            }))
    );
    let transcript_names: Vec<_> = std::fs::read_dir(&transcripts)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    let digest = recs[0].request_digest.clone().unwrap();
    assert!(transcript_names.contains(&digest.trim_start_matches("sha256:").to_owned()));
}

#[tokio::test]
async fn token_counts_equal_the_upstream_usage() {
    let up = upstream().await;
    let sink = sink();
    let (proxy, _dir, sock) = one_attempt(
        config(&up, ApiKind::OpenAiChat, sink.clone()),
        "u1",
        Contract::model_only(MODEL),
    )
    .await;

    let r = post(&sock, "openai-json", &chat("usage:120:33", false)).await;
    assert_eq!(r.status, 200);
    let r = post(&sock, "deepseek-json", &chat("x", false)).await;
    assert_eq!(r.status, 200);
    // Streaming without asking for usage: the proxy asks, meters, and hides the usage chunk.
    let r = post(&sock, "openai-stream", &chat("usage:200:50", true)).await;
    assert_eq!(r.status, 200);
    assert!(
        !r.text().contains("\"usage\""),
        "usage chunk reached a client that did not ask: {}",
        r.text()
    );
    assert!(r.text().contains("data: [DONE]"));
    // Asking for it: the chunk is passed on.
    let mut body = chat("usage:300:60", true);
    body["stream_options"] = json!({"include_usage": true});
    let r = post(&sock, "openai-stream-crlf", &body).await;
    assert!(r.text().contains("\"usage\""), "{}", r.text());

    let recs = settle_records(&sink, 4).await;
    let u: Vec<&Usage> = recs
        .iter()
        .map(|r| r.usage.as_ref().expect("metered"))
        .collect();
    assert_eq!(
        (
            u[0].input_tokens,
            u[0].output_tokens,
            u[0].cached_input_tokens,
            u[0].reasoning_tokens
        ),
        (120, 33, 3, 2)
    );
    assert_eq!(
        (
            u[1].input_tokens,
            u[1].output_tokens,
            u[1].cached_input_tokens,
            u[1].cache_miss_tokens,
            u[1].reasoning_tokens
        ),
        (100, 40, 64, Some(36), 25)
    );
    assert_eq!(
        (
            u[2].input_tokens,
            u[2].output_tokens,
            u[2].cached_input_tokens,
            u[2].reasoning_tokens
        ),
        (200, 50, 5, 4)
    );
    assert_eq!((u[3].input_tokens, u[3].output_tokens), (300, 60));
    assert_eq!(u[1].raw["prompt_cache_hit_tokens"], 64);
    assert!(recs[2].changes.contains(&Change::AddedStreamUsage));
    assert!(recs[2].changes.contains(&Change::HidUsageChunk));
    assert!(!recs[3].changes.contains(&Change::AddedStreamUsage));
    assert_eq!(
        recs.iter().map(|r| r.seq).collect::<Vec<_>>(),
        vec![1, 2, 3, 4]
    );
    assert!(
        recs.iter()
            .all(|r| r.ttfb_ms.is_some() && r.response_digest.is_some())
    );
    let m = proxy.close_attempt("u1").unwrap();
    let a = &m.roles[&Role::Agent];
    assert_eq!(
        (a.calls, a.turns, a.input_tokens, a.output_tokens),
        (4, 4, 720, 183)
    );
    assert_eq!(a.reasoning_tokens, 2 + 25 + 4 + 4);
    proxy.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn anthropic_usage_is_read_and_message_delta_replaced() {
    let up = upstream().await;
    let sink = sink();
    let (proxy, _dir, sock) = one_attempt(
        config(&up, ApiKind::AnthropicMessages, sink.clone()),
        "an",
        Contract::model_only(MODEL),
    )
    .await;
    let body =
        json!({"model": MODEL, "max_tokens": 100, "messages":[{"role":"user","content":"hi"}]});
    for (script, stream) in [("anthropic-json", false), ("anthropic-stream", true)] {
        let mut b = body.clone();
        b["stream"] = Value::Bool(stream);
        let r = unix_call(
            &sock,
            "POST",
            "/v1/messages",
            &[
                ("x-test-script", script),
                ("x-api-key", "client-own-key"),
                ("anthropic-version", "2023-06-01"),
            ],
            b.to_string(),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.text());
    }
    // OpenAI paths are not served by an Anthropic proxy.
    let r = unix_call(
        &sock,
        "POST",
        "/v1/chat/completions",
        &[],
        chat("x", false).to_string(),
    )
    .await;
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["type"], "error");
    let seen = up.seen();
    assert!(
        seen.iter()
            .all(|s| s.header("x-api-key") == Some(KEY) && s.header("authorization").is_none())
    );
    assert!(
        seen.iter()
            .all(|s| s.header("anthropic-version") == Some("2023-06-01"))
    );
    let recs = settle_records(&sink, 3).await;
    let u0 = recs[0].usage.as_ref().unwrap();
    assert_eq!(
        (
            u0.input_tokens,
            u0.output_tokens,
            u0.cached_input_tokens,
            u0.cache_creation_tokens
        ),
        (21 + 50 + 8, 9, 50, 8)
    );
    let u1 = recs[1].usage.as_ref().unwrap();
    // 15 is cumulative; 1 + 10 + 15 would be the summing bug.
    assert_eq!(
        (
            u1.input_tokens,
            u1.output_tokens,
            u1.cached_input_tokens,
            u1.cache_creation_tokens
        ),
        (46, 15, 12, 4)
    );
    assert_eq!(recs[2].outcome, CallOutcome::BadRequest);
    proxy.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn streams_are_forwarded_chunk_by_chunk() {
    let up = upstream().await;
    let sink = sink();
    let (proxy, _dir, sock) = one_attempt(
        config(&up, ApiKind::OpenAiChat, sink.clone()),
        "st",
        Contract::model_only(MODEL),
    )
    .await;
    for hide in [true, false] {
        up.state.chunk2_sent.store(false, Ordering::SeqCst);
        let mut body = chat("usage:5:6", true);
        if !hide {
            body["stream_options"] = json!({"include_usage": true});
        }
        let resp = unix_send(
            &sock,
            "POST",
            "/v1/chat/completions",
            &[("x-test-script", "slow-stream")],
            body.to_string(),
        )
        .await;
        assert_eq!(resp.status(), 200);
        let mut body = resp.into_body();
        let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert!(String::from_utf8_lossy(&first).contains("first"));
        assert!(
            !up.state.chunk2_sent.load(Ordering::SeqCst),
            "chunk 1 arrived only after chunk 2 was sent: the proxy buffers"
        );
        up.state.go_on.notify_one();
        let rest = body.collect().await.unwrap().to_bytes();
        assert!(String::from_utf8_lossy(&rest).contains("second"));
    }
    let recs = settle_records(&sink, 2).await;
    assert!(
        recs.iter()
            .all(|r| r.usage.as_ref().map(|u| u.total_tokens()) == Some(11))
    );
    proxy.shutdown(Duration::from_secs(5)).await;
}

/// Many small events that reach the proxy together (coalesced into fewer writes) arrive whole,
/// in order, with the key split across two of them redacted, and the call metered once.
#[tokio::test]
async fn a_burst_of_token_events_arrives_whole_in_order_and_redacted() {
    let up = upstream().await;
    let sink = sink();
    let proxy = Proxy::start(config(&up, ApiKind::OpenAiChat, sink.clone()))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("s.sock");
    proxy
        .register_attempt(spec(
            "burst",
            Listen::Unix(sock.clone()),
            Contract::model_only(MODEL),
            Budget::default(),
        ))
        .await
        .unwrap();
    let mut body = chat("usage:9:401", true);
    body["stream_options"] = json!({"include_usage": true});
    let resp = unix_send(
        &sock,
        "POST",
        "/v1/chat/completions",
        &[("x-test-script", "burst-stream")],
        body.to_string(),
    )
    .await;
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let mut all = Vec::new();
    while let Some(f) = body.frame().await {
        if let Ok(d) = f.unwrap().into_data() {
            all.extend_from_slice(&d);
        }
    }
    let text = String::from_utf8(all).unwrap();
    assert!(!text.contains(KEY) && !text.contains("UPSTREAM"), "{text}");
    assert!(text.contains("key=Bearer [REDACTED]!"), "{text}");
    let mut at = 0;
    for i in 0..BURST_EVENTS {
        let t = format!("\"t{i} \"");
        at += text[at..]
            .find(&t)
            .unwrap_or_else(|| panic!("event {i} missing or out of order"));
    }
    assert!(text.ends_with("data: [DONE]\n\n"));
    let recs = settle_records(&sink, 1).await;
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].usage.as_ref().map(|u| u.total_tokens()), Some(410));
    assert!(!recs[0].incomplete);
    assert!(
        recs[0].changes.contains(&Change::RedactedKey { count: 1 }),
        "{:?}",
        recs[0].changes
    );
    proxy.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn a_client_that_leaves_early_is_still_metered() {
    let up = upstream().await;
    let sink = sink();
    let (proxy, _dir, sock) = one_attempt(
        config(&up, ApiKind::OpenAiChat, sink.clone()),
        "dc",
        Contract::model_only(MODEL),
    )
    .await;
    let resp = unix_send(
        &sock,
        "POST",
        "/v1/chat/completions",
        &[("x-test-script", "slow-stream")],
        chat("usage:40:2", true).to_string(),
    )
    .await;
    let mut body = resp.into_body();
    let _ = body.frame().await.unwrap().unwrap();
    drop(body);
    up.state.go_on.notify_one();
    let recs = settle_records(&sink, 1).await;
    assert_eq!(recs.len(), 1);
    assert!(recs[0].client_disconnected);
    assert_eq!(recs[0].usage.as_ref().unwrap().input_tokens, 40);
    assert_eq!(recs[0].outcome, CallOutcome::Ok);
    // A stream that ends without usage is recorded as unmetered, and counted at its reservation.
    let r = post(&sock, "stream-no-usage", &chat("x", true)).await;
    assert_eq!(r.status, 200);
    let recs = settle_records(&sink, 2).await;
    assert_eq!(recs[1].outcome, CallOutcome::Unmetered);
    assert!(recs[1].usage.is_none());
    let m = proxy.close_attempt("dc").unwrap();
    assert_eq!(m.roles[&Role::Agent].unmetered_calls, 1);
    proxy.shutdown(Duration::from_secs(5)).await;
}

/// A non-stream call whose client hangs up while the upstream is still thinking runs on: the
/// answer is read, metered and recorded, and closing the attempt waits for it.
#[tokio::test]
async fn a_non_stream_call_whose_client_hangs_up_is_still_metered() {
    let up = upstream().await;
    let sink = sink();
    let (proxy, _dir, sock) = one_attempt(
        config(&up, ApiKind::OpenAiChat, sink.clone()),
        "hangup",
        Contract::model_only(MODEL),
    )
    .await;
    let body = chat("usage:30:5", false).to_string();
    let mut s = tokio::net::UnixStream::connect(&sock).await.unwrap();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\nx-test-script: held-json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    use tokio::io::AsyncWriteExt;
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(body.as_bytes()).await.unwrap();
    // The upstream has the request (the minute is a hang guard): the call is in flight.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while up.state.seen.lock().unwrap().is_empty() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(up.state.seen.lock().unwrap().len(), 1);
    drop(s);
    up.state.go_on.notify_one();
    let m = proxy
        .close_attempt_and_wait("hangup", Duration::from_secs(60))
        .await
        .unwrap();
    let recs = sink.records();
    assert_eq!(recs.len(), 1, "{recs:?}");
    assert_eq!(recs[0].outcome, CallOutcome::Ok);
    assert_eq!(recs[0].usage.as_ref().map(|u| u.total_tokens()), Some(35));
    assert_eq!(m.roles[&Role::Agent].turns, 1);
    proxy.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn refusals_have_the_right_status_body_and_record() {
    let up = upstream().await;
    let sink = sink();
    let mut cfg = config(&up, ApiKind::OpenAiChat, sink.clone());
    cfg.max_body_bytes = 4096;
    cfg.timeouts.first_byte = Duration::from_millis(800);
    cfg.tcp_listen = Some("127.0.0.1:0".parse().unwrap());
    let proxy = Proxy::start(cfg).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("s.sock");
    let mut contract = Contract::v04(MODEL);
    contract.session_header = Some("x-eval-session".into());
    proxy
        .register_attempt(spec(
            "rf",
            Listen::Unix(sock.clone()),
            contract,
            Budget {
                max_requests: Some(2),
                ..Budget::default()
            },
        ))
        .await
        .unwrap();
    let good = json!({"model": MODEL, "messages":[{"role":"user","content":"usage:1:1"}], "temperature": 0, "max_tokens": 32768, "stream": true});
    let sess = "session-rf";
    let call = |body: Value, session: &'static str, script: &'static str| {
        let sock = sock.clone();
        async move {
            unix_call(
                &sock,
                "POST",
                "/v1/chat/completions",
                &[("x-eval-session", session), ("x-test-script", script)],
                body.to_string(),
            )
            .await
        }
    };
    let expect = |r: &crate::support::Reply, status: u16, code: &str| {
        assert_eq!(r.status, status, "{}", r.text());
        assert_eq!(r.json()["error"]["code"], code, "{}", r.text());
        assert!(r.json()["error"]["message"].as_str().unwrap().len() > 10);
    };
    let mut expected = vec![];

    let r = call(good.clone(), sess, "openai-stream").await;
    assert_eq!(r.status, 200, "{}", r.text());
    expected.push(CallOutcome::Ok);
    let mut wrong_model = good.clone();
    wrong_model["model"] = json!("deepseek-v4-flash-2");
    expect(
        &call(wrong_model, sess, "openai-stream").await,
        403,
        "contract_violation",
    );
    expected.push(CallOutcome::ContractViolation);
    let mut warm = good.clone();
    warm["temperature"] = json!(0.2);
    let r = call(warm, sess, "openai-stream").await;
    expect(&r, 403, "contract_violation");
    assert_eq!(r.headers.get("x-should-retry").unwrap(), "false");
    expected.push(CallOutcome::ContractViolation);
    let mut no_stream = good.clone();
    no_stream["stream"] = json!(false);
    expect(
        &call(no_stream, sess, "openai-json").await,
        403,
        "contract_violation",
    );
    expected.push(CallOutcome::ContractViolation);
    // A session id that merely starts with the right one is not the right one.
    expect(
        &call(good.clone(), "session-rf-other", "openai-stream").await,
        403,
        "contract_violation",
    );
    expected.push(CallOutcome::ContractViolation);
    expect(
        &call(good.clone(), "session-r", "openai-stream").await,
        403,
        "contract_violation",
    );
    expected.push(CallOutcome::ContractViolation);
    // Malformed JSON, duplicate members, oversize body.
    let r = unix_call(&sock, "POST", "/v1/chat/completions", &[], "{\"model\": ").await;
    expect(&r, 400, "invalid_json");
    expected.push(CallOutcome::BadRequest);
    let r = unix_call(
        &sock,
        "POST",
        "/v1/chat/completions",
        &[],
        "{\"model\":\"a\",\"model\":\"b\"}",
    )
    .await;
    expect(&r, 400, "invalid_json");
    expected.push(CallOutcome::BadRequest);
    let big = format!("{{\"model\":\"{MODEL}\",\"pad\":\"{}\"}}", "x".repeat(5000));
    expect(
        &unix_call(&sock, "POST", "/v1/chat/completions", &[], big).await,
        413,
        "request_too_large",
    );
    expected.push(CallOutcome::BadRequest);
    // Wrong method and unknown path.
    expect(
        &unix_call(&sock, "GET", "/v1/chat/completions", &[], "").await,
        405,
        "bad_request",
    );
    expected.push(CallOutcome::BadRequest);
    expect(
        &unix_call(&sock, "POST", "/v1/embeddings", &[], "{}").await,
        404,
        "bad_request",
    );
    expected.push(CallOutcome::BadRequest);
    // Upstream hang (first-byte timeout), 500, garbage.
    // The 504 itself shows the first-byte timeout fired: the hanging upstream never answers
    // before its own 30 s, and the bound below is that line, not a guess at the proxy's speed.
    let t = std::time::Instant::now();
    expect(
        &call(good.clone(), sess, "hang").await,
        504,
        "upstream_timeout",
    );
    assert!(t.elapsed() < Duration::from_secs(30));
    expected.push(CallOutcome::UpstreamError);
    // The request budget (2) is spent by ok + hang; the 500 and garbage calls get a fresh attempt.
    expect(
        &call(good.clone(), sess, "error-500").await,
        429,
        "budget_exhausted",
    );
    expected.push(CallOutcome::BudgetExhausted);
    let recs = settle_records(&sink, expected.len()).await;
    assert_eq!(recs.iter().map(|r| r.outcome).collect::<Vec<_>>(), expected);
    assert!(
        recs.iter()
            .all(|r| r.detail.as_deref().is_none_or(|d| !d.contains(KEY)))
    );
    let m = proxy.close_attempt("rf").unwrap();
    let a = &m.roles[&Role::Agent];
    assert_eq!(
        (
            a.contract_violations,
            a.budget_exhaustions,
            a.calls,
            a.turns
        ),
        (5, 1, 2, 1)
    );
    // A closed attempt's socket is gone.
    assert!(tokio::net::UnixStream::connect(&sock).await.is_err());

    let sock2 = dir.path().join("s2.sock");
    proxy
        .register_attempt(spec(
            "rf2",
            Listen::Unix(sock2.clone()),
            Contract::model_only(MODEL),
            Budget::default(),
        ))
        .await
        .unwrap();
    let r = post(&sock2, "error-500", &chat("x", false)).await;
    assert_eq!(r.status, 500);
    assert_eq!(r.json()["error"]["message"], "internal trouble");
    let r = post(&sock2, "garbage", &chat("x", false)).await;
    expect(&r, 502, "upstream_error");
    // Unknown token on TCP.
    let reg = proxy
        .register_attempt(spec(
            "tok",
            Listen::Token,
            Contract::model_only(MODEL),
            Budget::default(),
        ))
        .await
        .unwrap();
    let addr = reg.tcp_addr.unwrap();
    let client = reqwest::Client::new();
    let url = format!("http://{addr}/v1/chat/completions");
    let r = client
        .post(&url)
        .bearer_auth("evp-not-a-token")
        .header("x-test-script", "openai-json")
        .body(chat("x", false).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = client
        .post(&url)
        .header("x-test-script", "openai-json")
        .body(chat("x", false).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let token = reg.token.clone().unwrap();
    assert!(!format!("{reg:?}").contains(&token));
    let r = client
        .post(&url)
        .header("x-api-key", &token)
        .header("x-test-script", "openai-json")
        .body(chat("x", false).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let recs = settle_records(&sink, expected.len() + 5).await;
    let tail: Vec<CallOutcome> = recs[expected.len()..].iter().map(|r| r.outcome).collect();
    assert_eq!(
        tail,
        vec![
            CallOutcome::UpstreamError,
            CallOutcome::UpstreamError,
            CallOutcome::UnknownAttempt,
            CallOutcome::UnknownAttempt,
            CallOutcome::Ok
        ]
    );
    // The token is not forwarded upstream.
    assert!(
        up.seen()
            .iter()
            .all(|s| !s.headers.iter().any(|(_, v)| v.contains(&token)))
    );
    proxy.close_attempt("tok").unwrap();
    let r = client
        .post(&url)
        .bearer_auth(&token)
        .body(chat("x", false).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401, "a closed attempt's token still works");
    proxy.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_concurrent_streams_over_twenty_attempts_are_metered_exactly() {
    let up = upstream().await;
    let sink = sink();
    let proxy = Proxy::start(config(&up, ApiKind::OpenAiChat, sink.clone()))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut socks = vec![];
    for a in 0..20 {
        let sock = dir.path().join(format!("att{a}/p.sock"));
        proxy
            .register_attempt(spec(
                &format!("att{a}"),
                Listen::Unix(sock.clone()),
                Contract::model_only(MODEL),
                Budget::default(),
            ))
            .await
            .unwrap();
        socks.push(sock);
    }
    let mut tasks = vec![];
    for a in 0..20u64 {
        for c in 0..10u64 {
            let sock = socks[a as usize].clone();
            tasks.push(tokio::spawn(async move {
                let marker = format!("m{a}x{c}|usage:{}:{}", 1000 * a + c, c + 1);
                let r = post(&sock, "openai-stream", &chat(&marker, true)).await;
                assert_eq!(r.status, 200);
                assert!(
                    r.text().contains(&format!("Helm{a}x{c}|")),
                    "cross-talk: {}",
                    r.text()
                );
            }));
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    let recs = settle_records(&sink, 200).await;
    assert_eq!(recs.len(), 200);
    for a in 0..20u64 {
        let id = format!("att{a}");
        let mine = records_for(&recs, &id);
        assert_eq!(mine.len(), 10);
        let mut seqs: Vec<u64> = mine.iter().map(|r| r.seq).collect();
        seqs.sort();
        assert_eq!(seqs, (1..=10).collect::<Vec<_>>());
        let input: u64 = mine
            .iter()
            .map(|r| r.usage.as_ref().unwrap().input_tokens)
            .sum();
        let output: u64 = mine
            .iter()
            .map(|r| r.usage.as_ref().unwrap().output_tokens)
            .sum();
        assert_eq!(input, (0..10).map(|c| 1000 * a + c).sum::<u64>());
        assert_eq!(output, (0..10).map(|c| c + 1).sum::<u64>());
        let m = proxy.close_attempt(&id).unwrap();
        assert_eq!(m.roles[&Role::Agent].input_tokens, input);
        assert_eq!(m.roles[&Role::Agent].turns, 10);
    }
    let (run_tokens, _) = proxy.run_usage();
    assert_eq!(
        run_tokens,
        (0..20u64)
            .map(|a| (0..10).map(|c| 1000 * a + c + c + 1).sum::<u64>())
            .sum::<u64>()
    );
    proxy.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_calls_never_spend_past_a_budget_for_ten() {
    let up = upstream().await;
    let sink = sink();
    let mut cfg = config(&up, ApiKind::OpenAiChat, sink.clone());
    // The run's spend limit admits ten worst cases: each call reserves its body bytes + 1000.
    let body = json!({"model": MODEL, "messages":[{"role":"user","content":"usage:400:600"}], "max_tokens": 1000});
    let reserve = body.to_string().len() as u64 + 1000;
    cfg.prices.models.insert(
        MODEL.into(),
        Price {
            model: MODEL.into(),
            input_usd_per_mtok: 1.0,
            cached_input_usd_per_mtok: Some(0.1),
            cache_write_usd_per_mtok: Some(1.0),
            output_usd_per_mtok: 1.0,
        },
    );
    cfg.run_budget = Some(RunBudget {
        max_tokens: u64::MAX,
        max_spend_usd: 10.0 * reserve as f64 / 1e6 + 1e-9,
    });
    // Fifty connections at once on one socket: above the default per-attempt cap.
    cfg.listener.max_connections = 64;
    let proxy = Proxy::start(cfg).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("b.sock");
    let budget = Budget {
        max_tokens: Some(10 * reserve),
        ..Budget::default()
    };
    proxy
        .register_attempt(spec(
            "bud",
            Listen::Unix(sock.clone()),
            allowing(Contract::model_only(MODEL), &["max_tokens"]),
            budget,
        ))
        .await
        .unwrap();
    let mut tasks = vec![];
    for _ in 0..50 {
        let sock = sock.clone();
        let body = body.clone();
        tasks.push(tokio::spawn(async move {
            post(&sock, "delay-json", &body).await.status
        }));
    }
    let mut statuses = vec![];
    for t in tasks {
        statuses.push(t.await.unwrap());
    }
    let ok = statuses.iter().filter(|s| **s == 200).count();
    let refused = statuses.iter().filter(|s| **s == 429).count();
    assert_eq!(ok + refused, 50);
    assert_eq!(ok, 10, "statuses: {statuses:?}");
    let recs = settle_records(&sink, 50).await;
    let spent: u64 = recs
        .iter()
        .filter_map(|r| r.usage.as_ref())
        .map(|u| u.total_tokens())
        .sum();
    assert!(spent <= 10 * reserve);
    assert_eq!(spent, 10 * 1000);
    assert_eq!(
        recs.iter()
            .filter(|r| r.outcome == CallOutcome::BudgetExhausted)
            .count(),
        40
    );
    assert_eq!(
        up.seen().len(),
        10,
        "the upstream saw more calls than the budget admits"
    );
    let (_, spend) = proxy.run_usage();
    assert!((spend - 10.0 * 1000.0 / 1e6).abs() < 1e-9, "{spend}");
    proxy.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn parameters_reach_the_upstream_byte_for_byte() {
    let up = upstream().await;
    let sink = sink();
    let proxy = Proxy::start(config(&up, ApiKind::OpenAiChat, sink.clone()))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("p.sock");
    proxy
        .register_attempt(spec(
            "pb",
            Listen::Unix(sock.clone()),
            allowing(
                Contract::model_only(MODEL),
                &[
                    "temperature",
                    "max_tokens",
                    "reasoning_effort",
                    "tools",
                    "seed",
                ],
            ),
            Budget::default(),
        ))
        .await
        .unwrap();
    let raw = format!(
        "{{ \"temperature\" : 0.70,\n  \"model\":\"{MODEL}\", \"max_tokens\": 1e3, \"reasoning_effort\":\"high\",\n  \"tools\":[{{\"type\":\"function\",\"function\":{{\"name\":\"f\",\"parameters\":{{\"z\":1,\"a\":2}}}}}}],\n  \"messages\":[{{\"role\":\"user\",\"content\":\"caf\\u00e9 \u{1F600}\"}}], \"seed\": 12345678901234567890 }}  "
    );
    let r = unix_call(
        &sock,
        "POST",
        "/v1/chat/completions",
        &[("x-test-script", "openai-json")],
        raw.clone(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let streamed = raw.replacen("\"max_tokens\"", "\"stream\": true, \"max_tokens\"", 1);
    let r = unix_call(
        &sock,
        "POST",
        "/chat/completions",
        &[("x-test-script", "openai-stream")],
        streamed.clone(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let seen = up.seen();
    assert_eq!(
        seen[0].body,
        raw.as_bytes(),
        "non-streaming body was rewritten"
    );
    let close = streamed.rfind('}').unwrap();
    let expected = format!(
        "{},\"stream_options\":{{\"include_usage\":true}}{}",
        &streamed[..close],
        &streamed[close..]
    );
    assert_eq!(std::str::from_utf8(&seen[1].body).unwrap(), expected);
    assert_eq!(seen[1].path, "/chat/completions");
    let recs = settle_records(&sink, 2).await;
    assert_eq!(
        recs[0].changes,
        vec![
            Change::InjectedCredential {
                header: "authorization".into()
            },
            Change::AcceptEncodingIdentity
        ]
    );
    assert!(recs[1].changes.contains(&Change::AddedStreamUsage));
    proxy.shutdown(Duration::from_secs(5)).await;
}

struct Plane;

impl ControlPlane for Plane {
    fn handle<'a>(
        &'a self,
        attempt_id: &'a str,
        path: &'a str,
        body: bytes::Bytes,
    ) -> ControlFuture<'a> {
        Box::pin(async move {
            (
                http::StatusCode::OK,
                json!({"attempt": attempt_id, "path": path, "len": body.len()}),
            )
        })
    }
}

#[tokio::test]
async fn control_paths_and_oracle_calls() {
    let up = upstream().await;
    let sink = sink();
    let mut cfg = config(&up, ApiKind::OpenAiChat, sink.clone());
    cfg.control = Some(Arc::new(Plane));
    let proxy = Proxy::start(cfg).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("c.sock");
    let mut s = spec(
        "ctl",
        Listen::Unix(sock.clone()),
        Contract::model_only(MODEL),
        Budget::default(),
    );
    s.roles.insert(
        Role::Oracle,
        RoleSpec {
            contract: Contract::model_only(MODEL),
            budget: Budget {
                max_requests: Some(1),
                ..Budget::default()
            },
        },
    );
    proxy.register_attempt(s).await.unwrap();
    let r = unix_call(&sock, "POST", "/_eval/attest", &[], "{\"x\":1}").await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.json(),
        json!({"attempt":"ctl","path":"/_eval/attest","len":7})
    );
    assert!(up.seen().is_empty(), "a control request went upstream");
    let mut h = http::HeaderMap::new();
    h.insert("x-test-script", "openai-json".parse().unwrap());
    h.insert("authorization", "Bearer whatever".parse().unwrap());
    let reply = proxy
        .oracle_call(
            "ctl",
            h.clone(),
            chat("usage:9:4", false).to_string().into(),
        )
        .await
        .unwrap();
    assert_eq!(reply.status, 200);
    assert_eq!(reply.refused_by_proxy, None, "a forwarded call");
    let reply = proxy
        .oracle_call("ctl", h, chat("usage:9:4", false).to_string().into())
        .await
        .unwrap();
    assert_eq!(reply.status, 429);
    // The same status an overloaded upstream sends, but the proxy's own refusal: the
    // controller must be able to tell (an agent's question over budget is never an outage).
    assert_eq!(
        reply.refused_by_proxy,
        Some(eval_proxy::CallOutcome::BudgetExhausted)
    );
    let m = proxy.close_attempt("ctl").unwrap();
    assert_eq!(m.roles[&Role::Oracle].turns, 1);
    assert_eq!(m.roles[&Role::Oracle].budget_exhaustions, 1);
    assert_eq!(m.roles[&Role::Agent].calls, 0);
    let recs = settle_records(&sink, 2).await;
    assert_eq!(
        recs.len(),
        2,
        "control requests must not be recorded as model calls"
    );
    assert!(recs.iter().all(|r| r.role == Role::Oracle));
    assert_eq!(
        up.seen()[0].header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    proxy.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn sockets_are_usable_by_other_users_and_models_are_listed() {
    use std::os::unix::fs::PermissionsExt;
    let up = upstream().await;
    let sink = sink();
    let proxy = Proxy::start(config(&up, ApiKind::OpenAiChat, sink.clone()))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("new-dir/m.sock");
    proxy
        .register_attempt(spec(
            "md",
            Listen::Unix(sock.clone()),
            Contract::model_only(MODEL),
            Budget::default(),
        ))
        .await
        .unwrap();
    assert_eq!(
        std::fs::metadata(&sock).unwrap().permissions().mode() & 0o777,
        0o666
    );
    assert_eq!(
        std::fs::metadata(sock.parent().unwrap())
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o755
    );
    let r = unix_call(
        &sock,
        "GET",
        "/v1/models",
        &[("x-test-script", "models")],
        "",
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["data"][0]["id"], MODEL);
    assert!(
        proxy
            .register_attempt(spec(
                "md",
                Listen::Unix(dir.path().join("x.sock")),
                Contract::model_only(MODEL),
                Budget::default()
            ))
            .await
            .is_err()
    );
    let m = proxy.close_attempt("md").unwrap();
    assert_eq!(m.roles[&Role::Agent].turns, 0);
    let _ = futures_util::stream::iter([1]).next().await;
    proxy.shutdown(Duration::from_secs(5)).await;
}

/// The rule for calls without usage: a 2xx answer is a model turn only when it ended as the API
/// defines an end and carried usage. A stream whose usage arrived but whose `[DONE]` never did is
/// incomplete (the DeepSeek Harness discards its usage), counted apart at its reservation with
/// what it streamed; a stream that only ever sends keep-alive comments stalls at the idle
/// timeout (comments are not progress) instead of holding the call open.
#[tokio::test]
async fn incomplete_streams_are_not_turns_and_keep_alives_do_not_hold_a_call() {
    let up = upstream().await;
    let sink = sink();
    let mut cfg = config(&up, ApiKind::OpenAiChat, sink.clone());
    cfg.timeouts.idle = Duration::from_millis(300);
    let (proxy, _dir, sock) = one_attempt(cfg, "inc", Contract::model_only(MODEL)).await;
    let r = post(&sock, "openai-stream", &chat("usage:30:5", true)).await;
    assert_eq!(r.status, 200);
    let r = post(&sock, "usage-then-eof", &chat("usage:40:9", true)).await;
    assert_eq!(r.status, 200);
    let recs = settle_records(&sink, 2).await;
    assert!(!recs[0].incomplete, "{:?}", recs[0]);
    assert!(recs[1].incomplete, "{:?}", recs[1]);
    assert_eq!(recs[1].usage.as_ref().map(|u| u.total_tokens()), Some(49));
    assert!(recs[1].streamed_bytes.unwrap() > 0);
    assert!(
        recs[1].detail.as_deref().unwrap().contains("end marker"),
        "{:?}",
        recs[1].detail
    );
    let resp = unix_send(
        &sock,
        "POST",
        "/v1/chat/completions",
        &[("x-test-script", "keepalive-forever")],
        chat("usage:3:3", true).to_string(),
    )
    .await;
    assert_eq!(resp.status(), 200);
    // Without the rule this never ends: the upstream sends a comment every 20 ms forever.
    assert!(resp.into_body().collect().await.is_err());
    let recs = settle_records(&sink, 3).await;
    assert_eq!(recs[2].outcome, CallOutcome::UpstreamError);
    assert!(recs[2].incomplete);
    assert!(
        recs[2].detail.as_deref().unwrap().contains("keep-alive"),
        "{:?}",
        recs[2].detail
    );
    let m = proxy.close_attempt("inc").unwrap();
    let a = &m.roles[&Role::Agent];
    assert_eq!(a.turns, 1, "only the complete call is a turn");
    assert_eq!(a.input_tokens + a.output_tokens, 35);
    assert_eq!(a.incomplete_calls, 2);
    assert_eq!(
        a.incomplete_reserved_tokens,
        recs[1].reserved_tokens + recs[2].reserved_tokens
    );
    assert_eq!(a.incomplete_seen_tokens, 49);
    assert_eq!(
        a.incomplete_streamed_bytes,
        recs[1].streamed_bytes.unwrap() + recs[2].streamed_bytes.unwrap()
    );
    proxy.shutdown(Duration::from_secs(5)).await;
}

/// Provider faults as the proxy sees them on the wire: 402 (and 401/403) are account refusals,
/// never the agent's 4xx; 429 passes through in the API's own shape with its `retry-after`;
/// a keep-alive-only stream that closes and `insufficient_system_resource` are provider faults;
/// the last one is remembered with the upstream's status and body digest until a later
/// complete turn clears it.
#[tokio::test]
async fn provider_faults_are_told_apart_from_the_agents_errors() {
    let up = upstream().await;
    let sink = sink();
    let cfg = config(&up, ApiKind::OpenAiChat, sink.clone());
    let (proxy, _dir, sock) = one_attempt(cfg, "pf", Contract::model_only(MODEL)).await;
    let r = post(&sock, "deepseek-402", &chat("x", false)).await;
    assert_eq!(r.status, 402);
    assert_eq!(r.json()["error"]["message"], "Insufficient Balance");
    let resp = unix_send(
        &sock,
        "POST",
        "/v1/chat/completions",
        &[("x-test-script", "deepseek-429-retry-after")],
        chat("x", false).to_string(),
    )
    .await;
    assert_eq!(resp.status(), 429);
    assert_eq!(
        resp.headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap()),
        Some("7")
    );
    let m = proxy.meter("pf").unwrap();
    let a = &m.roles[&Role::Agent];
    assert_eq!(a.upstream_account_refusals, 1);
    assert_eq!(a.upstream_client_errors, 0, "a 402 is not the agent's 4xx");
    assert_eq!(a.upstream_server_errors, 1);
    let f = a.last_provider_fault.clone().unwrap();
    assert_eq!((f.kind.as_str(), f.status), ("status", Some(429)));
    assert!(f.body_digest.unwrap().starts_with("sha256:"));

    let r = post(&sock, "keepalive-close", &chat("x", true)).await;
    assert_eq!(r.status, 200);
    let recs = settle_records(&sink, 3).await;
    assert!(recs[2].incomplete);
    let m = proxy.meter("pf").unwrap();
    let f = m.roles[&Role::Agent].last_provider_fault.clone().unwrap();
    assert_eq!(f.kind, "keep_alive_only");
    // A complete turn clears it; a complete turn stopped for want of capacity sets it again.
    let r = post(&sock, "openai-stream", &chat("usage:3:3", true)).await;
    assert_eq!(r.status, 200);
    settle_records(&sink, 4).await;
    assert_eq!(
        proxy.meter("pf").unwrap().roles[&Role::Agent].last_provider_fault,
        None
    );
    let r = post(&sock, "insufficient-resource", &chat("usage:3:3", true)).await;
    assert_eq!(r.status, 200);
    settle_records(&sink, 5).await;
    let m = proxy.close_attempt("pf").unwrap();
    let a = &m.roles[&Role::Agent];
    assert_eq!(
        a.last_provider_fault.as_ref().map(|f| f.kind.as_str()),
        Some("insufficient_system_resource")
    );
    assert_eq!((a.turns, a.provider_faults), (2, 4));
    proxy.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn a_stalled_stream_and_a_spent_wall_clock_are_refused_and_recorded() {
    let up = upstream().await;
    let sink = sink();
    let mut cfg = config(&up, ApiKind::OpenAiChat, sink.clone());
    cfg.timeouts.idle = Duration::from_millis(300);
    let (proxy, dir, sock) = one_attempt(cfg, "stall", Contract::model_only(MODEL)).await;
    let resp = unix_send(
        &sock,
        "POST",
        "/v1/chat/completions",
        &[("x-test-script", "slow-stream")],
        chat("usage:3:3", true).to_string(),
    )
    .await;
    assert_eq!(resp.status(), 200);
    // The upstream sends one event and then goes quiet for longer than the idle timeout.
    let got = resp.into_body().collect().await;
    assert!(
        got.is_err(),
        "a stalled stream must end as a broken transfer, not a clean end"
    );
    let recs = settle_records(&sink, 1).await;
    assert_eq!(recs[0].outcome, CallOutcome::UpstreamError);
    assert!(
        recs[0].detail.as_deref().unwrap().contains("idle"),
        "{:?}",
        recs[0].detail
    );
    assert!(recs[0].usage.is_none());

    let sock2 = dir.path().join("w2.sock");
    let wall = Duration::from_millis(500);
    let budget = Budget {
        max_wall_time: Some(wall),
        ..Budget::default()
    };
    // The wall clock starts at registration; `registered` is taken before it, so a refusal of
    // the first call is correct exactly when this much time has passed (a loaded machine).
    let registered = std::time::Instant::now();
    proxy
        .register_attempt(spec(
            "wall",
            Listen::Unix(sock2.clone()),
            Contract::model_only(MODEL),
            budget,
        ))
        .await
        .unwrap();
    let first = post(&sock2, "openai-json", &chat("x", false)).await;
    if first.status != 200 {
        assert_eq!(first.status, 429, "{}", first.text());
        assert!(registered.elapsed() >= wall, "refused before its wall time");
    }
    // A lower bound only: at least the wall time has passed after this, however slow.
    tokio::time::sleep(wall + Duration::from_millis(50)).await;
    let r = post(&sock2, "openai-json", &chat("x", false)).await;
    assert_eq!(r.status, 429);
    assert_eq!(r.json()["error"]["code"], "budget_exhausted");
    assert!(
        r.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("wall-time")
    );
    up.state.go_on.notify_waiters();
    proxy.shutdown(Duration::from_secs(5)).await;
}

/// A sink that holds every call's start until the test releases it (or refuses it), so the test
/// can see whether the proxy waits for a durable start before forwarding.
struct GatedSink {
    inner: Arc<MemorySink>,
    gate: tokio::sync::Semaphore,
    refuse: std::sync::atomic::AtomicBool,
    starts: std::sync::Mutex<Vec<CallStarted>>,
}

impl RecordSink for GatedSink {
    fn record(&self, record: &CallRecord) -> Result<(), RecordError> {
        self.inner.record(record)
    }

    fn call_started<'a>(&'a self, started: &'a CallStarted) -> StartFuture<'a> {
        Box::pin(async move {
            self.starts.lock().unwrap().push(started.clone());
            let _permit = self.gate.acquire().await.unwrap();
            if self.refuse.load(Ordering::SeqCst) {
                return Err(RecordError("disk full".into()));
            }
            Ok(())
        })
    }
}

#[tokio::test]
async fn a_call_is_forwarded_only_after_its_start_is_recorded() {
    let up = upstream().await;
    let sink = Arc::new(GatedSink {
        inner: crate::support::sink(),
        gate: tokio::sync::Semaphore::new(0),
        refuse: false.into(),
        starts: Default::default(),
    });
    let (_proxy, _dir, sock) = one_attempt(
        config(&up, ApiKind::OpenAiChat, sink.clone()),
        "started",
        Contract::model_only(MODEL),
    )
    .await;
    let call = tokio::spawn({
        let sock = sock.clone();
        async move { post(&sock, "openai-json", &chat("hi", false)).await }
    });
    // The start is announced, but nothing reaches the upstream while the sink holds it.
    // Polls for the announcement under a generous hang guard (no speed assumed); the pause
    // after it only gives a broken proxy the chance to forward early, a correct one passes
    // however long it is.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while sink.starts.lock().unwrap().is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the call's start was never announced"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        up.seen().len(),
        0,
        "forwarded before the start was recorded"
    );
    {
        let starts = sink.starts.lock().unwrap();
        assert_eq!(starts.len(), 1);
        assert_eq!(starts[0].attempt_id, "started");
        assert_eq!(starts[0].seq, 1);
        assert!(starts[0].reserved_tokens > 0);
    }
    sink.gate.add_permits(1);
    let r = call.await.unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(up.seen().len(), 1);

    // A sink that cannot record the start refuses the call: nothing is forwarded or spent.
    sink.refuse.store(true, Ordering::SeqCst);
    sink.gate.add_permits(1);
    let r = post(&sock, "openai-json", &chat("again", false)).await;
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(
        up.seen().len(),
        1,
        "a call whose start was not recorded reached the upstream"
    );
    let recs = settle_records(&sink.inner, 2).await;
    assert_eq!(recs.last().unwrap().outcome, CallOutcome::NotRecorded);
    assert!(!r.text().contains(KEY));
}

/// The record names the tools a forwarded request offered and digests its system sections (the
/// bodies never).
#[tokio::test]
async fn the_record_names_the_tools_and_digests_the_system_sections() {
    let up = upstream().await;
    let sink = sink();
    let (proxy, _dir, sock) = one_attempt(
        config(&up, ApiKind::OpenAiChat, sink.clone()),
        "wire",
        allowing(Contract::model_only(MODEL), &["tools"]),
    )
    .await;
    let control = "## Plan Lattice contract control\n\nBefore protected work.\n\nDo not ask the user. Record reasonable, reversible assumptions explicitly.";
    let system = format!("You are a coding agent. SECRET-PERSONA-BODY\n\n{control}");
    let body = json!({
        "model": MODEL,
        "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": "fix it"},
        ],
        "tools": [
            {"type": "function", "function": {"name": "read", "parameters": {}}},
            {"type": "function", "function": {"name": "lattice_intake", "parameters": {}}},
        ],
    })
    .to_string();
    let r = unix_call(
        &sock,
        "POST",
        "/v1/chat/completions",
        &[("x-test-script", "openai-json")],
        body.clone(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let recs = settle_records(&sink, 1).await;
    let wire = recs[0].wire.clone().expect("a wire shape");
    assert_eq!(
        wire.tools,
        Some(vec!["read".to_owned(), "lattice_intake".to_owned()])
    );
    assert_eq!(wire.system.len(), 2);
    assert_eq!(wire.system[1].heading, "## Plan Lattice contract control");
    assert_eq!(
        wire.system[1].digest,
        eval_proxy::wire::text_digest(control)
    );
    assert!(
        wire.system[1]
            .paragraphs
            .contains(&eval_proxy::wire::text_digest(
                "Do not ask the user. Record reasonable, reversible assumptions explicitly."
            ))
    );
    let json = serde_json::to_string(&recs[0]).unwrap();
    assert!(!json.contains("SECRET-PERSONA-BODY"), "{json}");
    assert!(!json.contains("Before protected work"), "{json}");
    proxy.shutdown(Duration::from_secs(5)).await;
}

/// A request's reservation bounds its input by body bytes, which holds for text only: an image,
/// audio, file or document part costs the provider's own count (and a URL part makes it fetch
/// what the agent names). Such parts are refused by default with a 4xx naming the part and the
/// allowed types, recorded as a contract violation and never forwarded; text parts pass, and a
/// contract that lists a type lets it through.
#[tokio::test]
async fn non_text_content_parts_are_refused_unless_the_contract_lists_them() {
    let up = upstream().await;
    let sink = sink();
    let (proxy, dir, sock) = one_attempt(
        config(&up, ApiKind::OpenAiChat, sink.clone()),
        "parts",
        Contract::model_only(MODEL),
    )
    .await;
    let with = |parts: Value| {
        json!({"model": MODEL, "stream": false, "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": parts}]})
    };
    let text_parts = with(json!([{"type": "text", "text": "usage:3:2"}]));
    let r = post(&sock, "openai-json", &text_parts).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let forwarded = up.seen().len();
    for (parts, needle) in [
        (
            json!([{"type": "text", "text": "look"},
                   {"type": "image_url", "image_url": {"url": "https://agent.example/x.png"}}]),
            "\"image_url\" (messages[1].content[1])",
        ),
        (
            json!([{"type": "file", "file": {"file_data": "JVBERi0="}}]),
            "\"file\" (messages[1].content[0])",
        ),
        (
            json!([{"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}]),
            "\"input_audio\"",
        ),
        (json!([{"text": "no type"}]), "without a type"),
    ] {
        let r = post(&sock, "openai-json", &with(parts.clone())).await;
        assert_eq!(r.status, 403, "{parts}: {}", r.text());
        let msg = r.json()["error"]["message"].as_str().unwrap().to_owned();
        assert_eq!(r.json()["error"]["code"], "contract_violation", "{msg}");
        assert!(msg.contains(needle), "{msg}");
        assert!(msg.contains("text, refusal"), "{msg}");
    }
    assert_eq!(
        up.seen().len(),
        forwarded,
        "a refused part reached the upstream"
    );
    let recs = settle_records(&sink, 5).await;
    let outcomes: Vec<CallOutcome> = recs.iter().map(|r| r.outcome).collect();
    assert_eq!(
        outcomes,
        [
            CallOutcome::Ok,
            CallOutcome::ContractViolation,
            CallOutcome::ContractViolation,
            CallOutcome::ContractViolation,
            CallOutcome::ContractViolation
        ]
    );
    assert!(
        recs[1]
            .detail
            .as_deref()
            .is_some_and(|d| d.contains("image_url")),
        "{:?}",
        recs[1].detail
    );
    let m = proxy.close_attempt("parts").unwrap();
    assert_eq!(m.roles[&Role::Agent].contract_violations, 4);

    // A protocol that lists image parts knowingly gets them through.
    let sock2 = dir.path().join("p2.sock");
    let mut images = Contract::model_only(MODEL);
    images.allowed_content_parts = Some(["text".to_owned(), "image_url".to_owned()].into());
    proxy
        .register_attempt(spec(
            "images",
            Listen::Unix(sock2.clone()),
            images,
            Budget::default(),
        ))
        .await
        .unwrap();
    let r = post(
        &sock2,
        "openai-json",
        &with(json!([{"type": "text", "text": "usage:3:2"},
                     {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}}])),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
}
