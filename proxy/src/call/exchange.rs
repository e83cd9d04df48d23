//! The state of one call and the steps every way back shares: the headers in and out, the body
//! read, the settling of the reservation and the meter. A leaf of `call`: the entry (`call.rs`),
//! the pipeline and both ways back (`whole.rs`, `stream.rs`) use it and it uses none of them.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use eval_core::headers;
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use http_body_util::BodyExt;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::budget::Reservation;
use crate::config::{ApiKind, Contract, Price, Role};
use crate::errors::api_error;
use crate::record::{CallOutcome, CallRecord, Change};
use crate::state::{Attempt, Shared};
use crate::usage::Usage;

/// Marks a response the proxy made itself (a refusal), with the call's outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RefusedByProxy(pub CallOutcome);

/// Upstream response headers passed back to the client; everything else stays in the proxy.
pub(super) const RESPONSE_HEADERS: [&str; 5] = [
    "content-type",
    "cache-control",
    "x-request-id",
    "request-id",
    // A 429/503's pacing: the client's retry policy (the DeepSeek Harness honours it) needs it.
    "retry-after",
];

/// The parts of a complete response body the meter reads.
#[derive(serde::Deserialize)]
pub(super) struct ResponseHead {
    #[serde(default)]
    pub(super) model: Option<Value>,
    #[serde(default)]
    pub(super) usage: Option<Value>,
}

pub(super) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

pub(super) fn digest(b: &[u8]) -> String {
    crate::digest::digest_text(&Sha256::digest(b))
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
pub(super) struct Call {
    pub(super) shared: Arc<Shared>,
    pub(super) attempt: Option<Arc<Attempt>>,
    pub(super) record: CallRecord,
    t0: Instant,
}

impl Call {
    pub(super) fn new(
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

    pub(super) fn api(&self) -> ApiKind {
        self.shared.api
    }

    pub(super) fn with_meter(&self, f: impl FnOnce(&mut crate::budget::RoleMeter)) {
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
    pub(super) fn refuse(
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
    pub(super) fn count_upstream(&self, fault: UpstreamFault) {
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
    pub(super) fn provider_fault(&self, kind: &str, detail: &str) {
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
    pub(super) fn upstream_failed(
        self,
        fault: UpstreamFault,
        status: StatusCode,
        detail: &str,
    ) -> Response {
        self.upstream_refused(fault, status, "upstream_error", detail)
    }

    pub(super) fn upstream_refused(
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
    pub(super) fn cut_at_close(mut self) -> Response {
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
    pub(super) fn keep_request(&mut self, redacted: &Bytes) {
        if self.shared.keep_bodies.is_some() {
            self.record
                .bodies
                .get_or_insert_with(Default::default)
                .request = Some(redacted.clone());
        }
    }

    /// Keeps the (redacted) response body for the sink, when bodies are kept.
    pub(super) fn keep_response(&mut self, redacted: &Bytes, sse: bool, truncated: bool) {
        if self.shared.keep_bodies.is_some() {
            let b = self.record.bodies.get_or_insert_with(Default::default);
            b.response = Some(redacted.clone());
            b.response_sse = sse;
            b.response_truncated = truncated;
        }
    }

    pub(super) fn finish(mut self) {
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

/// Reads a whole request body, refusing one larger than `limit` (413) or slower than `deadline`
/// (408: a client trickling its body would otherwise hold a connection slot indefinitely).
pub(super) async fn read_body(
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

pub(super) fn route_allowed(api: ApiKind, method: &Method, path: &str) -> Result<bool, StatusCode> {
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

pub(super) fn upstream_url(base: &str, path: &str) -> String {
    if base.ends_with("/v1")
        && let Some(rest) = path.strip_prefix("/v1")
    {
        return format!("{base}{rest}");
    }
    format!("{base}{path}")
}

/// Forwardable client headers, with the credential, allow-list and encoding changes recorded.
pub(super) fn upstream_headers(
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

/// Settles a reservation: with usage, at the real count; without, either at the worst case
/// (`charged`: the upstream may have billed it) or released.
pub(super) fn settle(
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
pub(super) fn meter_success(call: &mut Call, usage: Option<Usage>, spend: f64, complete: bool) {
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

pub(super) fn copy_response_headers(
    from: &HeaderMap,
    to: &mut HeaderMap,
    redactor: &crate::secret::Redactor,
) {
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

pub(super) async fn write_transcript(dir: &std::path::Path, redacted: &[u8]) {
    let name = hex::encode(Sha256::digest(redacted));
    let path = dir.join(&name);
    if tokio::fs::metadata(&path).await.is_ok() {
        return;
    }
    if let Err(e) = tokio::fs::write(&path, redacted).await {
        tracing::warn!("cannot write transcript {name}: {e}");
    }
}
