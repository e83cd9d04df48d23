//! One record per call, and the sinks records go to.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::role::Role;
use crate::usage::Usage;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
/// How one call ended (a model *call's* result; an attempt's outcome is `eval_core`'s).
pub enum CallOutcome {
    /// Forwarded, answered with 2xx, usage recorded.
    Ok,
    /// Answered with 2xx, but no usage arrived (the call is counted at its reserved worst case).
    Unmetered,
    /// Refused for breaking the role's model contract; never forwarded.
    ContractViolation,
    /// Refused because a budget could not hold its reservation; never forwarded.
    BudgetExhausted,
    /// The upstream failed: non-2xx status, timeout, connection error or an unreadable response.
    UpstreamError,
    /// The request was refused before reaching the upstream (malformed, oversize, wrong method
    /// or path).
    BadRequest,
    /// No registered attempt matches the socket or token.
    UnknownAttempt,
    /// The record sink could not durably note the call's start, so it was not forwarded.
    NotRecorded,
    /// The attempt was closed while the call was still running and its grace ran out: the
    /// upstream request was aborted, the call counted at its reservation.
    CutAtClose,
}

impl CallOutcome {
    /// The outcome's name in records.
    pub fn as_str(self) -> &'static str {
        match self {
            CallOutcome::Ok => "ok",
            CallOutcome::Unmetered => "unmetered",
            CallOutcome::ContractViolation => "contract_violation",
            CallOutcome::BudgetExhausted => "budget_exhausted",
            CallOutcome::UpstreamError => "upstream_error",
            CallOutcome::BadRequest => "bad_request",
            CallOutcome::UnknownAttempt => "unknown_attempt",
            CallOutcome::NotRecorded => "not_recorded",
            CallOutcome::CutAtClose => "cut_at_close",
        }
    }
}

/// Something the proxy did to a request or response on its way through.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "change", rename_all = "snake_case")]
pub enum Change {
    /// A client header that was not forwarded: a credential, or a header the contract's
    /// allow-list does not name (hop-by-hop headers are dropped without a note).
    DroppedHeader {
        /// The header's name (never its value).
        name: String,
    },
    /// The real credential was added in this header.
    InjectedCredential {
        /// The header's name.
        header: String,
    },
    /// `Accept-Encoding: identity` was sent so the meter reads plain bytes.
    AcceptEncodingIdentity,
    /// `stream_options.include_usage: true` was added to a streaming request.
    AddedStreamUsage,
    /// The usage-only stream chunk the client had not asked for was not passed on.
    HidUsageChunk,
    /// The key appeared in the upstream's response and was replaced by `[REDACTED]`.
    RedactedKey {
        /// How many times.
        count: usize,
    },
    /// An upstream 401/403 body was replaced by a generic error.
    ReplacedAuthError,
    /// The request named no output limit, so the one its reservation assumed was added.
    InsertedOutputLimit {
        /// The parameter added (`max_tokens`).
        param: String,
        /// Its value: the per-choice limit reserved.
        value: u64,
    },
}

/// One model call (or refused attempt at one).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallRecord {
    /// `None` when no registered attempt matched.
    pub attempt_id: Option<String>,
    /// The attempt's arm.
    pub arm: Option<String>,
    /// The role the call was made in.
    pub role: Role,
    /// 1, 2, … per attempt over all its roles, in the order calls arrived.
    pub seq: u64,
    /// Unix time in milliseconds when the request arrived.
    pub started_at_ms: u64,
    /// The HTTP method.
    pub method: String,
    /// The request path.
    pub path: String,
    /// The model the request named.
    pub model: Option<String>,
    /// The model the upstream said answered.
    pub upstream_model: Option<String>,
    /// Whether the request asked for a stream.
    pub stream: bool,
    /// Status the client received.
    pub status: u16,
    /// Status the upstream answered, when it was reached.
    pub upstream_status: Option<u16>,
    /// How the call ended.
    pub outcome: CallOutcome,
    /// A short human-readable reason for non-ok outcomes (never contains the key).
    pub detail: Option<String>,
    /// Time from the request's arrival to the end of the response.
    pub latency_ms: f64,
    /// Time from forwarding the request to the first upstream body byte.
    pub ttfb_ms: Option<f64>,
    /// The upstream's usage, as the meter read it.
    pub usage: Option<Usage>,
    /// What this call cost, priced with the run's table (0 when the model has no price).
    pub spend_usd: f64,
    /// Tokens reserved before forwarding (input estimate + bounded max output).
    pub reserved_tokens: u64,
    /// `sha256:<hex>` of the request body as forwarded (redacted).
    pub request_digest: Option<String>,
    /// `sha256:<hex>` of the upstream's response body (redacted).
    pub response_digest: Option<String>,
    /// What the proxy did to the request and response.
    pub changes: Vec<Change>,
    /// The client went away before the response ended; the upstream was drained anyway.
    pub client_disconnected: bool,
    /// A 2xx answer that did not end as the API defines an end (a stream without `[DONE]` /
    /// `message_stop`, or without usage): not a model turn of the meter, counted apart at its
    /// reservation (see docs/proxy.md, "Calls without usage"). Absent when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub incomplete: bool,
    /// Bytes of the upstream's answer that arrived (streams only), so an incomplete call shows
    /// what was streamed before it broke off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub streamed_bytes: Option<u64>,
    /// The tool names and system-prompt section digests the request carried (bounded; never the
    /// bodies). `None` when the body was not parsed (refused before that), and in records from
    /// before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wire: Option<crate::wire::WireShape>,
    /// The call's redacted bodies, for a sink that keeps a readable wire log
    /// ([`crate::ProxyConfig::keep_bodies`]); never serialised into the record itself.
    #[serde(skip)]
    pub bodies: Option<CallBodies>,
}

/// A call's request and response bodies as the proxy saw them, redacted: the request as
/// forwarded (its digest is `request_digest`), the response as the upstream sent it (for a
/// stream, the SSE bytes up to the per-call cap).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallBodies {
    /// The request body as forwarded.
    pub request: Option<bytes::Bytes>,
    /// The response body as the upstream sent it.
    pub response: Option<bytes::Bytes>,
    /// The response is an event stream (`text/event-stream`).
    pub response_sse: bool,
    /// The response went past [`crate::ProxyConfig::keep_bodies`] and was cut there.
    pub response_truncated: bool,
}

/// A sink could not take a record; the text says why.
#[derive(Debug, thiserror::Error)]
#[error("cannot write call record: {0}")]
pub struct RecordError(pub String);

/// What the proxy knows of a call at the moment it is about to forward it upstream.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CallStarted {
    /// The attempt's id.
    pub attempt_id: String,
    /// The attempt's arm.
    pub arm: Option<String>,
    /// The role the call is made in.
    pub role: Role,
    /// The call's seq in its attempt (the record's `seq`).
    pub seq: u64,
    /// Unix time in milliseconds when the request arrived.
    pub started_at_ms: u64,
    /// The request path.
    pub path: String,
    /// The model the request named.
    pub model: Option<String>,
    /// Whether the request asked for a stream.
    pub stream: bool,
    /// The tokens reserved for it.
    pub reserved_tokens: u64,
}

/// The future [`RecordSink::call_started`] returns.
pub type StartFuture<'a> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), RecordError>> + Send + 'a>>;

/// Where records go. Called from the proxy's tasks; must not block for long.
pub trait RecordSink: Send + Sync {
    /// Takes one finished call's record.
    fn record(&self, record: &CallRecord) -> Result<(), RecordError>;

    /// Called after a call passed its contract and budget checks and before any byte of it goes
    /// upstream; the call is forwarded only once this resolves `Ok`. A sink whose records must
    /// survive a crash (the controller's ledger) resolves only when the start is durable, so an
    /// attempt killed in the middle of a paid call is still known to have spent — and is never
    /// rerun. An `Err` refuses the call (503) without forwarding it.
    fn call_started<'a>(&'a self, _started: &'a CallStarted) -> StartFuture<'a> {
        Box::pin(async { Ok(()) })
    }
}

/// Appends one JSON object per line; each line is flushed as written.
pub struct JsonlSink {
    file: Mutex<File>,
}

impl JsonlSink {
    /// Opens (or creates) `path` for appending.
    pub fn open(path: &Path) -> Result<Self, RecordError> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| RecordError(format!("{}: {e}", path.display())))?;
        Ok(Self {
            file: Mutex::new(file),
        })
    }
}

impl RecordSink for JsonlSink {
    fn record(&self, record: &CallRecord) -> Result<(), RecordError> {
        let mut line = serde_json::to_vec(record).map_err(|e| RecordError(e.to_string()))?;
        line.push(b'\n');
        let mut f = self
            .file
            .lock()
            .map_err(|_| RecordError("sink lock poisoned".into()))?;
        f.write_all(&line).map_err(|e| RecordError(e.to_string()))
    }
}

/// Keeps records in memory (tests, and controllers that bridge to the ledger later).
#[derive(Default)]
pub struct MemorySink {
    records: Mutex<Vec<CallRecord>>,
}

impl MemorySink {
    /// An empty sink.
    pub fn new() -> Self {
        Self::default()
    }

    /// The records so far, in the order they came.
    pub fn records(&self) -> Vec<CallRecord> {
        self.records.lock().map(|r| r.clone()).unwrap_or_default()
    }
}

impl RecordSink for MemorySink {
    fn record(&self, record: &CallRecord) -> Result<(), RecordError> {
        self.records
            .lock()
            .map_err(|_| RecordError("sink lock poisoned".into()))?
            .push(record.clone());
        Ok(())
    }
}

/// Discards records (for `eval proxy` without `--meter-out`).
pub struct NullSink;

impl RecordSink for NullSink {
    fn record(&self, _record: &CallRecord) -> Result<(), RecordError> {
        Ok(())
    }
}
