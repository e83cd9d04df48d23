//! The request pipeline of one model call, one job per stage:
//! admit (attempt, route, role) → read and check the request (contract) → reserve (budget) →
//! record the start → forward → answer (stream or whole body, metered and settled there).
//!
//! Every stage takes the call by value and either hands it on or ends it: `Err` carries the
//! response of a call that was refused, its record already written and its reservation settled.
#![allow(
    clippy::result_large_err,
    reason = "the Ok side carries the whole Call, larger still; a refusal is returned once per call"
)]

use std::sync::Arc;
use std::time::Instant;

use axum::extract::Request;
use axum::response::Response;
use bytes::Bytes;
use futures_util::FutureExt;
use http::{HeaderMap, StatusCode};
use serde_json::Value;

use super::exchange::{
    Call, UpstreamFault, digest, read_body, route_allowed, settle, upstream_headers, upstream_url,
    write_transcript,
};
use super::stream::stream_back;
use super::whole::{list_models, whole_back};
use crate::budget::Reservation;
use crate::config::{ApiKind, Price};
use crate::errors::error_chain;
use crate::record::{CallOutcome, CallStarted, Change};
use crate::request::ParsedRequest;
use crate::state::{Attempt, RoleEntry};

/// A stage's result: the call handed on with what the stage produced, or the response of a call
/// the stage ended.
type Step<T> = Result<(Call, T), Response>;

/// A model request the contract admits, in the form it will be sent upstream.
struct Outbound {
    body: Bytes,
    /// The proxy asked an OpenAI stream for usage the client did not ask for.
    hide_usage_chunk: bool,
    /// The body differs from the client's, so its digest is recorded instead.
    changed: bool,
    /// The worst-case output the reservation must cover.
    max_out: u64,
}

/// The budget held for a call while it is upstream.
struct Held {
    reservation: Reservation,
    price: Option<Price>,
}

pub(super) async fn run(call: Call, req: Request) -> Response {
    match pipeline(call, req).await {
        Ok(resp) | Err(resp) => resp,
    }
}

async fn pipeline(call: Call, req: Request) -> Result<Response, Response> {
    let (call, (attempt, is_model_call)) = admit(call, &req)?;
    let Some(entry) = attempt.roles.get(&call.record.role) else {
        let role = call.record.role;
        return Err(call.refuse(
            StatusCode::FORBIDDEN,
            CallOutcome::ContractViolation,
            "contract_violation",
            &format!("this attempt has no {} role", role.as_str()),
        ));
    };
    let (parts, body) = req.into_parts();
    let mut changes = Vec::new();
    let headers = upstream_headers(&call.shared, &entry.contract, &parts.headers, &mut changes);
    let url = upstream_url(&call.shared.upstream, parts.uri.path());
    if !is_model_call {
        return Ok(list_models(call, entry, &attempt, headers, url, changes).await);
    }
    let (call, out) =
        check_request(call, entry, &attempt, &parts.headers, body, &mut changes).await?;
    let (call, held) = reserve(call, entry, &attempt, &out)?;
    let (call, held) = record_start(call, &attempt, &out, held, changes).await?;
    let hide_usage_chunk = out.hide_usage_chunk;
    let (call, (upstream, held, sent_at)) =
        forward(call, &attempt, &url, headers, out.body, held).await?;
    Ok(answer(call, upstream, held, sent_at, hide_usage_chunk).await)
}

/// A registered attempt and a route this proxy serves; `true` for a model call, `false` for the
/// model list.
fn admit(call: Call, req: &Request) -> Step<(Arc<Attempt>, bool)> {
    let Some(attempt) = call.attempt.clone() else {
        return Err(call.refuse(
            StatusCode::UNAUTHORIZED,
            CallOutcome::UnknownAttempt,
            "unknown_attempt",
            "unknown attempt",
        ));
    };
    match route_allowed(call.api(), req.method(), req.uri().path()) {
        Ok(is_model_call) => Ok((call, (attempt, is_model_call))),
        Err(status) => {
            let msg = if status == StatusCode::NOT_FOUND {
                format!("path {} is not served by this proxy", req.uri().path())
            } else {
                format!(
                    "method {} is not allowed on {}",
                    req.method(),
                    req.uri().path()
                )
            };
            Err(call.refuse(status, CallOutcome::BadRequest, "bad_request", &msg))
        }
    }
}

/// Reads the body, parses it, checks it against the role's contract, and shapes what will be
/// forwarded (usage asked of OpenAI streams, the output limit made explicit).
async fn check_request(
    mut call: Call,
    entry: &RoleEntry,
    attempt: &Attempt,
    client_headers: &HeaderMap,
    body: axum::body::Body,
    changes: &mut Vec<Change>,
) -> Step<Outbound> {
    let shared = call.shared.clone();
    let api = shared.api;
    let body = match read_body(body, shared.max_body, shared.listener.body_read_timeout).await {
        Ok(b) => b,
        Err(status) => return Err(refuse_body(call, status)),
    };
    let redacted = shared.redactor.redact(body.clone()).0;
    call.record.request_digest = Some(digest(&redacted));
    call.keep_request(&redacted);
    let parsed = match ParsedRequest::parse(body) {
        Ok(p) => p,
        Err(e) => {
            return Err(call.refuse(
                StatusCode::BAD_REQUEST,
                CallOutcome::BadRequest,
                "invalid_json",
                &e.to_string(),
            ));
        }
    };
    call.record.wire = Some(crate::wire::shape(api, &parsed));
    call.record.model = parsed
        .get("model")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let stream = parsed
        .get("stream")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    call.record.stream = stream;
    if let Err(why) = crate::contract::check(
        &entry.contract,
        api,
        &attempt.session_id,
        client_headers,
        &parsed,
    ) {
        return Err(call.refuse(
            StatusCode::FORBIDDEN,
            CallOutcome::ContractViolation,
            "contract_violation",
            &why,
        ));
    }
    let (forwarded, hide_usage_chunk) = ask_stream_usage(api, stream, &parsed, changes);
    let plan = crate::contract::output_plan(&entry.contract, &parsed);
    // The reservation assumes the contract's default limit; the upstream's own default may be
    // far larger, so a request that names no limit is sent with that one.
    let forwarded = if plan.must_forward_limit {
        match ParsedRequest::parse(forwarded.clone()) {
            Ok(p) => {
                changes.push(Change::InsertedOutputLimit {
                    param: "max_tokens".into(),
                    value: plan.per_choice,
                });
                p.with_member("max_tokens", &Value::from(plan.per_choice))
            }
            Err(_) => forwarded,
        }
    } else {
        forwarded
    };
    let out = Outbound {
        body: forwarded,
        hide_usage_chunk,
        changed: hide_usage_chunk || plan.must_forward_limit,
        max_out: plan.worst_case(),
    };
    Ok((call, out))
}

/// Ends a call whose request body could not be read, with the reason `read_body` gave.
fn refuse_body(call: Call, status: StatusCode) -> Response {
    let shared = call.shared.clone();
    match status {
        StatusCode::REQUEST_TIMEOUT => call.refuse(
            StatusCode::REQUEST_TIMEOUT,
            CallOutcome::BadRequest,
            "request_timeout",
            &format!(
                "the request body did not arrive within {:?}",
                shared.listener.body_read_timeout
            ),
        ),
        StatusCode::PAYLOAD_TOO_LARGE => call.refuse(
            StatusCode::PAYLOAD_TOO_LARGE,
            CallOutcome::BadRequest,
            "request_too_large",
            &format!("the request body is larger than {} bytes", shared.max_body),
        ),
        _ => call.refuse(
            StatusCode::BAD_REQUEST,
            CallOutcome::BadRequest,
            "bad_request",
            "the request body could not be read",
        ),
    }
}

/// Streams of the OpenAI API carry usage only when asked; ask, and (the `bool`) hide the answer
/// from a client that did not ask.
fn ask_stream_usage(
    api: ApiKind,
    stream: bool,
    parsed: &ParsedRequest,
    changes: &mut Vec<Change>,
) -> (Bytes, bool) {
    if api != ApiKind::OpenAiChat || !stream {
        return (parsed.body().clone(), false);
    }
    let opts = parsed.get("stream_options");
    let asked = opts
        .and_then(|o| o.get("include_usage"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    if asked {
        return (parsed.body().clone(), false);
    }
    let mut o = match opts {
        Some(Value::Object(m)) => m.clone(),
        _ => serde_json::Map::new(),
    };
    o.insert("include_usage".into(), Value::Bool(true));
    changes.push(Change::AddedStreamUsage);
    (
        parsed.with_member("stream_options", &Value::Object(o)),
        true,
    )
}

/// Holds the call's worst case against the role's and the run's budgets.
fn reserve(mut call: Call, entry: &RoleEntry, attempt: &Attempt, out: &Outbound) -> Step<Held> {
    let shared = call.shared.clone();
    let model = call.record.model.clone().unwrap_or_default();
    let price = shared.prices.get(&model).cloned();
    // Bytes bound tokens from above for every tokenizer in use, so the reservation is a true
    // worst case.
    let input_estimate = out.body.len() as u64;
    match shared.run.reserve(
        &entry.state,
        attempt.started,
        &model,
        price.as_ref(),
        input_estimate,
        out.max_out,
    ) {
        Ok(reservation) => {
            call.record.reserved_tokens = reservation.tokens;
            Ok((call, Held { reservation, price }))
        }
        Err(refusal) => Err(call.refuse(
            StatusCode::TOO_MANY_REQUESTS,
            CallOutcome::BudgetExhausted,
            "budget_exhausted",
            &refusal.message(),
        )),
    }
}

/// Records the forwarded request (its digest, its transcript) and the `call_started` record; a
/// call whose start cannot be recorded is not forwarded, and its reservation is released.
async fn record_start(
    mut call: Call,
    attempt: &Attempt,
    out: &Outbound,
    held: Held,
    changes: Vec<Change>,
) -> Step<Held> {
    let shared = call.shared.clone();
    if out.changed {
        let redacted = shared.redactor.redact(out.body.clone()).0;
        call.record.request_digest = Some(digest(&redacted));
        call.keep_request(&redacted);
    }
    if let Some(dir) = &shared.transcript_dir {
        write_transcript(dir, &shared.redactor.redact(out.body.clone()).0).await;
    }
    let started = CallStarted {
        attempt_id: attempt.id.clone(),
        arm: call.record.arm.clone(),
        role: call.record.role,
        seq: call.record.seq,
        started_at_ms: call.record.started_at_ms,
        path: call.record.path.clone(),
        model: call.record.model.clone(),
        stream: call.record.stream,
        reserved_tokens: held.reservation.tokens,
    };
    if let Err(e) = shared.sink.call_started(&started).await {
        settle(&call, held.reservation, None, held.price.as_ref(), false);
        call.record.changes = changes;
        return Err(call.refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            CallOutcome::NotRecorded,
            "not_recorded",
            &format!("the call was not forwarded: {e}"),
        ));
    }
    call.record.changes = changes;
    call.with_meter(|m| m.calls += 1);
    Ok((call, held))
}

/// A send that got no response head, from either client.
enum Sent {
    Reqwest(reqwest::Error),
    H1(crate::upstream::SendError),
}

/// Sends the request with the real key and waits for the response head, within the first-byte
/// timeout and unless the attempt is closed meanwhile.
async fn forward(
    mut call: Call,
    attempt: &Attempt,
    url: &str,
    headers: HeaderMap,
    body: Bytes,
    held: Held,
) -> Step<(reqwest::Response, Held, Instant)> {
    let shared = call.shared.clone();
    let Held { reservation, price } = held;
    let sent_at = Instant::now();
    // A stream goes through the client that drives its connection from the answer's body
    // (`crate::upstream`); everything else through reqwest.
    let send = match (&shared.stream_client, call.record.stream) {
        (Some(h1), true) => {
            let h1 = h1.clone();
            async move { h1.post(url, headers, body).await.map_err(Sent::H1) }.boxed()
        }
        _ => {
            let send = shared.client.post(url).headers(headers).body(body).send();
            async move { send.await.map_err(Sent::Reqwest) }.boxed()
        }
    };
    let waited = tokio::select! {
        r = tokio::time::timeout(shared.timeouts.first_byte, send) => r,
        _ = attempt.cut.cancelled() => {
            call.record.spend_usd = settle(&call, reservation, None, price.as_ref(), true);
            return Err(call.cut_at_close());
        }
    };
    match waited {
        Ok(Ok(r)) => Ok((call, (r, Held { reservation, price }, sent_at))),
        Ok(Err(e)) => {
            let (connect, chain) = match e {
                Sent::Reqwest(e) => (e.is_connect(), error_chain(&e)),
                Sent::H1(e) => (e.connect, e.message),
            };
            let detail = format!("the upstream could not be reached: {chain}");
            settle(&call, reservation, None, price.as_ref(), !connect);
            Err(call.upstream_failed(UpstreamFault::Transport, StatusCode::BAD_GATEWAY, &detail))
        }
        Err(_) => {
            settle(&call, reservation, None, price.as_ref(), true);
            Err(call.upstream_refused(
                UpstreamFault::Transport,
                StatusCode::GATEWAY_TIMEOUT,
                "upstream_timeout",
                &format!(
                    "the upstream sent no response within {:?}",
                    shared.timeouts.first_byte
                ),
            ))
        }
    }
}

/// Hands the upstream's answer back: an auth refusal of the proxy's key replaced, an event
/// stream streamed, anything else read whole; metered and settled by whoever reads it.
async fn answer(
    mut call: Call,
    upstream: reqwest::Response,
    held: Held,
    sent_at: Instant,
    hide_usage_chunk: bool,
) -> Response {
    let Held { reservation, price } = held;
    let status = upstream.status();
    call.record.upstream_status = Some(status.as_u16());
    if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
        // The body may echo the credential; it never leaves the proxy.
        drop(upstream);
        settle(&call, reservation, None, price.as_ref(), false);
        call.record.changes.push(Change::ReplacedAuthError);
        return call.upstream_refused(
            UpstreamFault::Account,
            StatusCode::BAD_GATEWAY,
            "upstream_auth_error",
            &format!(
                "the upstream refused the proxy's credentials (status {})",
                status.as_u16()
            ),
        );
    }
    let is_sse = upstream
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    if status.is_success() && is_sse {
        return stream_back(
            call,
            upstream,
            reservation,
            price,
            sent_at,
            hide_usage_chunk,
        );
    }
    whole_back(call, upstream, reservation, price, sent_at).await
}
