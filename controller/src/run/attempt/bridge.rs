//! Model-call records → ledger, in order, with a flush barrier.

use crate::run::Recorder;
use crate::run::events::{self, ModelCall, ModelCallStarted, Tokens};
use eval_proxy::{CallRecord, CallStarted, RecordError, RecordSink, StartFuture};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

enum BridgeMsg {
    Record(Box<CallRecord>),
    Flush(oneshot::Sender<()>),
}

/// The proxy's record sink: forwards every record to one task that appends `model_call` entries,
/// and commits a `model_call_started` entry before the proxy may forward a call.
pub struct LedgerSink {
    tx: mpsc::UnboundedSender<BridgeMsg>,
    rec: Recorder,
}

impl RecordSink for LedgerSink {
    fn record(&self, record: &CallRecord) -> Result<(), RecordError> {
        self.tx
            .send(BridgeMsg::Record(Box::new(record.clone())))
            .map_err(|_| RecordError("the ledger bridge has stopped".into()))
    }

    fn call_started<'a>(&'a self, started: &'a CallStarted) -> StartFuture<'a> {
        Box::pin(async move {
            let payload = ModelCallStarted {
                schema: events::SCHEMA,
                attempt: started.attempt_id.clone(),
                role: started.role.as_str().to_owned(),
                seq: started.seq,
                model: started.model.clone().unwrap_or_default(),
                path: started.path.clone(),
                stream: started.stream,
                reserved_tokens: started.reserved_tokens,
            };
            self.rec
                .append(events::MODEL_CALL_STARTED, &payload)
                .await
                .map(|_| ())
                .map_err(|e| RecordError(format!("cannot record the call's start: {e}")))
        })
    }
}

/// Handle to wait until every record sent so far is in the ledger.
#[derive(Clone)]
pub struct Bridge {
    tx: mpsc::UnboundedSender<BridgeMsg>,
}

impl Bridge {
    pub fn start(rec: Recorder) -> (Bridge, LedgerSink) {
        let rec_for_sink = rec.clone();
        let (tx, mut rx) = mpsc::unbounded_channel::<BridgeMsg>();
        tokio::spawn(async move {
            while let Some(msg) = rx.recv().await {
                match msg {
                    BridgeMsg::Flush(done) => {
                        let _ = done.send(());
                    }
                    BridgeMsg::Record(r) => {
                        // Records without an attempt (unknown socket) concern no attempt of ours.
                        let Some(attempt) = r.attempt_id.clone() else {
                            continue;
                        };
                        let usage = r.usage.clone().unwrap_or_default();
                        let payload = ModelCall {
                            schema: events::SCHEMA,
                            attempt,
                            role: r.role.as_str().to_owned(),
                            seq: r.seq,
                            model: r.model.clone().unwrap_or_default(),
                            status: r.status,
                            result: r.outcome.as_str().to_owned(),
                            tokens: Tokens {
                                input: usage.input_tokens,
                                output: usage.output_tokens,
                                cached: usage.cached_input_tokens,
                                reasoning: usage.reasoning_tokens,
                            },
                            metered: r.usage.is_some(),
                            latency_ms: r.latency_ms.max(0.0) as u64,
                            record: serde_json::to_value(&*r).unwrap_or(Value::Null),
                        };
                        if let Err(e) = rec.append(events::MODEL_CALL, &payload).await {
                            tracing::error!("cannot record a model call: {e}");
                        }
                    }
                }
            }
        });
        (
            Bridge { tx: tx.clone() },
            LedgerSink {
                tx,
                rec: rec_for_sink,
            },
        )
    }

    pub async fn flush(&self) {
        let (tx, rx) = oneshot::channel();
        if self.tx.send(BridgeMsg::Flush(tx)).is_ok() {
            let _ = rx.await;
        }
    }
}
