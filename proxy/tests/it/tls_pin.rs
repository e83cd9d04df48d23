//! The TLS key pin of the upstream client (`eval_proxy::tls_pin`), against a local HTTPS upstream
//! whose certificate a test CA (rcgen) signs and the proxy trusts: the pin decides, in the
//! handshake, whether the request — and with it the key — is ever sent.

use crate::support::*;
use eval_proxy::*;

/// A test CA and a leaf for 127.0.0.1 it signs: (CA PEM, leaf DER, leaf key PKCS#8 DER).
fn pki() -> (String, Vec<u8>, Vec<u8>) {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "eval tls pin test CA");
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca, ca_key);
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .unwrap()
        .signed_by(&leaf_key, &issuer)
        .unwrap();
    (ca_cert.pem(), leaf.der().to_vec(), leaf_key.serialize_der())
}

fn pinned(
    up: &Upstream,
    ca_pem: &str,
    pins: Vec<[u8; 32]>,
    sink: std::sync::Arc<MemorySink>,
) -> ProxyConfig {
    let mut cfg = config(up, ApiKind::OpenAiChat, sink);
    cfg.extra_root_pem = Some(ca_pem.as_bytes().to_vec());
    cfg.tls_spki_sha256 = pins;
    cfg
}

/// A trusted certificate whose key is not the pinned one is refused before any request reaches
/// the server (so the key never does); the matching pin passes; without a pin the same trusted
/// server is reached as before.
#[tokio::test]
async fn an_upstream_whose_tls_key_matches_no_pin_is_refused_in_the_handshake() {
    let (ca_pem, leaf, leaf_key) = pki();
    let up = tls_upstream(leaf.clone(), leaf_key).await;
    let own = tls_pin::spki_sha256(&leaf).unwrap();
    // Another key's pin: what a protocol preregistered for the real provider.
    let (_, other_leaf, _) = pki();
    let other = tls_pin::spki_sha256(&other_leaf).unwrap();
    assert_ne!(own, other);

    let sink = sink();
    let (_p, _dir, sock) = one_attempt(
        pinned(&up, &ca_pem, vec![other], sink.clone()),
        "a1",
        Contract::model_only(MODEL),
    )
    .await;
    let r = post(&sock, "openai-json", &chat("hi", false)).await;
    assert_eq!(r.status, 502, "{}", r.text());
    assert!(up.seen().is_empty(), "the pinned-out server got a request");
    let rec = sink.records();
    let detail = rec
        .last()
        .and_then(|c| c.detail.clone())
        .unwrap_or_default();
    assert!(detail.contains("preregistered pins"), "{detail}");
    assert!(detail.contains(&hex::encode(own)), "{detail}");
    assert!(!r.text().contains(KEY) && !detail.contains(KEY));

    // The right pin (among others) passes.
    let (_p, _dir, sock) = one_attempt(
        pinned(&up, &ca_pem, vec![other, own], self::sink()),
        "a2",
        Contract::model_only(MODEL),
    )
    .await;
    let r = post(&sock, "openai-json", &chat("hi", false)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(up.seen().len(), 1);

    // A pin never replaces the certificate check: the right pin without the CA is refused.
    let mut cfg = pinned(&up, &ca_pem, vec![own], self::sink());
    cfg.extra_root_pem = None;
    let (_p, _dir, sock) = one_attempt(cfg, "a3", Contract::model_only(MODEL)).await;
    let r = post(&sock, "openai-json", &chat("hi", false)).await;
    assert_eq!(r.status, 502, "{}", r.text());
    assert_eq!(up.seen().len(), 1);
}

/// A pin on a plain-HTTP upstream is a configuration error, not a silently ignored pin.
#[tokio::test]
async fn a_pin_on_a_plain_http_upstream_is_refused_at_start() {
    let up = upstream().await;
    let mut cfg = config(&up, ApiKind::OpenAiChat, sink());
    cfg.tls_spki_sha256 = vec![[7; 32]];
    let e = Proxy::start(cfg).await.err().expect("started");
    assert!(e.to_string().contains("https://"), "{e}");
}

/// A streamed call takes the streamed calls' own client (`proxy/src/upstream.rs`) and is
/// verified and pinned exactly like the rest: a pin that does not match stops it in the
/// handshake (nothing reaches the server), the matching pin streams it, and without the CA the
/// certificate check refuses it whatever the pin.
#[tokio::test]
async fn a_streamed_call_is_verified_and_pinned_like_any_other() {
    let (ca_pem, leaf, leaf_key) = pki();
    let up = tls_upstream(leaf.clone(), leaf_key).await;
    let own = tls_pin::spki_sha256(&leaf).unwrap();
    let (_, other_leaf, _) = pki();
    let other = tls_pin::spki_sha256(&other_leaf).unwrap();

    let sink = sink();
    let (_p, _dir, sock) = one_attempt(
        pinned(&up, &ca_pem, vec![other], sink.clone()),
        "s1",
        Contract::model_only(MODEL),
    )
    .await;
    let r = post(&sock, "openai-stream", &chat("hi", true)).await;
    assert_eq!(r.status, 502, "{}", r.text());
    assert!(up.seen().is_empty(), "the pinned-out server got a request");
    let detail = sink
        .records()
        .last()
        .and_then(|c| c.detail.clone())
        .unwrap_or_default();
    assert!(detail.contains("preregistered pins"), "{detail}");
    assert!(!r.text().contains(KEY) && !detail.contains(KEY));

    let (_p, _dir, sock) = one_attempt(
        pinned(&up, &ca_pem, vec![own], self::sink()),
        "s2",
        Contract::model_only(MODEL),
    )
    .await;
    let r = post(&sock, "openai-stream", &chat("hi", true)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(
        r.text().contains("Hel") && r.text().ends_with("data: [DONE]\n\n"),
        "{}",
        r.text()
    );
    assert_eq!(up.seen().len(), 1);
    assert_eq!(
        up.seen()[0].header("authorization"),
        Some(format!("Bearer {KEY}").as_str()),
        "the key goes only in the upstream request's credential header"
    );

    // Unpinned, the same verifier: trusted with the CA, refused without it.
    let cfg = pinned(&up, &ca_pem, vec![], self::sink());
    let (_p, _dir, sock) = one_attempt(cfg, "s3", Contract::model_only(MODEL)).await;
    let r = post(&sock, "openai-stream", &chat("hi", true)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let mut cfg = pinned(&up, &ca_pem, vec![], self::sink());
    cfg.extra_root_pem = None;
    let (_p, _dir, sock) = one_attempt(cfg, "s4", Contract::model_only(MODEL)).await;
    let r = post(&sock, "openai-stream", &chat("hi", true)).await;
    assert_eq!(r.status, 502, "{}", r.text());
    assert_eq!(up.seen().len(), 2);
}
