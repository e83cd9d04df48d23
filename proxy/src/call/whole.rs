//! The way back for a complete (non-streaming) answer, and the model list.

use std::time::Instant;

use axum::body::Body;
use axum::response::Response;
use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use http::{HeaderMap, StatusCode};

use crate::budget::Reservation;
use crate::config::Price;
use crate::errors::error_chain;
use crate::record::{CallOutcome, Change};
use crate::state::Attempt;
use crate::usage::Usage;

use super::exchange::*;

/// A complete (non-streaming) answer: read with the idle timeout, check it, meter it, redact it.
pub(super) async fn whole_back(
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
        return pass_upstream_error(call, body, status, &up_headers, usage, reservation, price);
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

/// An upstream error answer: passed through with its status when it is a JSON error body; any
/// other body is replaced by an error in the API's shape.
fn pass_upstream_error(
    mut call: Call,
    body: Bytes,
    status: StatusCode,
    up_headers: &HeaderMap,
    usage: Option<Usage>,
    reservation: Reservation,
    price: Option<Price>,
) -> Response {
    let shared = call.shared.clone();
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
    copy_response_headers(up_headers, r.headers_mut(), &shared.redactor);
    call.finish();
    r
}

/// `GET /v1/models`: forwarded with the real key like a model call — inside the role's request
/// and wall-time budgets and only after its start is recorded — but not a model turn.
pub(super) async fn list_models(
    mut call: Call,
    entry: &crate::state::RoleEntry,
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
