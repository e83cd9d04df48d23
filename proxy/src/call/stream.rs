//! A streamed answer. The client's response body pulls straight from the upstream — each chunk is
//! parsed for usage, redacted and handed on in the same poll, with no task or channel in between;
//! the chunks that are ready together go out as one write (`coalesce.rs`).
//! If the client goes away, dropping the body hands the rest of the upstream stream to a drain
//! task, so the usage is still read and the call still recorded.

use std::time::Instant;

use axum::body::Body;
use axum::response::Response;
use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use http::HeaderMap;
use sha2::{Digest, Sha256};

use super::coalesce::{Chunks, coalesce};
use super::exchange::{
    Call, UpstreamFault, copy_response_headers, meter_success, settle, write_transcript,
};
use crate::budget::Reservation;
use crate::config::Price;
use crate::errors::error_chain;
use crate::record::{CallOutcome, Change};
use crate::secret::StreamRedactor;
use crate::sse::{SseParser, SseScanner};
use crate::usage::StreamUsage;
use tokio_util::sync::CancellationToken;
use tokio_util::task::task_tracker::TaskTrackerToken;

type Upstream = BoxStream<'static, reqwest::Result<Bytes>>;

/// How a stream ended.
enum End {
    Done,
    Fail(String),
    Cut,
}

struct Pump {
    call: Call,
    upstream: Upstream,
    reservation: Reservation,
    price: Option<Price>,
    sent_at: Instant,
    hide_usage_chunk: bool,
    /// Frames events whole, for the hiding path (it forwards or drops whole events).
    parser: SseParser,
    /// Frames events for the meter alone, on the path that forwards bytes as they arrive.
    scanner: SseScanner,
    meter: StreamUsage,
    to_client: StreamRedactor,
    /// The upstream's bytes redacted for the digest and transcript, when they differ from the
    /// client's (the hiding path); otherwise the client's bytes are the record's.
    to_record: Option<StreamRedactor>,
    hasher: Sha256,
    /// The recorded bytes, kept for the transcript directory and/or the sink's wire log (up to
    /// `keep_cap`; past it only the transcript, if any, keeps growing).
    transcript: Option<Vec<u8>>,
    keep_cap: Option<usize>,
    kept_truncated: bool,
    hid: bool,
    /// Upstream body bytes so far.
    streamed: u64,
    /// When the upstream last made progress (a field line; comments do not count): the idle
    /// timer runs from here, so keep-alives alone cannot hold a call open.
    last_progress: tokio::time::Instant,
    /// A field line ever arrived (a stream of comments only is a provider fault when it closes).
    progressed: bool,
    /// The stream ended at the idle timeout.
    stalled: bool,
    cut: CancellationToken,
    /// How the stream ended, when coalescing met the end: returned by the next read.
    held: Option<Step>,
    /// Held until the record is delivered, so closing the attempt waits for it.
    _tracked: Option<TaskTrackerToken>,
}

enum Step {
    Data(Bytes),
    End,
    Fail(String),
    Cut,
}

impl Pump {
    async fn next_chunk(&mut self) -> Step {
        if let Some(step) = self.held.take() {
            return step;
        }
        let idle = self.call.shared.timeouts.idle;
        let next = tokio::select! {
            n = tokio::time::timeout_at(self.last_progress + idle, self.upstream.next()) => n,
            _ = self.cut.cancelled() => return Step::Cut,
        };
        match next {
            Ok(n) => step_of(n),
            Err(_) => {
                self.stalled = true;
                Step::Fail(
                    "the upstream stream stalled (no data for the idle timeout; keep-alive \
                     comments are not progress)"
                        .into(),
                )
            }
        }
    }

    /// Meters and records one upstream chunk; returns what the client may see of it now.
    ///
    /// The common path (the client asked for usage, as the Harness does) is one pass that
    /// allocates nothing: the scanner frames events for the meter in place, the meter skips
    /// every event that cannot carry usage without decoding it, and the redactor hands the
    /// chunk itself on when no key form is in it or could begin at its end; the digest is taken
    /// of those same bytes.
    fn process(&mut self, chunk: Bytes) -> Bytes {
        if self.call.record.ttfb_ms.is_none() {
            self.call.record.ttfb_ms = Some(self.sent_at.elapsed().as_secs_f64() * 1e3);
        }
        self.streamed += chunk.len() as u64;
        let Some(to_record) = self.to_record.as_mut() else {
            let meter = &mut self.meter;
            self.scanner.push(&chunk, |d| {
                meter.observe_bytes(d);
            });
            if self.scanner.progressed() {
                self.last_progress = tokio::time::Instant::now();
                self.progressed = true;
            }
            let out = self.to_client.push_bytes(chunk);
            self.record_bytes(&out);
            return out;
        };
        let rec = to_record.push(&chunk);
        self.record_bytes(&rec);
        let events = self.parser.push(&chunk);
        if self.parser.progressed() {
            self.last_progress = tokio::time::Instant::now();
            self.progressed = true;
        }
        // Hiding the usage chunk: whole events are forwarded as they complete, so the usage-only
        // one can be left out.
        let mut out = BytesMut::new();
        for ev in events {
            if let Some(d) = &ev.data
                && self.meter.observe(d)
            {
                self.hid = true;
                continue;
            }
            out.extend_from_slice(&ev.raw);
        }
        self.to_client.push(&out)
    }

    /// Adds redacted upstream bytes to the digest and the transcript.
    fn record_bytes(&mut self, rec: &[u8]) {
        self.hasher.update(rec);
        if let Some(t) = self.transcript.as_mut() {
            match self.keep_cap {
                // Without a transcript directory only the wire log wants these bytes: stop at
                // its cap, so a long stream costs bounded memory.
                Some(cap)
                    if self.call.shared.transcript_dir.is_none() && t.len() + rec.len() > cap =>
                {
                    let room = cap.saturating_sub(t.len());
                    t.extend_from_slice(&rec[..room.min(rec.len())]);
                    self.kept_truncated = true;
                }
                _ => t.extend_from_slice(rec),
            }
        }
    }

    /// The bytes held back at the end of the stream (an unterminated last event, a possible key
    /// prefix).
    fn flush(&mut self) -> Bytes {
        if self.to_record.is_none() {
            let meter = &mut self.meter;
            self.scanner.finish(|d| {
                meter.observe_bytes(d);
            });
            let tail = self.to_client.finish();
            self.record_bytes(&tail);
            return tail;
        }
        let mut tail = BytesMut::new();
        if let Some(ev) = self.parser.finish() {
            let usage_only = ev.data.as_deref().is_some_and(|d| self.meter.observe(d));
            if self.hide_usage_chunk {
                if usage_only {
                    self.hid = true;
                } else {
                    tail.extend_from_slice(&ev.raw);
                }
            }
        }
        let mut out = BytesMut::from(&self.to_client.push(&tail)[..]);
        out.extend_from_slice(&self.to_client.finish());
        out.freeze()
    }

    /// Settles the reservation and writes the record. A cut call is counted at its
    /// reservation whatever usage it showed so far.
    fn finish(mut self, end: End, client_gone: bool) {
        if let Some(mut to_record) = self.to_record.take() {
            let rec_tail = to_record.finish();
            self.record_bytes(&rec_tail);
        }
        let shared = self.call.shared.clone();
        let mut call = self.call;
        call.record.client_disconnected = client_gone;
        call.record.response_digest = Some(crate::digest::digest_text(&self.hasher.finalize()));
        let kept = self.transcript.take().map(Bytes::from);
        if let Some(cap) = self.keep_cap
            && let Some(t) = &kept
        {
            let truncated = self.kept_truncated || t.len() > cap;
            call.keep_response(&t.slice(..t.len().min(cap)), true, truncated);
        }
        if let (Some(dir), Some(t)) = (shared.transcript_dir.clone(), kept) {
            shared
                .tracker
                .spawn(async move { write_transcript(&dir, &t).await });
        }
        if self.hid {
            call.record.changes.push(Change::HidUsageChunk);
        }
        let redactions = self.to_client.redactions();
        if redactions > 0 {
            call.record
                .changes
                .push(Change::RedactedKey { count: redactions });
        }
        call.record.upstream_model = self.meter.model.clone();
        call.record.streamed_bytes = Some(self.streamed);
        let complete = matches!(end, End::Done) && self.meter.ended;
        let finish_reason = self.meter.finish_reason.clone();
        let keep_alive_only = matches!(end, End::Done) && !self.meter.ended && !self.progressed;
        let usage = self.meter.into_usage();
        let cut = matches!(end, End::Cut);
        let settled = if cut { None } else { usage.as_ref() };
        let spend = settle(&call, self.reservation, settled, self.price.as_ref(), true);
        meter_success(&mut call, usage, spend, complete);
        match end {
            End::Fail(msg) => {
                call.record.outcome = CallOutcome::UpstreamError;
                call.count_upstream(UpstreamFault::Transport);
                if self.stalled {
                    call.provider_fault("stall", &msg);
                }
                call.record.detail = Some(msg);
            }
            End::Cut => {
                call.record.outcome = CallOutcome::CutAtClose;
                call.record.detail =
                    Some("the attempt was closed while this stream was running".into());
            }
            End::Done if keep_alive_only => {
                let why = "the upstream closed a stream of keep-alive comments without data";
                call.provider_fault("keep_alive_only", why);
                call.record.detail = Some(why.into());
            }
            End::Done if call.record.outcome == CallOutcome::Unmetered => {
                call.record.detail = Some("the stream ended without usage".into());
            }
            End::Done if call.record.incomplete => {
                call.record.detail = Some("the stream ended without the API's end marker".into());
            }
            End::Done => {}
        }
        // A complete answer whose model stopped for want of capacity (DeepSeek's
        // `insufficient_system_resource`): metered like any turn, and the provider's fault.
        if finish_reason.as_deref() == Some("insufficient_system_resource") {
            call.provider_fault(
                "insufficient_system_resource",
                "the model stopped: insufficient_system_resource",
            );
        }
        call.finish();
    }

    /// Reads the rest of the upstream for the meter after the client left.
    async fn drain(mut self) {
        let end = loop {
            match self.next_chunk().await {
                Step::Data(c) => {
                    let _ = self.process(c);
                }
                Step::End => break End::Done,
                Step::Fail(m) => break End::Fail(m),
                Step::Cut => break End::Cut,
            }
        };
        let _ = self.flush();
        self.finish(end, true);
    }
}

fn step_of(next: Option<reqwest::Result<Bytes>>) -> Step {
    match next {
        Some(Ok(c)) => Step::Data(c),
        None => Step::End,
        Some(Err(e)) => Step::Fail(format!(
            "the upstream stream broke off: {}",
            error_chain(&e)
        )),
    }
}

impl Chunks for Pump {
    type End = Step;

    fn poll_chunk(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<Bytes, Step>> {
        self.upstream.poll_next_unpin(cx).map(|n| match step_of(n) {
            Step::Data(c) => Ok(c),
            end => Err(end),
        })
    }

    fn process(&mut self, chunk: Bytes) -> Bytes {
        Pump::process(self, chunk)
    }
}

/// Owns the pump while the client's body is alive; on drop mid-stream it hands the pump to a
/// drain task.
struct Guard(Option<Pump>);

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(pump) = self.0.take() {
            let shared = pump.call.shared.clone();
            match tokio::runtime::Handle::try_current() {
                Ok(h) => {
                    h.spawn(shared.tracker.track_future(pump.drain()));
                }
                Err(_) => tracing::error!(
                    attempt = ?pump.call.record.attempt_id,
                    seq = pump.call.record.seq,
                    "a stream was dropped outside the runtime; its record is lost"
                ),
            }
        }
    }
}

pub(super) fn stream_back(
    mut call: Call,
    upstream: reqwest::Response,
    reservation: Reservation,
    price: Option<Price>,
    sent_at: Instant,
    hide_usage_chunk: bool,
) -> Response {
    let shared = call.shared.clone();
    let status = upstream.status();
    call.record.status = status.as_u16();
    let cut = call
        .attempt
        .as_ref()
        .map(|a| a.cut.clone())
        .unwrap_or_default();
    let tracked = call.attempt.as_ref().map(|a| a.calls.token());
    let mut headers = HeaderMap::new();
    copy_response_headers(upstream.headers(), &mut headers, &shared.redactor);
    let pump = Pump {
        call,
        upstream: upstream.bytes_stream().boxed(),
        reservation,
        price,
        sent_at,
        hide_usage_chunk,
        parser: SseParser::new(),
        scanner: SseScanner::new(),
        meter: StreamUsage::new(shared.api),
        to_client: shared.redactor.stream(),
        to_record: hide_usage_chunk.then(|| shared.redactor.stream()),
        hasher: Sha256::new(),
        transcript: (shared.transcript_dir.is_some() || shared.keep_bodies.is_some())
            .then(Vec::new),
        keep_cap: shared.keep_bodies,
        kept_truncated: false,
        hid: false,
        streamed: 0,
        last_progress: tokio::time::Instant::now(),
        progressed: false,
        stalled: false,
        cut,
        held: None,
        _tracked: tracked,
    };
    let body = futures_util::stream::unfold(Guard(Some(pump)), |mut guard| async move {
        loop {
            let pump = guard.0.as_mut()?;
            match pump.next_chunk().await {
                Step::Data(c) => {
                    let out = pump.process(c);
                    let (out, end) = coalesce(pump, out).await;
                    pump.held = end;
                    if !out.is_empty() {
                        return Some((Ok::<Bytes, std::io::Error>(out), guard));
                    }
                }
                Step::End => {
                    let mut pump = guard.0.take()?;
                    let tail = pump.flush();
                    pump.finish(End::Done, false);
                    if tail.is_empty() {
                        return None;
                    }
                    return Some((Ok(tail), guard));
                }
                Step::Fail(msg) => {
                    let mut pump = guard.0.take()?;
                    let tail = pump.flush();
                    pump.finish(End::Fail(msg.clone()), false);
                    // The client sees a broken stream, not a clean end. Bytes held back for
                    // redaction cannot contain the key, but the last event is incomplete anyway.
                    drop(tail);
                    return Some((Err(std::io::Error::other(msg)), guard));
                }
                Step::Cut => {
                    let mut pump = guard.0.take()?;
                    drop(pump.flush());
                    pump.finish(End::Cut, false);
                    return Some((Err(std::io::Error::other("the attempt was closed")), guard));
                }
            }
        }
    });
    let mut r = Response::new(Body::from_stream(body));
    *r.status_mut() = status;
    *r.headers_mut() = headers;
    r
}
