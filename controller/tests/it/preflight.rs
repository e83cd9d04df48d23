//! `eval preflight` against a scripted account upstream on loopback: DeepSeek's account endpoints
//! as DEEPSEEK-WIRE.md ("Account endpoints", "Errors and retries") documents them — `GET /models`
//! (`{"object":"list","data":[{"id",…}]}`), `GET /user/balance` (`is_available`,
//! `balance_infos[{currency,total_balance,granted_balance,topped_up_balance}]`, amounts as
//! decimal strings) and a 401 with the API's error body — over plain HTTP and over HTTPS with a
//! test CA given the way a user would (`SSL_CERT_FILE`). Every output is grepped for the key.

use crate::support::account::{balance_body as deepseek_balance, refused};
use crate::support::{demo_project, eval, text};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;

const KEY: &str = "sk-preflight-7f3a9c2e41d8b6a0WXYZ";
const MODEL: &str = "deepseek-v4-flash"; // the demo protocol's contract model

/// What the scripted account answers.
#[derive(Clone)]
struct Account {
    /// The key it accepts.
    key: &'static str,
    models: Vec<&'static str>,
    /// `None`: the provider has no balance endpoint (404).
    balance: Option<serde_json::Value>,
    /// Requests to any other path (shared by the clones of one account).
    others: Arc<std::sync::atomic::AtomicUsize>,
}

fn good() -> Account {
    Account {
        key: KEY,
        models: vec!["deepseek-v4-pro", MODEL],
        balance: Some(deepseek_balance(true, "USD", "1000.00")),
        others: Arc::default(),
    }
}

/// The 401 for a request without the account's key, else `None`.
fn refusal(acct: &Account, h: &HeaderMap) -> Option<Response> {
    let presented = h
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    (presented != acct.key).then(|| refused(presented))
}

async fn models(State(acct): State<Arc<Account>>, h: HeaderMap) -> Response {
    if let Some(r) = refusal(&acct, &h) {
        return r;
    }
    axum::Json(crate::support::account::models_body(&acct.models)).into_response()
}

async fn balance(State(acct): State<Arc<Account>>, h: HeaderMap) -> Response {
    if let Some(r) = refusal(&acct, &h) {
        return r;
    }
    match &acct.balance {
        Some(b) => axum::Json(b.clone()).into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

/// Any other request: counted (a refused run must send none), and 404.
async fn other(State(acct): State<Arc<Account>>) -> Response {
    acct.others
        .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    StatusCode::NOT_FOUND.into_response()
}

fn app(acct: Account) -> axum::Router {
    axum::Router::new()
        .route("/models", get(models))
        .route("/user/balance", get(balance))
        .fallback(other)
        .with_state(Arc::new(acct))
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

/// `eval preflight` in `dir` with the key in `PREFLIGHT_KEY` only, and the trust store given by
/// `cert_file` alone (a user's own `SSL_CERT_FILE`/`SSL_CERT_DIR` never leak into the test).
fn preflight(dir: &Path, args: &[&str], cert_file: Option<&Path>) -> Output {
    keyed(dir, "preflight", args, cert_file, &[])
}

/// `eval COMMAND --api-key-env PREFLIGHT_KEY ARGS` in `dir` (with `env` added), the key in
/// `PREFLIGHT_KEY` only; fails when the key, a part of it or the refusal body naming its tail
/// reached the output.
fn keyed(
    dir: &Path,
    command: &str,
    args: &[&str],
    cert_file: Option<&Path>,
    env: &[(&str, &str)],
) -> Output {
    let mut c = Command::new(crate::support::eval_bin());
    c.arg(command)
        .args(["--api-key-env", "PREFLIGHT_KEY"])
        .args(args)
        .envs(env.iter().copied())
        .env_remove("EVAL_SIGNING_KEY_FILE")
        .current_dir(dir)
        .env("PREFLIGHT_KEY", KEY)
        .env_remove("SSL_CERT_FILE")
        .env_remove("SSL_CERT_DIR");
    if let Some(f) = cert_file {
        c.env("SSL_CERT_FILE", f);
    }
    let o = c.output().unwrap();
    let all = text(&o);
    assert!(!all.contains(KEY), "the key reached the output:\n{all}");
    assert!(
        !all.contains(&KEY[..KEY.len() - 4]),
        "a part of the key reached the output:\n{all}"
    );
    assert!(
        !all.contains("****WXYZ"),
        "the upstream's refusal body (naming the key's tail) reached the output:\n{all}"
    );
    o
}

fn http_upstream(rt: &tokio::runtime::Runtime, acct: Account) -> String {
    format!("http://{}", crate::support::serve_loopback(rt, app(acct)))
}

fn assert_exit(o: &Output, code: i32, needles: &[&str]) {
    let all = text(o);
    assert_eq!(o.status.code(), Some(code), "{all}");
    for n in needles {
        assert!(all.contains(n), "{n:?} not in:\n{all}");
    }
}

#[test]
fn preflight_good_key_balance_model_and_spend_pass() {
    let rt = runtime();
    let (_tmp, dir) = demo_project();
    let url = http_upstream(&rt, good());
    let o = preflight(&dir, &["--upstream", &url, "--matrix", "demo"], None);
    // The demo protocol's run budget: max_spend_usd 500 is below 600M tokens at 1.10 USD/Mtok.
    assert_exit(
        &o,
        0,
        &[
            "key accepted",
            MODEL,
            "worst-case spend 500.00 USD",
            "1000.00 USD",
        ],
    );
    // Without a matrix: the key and the listing only.
    let o = preflight(&dir, &["--upstream", &url], None);
    assert_exit(&o, 0, &["deepseek-v4-pro", "balance available"]);
}

#[test]
fn preflight_refuses_a_bad_key() {
    let rt = runtime();
    let (_tmp, dir) = demo_project();
    let url = http_upstream(
        &rt,
        Account {
            key: "sk-the-account-s-real-key",
            ..good()
        },
    );
    let o = preflight(&dir, &["--upstream", &url, "--matrix", "demo"], None);
    assert_exit(
        &o,
        2,
        &["key", "the upstream refused the API key", "HTTP 401"],
    );
}

#[test]
fn preflight_refuses_an_empty_balance() {
    let rt = runtime();
    let (_tmp, dir) = demo_project();
    for b in [
        deepseek_balance(false, "USD", "0.00"),
        deepseek_balance(true, "USD", "0.00"),
    ] {
        let url = http_upstream(
            &rt,
            Account {
                balance: Some(b),
                ..good()
            },
        );
        let o = preflight(&dir, &["--upstream", &url], None);
        assert_exit(&o, 2, &["balance", "out of balance", "0.00 USD"]);
    }
}

#[test]
fn preflight_refuses_a_worst_case_above_the_balance() {
    let rt = runtime();
    let (_tmp, dir) = demo_project();
    let url = http_upstream(
        &rt,
        Account {
            balance: Some(deepseek_balance(true, "USD", "120.50")),
            ..good()
        },
    );
    let o = preflight(&dir, &["--upstream", &url, "--matrix", "demo"], None);
    assert_exit(
        &o,
        2,
        &["spend", "500.00 USD", "max_spend_usd", "120.50 USD"],
    );
    // A balance in another currency than the price table's cannot be compared: said, not guessed.
    let url = http_upstream(
        &rt,
        Account {
            balance: Some(deepseek_balance(true, "CNY", "9000.00")),
            ..good()
        },
    );
    let o = preflight(&dir, &["--upstream", &url, "--matrix", "demo"], None);
    assert_exit(&o, 2, &["spend", "9000.00 CNY", "USD"]);
}

#[test]
fn preflight_refuses_an_unknown_model() {
    let rt = runtime();
    let (_tmp, dir) = demo_project();
    let url = http_upstream(
        &rt,
        Account {
            models: vec!["deepseek-chat", "deepseek-reasoner"],
            ..good()
        },
    );
    let o = preflight(&dir, &["--upstream", &url, "--matrix", "demo"], None);
    assert_exit(&o, 2, &["model", MODEL, "deepseek-chat"]);
}

#[test]
fn preflight_balance_check_is_skippable_for_providers_without_the_endpoint() {
    let rt = runtime();
    let (_tmp, dir) = demo_project();
    let url = http_upstream(
        &rt,
        Account {
            balance: None,
            ..good()
        },
    );
    let o = preflight(&dir, &["--upstream", &url, "--matrix", "demo"], None);
    assert_exit(&o, 2, &["balance", "/user/balance", "HTTP 404"]);
    let o = preflight(
        &dir,
        &["--upstream", &url, "--matrix", "demo", "--no-balance-check"],
        None,
    );
    assert_exit(&o, 0, &["key accepted", MODEL, "--no-balance-check"]);
}

/// A test CA (rcgen) and a server certificate it signs for 127.0.0.1 and localhost.
struct TestPki {
    ca_pem: String,
    leaf_der: Vec<u8>,
    leaf_key_der: Vec<u8>,
}

fn test_pki() -> TestPki {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "eval preflight test CA");
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca, ca_key);
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
        .unwrap()
        .signed_by(&leaf_key, &issuer)
        .unwrap();
    TestPki {
        ca_pem: ca_cert.pem(),
        leaf_der: leaf.der().to_vec(),
        leaf_key_der: leaf_key.serialize_der(),
    }
}

/// Accepts TCP connections and completes the TLS handshake; a client that aborts it (an
/// untrusted certificate) is dropped and the next connection accepted.
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

fn https_upstream(rt: &tokio::runtime::Runtime, pki: &TestPki, acct: Account) -> String {
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
    let cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(
        vec![CertificateDer::from(pki.leaf_der.clone())],
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(pki.leaf_key_der.clone())),
    )
    .unwrap();
    let tcp = rt
        .block_on(tokio::net::TcpListener::bind(("127.0.0.1", 0)))
        .unwrap();
    let addr = tcp.local_addr().unwrap();
    let listener = TlsListener {
        tcp,
        acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(cfg)),
    };
    let app = app(acct);
    rt.spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    format!("https://127.0.0.1:{}", addr.port())
}

#[test]
fn preflight_over_tls_trusts_the_ca_from_ssl_cert_file_and_refuses_without_it() {
    let rt = runtime();
    let (tmp, dir) = demo_project();
    let pki = test_pki();
    let ca_file = tmp.path().join("test-ca.pem");
    std::fs::write(&ca_file, &pki.ca_pem).unwrap();
    let url = https_upstream(&rt, &pki, good());
    let o = preflight(
        &dir,
        &["--upstream", &url, "--matrix", "demo"],
        Some(&ca_file),
    );
    assert_exit(&o, 0, &["key accepted", "fits the balance"]);
    // The same upstream with the platform's roots only: its certificate is not trusted.
    let o = preflight(&dir, &["--upstream", &url, "--matrix", "demo"], None);
    assert_exit(
        &o,
        2,
        &["connection", "certificate is not trusted", "SSL_CERT_FILE"],
    );
}

/// `eval freeze --protocol demo` in a fresh demo project (no engine needed).
fn frozen_demo() -> (tempfile::TempDir, std::path::PathBuf) {
    let (tmp, dir) = demo_project();
    let o = eval(&dir, &["freeze", "--protocol", "demo"]);
    assert!(o.status.success(), "{}", text(&o));
    (tmp, dir)
}

/// `eval run --matrix demo --upstream URL` with the key in `PREFLIGHT_KEY`; `DOCKER_HOST` names
/// a socket nothing listens on, so a run that got past its preflight ends at the engine
/// ("no Docker engine answers", exit 2) before any attempt, in any environment.
fn paid_run(dir: &Path, url: &str, extra: &[&str]) -> Output {
    let docker_host = format!("unix://{}", dir.join("no-engine.sock").display());
    let mut args = vec!["--matrix", "demo", "--upstream", url];
    args.extend_from_slice(extra);
    keyed(dir, "run", &args, None, &[("DOCKER_HOST", &docker_host)])
}

/// `eval run` against a non-fixture upstream runs the preflight first: a refused key, an
/// account out of balance, a contract model the upstream does not list or a worst case above
/// the balance refuse the run with exit 2 naming the check — before the ledger exists, and
/// with no request but the account's two reaching the upstream.
#[test]
fn a_paid_run_is_refused_by_its_preflight_before_anything_is_recorded() {
    let rt = runtime();
    let (_tmp, dir) = frozen_demo();
    let cases: [(&str, Account, &[&str]); 4] = [
        (
            "bad key",
            Account {
                key: "sk-the-account-s-real-key",
                ..good()
            },
            &["preflight failed: key", "the upstream refused the API key"],
        ),
        (
            "empty balance",
            Account {
                balance: Some(deepseek_balance(false, "USD", "0.00")),
                ..good()
            },
            &["preflight failed: balance", "out of balance"],
        ),
        (
            "unknown model",
            Account {
                models: vec!["deepseek-chat", "deepseek-reasoner"],
                ..good()
            },
            &["preflight failed: model", MODEL],
        ),
        (
            "worst case above the balance",
            Account {
                balance: Some(deepseek_balance(true, "USD", "120.50")),
                ..good()
            },
            &["preflight failed: spend", "500.00 USD", "120.50 USD"],
        ),
    ];
    for (what, acct, needles) in cases {
        let others = acct.others.clone();
        let url = http_upstream(&rt, acct);
        let o = paid_run(&dir, &url, &[]);
        let all = text(&o);
        assert_eq!(o.status.code(), Some(2), "{what}: {all}");
        for n in needles.iter().chain(&["refusing to run matrix demo"]) {
            assert!(all.contains(n), "{what}: {n:?} not in:\n{all}");
        }
        assert!(
            !all.contains("no Docker engine answers"),
            "{what}: the session started: {all}"
        );
        assert!(
            !dir.join("runs/demo").exists(),
            "{what}: the refused run left a run directory"
        );
        assert_eq!(
            others.load(std::sync::atomic::Ordering::SeqCst),
            0,
            "{what}: a request beside the account's reached the upstream"
        );
    }
}

/// `eval run --no-balance-check` skips the preflight's balance and spend checks for a provider
/// without `GET /user/balance` (the key and the model are still checked); without the flag the
/// run is refused naming the endpoint and the flag.
#[test]
fn a_paid_run_skips_the_balance_check_for_a_provider_without_the_endpoint() {
    let rt = runtime();
    let (_tmp, dir) = frozen_demo();
    let url = http_upstream(
        &rt,
        Account {
            balance: None,
            ..good()
        },
    );
    let o = paid_run(&dir, &url, &[]);
    assert_exit(
        &o,
        2,
        &[
            "preflight failed: balance",
            "/user/balance",
            "HTTP 404",
            "--no-balance-check",
        ],
    );
    assert!(!dir.join("runs/demo").exists(), "{}", text(&o));
    let o = paid_run(&dir, &url, &["--no-balance-check"]);
    // Past the preflight, the session reached the (absent) engine.
    assert_exit(
        &o,
        2,
        &["key accepted", "skip balance", "no Docker engine answers"],
    );
    assert!(!text(&o).contains("preflight failed"), "{}", text(&o));
    // The model check still runs with the flag.
    let url = http_upstream(
        &rt,
        Account {
            balance: None,
            models: vec!["deepseek-chat"],
            ..good()
        },
    );
    let o = paid_run(&dir, &url, &["--no-balance-check"]);
    assert_exit(&o, 2, &["preflight failed: model", MODEL]);
}
