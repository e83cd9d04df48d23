//! The proxy's lifetime: start, attempt registration (one Unix socket or one token each),
//! the admin listener, oracle calls on the controller's behalf, and shutdown.

use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::Response;
use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use http_body_util::BodyExt;
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::budget::{RoleMeter, RoleState, RunLedger};
use crate::config::{ApiKind, AttemptSpec, Listen, ProxyConfig, Role};
use crate::errors::ProxyError;
use crate::metrics::Metrics;
use crate::state::{Attempt, ConnCounters, RoleEntry, Shared};

/// What happened on an attempt socket's connections.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ConnectionMeter {
    /// Connections accepted.
    pub accepted: u64,
    /// Closed on accept because the attempt already had its maximum of open connections.
    pub refused_over_limit: u64,
    /// Closed because the request head did not arrive within the header-read timeout.
    pub header_timeouts: u64,
}

/// Starts proxies.
pub struct Proxy;

/// What registering an attempt gives back.
#[derive(Clone)]
pub struct AttemptRegistration {
    /// The attempt registered.
    pub attempt_id: String,
    /// The socket path for Unix attempts.
    pub socket: Option<PathBuf>,
    /// For token attempts: the bearer token clients present (`Authorization: Bearer …` or
    /// `x-api-key: …`). Not the upstream key; worthless outside this proxy.
    pub token: Option<String>,
    /// For token attempts: the proxy's TCP address.
    pub tcp_addr: Option<std::net::SocketAddr>,
}

impl std::fmt::Debug for AttemptRegistration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AttemptRegistration")
            .field("attempt_id", &self.attempt_id)
            .field("socket", &self.socket)
            .field("token", &self.token.as_ref().map(|_| "[REDACTED]"))
            .field("tcp_addr", &self.tcp_addr)
            .finish()
    }
}

/// What an attempt used, per role, when it was closed.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct AttemptMeter {
    /// The attempt.
    pub attempt_id: String,
    /// Its meter per role.
    pub roles: BTreeMap<Role, RoleMeter>,
    /// Its socket's connections.
    #[serde(default)]
    pub connections: ConnectionMeter,
}

/// The answer to an oracle call, collected whole (an SSE stream's bytes when the contract
/// requires streaming).
#[derive(Debug, Clone)]
pub struct OracleReply {
    /// The status the oracle call got.
    pub status: StatusCode,
    /// Its response headers.
    pub headers: HeaderMap,
    /// Its whole (redacted) body.
    pub body: Bytes,
    /// Set when the proxy refused the call itself (budget, contract, wall time…) rather than
    /// forwarding it: the question's fault, never the oracle service's.
    pub refused_by_proxy: Option<crate::record::CallOutcome>,
}

/// A running proxy. Dropping it does not stop it; call [`ProxyHandle::shutdown`].
#[derive(Clone)]
pub struct ProxyHandle {
    shared: Arc<Shared>,
    tcp_addr: Option<std::net::SocketAddr>,
    admin_addr: Option<std::net::SocketAddr>,
}

fn build_client(cfg: &ProxyConfig) -> Result<reqwest::Client, ProxyError> {
    upstream_client(
        cfg.timeouts.connect,
        cfg.outbound_proxy.as_deref(),
        cfg.extra_root_pem.as_deref(),
        &cfg.tls_spki_sha256,
    )
}

/// The streamed calls' HTTP/1.1 client, with the same TLS verification and pins as
/// [`upstream_client`]; none behind an outbound proxy, which only reqwest speaks.
fn build_stream_client(
    cfg: &ProxyConfig,
) -> Result<Option<Arc<crate::upstream::StreamClient>>, ProxyError> {
    if cfg.outbound_proxy.is_some() {
        return Ok(None);
    }
    let tls = if cfg.upstream.starts_with("https:") {
        let _ = rustls::crypto::ring::default_provider().install_default();
        Some(
            crate::tls_pin::h1_config(&cfg.tls_spki_sha256, cfg.extra_root_pem.as_deref())
                .map_err(ProxyError::Client)?,
        )
    } else {
        None
    };
    Ok(crate::upstream::StreamClient::new(&cfg.upstream, cfg.timeouts.connect, tls).map(Arc::new))
}

/// The one construction of an HTTP client to the upstream, shared by the proxy and the account
/// checks (`crate::account`), so both trust the same roots: rustls through reqwest's platform
/// verifier (on Linux the system CA bundle, or only `SSL_CERT_FILE`/`SSL_CERT_DIR` when set), plus
/// `extra_root_pem`. Environment proxies (`HTTPS_PROXY`…) are never consulted. With `pins`, the
/// same verifier is wrapped by the TLS key pin (`crate::tls_pin`).
pub(crate) fn upstream_client(
    connect: Duration,
    outbound_proxy: Option<&str>,
    extra_root_pem: Option<&[u8]>,
    pins: &[[u8; 32]],
) -> Result<reqwest::Client, ProxyError> {
    // reqwest is built without a default crypto provider; ring is ours. A second install
    // (another proxy in the same process) fails harmlessly.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut b = reqwest::Client::builder()
        .no_proxy()
        .retry(reqwest::retry::never())
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(connect)
        .pool_idle_timeout(Duration::from_secs(90))
        .tcp_nodelay(true);
    if let Some(p) = outbound_proxy {
        b = b.proxy(reqwest::Proxy::all(p).map_err(|e| ProxyError::Client(e.to_string()))?);
    }
    if !pins.is_empty() {
        // A preconfigured rustls config replaces reqwest's TLS set-up whole: the extra roots go
        // into it rather than through `tls_certs_merge`.
        let tls =
            crate::tls_pin::client_config(pins, extra_root_pem).map_err(ProxyError::Client)?;
        b = b.tls_backend_preconfigured(tls);
    } else if let Some(pem) = extra_root_pem {
        let certs = reqwest::Certificate::from_pem_bundle(pem)
            .map_err(|e| ProxyError::Client(e.to_string()))?;
        b = b.tls_certs_merge(certs);
    }
    b.build().map_err(|e| ProxyError::Client(e.to_string()))
}

impl Proxy {
    /// Builds the upstream client, opens the optional TCP and admin listeners, and returns the
    /// handle. Must be called inside a Tokio runtime.
    pub async fn start(cfg: ProxyConfig) -> Result<ProxyHandle, ProxyError> {
        let url = reqwest::Url::parse(&cfg.upstream)
            .map_err(|_| ProxyError::Upstream(cfg.upstream.clone()))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(ProxyError::Upstream(cfg.upstream.clone()));
        }
        if !cfg.tls_spki_sha256.is_empty() && url.scheme() != "https" {
            return Err(ProxyError::Client(format!(
                "a TLS key pin needs an https:// upstream, not {}",
                cfg.upstream
            )));
        }
        let client = build_client(&cfg)?;
        let stream_client = build_stream_client(&cfg)?;
        let shared = Arc::new(Shared {
            upstream: cfg.upstream.trim_end_matches('/').to_owned(),
            api: cfg.api,
            redactor: cfg.key.redactor(),
            key: cfg.key,
            timeouts: cfg.timeouts,
            prices: cfg.prices.models,
            max_body: cfg.max_body_bytes,
            listener: cfg.listener,
            transcript_dir: cfg.transcript_dir,
            keep_bodies: cfg.keep_bodies,
            client,
            stream_client,
            sink: cfg.sink,
            control: cfg.control,
            run: RunLedger::new(cfg.run_budget, cfg.run_seed),
            metrics: Metrics::default(),
            tracker: TaskTracker::new(),
            cancel: CancellationToken::new(),
            attempts: RwLock::new(HashMap::new()),
            tokens: RwLock::new(HashMap::new()),
            token_conns: ConnCounters::default(),
        });
        let mut tcp_addr = None;
        if let Some(addr) = cfg.tcp_listen {
            let l = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|source| ProxyError::Listen {
                    what: addr.to_string(),
                    source,
                })?;
            tcp_addr = l.local_addr().ok();
            shared
                .tracker
                .spawn(serve_token_listener(l, shared.clone()));
        }
        let mut admin_addr = None;
        if let Some(addr) = cfg.admin_listen {
            let l = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|source| ProxyError::Listen {
                    what: addr.to_string(),
                    source,
                })?;
            admin_addr = l.local_addr().ok();
            let app = Router::new()
                .route("/metrics", axum::routing::get(metrics_entry))
                .with_state(shared.clone());
            let stop = shared.cancel.clone();
            shared.tracker.spawn(async move {
                let _ = axum::serve(l, app)
                    .with_graceful_shutdown(stop.cancelled_owned())
                    .await;
            });
        }
        Ok(ProxyHandle {
            shared,
            tcp_addr,
            admin_addr,
        })
    }
}

async fn metrics_entry(State(shared): State<Arc<Shared>>) -> Response {
    let mut r = Response::new(Body::from(shared.metrics.render()));
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; version=0.0.4"),
    );
    r
}

async fn tcp_entry(shared: Arc<Shared>, req: Request) -> Response {
    let token = presented_token(req.headers());
    let attempt = token.and_then(|t| shared.attempt_by_token(&t));
    crate::call::serve(shared, attempt, Role::Agent, req).await
}

/// Serves the shared loopback token listener with the limits of an attempt socket: at most
/// `max_connections` open connections (more are closed on accept), each with the header-read
/// timeout, so one client cannot hold every slot of a listener all token attempts share; on the
/// proxy's shutdown connections finish their current request.
async fn serve_token_listener(l: tokio::net::TcpListener, shared: Arc<Shared>) {
    let limits = shared.listener;
    let slots = Arc::new(tokio::sync::Semaphore::new(limits.max_connections.max(1)));
    let refusals = Arc::new(tokio::sync::Semaphore::new(limits.max_connections.max(1)));
    let stop = shared.cancel.clone();
    loop {
        let stream = tokio::select! {
            r = l.accept() => match r {
                Ok((s, _)) => s,
                Err(e) => {
                    // Out of descriptors or similar: back off instead of spinning.
                    tracing::warn!("token listener: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stop.cancelled() => break,
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            shared.token_conns.refused.fetch_add(1, Ordering::SeqCst);
            let _ = stream.set_nodelay(true);
            refuse_over_limit(stream, &shared, &refusals, stop.clone());
            continue;
        };
        shared.token_conns.accepted.fetch_add(1, Ordering::SeqCst);
        let _ = stream.set_nodelay(true);
        let shared = shared.clone();
        let tracker = shared.tracker.clone();
        tracker.spawn(async move {
            let _permit = permit;
            let svc_shared = shared.clone();
            let service =
                hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                    let shared = svc_shared.clone();
                    async move {
                        Ok::<_, std::convert::Infallible>(
                            tcp_entry(shared, req.map(Body::new)).await,
                        )
                    }
                });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(limits.header_read_timeout)
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            let mut conn = std::pin::pin!(conn);
            let result = tokio::select! {
                r = conn.as_mut() => r,
                _ = shared.cancel.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    conn.as_mut().await
                }
            };
            if let Err(e) = result
                && e.is_timeout()
            {
                shared
                    .token_conns
                    .header_timeouts
                    .fetch_add(1, Ordering::SeqCst);
            }
        });
    }
}

/// Serves one attempt's socket: at most `max_connections` open connections (more are closed on
/// accept), each with the header-read timeout; on `stop` connections finish their current
/// request, on the attempt's `cut` they are dropped.
async fn serve_attempt_socket(
    l: tokio::net::UnixListener,
    shared: Arc<Shared>,
    attempt: Arc<Attempt>,
) {
    let limits = shared.listener;
    let slots = Arc::new(tokio::sync::Semaphore::new(limits.max_connections.max(1)));
    let refusals = Arc::new(tokio::sync::Semaphore::new(limits.max_connections.max(1)));
    let stop = attempt.stop.clone();
    let id: Arc<str> = Arc::from(attempt.id.as_str());
    loop {
        let stream = tokio::select! {
            r = l.accept() => match r {
                Ok((s, _)) => s,
                Err(e) => {
                    // Out of descriptors or similar: back off instead of spinning; the accept
                    // queue keeps what it can.
                    tracing::warn!(attempt = %id, "accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stop.cancelled() => break,
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            attempt.conns.refused.fetch_add(1, Ordering::SeqCst);
            refuse_over_limit(stream, &shared, &refusals, attempt.cut.clone());
            continue;
        };
        attempt.conns.accepted.fetch_add(1, Ordering::SeqCst);
        let shared = shared.clone();
        let attempt = attempt.clone();
        let id = id.clone();
        let tracker = shared.tracker.clone();
        tracker.spawn(async move {
            let _permit = permit;
            let svc_shared = shared.clone();
            let service =
                hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                    let shared = svc_shared.clone();
                    let id = id.clone();
                    async move {
                        let attempt = shared.attempt(&id);
                        let req = req.map(Body::new);
                        Ok::<_, std::convert::Infallible>(
                            crate::call::serve(shared, attempt, Role::Agent, req).await,
                        )
                    }
                });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(limits.header_read_timeout)
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            let mut conn = std::pin::pin!(conn);
            let result = tokio::select! {
                r = conn.as_mut() => Some(r),
                _ = attempt.stop.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    tokio::select! {
                        r = conn.as_mut() => Some(r),
                        _ = attempt.cut.cancelled() => None,
                    }
                }
                _ = attempt.cut.cancelled() => None,
            };
            if let Some(Err(e)) = result
                && e.is_timeout()
            {
                attempt.conns.header_timeouts.fetch_add(1, Ordering::SeqCst);
            }
        });
    }
}

/// Answers one request on a connection over the cap with a 503 the client can read
/// (`too_many_connections`, `retry-after: 1`, `connection: close`) instead of a reset: an SDK
/// retries it like any overloaded server. The request is read (its body discarded, within the
/// listener's timeouts) before the answer, so closing never drops unread bytes and turns into a
/// reset. At most `max_connections` refusals run at once per listener; past that a connection is
/// closed on accept as the last resort, so a flood still costs a bounded amount.
fn refuse_over_limit<S>(
    stream: S,
    shared: &Arc<Shared>,
    refusals: &Arc<tokio::sync::Semaphore>,
    stop: CancellationToken,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let Ok(permit) = refusals.clone().try_acquire_owned() else {
        drop(stream);
        return;
    };
    let api = shared.api;
    let limits = shared.listener;
    let max_body = shared.max_body;
    shared.tracker.spawn(async move {
        let _permit = permit;
        let service = hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
            async move {
                // Discarded frame by frame: a refused body is never buffered.
                let mut body = http_body_util::Limited::new(req.into_body(), max_body);
                let drained = tokio::time::timeout(limits.body_read_timeout, async {
                    while let Some(frame) = body.frame().await {
                        if frame.is_err() {
                            break;
                        }
                    }
                })
                .await;
                let _ = drained;
                let mut resp = crate::errors::api_error(
                    api,
                    StatusCode::SERVICE_UNAVAILABLE,
                    "too_many_connections",
                    "this listener already has its maximum of open connections; retry after closing one",
                );
                resp.headers_mut().insert(
                    http::header::RETRY_AFTER,
                    http::HeaderValue::from_static("1"),
                );
                Ok::<_, std::convert::Infallible>(resp)
            }
        });
        let conn = hyper::server::conn::http1::Builder::new()
            .timer(hyper_util::rt::TokioTimer::new())
            .header_read_timeout(limits.header_read_timeout)
            .keep_alive(false)
            .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
        tokio::select! {
            _ = conn => {}
            _ = stop.cancelled() => {}
        }
    });
}

fn presented_token(h: &HeaderMap) -> Option<String> {
    if let Some(v) = h
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        && let Some(t) = v
            .strip_prefix("Bearer ")
            .or_else(|| v.strip_prefix("bearer "))
    {
        return Some(t.trim().to_owned());
    }
    h.get("x-api-key")
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().to_owned())
}

fn random_token() -> Result<String, ProxyError> {
    let mut b = [0u8; 32];
    getrandom::fill(&mut b).map_err(|e| ProxyError::Random(e.to_string()))?;
    Ok(format!("evp-{}", hex::encode(b)))
}

impl ProxyHandle {
    /// The loopback TCP listener's address, when there is one.
    pub fn tcp_addr(&self) -> Option<std::net::SocketAddr> {
        self.tcp_addr
    }

    /// The admin (`/metrics`) listener's address, when there is one.
    pub fn admin_addr(&self) -> Option<std::net::SocketAddr> {
        self.admin_addr
    }

    /// Opens the attempt's socket (mode 0666 so a container's non-root user can connect; the
    /// parent directory, created 0755 if missing, is the caller's access boundary) or issues its
    /// token.
    pub async fn register_attempt(
        &self,
        spec: AttemptSpec,
    ) -> Result<AttemptRegistration, ProxyError> {
        let shared = &self.shared;
        if shared.attempt(&spec.attempt_id).is_some() {
            return Err(ProxyError::Duplicate(spec.attempt_id));
        }
        let stop = shared.cancel.child_token();
        let mut reg = AttemptRegistration {
            attempt_id: spec.attempt_id.clone(),
            socket: None,
            token: None,
            tcp_addr: None,
        };
        let mut token_digest = None;
        let listener = match &spec.listen {
            Listen::Unix(path) => {
                let listen_err = |source| ProxyError::Listen {
                    what: path.display().to_string(),
                    source,
                };
                if let Some(dir) = path.parent()
                    && !dir.as_os_str().is_empty()
                    && !dir.exists()
                {
                    std::fs::create_dir_all(dir).map_err(listen_err)?;
                    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))
                        .map_err(listen_err)?;
                }
                if let Ok(meta) = std::fs::symlink_metadata(path) {
                    use std::os::unix::fs::FileTypeExt;
                    if meta.file_type().is_socket() {
                        std::fs::remove_file(path).map_err(listen_err)?;
                    }
                }
                let l = tokio::net::UnixListener::bind(path).map_err(listen_err)?;
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))
                    .map_err(listen_err)?;
                reg.socket = Some(path.clone());
                Some(l)
            }
            Listen::Token => {
                let addr = self.tcp_addr.ok_or(ProxyError::NoTcpListener)?;
                let token = random_token()?;
                token_digest = Some(Sha256::digest(token.as_bytes()).into());
                reg.token = Some(token);
                reg.tcp_addr = Some(addr);
                None
            }
        };
        let attempt = Arc::new(Attempt {
            id: spec.attempt_id.clone(),
            arm: spec.arm,
            session_id: spec.session_id,
            started: Instant::now(),
            roles: spec
                .roles
                .into_iter()
                .map(|(role, rs)| {
                    (
                        role,
                        RoleEntry {
                            contract: rs.contract,
                            state: Mutex::new(RoleState::new(rs.budget)),
                        },
                    )
                })
                .collect(),
            seq: AtomicU64::new(0),
            closed: AtomicBool::new(false),
            cut: CancellationToken::new(),
            calls: TaskTracker::new(),
            conns: ConnCounters::default(),
            stop: stop.clone(),
            socket: reg.socket.clone(),
            token_digest,
        });
        {
            let mut map = shared.attempts.write().unwrap_or_else(|p| p.into_inner());
            if map.contains_key(&spec.attempt_id) {
                return Err(ProxyError::Duplicate(spec.attempt_id));
            }
            map.insert(spec.attempt_id.clone(), attempt.clone());
        }
        if let Some(d) = token_digest {
            let mut t = shared.tokens.write().unwrap_or_else(|p| p.into_inner());
            t.insert(d, spec.attempt_id.clone());
        }
        if let Some(l) = listener {
            shared
                .tracker
                .spawn(serve_attempt_socket(l, shared.clone(), attempt));
        }
        Ok(reg)
    }

    /// Stops accepting the attempt's requests, removes its socket or token, and returns its
    /// meter. Calls still streaming finish and are recorded, but are not in the returned meter;
    /// use [`ProxyHandle::close_attempt_and_wait`] to include them.
    pub fn close_attempt(&self, attempt_id: &str) -> Result<AttemptMeter, ProxyError> {
        let attempt = {
            let mut map = self
                .shared
                .attempts
                .write()
                .unwrap_or_else(|p| p.into_inner());
            map.remove(attempt_id)
        }
        .ok_or_else(|| ProxyError::UnknownAttempt(attempt_id.to_owned()))?;
        attempt
            .closed
            .store(true, std::sync::atomic::Ordering::SeqCst);
        attempt.stop.cancel();
        if let Some(d) = attempt.token_digest {
            let mut t = self
                .shared
                .tokens
                .write()
                .unwrap_or_else(|p| p.into_inner());
            t.remove(&d);
        }
        if let Some(p) = &attempt.socket {
            let _ = std::fs::remove_file(p);
        }
        Ok(meter_of(&attempt))
    }

    /// Closes the attempt, waits up to `grace` for its in-flight calls, then cuts the rest
    /// (their upstream requests are aborted, their connections dropped, and each is recorded as
    /// [`crate::CallOutcome::CutAtClose`] at its reservation). Returns only once every call of the
    /// attempt has delivered its record to the sink, so no record can follow the attempt's
    /// outcome. (On the shared token listener a cut stream whose client stopped reading is
    /// only noticed when the client reads again; the wait for it is bounded by a second `grace`.)
    pub async fn close_attempt_and_wait(
        &self,
        attempt_id: &str,
        grace: Duration,
    ) -> Result<AttemptMeter, ProxyError> {
        let attempt = self
            .shared
            .attempt(attempt_id)
            .ok_or_else(|| ProxyError::UnknownAttempt(attempt_id.to_owned()))?;
        self.close_attempt(attempt_id)?;
        attempt.calls.close();
        if tokio::time::timeout(grace, attempt.calls.wait())
            .await
            .is_err()
        {
            attempt.cut.cancel();
            if attempt.socket.is_some() {
                attempt.calls.wait().await;
            } else {
                let _ = tokio::time::timeout(grace, attempt.calls.wait()).await;
            }
        }
        // Every call is recorded; connections still open (idle, or a head never finished) go.
        attempt.cut.cancel();
        Ok(meter_of(&attempt))
    }

    /// The attempt's meter so far, without closing it.
    /// What happened on the shared loopback token listener's connections.
    pub fn token_listener_meter(&self) -> ConnectionMeter {
        let c = &self.shared.token_conns;
        ConnectionMeter {
            accepted: c.accepted.load(Ordering::SeqCst),
            refused_over_limit: c.refused.load(Ordering::SeqCst),
            header_timeouts: c.header_timeouts.load(Ordering::SeqCst),
        }
    }

    /// What the attempt has used so far.
    pub fn meter(&self, attempt_id: &str) -> Result<AttemptMeter, ProxyError> {
        let a = self
            .shared
            .attempt(attempt_id)
            .ok_or_else(|| ProxyError::UnknownAttempt(attempt_id.to_owned()))?;
        Ok(meter_of(&a))
    }

    /// Run-wide tokens and spend settled so far (including the seed from earlier sessions).
    pub fn run_usage(&self) -> (u64, f64) {
        self.shared.run.used()
    }

    /// Run-wide requests admitted so far (including the seed from earlier sessions).
    pub fn run_requests(&self) -> u64 {
        self.shared.run.requests()
    }

    /// Makes a model call in the attempt's `oracle` role (its own contract and budget), e.g. to
    /// answer a clarifying question. `headers` may carry the session header or
    /// `anthropic-version`; credentials in it are dropped like any client's.
    pub async fn oracle_call(
        &self,
        attempt_id: &str,
        headers: HeaderMap,
        body: Bytes,
    ) -> Result<OracleReply, ProxyError> {
        let attempt = self
            .shared
            .attempt(attempt_id)
            .ok_or_else(|| ProxyError::UnknownAttempt(attempt_id.to_owned()))?;
        if !attempt.roles.contains_key(&Role::Oracle) {
            return Err(ProxyError::NoRole {
                attempt: attempt_id.to_owned(),
                role: "oracle",
            });
        }
        let path = match self.shared.api {
            ApiKind::OpenAiChat => "/v1/chat/completions",
            ApiKind::AnthropicMessages => "/v1/messages",
        };
        let mut req = Request::new(Body::from(body));
        *req.method_mut() = http::Method::POST;
        *req.uri_mut() = http::Uri::from_static(path);
        *req.headers_mut() = headers;
        req.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/json"),
        );
        let resp = crate::call::serve(self.shared.clone(), Some(attempt), Role::Oracle, req).await;
        let (parts, body) = resp.into_parts();
        let refused_by_proxy = parts
            .extensions
            .get::<crate::call::RefusedByProxy>()
            .map(|r| r.0);
        let body = body
            .collect()
            .await
            .map_err(|e| ProxyError::Oracle(e.to_string()))?
            .to_bytes();
        Ok(OracleReply {
            status: parts.status,
            headers: parts.headers,
            body,
            refused_by_proxy,
        })
    }

    /// Stops every listener, lets in-flight calls finish and be recorded (up to `grace`), and
    /// removes the sockets.
    pub async fn shutdown(&self, grace: Duration) {
        let ids: Vec<String> = {
            let map = self
                .shared
                .attempts
                .read()
                .unwrap_or_else(|p| p.into_inner());
            map.keys().cloned().collect()
        };
        for id in ids {
            let _ = self.close_attempt(&id);
        }
        self.shared.cancel.cancel();
        self.shared.tracker.close();
        let _ = tokio::time::timeout(grace, self.shared.tracker.wait()).await;
    }
}

fn meter_of(a: &Attempt) -> AttemptMeter {
    AttemptMeter {
        connections: ConnectionMeter {
            accepted: a.conns.accepted.load(Ordering::SeqCst),
            refused_over_limit: a.conns.refused.load(Ordering::SeqCst),
            header_timeouts: a.conns.header_timeouts.load(Ordering::SeqCst),
        },
        attempt_id: a.id.clone(),
        roles: a
            .roles
            .iter()
            .map(|(r, e)| {
                let s = e.state.lock().unwrap_or_else(|p| p.into_inner());
                (*r, s.meter.clone())
            })
            .collect(),
    }
}
