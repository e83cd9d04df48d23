//! Model-call records → ledger, in order, with a flush barrier.
//!
//! The proxy hands over records synchronously; they queue in a bounded channel (a flooding agent
//! slows its own calls down instead of growing the controller's memory) and one task appends
//! them. Anything that cannot be recorded sets the bridge's fatal slot: the executor copies it
//! into the attempt's report and the run stops with an integrity error, because evidence with a
//! hole in it must not be reported as whole.

use crate::Recorder;
use eval_proxy::{CallRecord, CallStarted, RecordError, RecordSink, StartFuture, Usage};
use eval_runlog::events::{self, ModelCall, ModelCallStarted};
use eval_runlog::wire_log::{WireLog, WireNote};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{Notify, mpsc, oneshot};

/// Records queued between the proxy and the ledger at most.
pub const BRIDGE_CAPACITY: usize = 256;

enum BridgeMsg {
    Record(Box<CallRecord>),
    Flush(oneshot::Sender<()>),
}

/// The first recording failure of the session (shared by the sink and the bridge task).
#[derive(Clone, Default)]
pub struct Fatal(Arc<Mutex<Option<String>>>);

impl Fatal {
    pub fn set(&self, why: String) {
        tracing::error!("{why}");
        let mut slot = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none() {
            *slot = Some(why);
        }
    }

    pub fn get(&self) -> Option<String> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// The proxy's record sink: forwards every record to one task that appends `model_call` entries,
/// and commits a `model_call_started` entry before the proxy may forward a call.
pub struct LedgerSink {
    tx: mpsc::Sender<BridgeMsg>,
    rec: Recorder,
    fatal: Fatal,
    overflow: Overflow,
}

/// Records still waiting for room in the queue (current-thread fallback only): a flush waits
/// for them first, so it never overtakes a record handed over before it.
#[derive(Clone, Default)]
struct Overflow(Arc<(AtomicUsize, Notify)>);

impl Overflow {
    fn enter(&self) {
        self.0.0.fetch_add(1, Ordering::SeqCst);
    }

    fn leave(&self) {
        self.0.0.fetch_sub(1, Ordering::SeqCst);
        self.0.1.notify_waiters();
    }

    async fn drained(&self) {
        loop {
            let notified = self.0.1.notified();
            if self.0.0.load(Ordering::SeqCst) == 0 {
                return;
            }
            notified.await;
        }
    }
}

impl LedgerSink {
    /// Queues `msg`, waiting for room when the queue is full. The proxy calls `record` from
    /// synchronous code on a runtime worker: on the multi-threaded runtime that worker blocks in
    /// place (its other tasks move on); on a current-thread runtime (tests) a task waits instead.
    fn send(&self, msg: BridgeMsg) -> Result<(), RecordError> {
        let msg = match self.tx.try_send(msg) {
            Ok(()) => return Ok(()),
            Err(TrySendError::Closed(_)) => return Err(self.stopped()),
            Err(TrySendError::Full(m)) => m,
        };
        let multi = tokio::runtime::Handle::try_current()
            .map(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread)
            .unwrap_or(false);
        if multi {
            tokio::task::block_in_place(|| self.tx.blocking_send(msg)).map_err(|_| self.stopped())
        } else {
            let tx = self.tx.clone();
            let fatal = self.fatal.clone();
            let overflow = self.overflow.clone();
            overflow.enter();
            #[allow(
                clippy::disallowed_methods,
                reason = "counted by Overflow: Bridge::flush waits until every such send is done"
            )]
            tokio::spawn(async move {
                if tx.send(msg).await.is_err() {
                    fatal.set("the ledger bridge stopped with a record queued".into());
                }
                overflow.leave();
            });
            Ok(())
        }
    }

    fn stopped(&self) -> RecordError {
        let why = "the ledger bridge has stopped: a model call was not recorded".to_owned();
        self.fatal.set(why.clone());
        RecordError(why)
    }
}

impl RecordSink for LedgerSink {
    fn record(&self, record: &CallRecord) -> Result<(), RecordError> {
        self.send(BridgeMsg::Record(Box::new(record.clone())))
    }

    fn call_started<'a>(&'a self, started: &'a CallStarted) -> StartFuture<'a> {
        Box::pin(async move {
            let payload = ModelCallStarted {
                schema: events::SCHEMA,
                attempt: started.attempt_id.clone(),
                role: started.role.as_str().to_owned(),
                seq: started.seq,
                model: started.model.clone(),
                path: started.path.clone(),
                stream: started.stream,
                reserved_tokens: started.reserved_tokens,
            };
            match self.rec.append(events::MODEL_CALL_STARTED, &payload).await {
                Ok(_) => Ok(()),
                Err(e) => {
                    let why = format!("cannot record the call's start: {e}");
                    self.fatal.set(why.clone());
                    Err(RecordError(why))
                }
            }
        })
    }
}

/// Handle to wait until every record sent so far is in the ledger.
#[derive(Clone)]
pub struct Bridge {
    tx: mpsc::Sender<BridgeMsg>,
    fatal: Fatal,
    overflow: Overflow,
}

impl Bridge {
    #[cfg(test)]
    pub fn start(rec: Recorder) -> (Bridge, LedgerSink) {
        Self::start_with(rec, None)
    }

    /// Like [`Bridge::start`], storing each call's bodies in `wire` (the readable wire log)
    /// before its entry is appended, so the entry references them.
    pub fn start_with(rec: Recorder, wire: Option<WireLog>) -> (Bridge, LedgerSink) {
        let (tx, rx) = mpsc::channel::<BridgeMsg>(BRIDGE_CAPACITY);
        let fatal = Fatal::default();
        let overflow = Overflow::default();
        #[allow(
            clippy::disallowed_methods,
            reason = "joined through its channel: it ends when the last sender drops, and Bridge::flush waits for it"
        )]
        tokio::spawn(drain(
            rx,
            rec.clone(),
            fatal.clone(),
            wire.map(|w| Arc::new(Mutex::new(w))),
        ));
        (
            Bridge {
                tx: tx.clone(),
                fatal: fatal.clone(),
                overflow: overflow.clone(),
            },
            LedgerSink {
                tx,
                rec,
                fatal,
                overflow,
            },
        )
    }

    /// Waits until every record queued so far is in the ledger (or the bridge failed: see
    /// [`Bridge::fatal`]).
    pub async fn flush(&self) {
        self.overflow.drained().await;
        let (tx, rx) = oneshot::channel();
        if self.tx.send(BridgeMsg::Flush(tx)).await.is_err() || rx.await.is_err() {
            self.fatal
                .set("the ledger bridge stopped before a flush".into());
        }
    }

    /// The first recording failure of the session, if any.
    pub fn fatal(&self) -> Option<String> {
        self.fatal.get()
    }
}

async fn drain(
    mut rx: mpsc::Receiver<BridgeMsg>,
    rec: Recorder,
    fatal: Fatal,
    wire: Option<Arc<Mutex<WireLog>>>,
) {
    while let Some(msg) = rx.recv().await {
        match msg {
            // A flush whose waiter left needs no answer.
            BridgeMsg::Flush(done) => drop(done.send(())),
            BridgeMsg::Record(r) => {
                let (r, stored) = store_wire(wire.as_ref(), r).await;
                if let Err(why) = append_call(&rec, &r, stored).await {
                    fatal.set(why);
                }
            }
        }
    }
}

/// What the wire log stored for a call: the artifacts its entry references and the note.
type Stored = Option<(std::collections::BTreeMap<String, String>, WireNote)>;

/// Stores the call's bodies in the wire log, off the runtime (hashing and fsyncs); the record
/// comes back without its bodies. A failure of the store is noted in the entry, never fatal: the
/// record's digests are the evidence, the wire log is for reading it.
async fn store_wire(
    wire: Option<&Arc<Mutex<WireLog>>>,
    mut r: Box<CallRecord>,
) -> (Box<CallRecord>, Stored) {
    let Some(wire) = wire.cloned() else {
        return (r, None);
    };
    if r.bodies.is_none() {
        return (r, None);
    }
    // The record itself stays here (a clone is cheap: the bodies are shared bytes), so a
    // failing task loses only the wire log, never the record.
    let copy = r.clone();
    let job = tokio::task::spawn_blocking(move || {
        wire.lock()
            .unwrap_or_else(|p| p.into_inner())
            .store_call(&copy)
    });
    r.bodies = None;
    match job.await {
        Ok(stored) => (r, stored),
        Err(e) => {
            let note = WireNote {
                omitted: Some(format!("the wire log's task failed: {e}")),
                ..WireNote::default()
            };
            (r, Some((Default::default(), note)))
        }
    }
}

async fn append_call(rec: &Recorder, r: &CallRecord, stored: Stored) -> Result<(), String> {
    // Records without an attempt (unknown socket) concern no attempt of ours.
    let Some(attempt) = r.attempt_id.clone() else {
        return Ok(());
    };
    // `metered: false` says zeros from a call without usage are not a measurement.
    let tokens = r.usage.as_ref().map(Usage::tokens).unwrap_or_default();
    let record = serde_json::to_value(r)
        .map_err(|e| format!("cannot serialise model call {attempt}/{}: {e}", r.seq))?;
    let payload = ModelCall {
        schema: events::SCHEMA,
        attempt: attempt.clone(),
        role: r.role.as_str().to_owned(),
        seq: r.seq,
        model: r.model.clone(),
        status: r.status,
        result: r.outcome.as_str().to_owned(),
        tokens,
        metered: r.usage.is_some(),
        latency_ms: r.latency_ms.max(0.0) as u64,
        record,
        artifacts: stored.as_ref().map(|s| s.0.clone()).unwrap_or_default(),
        wire_log: stored.map(|s| s.1),
    };
    rec.append(events::MODEL_CALL, &payload)
        .await
        .map(|_| ())
        .map_err(|e| format!("cannot record model call {attempt}/{}: {e}", r.seq))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use eval_evidence::ledger::{LedgerReader, LedgerWriter};

    fn call(seq: u64) -> CallRecord {
        serde_json::from_value(serde_json::json!({
            "attempt_id": "s#1", "arm": "a", "role": "agent", "seq": seq,
            "started_at_ms": 0, "method": "POST", "path": "/v1/chat/completions",
            "model": "m", "upstream_model": null, "stream": false, "status": 200,
            "upstream_status": 200, "outcome": "ok", "detail": null, "latency_ms": 1.0,
            "ttfb_ms": null, "usage": null, "spend_usd": 0.0, "reserved_tokens": 10,
            "request_digest": null, "response_digest": null, "changes": [],
            "client_disconnected": false
        }))
        .unwrap()
    }

    /// More records than the queue holds, handed over without yielding: a flush afterwards
    /// returns only when every one of them is in the ledger, in order.
    async fn flood_then_flush() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.sqlite");
        let writer = LedgerWriter::open(&path).unwrap();
        let rec = Recorder::new(writer.clone(), &[], "fixture").unwrap();
        let (bridge, sink) = Bridge::start(rec);
        let n = BRIDGE_CAPACITY as u64 * 2 + 7;
        for seq in 1..=n {
            sink.record(&call(seq)).unwrap();
        }
        bridge.flush().await;
        assert_eq!(bridge.fatal(), None);
        let seqs: Vec<u64> = LedgerReader::open(&path)
            .unwrap()
            .entries()
            .unwrap()
            .iter()
            .map(|e| serde_json::from_slice::<ModelCall>(&e.payload).unwrap().seq)
            .collect();
        assert_eq!(seqs.len() as u64, n, "the flush waited for every record");
        if tokio::runtime::Handle::current().runtime_flavor()
            == tokio::runtime::RuntimeFlavor::MultiThread
        {
            assert!(seqs.windows(2).all(|w| w[0] < w[1]), "in order: {seqs:?}");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_full_queue_blocks_the_sender_and_loses_nothing() {
        flood_then_flush().await;
    }

    #[tokio::test]
    async fn a_full_queue_on_one_thread_still_flushes_everything() {
        flood_then_flush().await;
    }

    /// A ledger that stops taking entries is a fatal recording failure, not a log line.
    #[tokio::test]
    async fn a_record_the_ledger_refuses_is_fatal() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.sqlite");
        let writer = LedgerWriter::open(&path).unwrap();
        let rec = Recorder::new(writer.clone(), &[], "fixture").unwrap();
        let (bridge, sink) = Bridge::start(rec);
        sink.record(&call(1)).unwrap();
        bridge.flush().await;
        assert_eq!(bridge.fatal(), None);
        // Another connection makes every further insert fail, as a full or broken disk would.
        rusqlite::Connection::open(&path)
            .unwrap()
            .execute_batch(
                "CREATE TRIGGER refuse BEFORE INSERT ON entries BEGIN SELECT RAISE(FAIL, 'refused'); END;",
            )
            .unwrap();
        sink.record(&call(2)).unwrap();
        bridge.flush().await;
        let why = bridge.fatal().expect("the failed append is fatal");
        assert!(why.contains("s#1/2"), "{why}");
    }
}
