//! One request through the proxy: identify, check, reserve, forward, stream back, meter, record.
//!
//! The upstream exchange runs in the client connection's task; if the client goes away first,
//! it moves to a tracked task of its own (`Detached`), so leaving cancels nothing: the upstream
//! is drained, the usage settled and the record written regardless.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use bytes::{Bytes, BytesMut};
use eval_core::headers;
use futures_util::{FutureExt, StreamExt};
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use http_body_util::BodyExt;
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio_util::task::task_tracker::TaskTrackerToken;

use crate::budget::Reservation;
use crate::config::{ApiKind, Contract, Price, Role};
use crate::errors::api_error;
use crate::record::{CallOutcome, CallRecord, Change};
use crate::server::{Attempt, Shared};
use crate::usage::Usage;

mod coalesce;
mod pipeline;
mod stream;
use pipeline::run;

/// Marks a response the proxy made itself (a refusal), with the call's outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RefusedByProxy(pub CallOutcome);

/// Upstream response headers passed back to the client; everything else stays in the proxy.
const RESPONSE_HEADERS: [&str; 5] = [
    "content-type",
    "cache-control",
    "x-request-id",
    "request-id",
    // A 429/503's pacing: the client's retry policy (the DeepSeek Harness honours it) needs it.
    "retry-after",
];

/// The parts of a complete response body the meter reads.
#[derive(serde::Deserialize)]
struct ResponseHead {
    #[serde(default)]
    model: Option<Value>,
    #[serde(default)]
    usage: Option<Value>,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn digest(b: &[u8]) -> String {
    crate::record::digest_text(&Sha256::digest(b))
}

/// Who caused an upstream failure, for the meter: the classification of outcomes may turn only
/// the last two into infrastructure faults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UpstreamFault {
    /// A 4xx answer other than 429 (and other than an auth refusal of the proxy's own key): the
    /// request was at fault, and the request is the agent's.
    Client,
    /// A 5xx or 429 (the proxy never retries), an auth refusal of the proxy's key, or an answer
    /// the proxy cannot use (not JSON, too large): the provider's side.
    Server,
    /// No usable answer: connect failure, reset, timeout, a body that broke off or stalled.
    Transport,
    /// 401/403 (the proxy's key refused) or 402 (the account out of balance): the run's
    /// account, which no request of an agent can change.
    Account,
}

impl UpstreamFault {
    pub(crate) fn of_status(status: StatusCode) -> Self {
        let s = status.as_u16();
        if matches!(s, 401..=403) {
            UpstreamFault::Account
        } else if (400..500).contains(&s) && s != 429 {
            UpstreamFault::Client
        } else {
            UpstreamFault::Server
        }
    }
}

/// Everything known about a call so far; turned into its record at the end.
struct Call {
    shared: Arc<Shared>,
    attempt: Option<Arc<Attempt>>,
    record: CallRecord,
    t0: Instant,
}

impl Call {
    fn new(
        shared: Arc<Shared>,
        attempt: Option<Arc<Attempt>>,
        role: Role,
        method: &Method,
        path: &str,
    ) -> Self {
        let seq = attempt
            .as_ref()
            .map(|a| a.seq.fetch_add(1, Ordering::SeqCst) + 1)
            .unwrap_or(0);
        let record = CallRecord {
            attempt_id: attempt.as_ref().map(|a| a.id.clone()),
            arm: attempt.as_ref().map(|a| a.arm.clone()),
            role,
            seq,
            started_at_ms: now_ms(),
            method: method.to_string(),
            path: path.to_owned(),
            model: None,
            upstream_model: None,
            stream: false,
            status: 0,
            upstream_status: None,
            outcome: CallOutcome::Ok,
            detail: None,
            latency_ms: 0.0,
            ttfb_ms: None,
            usage: None,
            spend_usd: 0.0,
            reserved_tokens: 0,
            request_digest: None,
            response_digest: None,
            changes: Vec::new(),
            client_disconnected: false,
            incomplete: false,
            streamed_bytes: None,
            wire: None,
            bodies: None,
        };
        Self {
            shared,
            attempt,
            record,
            t0: Instant::now(),
        }
    }

    fn api(&self) -> ApiKind {
        self.shared.api
    }

    fn with_meter(&self, f: impl FnOnce(&mut crate::budget::RoleMeter)) {
        if let Some(e) = self
            .attempt
            .as_ref()
            .and_then(|a| a.roles.get(&self.record.role))
        {
            let mut s = e.state.lock().unwrap_or_else(|p| p.into_inner());
            f(&mut s.meter);
        }
    }

    /// Ends the call with an error response and writes its record.
    fn refuse(
        mut self,
        status: StatusCode,
        outcome: CallOutcome,
        code: &str,
        message: &str,
    ) -> Response {
        let message = self.shared.redactor.redact_str(message);
        self.record.outcome = outcome;
        self.record.status = status.as_u16();
        self.record.detail = Some(message.clone());
        match outcome {
            CallOutcome::ContractViolation => self.with_meter(|m| m.contract_violations += 1),
            CallOutcome::BudgetExhausted => self.with_meter(|m| m.budget_exhaustions += 1),
            _ => {}
        }
        let mut resp = api_error(self.api(), status, code, &message);
        // In-process callers (the controller's oracle) must tell the proxy's own refusal from
        // an upstream's answer with the same status; an extension never reaches the wire.
        resp.extensions_mut().insert(RefusedByProxy(outcome));
        self.finish();
        resp
    }

    /// Counts one upstream failure of the given kind (and in the total).
    fn count_upstream(&self, fault: UpstreamFault) {
        let status = self.record.upstream_status;
        self.with_meter(|m| {
            match fault {
                UpstreamFault::Client => m.upstream_client_errors += 1,
                UpstreamFault::Server => m.upstream_server_errors += 1,
                UpstreamFault::Transport => m.upstream_transport_errors += 1,
                UpstreamFault::Account => m.upstream_account_refusals += 1,
            }
            if fault != UpstreamFault::Account {
                m.upstream_errors += 1;
            }
        });
        match fault {
            UpstreamFault::Account => {
                let why = if status == Some(402) {
                    "the upstream account is out of balance"
                } else {
                    "the upstream refused the API key"
                };
                self.provider_fault("account", why);
            }
            // A status the provider answered (429, 5xx); not a body the proxy could not use.
            UpstreamFault::Server if status.is_some_and(|s| s == 429 || s >= 500) => {
                self.provider_fault("status", "the upstream answered an error status");
            }
            _ => {}
        }
    }

    /// Records a provider fault on the role's meter, with the upstream's status and body digest.
    fn provider_fault(&self, kind: &str, detail: &str) {
        let f = crate::budget::ProviderFault {
            kind: kind.to_owned(),
            status: self.record.upstream_status,
            body_digest: self.record.response_digest.clone(),
            seq: self.record.seq,
            detail: detail.to_owned(),
        };
        self.with_meter(|m| {
            m.provider_faults += 1;
            m.last_provider_fault = Some(f);
        });
    }

    /// Refuses the call because the upstream failed (unreachable, timed out, broken off, or
    /// answered garbage): a gateway status in the API's error shape, and an `upstream_error`.
    fn upstream_failed(self, fault: UpstreamFault, status: StatusCode, detail: &str) -> Response {
        self.upstream_refused(fault, status, "upstream_error", detail)
    }

    fn upstream_refused(
        self,
        fault: UpstreamFault,
        status: StatusCode,
        code: &str,
        detail: &str,
    ) -> Response {
        self.count_upstream(fault);
        self.refuse(status, CallOutcome::UpstreamError, code, detail)
    }

    /// Ends a call the closing of its attempt cut short (its reservation already settled as
    /// spent).
    fn cut_at_close(mut self) -> Response {
        self.record.outcome = CallOutcome::CutAtClose;
        self.record.status = StatusCode::SERVICE_UNAVAILABLE.as_u16();
        self.record.detail = Some("the attempt was closed while this call was running".into());
        let resp = api_error(
            self.api(),
            StatusCode::SERVICE_UNAVAILABLE,
            "cut_at_close",
            "the attempt was closed while this call was running",
        );
        self.finish();
        resp
    }

    /// Keeps the (redacted) request body for the sink, when bodies are kept.
    fn keep_request(&mut self, redacted: &Bytes) {
        if self.shared.keep_bodies.is_some() {
            self.record
                .bodies
                .get_or_insert_with(Default::default)
                .request = Some(redacted.clone());
        }
    }

    /// Keeps the (redacted) response body for the sink, when bodies are kept.
    fn keep_response(&mut self, redacted: &Bytes, sse: bool, truncated: bool) {
        if self.shared.keep_bodies.is_some() {
            let b = self.record.bodies.get_or_insert_with(Default::default);
            b.response = Some(redacted.clone());
            b.response_sse = sse;
            b.response_truncated = truncated;
        }
    }

    fn finish(mut self) {
        self.record.latency_ms = self.t0.elapsed().as_secs_f64() * 1e3;
        if let Some(d) = &self.record.detail {
            self.record.detail = Some(self.shared.redactor.redact_str(d));
        }
        self.shared.metrics.observe(&self.record);
        if let Err(e) = self.shared.sink.record(&self.record) {
            tracing::error!(attempt = ?self.record.attempt_id, seq = self.record.seq, "{e}");
        }
    }
}

/// Entry point for every request on an attempt's socket, the token listener, or an oracle call.
pub(crate) async fn serve(
    shared: Arc<Shared>,
    attempt: Option<Arc<Attempt>>,
    role: Role,
    req: Request,
) -> Response {
    let attempt = attempt.filter(|a| !a.closed.load(Ordering::SeqCst));
    let path = req.uri().path().to_owned();
    let method = req.method().clone();
    let Some(attempt) = attempt else {
        let call = Call::new(shared, None, role, &method, &path);
        return call.refuse(
            StatusCode::UNAUTHORIZED,
            CallOutcome::UnknownAttempt,
            "unknown_attempt",
            "no registered attempt matches this socket or token",
        );
    };
    if role == Role::Agent && path.starts_with("/_eval/") {
        return control(shared, attempt, req).await;
    }
    // The call runs in the connection's own task: no task spawned and no channel per call,
    // so the response is ready in the poll that completes it. `Detached` keeps the guarantee a
    // task of its own gave: a client that leaves mid-call only moves the rest of the call to a
    // tracked task, so its record and usage are never lost.
    let tokens = (shared.tracker.token(), attempt.calls.token());
    let call = Call::new(shared.clone(), Some(attempt), role, &method, &path);
    let run = std::panic::AssertUnwindSafe(run(call, req)).catch_unwind();
    match Detached::new(run, tokens).await {
        Some(Ok(r)) => r,
        _ => api_error(
            shared.api,
            StatusCode::INTERNAL_SERVER_ERROR,
            "proxy_error",
            "the proxy could not complete this call",
        ),
    }
}

/// A call's future, polled in place by whoever awaits it; dropped before it completes (the
/// client left, its connection was dropped), it is moved — boxed, so moving it is allowed — to
/// a task of its own that runs it to the end. The tracker tokens (the proxy's and the attempt's)
/// travel with it, so shutdown and `close_attempt_and_wait` wait for it either way.
struct Detached<F: Future + Send + 'static> {
    fut: Option<std::pin::Pin<Box<F>>>,
    tokens: Option<(TaskTrackerToken, TaskTrackerToken)>,
}

impl<F: Future + Send + 'static> Detached<F> {
    fn new(fut: F, tokens: (TaskTrackerToken, TaskTrackerToken)) -> Self {
        Self {
            fut: Some(Box::pin(fut)),
            tokens: Some(tokens),
        }
    }
}

impl<F: Future + Send + 'static> Future for Detached<F> {
    /// `None` only if polled again after it completed.
    type Output = Option<F::Output>;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        // `Detached` is `Unpin` (it holds the future boxed).
        let this = self.get_mut();
        let Some(fut) = this.fut.as_mut() else {
            return std::task::Poll::Ready(None);
        };
        let out = std::task::ready!(fut.as_mut().poll(cx));
        this.fut = None;
        this.tokens = None;
        std::task::Poll::Ready(Some(out))
    }
}

impl<F: Future + Send + 'static> Drop for Detached<F> {
    fn drop(&mut self) {
        let (Some(fut), tokens) = (self.fut.take(), self.tokens.take()) else {
            return;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(h) => {
                h.spawn(async move {
                    let _tokens = tokens;
                    let _ = fut.await;
                });
            }
            Err(_) => tracing::error!("a call was dropped outside the runtime; its record is lost"),
        }
    }
}

async fn control(shared: Arc<Shared>, attempt: Arc<Attempt>, req: Request) -> Response {
    let api = shared.api;
    let Some(plane) = shared.control.clone() else {
        return api_error(
            api,
            StatusCode::NOT_FOUND,
            "not_found",
            "no control plane is configured",
        );
    };
    if req.method() != Method::POST {
        return api_error(
            api,
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            "use POST",
        );
    }
    let path = req.uri().path().to_owned();
    let body = match read_body(
        req.into_body(),
        shared.max_body,
        shared.listener.body_read_timeout,
    )
    .await
    {
        Ok(b) => b,
        Err(status) => {
            return api_error(api, status, "bad_request", "cannot read the request body");
        }
    };
    let (status, value) = plane.handle(&attempt.id, &path, body).await;
    let mut r = Response::new(Body::from(value.to_string()));
    *r.status_mut() = status;
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// Reads a whole request body, refusing one larger than `limit` (413) or slower than `deadline`
/// (408: a client trickling its body would otherwise hold a connection slot indefinitely).
async fn read_body(
    body: Body,
    limit: usize,
    deadline: std::time::Duration,
) -> Result<Bytes, StatusCode> {
    let collected = match tokio::time::timeout(
        deadline,
        http_body_util::Limited::new(body, limit).collect(),
    )
    .await
    {
        Ok(r) => r,
        Err(_) => return Err(StatusCode::REQUEST_TIMEOUT),
    };
    match collected {
        Ok(c) => Ok(c.to_bytes()),
        Err(e)
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some() =>
        {
            Err(StatusCode::PAYLOAD_TOO_LARGE)
        }
        Err(_) => Err(StatusCode::BAD_REQUEST),
    }
}

fn route_allowed(api: ApiKind, method: &Method, path: &str) -> Result<bool, StatusCode> {
    let model_path = match api {
        ApiKind::OpenAiChat => matches!(path, "/v1/chat/completions" | "/chat/completions"),
        ApiKind::AnthropicMessages => path == "/v1/messages",
    };
    let list_path = matches!(path, "/v1/models" | "/models");
    if model_path {
        if method == Method::POST {
            Ok(true)
        } else {
            Err(StatusCode::METHOD_NOT_ALLOWED)
        }
    } else if list_path {
        if method == Method::GET {
            Ok(false)
        } else {
            Err(StatusCode::METHOD_NOT_ALLOWED)
        }
    } else {
        Err(StatusCode::NOT_FOUND)
    }
}

fn upstream_url(base: &str, path: &str) -> String {
    if base.ends_with("/v1")
        && let Some(rest) = path.strip_prefix("/v1")
    {
        return format!("{base}{rest}");
    }
    format!("{base}{path}")
}

/// Forwardable client headers, with the credential, allow-list and encoding changes recorded.
fn upstream_headers(
    shared: &Shared,
    contract: &Contract,
    client: &HeaderMap,
    changes: &mut Vec<Change>,
) -> HeaderMap {
    let mut out = HeaderMap::with_capacity(client.len() + 2);
    for (name, value) in client {
        let n = name.as_str();
        // Hop-by-hop headers are the connection's, not the request's: dropped silently.
        if headers::is_hop_by_hop(n) {
            continue;
        }
        if headers::is_credential(n) || !contract.allows_header(shared.api, n) {
            let dropped = Change::DroppedHeader { name: n.to_owned() };
            // A header sent several times is noted once.
            if !changes.contains(&dropped) {
                changes.push(dropped);
            }
            continue;
        }
        out.append(name.clone(), value.clone());
    }
    let (header, value) = match shared.api {
        ApiKind::OpenAiChat => (
            http::header::AUTHORIZATION,
            HeaderValue::from_str(&format!("Bearer {}", shared.key.expose())),
        ),
        ApiKind::AnthropicMessages => (
            HeaderName::from_static("x-api-key"),
            HeaderValue::from_str(shared.key.expose()),
        ),
    };
    if let Ok(mut v) = value {
        v.set_sensitive(true);
        changes.push(Change::InjectedCredential {
            header: header.as_str().to_owned(),
        });
        out.insert(header, v);
    }
    out.insert(
        http::header::ACCEPT_ENCODING,
        HeaderValue::from_static("identity"),
    );
    changes.push(Change::AcceptEncodingIdentity);
    out
}

pub(crate) fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// Settles a reservation: with usage, at the real count; without, either at the worst case
/// (`charged`: the upstream may have billed it) or released.
fn settle(
    call: &Call,
    res: Reservation,
    usage: Option<&Usage>,
    price: Option<&Price>,
    charged: bool,
) -> f64 {
    let Some(e) = call
        .attempt
        .as_ref()
        .and_then(|a| a.roles.get(&call.record.role))
    else {
        return 0.0;
    };
    if usage.is_none() && !charged {
        call.shared.run.release(&e.state, res);
        return 0.0;
    }
    call.shared.run.settle(&e.state, res, usage, price)
}

/// Meters a 2xx answer. `complete`: the answer ended as the API defines an end (a whole body; a
/// stream's `[DONE]` / `message_stop`). Only a complete answer with usage is a model turn of the
/// meter — exactly the calls a harness can count on its side (the DeepSeek Harness writes a
/// usage chunk only at `[DONE]`). Any other is counted apart as incomplete, at its reservation
/// (what the budget holds for it); its usage, if some arrived, stays in its record.
fn meter_success(call: &mut Call, usage: Option<Usage>, spend: f64, complete: bool) {
    call.record.spend_usd = spend;
    let metered = usage.is_some();
    let turn = metered && complete;
    let reserved = call.record.reserved_tokens;
    let streamed = call.record.streamed_bytes.unwrap_or(0);
    call.with_meter(|m| {
        m.spend_usd += spend;
        if !metered {
            m.unmetered_calls += 1;
        }
        match (&usage, turn) {
            (Some(u), true) => {
                m.turns += 1;
                m.last_provider_fault = None;
                m.input_tokens += u.input_tokens;
                m.output_tokens += u.output_tokens;
                m.cached_input_tokens += u.cached_input_tokens;
                m.cache_creation_tokens += u.cache_creation_tokens;
                m.reasoning_tokens += u.reasoning_tokens;
            }
            _ => {
                m.incomplete_calls += 1;
                m.incomplete_reserved_tokens += reserved;
                m.incomplete_streamed_bytes += streamed;
                m.incomplete_seen_tokens += usage.as_ref().map_or(0, Usage::total_tokens);
            }
        }
    });
    call.record.usage = usage;
    call.record.incomplete = !turn;
    if !metered {
        call.record.outcome = CallOutcome::Unmetered;
    }
}

fn copy_response_headers(from: &HeaderMap, to: &mut HeaderMap, redactor: &crate::secret::Redactor) {
    for (name, value) in from {
        let n = name.as_str();
        let pass = RESPONSE_HEADERS.contains(&n)
            || n.starts_with("x-ratelimit-")
            || n.starts_with("anthropic-ratelimit-")
            || n.starts_with("openai-");
        if pass && !redactor.contains_key(value.as_bytes()) {
            to.append(name.clone(), value.clone());
        }
    }
}

async fn write_transcript(dir: &std::path::Path, redacted: &[u8]) {
    let name = hex::encode(Sha256::digest(redacted));
    let path = dir.join(&name);
    if tokio::fs::metadata(&path).await.is_ok() {
        return;
    }
    if let Err(e) = tokio::fs::write(&path, redacted).await {
        tracing::warn!("cannot write transcript {name}: {e}");
    }
}

/// A complete (non-streaming) answer: read with the idle timeout, check it, meter it, redact it.
async fn whole_back(
    mut call: Call,
    upstream: reqwest::Response,
    reservation: Reservation,
    price: Option<Price>,
    sent_at: Instant,
) -> Response {
    let shared = call.shared.clone();
    let status = upstream.status();
    let up_headers = upstream.headers().clone();
    let mut stream = upstream.bytes_stream();
    let mut buf = BytesMut::new();
    let cut = call
        .attempt
        .as_ref()
        .map(|a| a.cut.clone())
        .unwrap_or_default();
    loop {
        let next = tokio::select! {
            n = tokio::time::timeout(shared.timeouts.idle, stream.next()) => n,
            _ = cut.cancelled() => {
                call.record.spend_usd = settle(&call, reservation, None, price.as_ref(), true);
                return call.cut_at_close();
            }
        };
        match next {
            Ok(Some(Ok(chunk))) => {
                if call.record.ttfb_ms.is_none() {
                    call.record.ttfb_ms = Some(sent_at.elapsed().as_secs_f64() * 1e3);
                }
                if buf.len() + chunk.len() > 4 * shared.max_body {
                    settle(&call, reservation, None, price.as_ref(), true);
                    return call.upstream_failed(
                        UpstreamFault::Server,
                        StatusCode::BAD_GATEWAY,
                        "the upstream's response is too large",
                    );
                }
                buf.extend_from_slice(&chunk);
            }
            Ok(None) => break,
            Ok(Some(Err(e))) => {
                settle(&call, reservation, None, price.as_ref(), true);
                let d = format!("the upstream's response broke off: {}", error_chain(&e));
                return call.upstream_failed(UpstreamFault::Transport, StatusCode::BAD_GATEWAY, &d);
            }
            Err(_) => {
                settle(&call, reservation, None, price.as_ref(), true);
                return call.upstream_refused(
                    UpstreamFault::Transport,
                    StatusCode::GATEWAY_TIMEOUT,
                    "upstream_timeout",
                    "the upstream's response stalled",
                );
            }
        }
    }
    let (body, redactions) = shared.redactor.redact(buf.freeze());
    if redactions > 0 {
        call.record
            .changes
            .push(Change::RedactedKey { count: redactions });
    }
    call.record.response_digest = Some(digest(&body));
    if let Some(dir) = &shared.transcript_dir {
        write_transcript(dir, &body).await;
    }
    call.keep_response(&body, false, false);
    // Only the model and usage are read; the rest is validated and skipped without building it.
    let head: Option<ResponseHead> = serde_json::from_slice(&body).ok();
    let usage = head
        .as_ref()
        .and_then(|h| h.usage.as_ref())
        .and_then(|u| Usage::from_usage(shared.api, u));
    if !status.is_success() {
        // An upstream error passes through with its status when it is a JSON error body; any
        // other body is replaced by an error in the API's shape.
        let spend = settle(&call, reservation, usage.as_ref(), price.as_ref(), false);
        call.record.spend_usd = spend;
        call.record.usage = usage;
        if serde_json::from_slice::<serde::de::IgnoredAny>(&body).is_err() {
            let d = format!(
                "the upstream answered status {} with a body that is not JSON",
                status.as_u16()
            );
            return call.upstream_failed(UpstreamFault::of_status(status), status, &d);
        }
        call.record.outcome = CallOutcome::UpstreamError;
        call.record.detail = Some(format!("upstream status {}", status.as_u16()));
        call.record.status = status.as_u16();
        call.count_upstream(UpstreamFault::of_status(status));
        let mut r = Response::new(Body::from(body));
        *r.status_mut() = status;
        copy_response_headers(&up_headers, r.headers_mut(), &shared.redactor);
        call.finish();
        return r;
    }
    let Some(head) = head else {
        settle(&call, reservation, None, price.as_ref(), true);
        return call.upstream_failed(
            UpstreamFault::Server,
            StatusCode::BAD_GATEWAY,
            "the upstream answered with a body that is not JSON",
        );
    };
    call.record.upstream_model = head.model.and_then(|m| m.as_str().map(str::to_owned));
    let spend = settle(&call, reservation, usage.as_ref(), price.as_ref(), true);
    meter_success(&mut call, usage, spend, true);
    call.record.status = status.as_u16();
    let mut r = Response::new(Body::from(body));
    *r.status_mut() = status;
    copy_response_headers(&up_headers, r.headers_mut(), &shared.redactor);
    call.finish();
    r
}

/// `GET /v1/models`: forwarded with the real key like a model call — inside the role's request
/// and wall-time budgets and only after its start is recorded — but not a model turn.
async fn list_models(
    mut call: Call,
    entry: &crate::server::RoleEntry,
    attempt: &Attempt,
    headers: HeaderMap,
    url: String,
    changes: Vec<Change>,
) -> Response {
    let shared = call.shared.clone();
    call.record.changes = changes;
    let reservation = match shared
        .run
        .reserve(&entry.state, attempt.started, "", None, 0, 0)
    {
        Ok(r) => r,
        Err(refusal) => {
            return call.refuse(
                StatusCode::TOO_MANY_REQUESTS,
                CallOutcome::BudgetExhausted,
                "budget_exhausted",
                &refusal.message(),
            );
        }
    };
    let started = crate::record::CallStarted {
        attempt_id: attempt.id.clone(),
        arm: call.record.arm.clone(),
        role: call.record.role,
        seq: call.record.seq,
        started_at_ms: call.record.started_at_ms,
        path: call.record.path.clone(),
        model: None,
        stream: false,
        reserved_tokens: 0,
    };
    let recorded = shared.sink.call_started(&started).await;
    // Nothing was or will be generated: the request is counted, no tokens are.
    shared.run.release(&entry.state, reservation);
    if let Err(e) = recorded {
        return call.refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            CallOutcome::NotRecorded,
            "not_recorded",
            &format!("the call was not forwarded: {e}"),
        );
    }
    call.with_meter(|m| m.calls += 1);
    let send = shared.client.get(&url).headers(headers).send();
    let resp = match tokio::time::timeout(shared.timeouts.first_byte, send).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            let d = format!("the upstream could not be reached: {}", error_chain(&e));
            return call.upstream_failed(UpstreamFault::Transport, StatusCode::BAD_GATEWAY, &d);
        }
        Err(_) => {
            return call.upstream_refused(
                UpstreamFault::Transport,
                StatusCode::GATEWAY_TIMEOUT,
                "upstream_timeout",
                "the upstream sent no response",
            );
        }
    };
    let status = resp.status();
    call.record.upstream_status = Some(status.as_u16());
    if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
        call.record.changes.push(Change::ReplacedAuthError);
        return call.upstream_refused(
            UpstreamFault::Account,
            StatusCode::BAD_GATEWAY,
            "upstream_auth_error",
            "the upstream refused the proxy's credentials",
        );
    }
    let up_headers = resp.headers().clone();
    let body = match tokio::time::timeout(shared.timeouts.idle, resp.bytes()).await {
        Ok(Ok(b)) => b,
        _ => {
            return call.upstream_failed(
                UpstreamFault::Transport,
                StatusCode::BAD_GATEWAY,
                "the upstream's response broke off",
            );
        }
    };
    let (body, _) = shared.redactor.redact(body);
    call.record.response_digest = Some(digest(&body));
    call.record.status = status.as_u16();
    if !status.is_success() {
        call.record.outcome = CallOutcome::UpstreamError;
        call.count_upstream(UpstreamFault::of_status(status));
    }
    let mut r = Response::new(Body::from(body));
    *r.status_mut() = status;
    copy_response_headers(&up_headers, r.headers_mut(), &shared.redactor);
    call.finish();
    r
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use tokio::sync::oneshot;
    use tokio_util::task::TaskTracker;

    /// A call whose awaiting side goes away (the client left) is not cancelled: it runs to its
    /// end in a task of its own, and both trackers count it until then. A call that completes
    /// where it is awaited releases them at once.
    #[tokio::test]
    async fn a_call_dropped_midway_runs_to_its_end_and_is_waited_for() {
        let (proxy, calls) = (TaskTracker::new(), TaskTracker::new());
        let (go, wait) = oneshot::channel::<()>();
        let (done, finished) = oneshot::channel::<&str>();
        let mut d = Detached::new(
            async move {
                wait.await.unwrap();
                done.send("recorded").unwrap();
            },
            (proxy.token(), calls.token()),
        );
        assert!(futures_util::poll!(&mut d).is_pending());
        drop(d);
        proxy.close();
        calls.close();
        assert_eq!(
            (proxy.len(), calls.len()),
            (1, 1),
            "the moved call is tracked"
        );
        go.send(()).unwrap();
        assert_eq!(finished.await, Ok("recorded"));
        calls.wait().await;
        proxy.wait().await;

        let (proxy, calls) = (TaskTracker::new(), TaskTracker::new());
        let d = Detached::new(async { 7 }, (proxy.token(), calls.token()));
        assert_eq!(d.await, Some(7));
        assert!(proxy.is_empty() && calls.is_empty());
    }
}
