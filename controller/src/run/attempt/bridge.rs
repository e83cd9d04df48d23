//! Model-call records → ledger, in order, with a flush barrier.
//!
//! The proxy hands over records synchronously; they queue in a bounded channel (a flooding agent
//! slows its own calls down instead of growing the controller's memory) and one task appends
//! them. Anything that cannot be recorded sets the bridge's fatal slot: the executor copies it
//! into the attempt's report and the run stops with an integrity error, because evidence with a
//! hole in it must not be reported as whole.

use crate::run::Recorder;
use crate::run::events::{self, ModelCall, ModelCallStarted, Tokens};
use eval_proxy::{CallRecord, CallStarted, RecordError, RecordSink, StartFuture};
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{mpsc, oneshot};

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
            tokio::spawn(async move {
                if tx.send(msg).await.is_err() {
                    fatal.set("the ledger bridge stopped with a record queued".into());
                }
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
}

impl Bridge {
    pub fn start(rec: Recorder) -> (Bridge, LedgerSink) {
        let (tx, rx) = mpsc::channel::<BridgeMsg>(BRIDGE_CAPACITY);
        let fatal = Fatal::default();
        tokio::spawn(drain(rx, rec.clone(), fatal.clone()));
        (
            Bridge {
                tx: tx.clone(),
                fatal: fatal.clone(),
            },
            LedgerSink { tx, rec, fatal },
        )
    }

    /// Waits until every record queued so far is in the ledger (or the bridge failed: see
    /// [`Bridge::fatal`]).
    pub async fn flush(&self) {
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

async fn drain(mut rx: mpsc::Receiver<BridgeMsg>, rec: Recorder, fatal: Fatal) {
    while let Some(msg) = rx.recv().await {
        match msg {
            // A flush whose waiter left needs no answer.
            BridgeMsg::Flush(done) => drop(done.send(())),
            BridgeMsg::Record(r) => {
                if let Err(why) = append_call(&rec, &r).await {
                    fatal.set(why);
                }
            }
        }
    }
}

async fn append_call(rec: &Recorder, r: &CallRecord) -> Result<(), String> {
    // Records without an attempt (unknown socket) concern no attempt of ours.
    let Some(attempt) = r.attempt_id.clone() else {
        return Ok(());
    };
    let tokens = match &r.usage {
        Some(u) => Tokens {
            input: u.input_tokens,
            output: u.output_tokens,
            cached: u.cached_input_tokens,
            reasoning: u.reasoning_tokens,
        },
        // `metered: false` says these zeros are not a measurement.
        None => Tokens::default(),
    };
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
    };
    rec.append(events::MODEL_CALL, &payload)
        .await
        .map(|_| ())
        .map_err(|e| format!("cannot record model call {attempt}/{}: {e}", r.seq))
}
