//! The proxy against a hostile agent and a misbehaving upstream: who caused each upstream
//! failure, per-socket limits, the parameter and header allow-list, budget reservations, key
//! redaction in its encodings, and closing an attempt mid-stream.

use std::sync::Arc;

use crate::support::*;
use eval_proxy::*;
use http_body_util::BodyExt;
use serde_json::{Value, json};

async fn one_attempt(
    cfg: ProxyConfig,
    contract: Contract,
    budget: Budget,
) -> (ProxyHandle, tempfile::TempDir, std::path::PathBuf) {
    let proxy = Proxy::start(cfg).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("a/proxy.sock");
    proxy
        .register_attempt(spec("a", Listen::Unix(sock.clone()), contract, budget))
        .await
        .unwrap();
    (proxy, dir, sock)
}

fn agent(m: &AttemptMeter) -> RoleMeter {
    m.roles.get(&Role::Agent).cloned().unwrap()
}

#[tokio::test]
async fn an_upstream_4xx_is_counted_as_the_clients_fault() {
    let up = upstream().await;
    let sink = sink();
    let (proxy, _d, sock) = one_attempt(
        config(&up, ApiKind::OpenAiChat, sink.clone()),
        Contract::model_only(MODEL),
        Budget::default(),
    )
    .await;
    let r = post(&sock, "error-400", &chat("hi", false)).await;
    assert_eq!(r.status, 400);
    let m = agent(
        &proxy
            .close_attempt_and_wait("a", std::time::Duration::from_secs(5))
            .await
            .unwrap(),
    );
    assert_eq!(
        (
            m.upstream_client_errors,
            m.upstream_server_errors,
            m.upstream_transport_errors,
            m.upstream_errors
        ),
        (1, 0, 0, 1)
    );
    assert_eq!(sink.records()[0].outcome, CallOutcome::UpstreamError);
}

#[tokio::test]
async fn an_upstream_5xx_or_429_is_counted_as_the_servers_fault() {
    let up = upstream().await;
    let sink = sink();
    let (proxy, _d, sock) = one_attempt(
        config(&up, ApiKind::OpenAiChat, sink.clone()),
        Contract::model_only(MODEL),
        Budget::default(),
    )
    .await;
    assert_eq!(
        post(&sock, "error-500", &chat("hi", false)).await.status,
        500
    );
    assert_eq!(
        post(&sock, "error-429", &chat("hi", false)).await.status,
        429
    );
    // The proxy's own key refused is not something the request caused.
    assert_eq!(
        post(&sock, "auth-401", &chat("hi", false)).await.status,
        502
    );
    let m = agent(
        &proxy
            .close_attempt_and_wait("a", std::time::Duration::from_secs(5))
            .await
            .unwrap(),
    );
    assert_eq!(
        (
            m.upstream_client_errors,
            m.upstream_server_errors,
            m.upstream_transport_errors,
            m.upstream_errors,
            m.upstream_account_refusals
        ),
        (0, 2, 0, 2, 1),
        "the refused key is the account's, counted apart from the server's errors"
    );
}

#[tokio::test]
async fn an_unreachable_upstream_is_counted_as_a_transport_fault() {
    // A port that was just free and is closed again: connecting is refused.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    drop(l);
    let sink = sink();
    let key = SecretKey::from_value_for_tests(KEY).unwrap();
    let cfg = ProxyConfig::new(&url, ApiKind::OpenAiChat, key, sink.clone());
    let (proxy, _d, sock) = one_attempt(cfg, Contract::model_only(MODEL), Budget::default()).await;
    let r = post(&sock, "openai-json", &chat("hi", false)).await;
    assert_eq!(r.status, 502);
    let m = agent(
        &proxy
            .close_attempt_and_wait("a", std::time::Duration::from_secs(5))
            .await
            .unwrap(),
    );
    assert_eq!(
        (
            m.upstream_client_errors,
            m.upstream_server_errors,
            m.upstream_transport_errors,
            m.upstream_errors
        ),
        (0, 0, 1, 1)
    );
    assert!(!r.text().contains(KEY));
}

fn budget_of(max_tokens: Option<u64>, max_requests: Option<u64>) -> Budget {
    Budget {
        max_tokens,
        max_requests,
        ..Budget::default()
    }
}

#[tokio::test]
async fn n_700_cannot_overshoot_the_token_budget() {
    let up = upstream().await;
    let sink = sink();
    let contract = allowing(
        Contract::model_only(MODEL),
        &["n", "best_of", "max_tokens", "max_completion_tokens"],
    );
    let (proxy, _d, sock) = one_attempt(
        config(&up, ApiKind::OpenAiChat, sink.clone()),
        contract,
        budget_of(Some(100_000), None),
    )
    .await;
    let mut body = chat("hi", false);
    body["max_tokens"] = json!(1000);
    body["n"] = json!(700);
    let r = post(&sock, "openai-json", &body).await;
    assert_eq!(r.status, 429, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "budget_exhausted");
    // The largest limit counts, whichever parameter names it, times best_of as well.
    let mut body = chat("hi", false);
    body["max_tokens"] = json!(10);
    body["max_completion_tokens"] = json!(20_000);
    body["best_of"] = json!(6);
    assert_eq!(post(&sock, "openai-json", &body).await.status, 429);
    assert!(up.seen().is_empty(), "a refused call reached the upstream");
    // Within the budget the same shape passes, reserved at its worst case.
    let mut body = chat("hi", false);
    body["max_tokens"] = json!(100);
    body["n"] = json!(7);
    assert_eq!(post(&sock, "openai-json", &body).await.status, 200);
    let recs = sink.records();
    let last = recs.last().unwrap();
    assert!(last.reserved_tokens >= 700, "{}", last.reserved_tokens);
    let _ = proxy.close_attempt("a");
}

#[tokio::test]
async fn parameters_and_headers_outside_the_allow_list_are_refused_or_dropped() {
    let up = upstream().await;
    let sink = sink();
    let mut contract = allowing(Contract::model_only(MODEL), &["temperature"]);
    contract.allowed_headers = Some(
        ["user-agent", "x-test-script"]
            .iter()
            .map(|s| s.to_string())
            .collect(),
    );
    let (proxy, _d, sock) = one_attempt(
        config(&up, ApiKind::OpenAiChat, sink.clone()),
        contract,
        Budget::default(),
    )
    .await;
    for extra in ["logit_bias", "seed", "max_completion_tokens", "n"] {
        let mut body = chat("hi", false);
        body[extra] = json!(1);
        let r = post(&sock, "openai-json", &body).await;
        assert_eq!(r.status, 403, "{extra}: {}", r.text());
        // The API's own error shape, naming the parameter.
        assert_eq!(r.json()["error"]["code"], "contract_violation");
        assert!(
            r.json()["error"]["message"]
                .as_str()
                .unwrap()
                .contains(extra)
        );
    }
    assert!(up.seen().is_empty());
    let mut body = chat("hi", false);
    body["temperature"] = json!(0.5);
    let r = unix_call(
        &sock,
        "POST",
        "/v1/chat/completions",
        &[
            ("x-test-script", "openai-json"),
            ("user-agent", "harness/1"),
            ("openai-organization", "org-evil"),
            ("anthropic-beta", "x"),
            ("x-http-method-override", "DELETE"),
        ],
        body.to_string(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let seen = up.seen();
    assert_eq!(seen[0].header("user-agent"), Some("harness/1"));
    for h in [
        "openai-organization",
        "anthropic-beta",
        "x-http-method-override",
    ] {
        assert_eq!(seen[0].header(h), None, "{h} was forwarded");
    }
    let recs = sink.records();
    let dropped: Vec<&str> = recs
        .last()
        .unwrap()
        .changes
        .iter()
        .filter_map(|c| match c {
            Change::DroppedHeader { name } => Some(name.as_str()),
            _ => None,
        })
        .collect();
    for h in [
        "openai-organization",
        "anthropic-beta",
        "x-http-method-override",
    ] {
        assert!(dropped.contains(&h), "{h} not recorded: {dropped:?}");
    }
    let violations = recs
        .iter()
        .filter(|r| r.outcome == CallOutcome::ContractViolation)
        .count();
    assert_eq!(violations, 4);
    let m = agent(&proxy.close_attempt("a").unwrap());
    assert_eq!(m.contract_violations, 4);
}

/// Accepts or refuses every call start, and remembers the paths it was asked about.
#[derive(Default)]
struct StartLog {
    refuse: bool,
    started: std::sync::Mutex<Vec<String>>,
    records: MemorySink,
}

impl RecordSink for StartLog {
    fn record(&self, record: &CallRecord) -> Result<(), RecordError> {
        self.records.record(record)
    }

    fn call_started<'a>(&'a self, started: &'a CallStarted) -> StartFuture<'a> {
        Box::pin(async move {
            self.started.lock().unwrap().push(started.path.clone());
            if self.refuse {
                Err(RecordError("the ledger is full".into()))
            } else {
                Ok(())
            }
        })
    }
}

#[tokio::test]
async fn model_listings_are_inside_the_budget_and_the_call_started_record() {
    let up = upstream().await;
    let log = Arc::new(StartLog::default());
    let (proxy, _d, sock) = one_attempt(
        config(&up, ApiKind::OpenAiChat, log.clone()),
        Contract::model_only(MODEL),
        budget_of(None, Some(1)),
    )
    .await;
    let list = || {
        unix_call(
            &sock,
            "GET",
            "/v1/models",
            &[("x-test-script", "models")],
            "",
        )
    };
    let r = list().await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(*log.started.lock().unwrap(), ["/v1/models"]);
    let r = list().await;
    assert_eq!(r.status, 429, "{}", r.text());
    assert_eq!(
        up.seen().len(),
        1,
        "a listing past the request budget was forwarded"
    );
    let m = agent(&proxy.close_attempt("a").unwrap());
    assert_eq!((m.calls, m.budget_exhaustions, m.turns), (1, 1, 0));

    // A start the sink cannot record is never forwarded.
    let up = upstream().await;
    let log = Arc::new(StartLog {
        refuse: true,
        ..StartLog::default()
    });
    let (_proxy, _d, sock) = one_attempt(
        config(&up, ApiKind::OpenAiChat, log.clone()),
        Contract::model_only(MODEL),
        Budget::default(),
    )
    .await;
    let r = unix_call(
        &sock,
        "GET",
        "/v1/models",
        &[("x-test-script", "models")],
        "",
    )
    .await;
    assert_eq!(r.status, 503, "{}", r.text());
    assert!(up.seen().is_empty());
    assert_eq!(log.records.records()[0].outcome, CallOutcome::NotRecorded);
}

#[tokio::test]
async fn a_request_without_an_output_limit_is_sent_with_the_reserved_one() {
    let up = upstream().await;
    let sink = sink();
    let mut contract = Contract::model_only(MODEL);
    contract.default_max_output_tokens = 777;
    let (proxy, _d, sock) = one_attempt(
        config(&up, ApiKind::OpenAiChat, sink.clone()),
        contract,
        Budget::default(),
    )
    .await;
    assert_eq!(
        post(&sock, "openai-json", &chat("hi", false)).await.status,
        200
    );
    let body: Value = serde_json::from_slice(&up.seen()[0].body).unwrap();
    assert_eq!(body["max_tokens"], json!(777));
    let rec = &sink.records()[0];
    assert!(rec.changes.contains(&Change::InsertedOutputLimit {
        param: "max_tokens".into(),
        value: 777
    }));
    assert!(rec.reserved_tokens >= 777);
    let _ = proxy.close_attempt("a");
}

#[tokio::test]
async fn cache_writes_are_priced_at_their_own_rate() {
    let up = upstream().await;
    let sink = sink();
    let mut cfg = config(&up, ApiKind::AnthropicMessages, sink.clone());
    let price = Price {
        model: MODEL.into(),
        input_usd_per_mtok: 1.0,
        cached_input_usd_per_mtok: Some(0.1),
        cache_write_usd_per_mtok: Some(10.0),
        output_usd_per_mtok: 2.0,
    };
    cfg.prices.models.insert(MODEL.into(), price);
    let (proxy, _d, sock) = one_attempt(cfg, Contract::model_only(MODEL), Budget::default()).await;
    let body =
        json!({"model": MODEL, "max_tokens": 100, "messages":[{"role":"user","content":"hi"}]});
    let r = unix_call(
        &sock,
        "POST",
        "/v1/messages",
        &[
            ("x-test-script", "anthropic-json"),
            ("anthropic-version", "2023-06-01"),
        ],
        body.to_string(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let rec = &sink.records()[0];
    let u = rec.usage.clone().unwrap();
    assert!(u.cache_creation_tokens > 0);
    let fresh = u.input_tokens - u.cached_input_tokens - u.cache_creation_tokens;
    let want = (fresh as f64 * 1.0
        + u.cached_input_tokens as f64 * 0.1
        + u.cache_creation_tokens as f64 * 10.0
        + u.output_tokens as f64 * 2.0)
        / 1e6;
    assert!(
        (rec.spend_usd - want).abs() < 1e-12,
        "{} vs {want}",
        rec.spend_usd
    );
    let _ = proxy.close_attempt("a");
}

#[tokio::test]
async fn stream_false_accepts_a_request_that_leaves_stream_out() {
    let up = upstream().await;
    let sink = sink();
    let mut contract = Contract::model_only(MODEL);
    contract
        .params
        .insert("stream".into(), ParamRule::Exact(Value::Bool(false)));
    let (proxy, _d, sock) = one_attempt(
        config(&up, ApiKind::OpenAiChat, sink.clone()),
        contract,
        Budget::default(),
    )
    .await;
    let absent = json!({"model": MODEL, "messages":[{"role":"user","content":"hi"}]});
    assert_eq!(post(&sock, "openai-json", &absent).await.status, 200);
    assert_eq!(
        post(&sock, "openai-json", &chat("hi", false)).await.status,
        200
    );
    assert_eq!(
        post(&sock, "openai-stream", &chat("hi", true)).await.status,
        403
    );
    assert_eq!(up.seen().len(), 2);
    let _ = proxy.close_attempt("a");
}

#[tokio::test]
async fn a_seeded_run_budget_refuses_at_the_limit_earlier_sessions_left() {
    let up = upstream().await;
    let sink = sink();
    let mut cfg = config(&up, ApiKind::OpenAiChat, sink.clone());
    let body = json!({"model": MODEL, "messages":[{"role":"user","content":"usage:10:10"}], "max_tokens": 100});
    let reserve = body.to_string().len() as u64 + 100;
    // Room for exactly one more call's worst case after what earlier sessions spent; the spend
    // limit is out of reach (the model is priced, or it would be refused as unpriced).
    cfg.prices.models.insert(
        MODEL.into(),
        Price {
            model: MODEL.into(),
            input_usd_per_mtok: 1.0,
            cached_input_usd_per_mtok: None,
            cache_write_usd_per_mtok: None,
            output_usd_per_mtok: 1.0,
        },
    );
    cfg.run_budget = Some(RunBudget {
        max_tokens: 1_000_000,
        max_spend_usd: 1e9,
    });
    cfg.run_seed = RunSeed {
        tokens: 1_000_000 - reserve,
        spend_usd: 0.0,
        requests: 9,
    };
    let (proxy, _d, sock) = one_attempt(
        cfg,
        allowing(Contract::model_only(MODEL), &["max_tokens"]),
        Budget::default(),
    )
    .await;
    assert_eq!(proxy.run_usage().0, 1_000_000 - reserve);
    assert_eq!(post(&sock, "openai-json", &body).await.status, 200);
    let r = post(&sock, "openai-json", &body).await;
    assert_eq!(r.status, 429, "{}", r.text());
    assert!(
        r.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("run limit")
    );
    assert_eq!(up.seen().len(), 1);
    assert_eq!(proxy.run_usage().0, 1_000_000 - reserve + 20);
    assert_eq!(proxy.run_requests(), 10);

    // The spend seed binds the same way.
    let up = upstream().await;
    let mut cfg = config(&up, ApiKind::OpenAiChat, sink.clone());
    cfg.prices.models.insert(
        MODEL.into(),
        Price {
            model: MODEL.into(),
            input_usd_per_mtok: 1.0,
            cached_input_usd_per_mtok: Some(1.0),
            cache_write_usd_per_mtok: Some(1.0),
            output_usd_per_mtok: 1.0,
        },
    );
    cfg.run_budget = Some(RunBudget {
        max_tokens: u64::MAX,
        max_spend_usd: 1.0,
    });
    cfg.run_seed.spend_usd = 1.0;
    let (_proxy, _d, sock) = one_attempt(
        cfg,
        allowing(Contract::model_only(MODEL), &["max_tokens"]),
        Budget::default(),
    )
    .await;
    assert_eq!(post(&sock, "openai-json", &body).await.status, 429);
    assert!(up.seen().is_empty());
}

/// Polls the attempt's meter until `done` holds (the proxy counts a connection event just after
/// the client can observe it); bounded so a broken proxy fails instead of hanging.
async fn meter_until(
    proxy: &ProxyHandle,
    id: &str,
    done: impl Fn(&AttemptMeter) -> bool,
) -> AttemptMeter {
    // A hang guard, not a speed assumption: the meter settles when the call's record lands.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while std::time::Instant::now() < deadline {
        let m = proxy.meter(id).unwrap();
        if done(&m) {
            return m;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    proxy.meter(id).unwrap()
}

/// The answer a connection over the cap gets: a 503 in the API's error shape that says to come
/// back, on a connection the proxy closes.
fn assert_over_cap_refusal(answer: &str) {
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    let head = answer.to_ascii_lowercase();
    assert!(head.contains("\r\nretry-after: 1\r\n"), "{answer}");
    assert!(head.contains("\r\nconnection: close\r\n"), "{answer}");
    assert!(answer.contains("\"too_many_connections\""), "{answer}");
}

async fn read_all(s: &mut tokio::net::UnixStream) -> Vec<u8> {
    use tokio::io::AsyncReadExt;
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out).await;
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_flood_exhausts_only_its_own_attempt() {
    use tokio::io::AsyncWriteExt;
    let up = upstream().await;
    let sink = sink();
    let mut cfg = config(&up, ApiKind::OpenAiChat, sink.clone());
    // Timeouts far away: the cap alone must hold the flood.
    cfg.listener = ListenerLimits {
        max_connections: 4,
        header_read_timeout: std::time::Duration::from_secs(3600),
        body_read_timeout: std::time::Duration::from_secs(3600),
    };
    let proxy = Proxy::start(cfg).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let flood = dir.path().join("flood.sock");
    let sibling = dir.path().join("sibling.sock");
    for (id, sock) in [("flood", &flood), ("sibling", &sibling)] {
        proxy
            .register_attempt(spec(
                id,
                Listen::Unix(sock.clone()),
                Contract::model_only(MODEL),
                Budget::default(),
            ))
            .await
            .unwrap();
    }
    let mut held = vec![];
    for _ in 0..4 {
        let mut s = tokio::net::UnixStream::connect(&flood).await.unwrap();
        s.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
            .await
            .unwrap();
        held.push(s);
    }
    let m = meter_until(&proxy, "flood", |m| m.connections.accepted == 4).await;
    assert_eq!(m.connections.accepted, 4);
    // Over the cap: a refusal the client can read, never served.
    for _ in 0..3 {
        let mut s = tokio::net::UnixStream::connect(&flood).await.unwrap();
        let _ = s
            .write_all(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
            .await;
        let answer = String::from_utf8_lossy(&read_all(&mut s).await).into_owned();
        assert_over_cap_refusal(&answer);
    }
    // The sibling attempt is untouched.
    for _ in 0..6 {
        let r = post(&sibling, "openai-json", &chat("hi", false)).await;
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let m = proxy.meter("flood").unwrap();
    assert_eq!(
        (m.connections.accepted, m.connections.refused_over_limit),
        (4, 3)
    );
    assert_eq!(
        proxy
            .meter("sibling")
            .unwrap()
            .connections
            .refused_over_limit,
        0
    );
    // Closing the flooding attempt closes its half-open connections.
    proxy
        .close_attempt_and_wait("flood", std::time::Duration::from_secs(5))
        .await
        .unwrap();
    for mut s in held {
        assert!(read_all(&mut s).await.is_empty());
    }
    assert!(
        sink.records()
            .iter()
            .all(|r| r.attempt_id.as_deref() == Some("sibling"))
    );
}

#[tokio::test]
async fn slow_heads_and_slow_bodies_are_cut_off() {
    use tokio::io::AsyncWriteExt;
    let up = upstream().await;
    let sink = sink();
    let mut cfg = config(&up, ApiKind::OpenAiChat, sink.clone());
    cfg.listener = ListenerLimits {
        max_connections: 4,
        header_read_timeout: std::time::Duration::from_millis(200),
        body_read_timeout: std::time::Duration::from_millis(200),
    };
    let (proxy, _d, sock) = one_attempt(cfg, Contract::model_only(MODEL), Budget::default()).await;
    // A head that never ends: the connection is closed.
    let mut s = tokio::net::UnixStream::connect(&sock).await.unwrap();
    s.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let _ = read_all(&mut s).await;
    let m = meter_until(&proxy, "a", |m| m.connections.header_timeouts == 1).await;
    assert_eq!(m.connections.header_timeouts, 1);
    // A body that never ends: 408 in the API's shape, recorded, nothing forwarded.
    let mut s = tokio::net::UnixStream::connect(&sock).await.unwrap();
    s.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{\"model\":").await.unwrap();
    let answer = String::from_utf8_lossy(&read_all(&mut s).await).into_owned();
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("request_timeout"), "{answer}");
    let recs = sink.records();
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].outcome, CallOutcome::BadRequest);
    assert!(up.seen().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_cuts_a_stream_left_draining_and_records_it_before_returning() {
    let up = upstream().await;
    let sink = sink();
    let (proxy, _d, sock) = one_attempt(
        config(&up, ApiKind::OpenAiChat, sink.clone()),
        Contract::model_only(MODEL),
        Budget::default(),
    )
    .await;
    // The client reads the first chunk and leaves; the upstream keeps trickling.
    let resp = unix_send(
        &sock,
        "POST",
        "/v1/chat/completions",
        &[("x-test-script", "endless-stream")],
        chat("hi", true).to_string(),
    )
    .await;
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let first = body.frame().await.unwrap().unwrap();
    assert!(first.is_data());
    drop(body);
    assert!(
        sink.records().is_empty(),
        "the call ended although the upstream is still sending"
    );
    let meter = proxy
        .close_attempt_and_wait("a", std::time::Duration::from_millis(200))
        .await
        .unwrap();
    // Returned: the record is already delivered, no polling.
    let recs = sink.records();
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].outcome, CallOutcome::CutAtClose);
    assert!(recs[0].client_disconnected);
    assert!(recs[0].reserved_tokens > 0);
    // Counted in the run budget at its reservation.
    assert_eq!(proxy.run_usage().0, recs[0].reserved_tokens);
    assert_eq!(agent(&meter).calls, 1);

    // A client still reading is cut the same way, and sees the stream break.
    let up = upstream().await;
    let sink = crate::support::sink();
    let (proxy, _d, sock) = one_attempt(
        config(&up, ApiKind::OpenAiChat, sink.clone()),
        Contract::model_only(MODEL),
        Budget::default(),
    )
    .await;
    let resp = unix_send(
        &sock,
        "POST",
        "/v1/chat/completions",
        &[("x-test-script", "endless-stream")],
        chat("hi", true).to_string(),
    )
    .await;
    let reader = tokio::spawn(async move { resp.into_body().collect().await.is_ok() });
    proxy
        .close_attempt_and_wait("a", std::time::Duration::from_millis(200))
        .await
        .unwrap();
    let recs = sink.records();
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].outcome, CallOutcome::CutAtClose);
    assert!(!reader.await.unwrap(), "a cut stream ended as if complete");
}

#[tokio::test]
async fn a_reflected_key_is_redacted_in_every_encoding_streaming_or_not() {
    let up = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let transcripts = dir.path().join("t");
    std::fs::create_dir(&transcripts).unwrap();
    let sink = sink();
    let mut cfg = config(&up, ApiKind::OpenAiChat, sink.clone());
    cfg.transcript_dir = Some(transcripts.clone());
    let (proxy, _d, sock) = one_attempt(cfg, Contract::model_only(MODEL), Budget::default()).await;
    let forms = key_encodings(&format!("Bearer {KEY}"));
    for (script, stream) in [
        ("echo-key-encoded-json", false),
        ("echo-key-encoded-stream", true),
    ] {
        let r = post(&sock, script, &chat("hi", stream)).await;
        assert_eq!(r.status, 200, "{}", r.text());
        let text = r.text();
        for form in &forms {
            let (label, value) = form.split_once('=').unwrap();
            assert!(
                !text.contains(value),
                "{script}: {label} reached the client: {text}"
            );
            assert!(
                text.contains(&format!("{label}=")),
                "{script}: {label} missing"
            );
        }
        assert!(
            text.matches("[REDACTED]").count() >= forms.len(),
            "{script}: {text}"
        );
    }
    let recs = sink.records();
    assert!(recs.iter().all(|r| {
        r.changes
            .iter()
            .any(|c| matches!(c, Change::RedactedKey { count } if *count >= 8))
    }));
    // Nothing the proxy wrote down holds any form either.
    let _ = proxy.close_attempt("a");
    let mut written: Vec<Vec<u8>> = read_tree(&transcripts)
        .into_iter()
        .map(|(_, b)| b)
        .collect();
    written.push(serde_json::to_vec(&recs).unwrap());
    for w in written {
        for form in &forms {
            let value = form.split_once('=').unwrap().1;
            assert!(!contains(&w, value), "{value} was written down");
        }
    }
}

/// Polls the token listener's meter until `done` holds (counted just after the client can
/// observe the event); bounded so a broken proxy fails instead of hanging.
async fn token_meter_until(
    proxy: &ProxyHandle,
    done: impl Fn(&ConnectionMeter) -> bool,
) -> ConnectionMeter {
    for _ in 0..2000 {
        let m = proxy.token_listener_meter();
        if done(&m) {
            return m;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    proxy.token_listener_meter()
}

async fn read_all_tcp(s: &mut tokio::net::TcpStream) -> Vec<u8> {
    use tokio::io::AsyncReadExt;
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out).await;
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shared_token_listener_has_the_attempt_sockets_cap_and_timeouts() {
    use tokio::io::AsyncWriteExt;
    let up = upstream().await;
    let sink = sink();
    let mut cfg = config(&up, ApiKind::OpenAiChat, sink.clone());
    cfg.tcp_listen = Some("127.0.0.1:0".parse().unwrap());
    // Timeouts far away: the cap alone must hold the flood.
    cfg.listener = ListenerLimits {
        max_connections: 4,
        header_read_timeout: std::time::Duration::from_secs(3600),
        body_read_timeout: std::time::Duration::from_secs(3600),
    };
    let proxy = Proxy::start(cfg).await.unwrap();
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
    let mut held = vec![];
    for _ in 0..4 {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
            .await
            .unwrap();
        held.push(s);
    }
    let m = token_meter_until(&proxy, |m| m.accepted == 4).await;
    assert_eq!(m.accepted, 4);
    // Over the cap: a refusal the client can read, never served.
    for _ in 0..3 {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let _ = s
            .write_all(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
            .await;
        let answer = String::from_utf8_lossy(&read_all_tcp(&mut s).await).into_owned();
        assert_over_cap_refusal(&answer);
    }
    let m = proxy.token_listener_meter();
    assert_eq!((m.accepted, m.refused_over_limit), (4, 3));
    // Closed connections free their slots: a token request is served again.
    drop(held);
    let client = reqwest::Client::new();
    let url = format!("http://{addr}/v1/chat/completions");
    let token = reg.token.clone().unwrap();
    let mut status = 0;
    // Each refused try is counted, so this ends once the server has seen the held ones close.
    for _ in 0..2000 {
        let r = client
            .post(&url)
            .header("x-api-key", &token)
            .header("x-test-script", "openai-json")
            .body(chat("hi", false).to_string())
            .send()
            .await;
        if let Ok(r) = r {
            status = r.status().as_u16();
            // A slot still taken is a 503 refusal: try again.
            if status != 503 {
                break;
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    assert_eq!(status, 200);
    assert_eq!(proxy.meter("tok").unwrap().connections.accepted, 0);
}

#[tokio::test]
async fn a_slow_head_on_the_token_listener_is_cut_off() {
    use tokio::io::AsyncWriteExt;
    let up = upstream().await;
    let sink = sink();
    let mut cfg = config(&up, ApiKind::OpenAiChat, sink.clone());
    cfg.tcp_listen = Some("127.0.0.1:0".parse().unwrap());
    cfg.listener = ListenerLimits {
        max_connections: 4,
        header_read_timeout: std::time::Duration::from_millis(200),
        body_read_timeout: std::time::Duration::from_millis(200),
    };
    let proxy = Proxy::start(cfg).await.unwrap();
    let addr = proxy.tcp_addr().unwrap();
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    // The server closes the connection; without a head timeout it never would (the bound only
    // turns that hang into a failure).
    let closed =
        tokio::time::timeout(std::time::Duration::from_secs(120), read_all_tcp(&mut s)).await;
    assert!(closed.is_ok(), "a head that never ends held the connection");
    let m = token_meter_until(&proxy, |m| m.header_timeouts == 1).await;
    assert_eq!(m.header_timeouts, 1);
}

/// A client over the cap that sends a whole request (a large body included) reads the 503: the
/// proxy takes the request in before answering and closing, so the client never sees a reset
/// mid-request, and nothing reaches the upstream or the records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_over_the_connection_cap_gets_a_readable_503_not_a_reset() {
    use tokio::io::AsyncWriteExt;
    let up = upstream().await;
    let sink = sink();
    let mut cfg = config(&up, ApiKind::OpenAiChat, sink.clone());
    cfg.tcp_listen = Some("127.0.0.1:0".parse().unwrap());
    cfg.listener = ListenerLimits {
        max_connections: 2,
        header_read_timeout: std::time::Duration::from_secs(3600),
        body_read_timeout: std::time::Duration::from_secs(3600),
    };
    let proxy = Proxy::start(cfg).await.unwrap();
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
    let mut held = vec![];
    for _ in 0..2 {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
            .await
            .unwrap();
        held.push(s);
    }
    assert_eq!(
        token_meter_until(&proxy, |m| m.accepted == 2)
            .await
            .accepted,
        2
    );
    // A body far larger than a socket buffer: were it left unread, closing would reset.
    let big = chat(&"y".repeat(1 << 20), false).to_string();
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    for _ in 0..3 {
        let r = client
            .post(format!("http://{addr}/v1/chat/completions"))
            .header("x-api-key", reg.token.clone().unwrap())
            .header("content-type", "application/json")
            .body(big.clone())
            .send()
            .await
            .expect("the refusal is an answer, not a transport error");
        assert_eq!(r.status().as_u16(), 503);
        assert_eq!(r.headers()["retry-after"], "1");
        let v: Value =
            serde_json::from_slice(&r.bytes().await.unwrap()).expect("a JSON error body");
        assert_eq!(v["error"]["code"], "too_many_connections", "{v}");
    }
    let m = proxy.token_listener_meter();
    assert_eq!((m.accepted, m.refused_over_limit), (2, 3));
    assert!(
        up.seen().is_empty(),
        "a refused request reached the upstream"
    );
    assert!(
        sink.records().is_empty(),
        "a refused connection made a call record"
    );
    drop(held);
}

/// The bodies kept for the controller's wire log (`keep_bodies`) are the redacted ones: no key
/// form is in them, the request is the one whose digest is recorded, a stream is marked as one,
/// and a stream past the per-call cap is cut there and flagged.
#[tokio::test]
async fn kept_bodies_are_redacted_digested_and_capped() {
    use sha2::Digest as _;
    let up = upstream().await;
    let sink = sink();
    let mut cfg = config(&up, ApiKind::OpenAiChat, sink.clone());
    cfg.keep_bodies = Some(1 << 20);
    let (proxy, _d, sock) = one_attempt(cfg, Contract::model_only(MODEL), Budget::default()).await;
    let forms = key_encodings(&format!("Bearer {KEY}"));
    for (script, stream) in [
        ("echo-key-encoded-json", false),
        ("echo-key-encoded-stream", true),
    ] {
        let r = post(&sock, script, &chat(&format!("my key: {KEY}"), stream)).await;
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let _ = proxy.close_attempt("a");
    let recs = sink.records();
    assert_eq!(recs.len(), 2);
    for (r, sse) in recs.iter().zip([false, true]) {
        let b = r.bodies.as_ref().expect("bodies kept");
        let req = b.request.as_ref().expect("request kept");
        let resp = b.response.as_ref().expect("response kept");
        assert_eq!(
            r.request_digest.as_deref(),
            Some(format!("sha256:{}", hex::encode(sha2::Sha256::digest(req))).as_str())
        );
        assert_eq!(b.response_sse, sse);
        assert!(!b.response_truncated);
        assert!(contains(resp, "[REDACTED]"));
        for w in [&req[..], &resp[..]] {
            assert!(!contains(w, KEY), "the key was kept");
            for form in &forms {
                let value = form.split_once('=').unwrap().1;
                assert!(!contains(w, value), "{value} was kept");
            }
        }
    }

    let sink = self::sink();
    let mut cfg = config(&up, ApiKind::OpenAiChat, sink.clone());
    cfg.keep_bodies = Some(40);
    let (proxy, _d, sock) = one_attempt(cfg, Contract::model_only(MODEL), Budget::default()).await;
    let r = post(&sock, "openai-stream", &chat("hi", true)).await;
    assert_eq!(r.status, 200);
    let _ = proxy.close_attempt("a");
    let recs = sink.records();
    let b = recs[0].bodies.as_ref().unwrap();
    assert!(b.response_truncated);
    assert_eq!(b.response.as_ref().unwrap().len(), 40);
    // The client got the whole stream regardless.
    assert!(r.text().contains("[DONE]"));
}
