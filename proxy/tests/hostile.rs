//! The proxy against a hostile agent and a misbehaving upstream: who caused each upstream
//! failure, per-socket limits, the parameter and header allow-list, budget reservations, key
//! redaction in its encodings, and closing an attempt mid-stream.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout,
    clippy::print_stderr
)]

mod common;

use common::*;
use eval_proxy::*;

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
    assert_eq!(sink.records()[0].outcome, Outcome::UpstreamError);
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
            m.upstream_errors
        ),
        (0, 3, 0, 3)
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
