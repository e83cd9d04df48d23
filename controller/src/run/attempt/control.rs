//! The control plane: `/_eval/attest` from the shim, `/_eval/clarify` from the agent.

use super::oracle::OracleAsk;
use crate::run::Recorder;
use crate::run::events::{self, Attestation, Clarification};
use eval_evidence::ledger::Digest;
use eval_proxy::{ControlFuture, ControlPlane, ProxyHandle};
use eval_runtimes::fixture::attest::AttestReport;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

pub(super) struct AttemptControl {
    pub(super) image: String,
    pub(super) expected: BTreeMap<String, Option<String>>,
    pub(super) attested: Mutex<Option<(bool, String)>>,
    pub(super) answers: BTreeMap<String, String>,
    /// Set when a model (the `oracle` role) answers this attempt's questions.
    pub(super) oracle: Option<OracleAsk>,
    /// A question the oracle model could not answer (the attempt is an infrastructure fault).
    pub(super) oracle_failed: AtomicBool,
    pub(super) max_questions: u32,
    pub(super) asked: AtomicU32,
    pub(super) answered: AtomicU32,
}

/// Answers the reserved paths of every attempt's socket, and records what happened.
pub struct Control {
    pub(super) rec: Recorder,
    attempts: Mutex<HashMap<String, Arc<AttemptControl>>>,
    /// The proxy, for the oracle role's calls (set once it has started: it needs this control
    /// plane to start). The proxy holds this control plane too; [`Control::release_proxy`] breaks
    /// that cycle when the session ends, so the ledger writer behind both is dropped.
    pub(super) proxy: Mutex<Option<ProxyHandle>>,
}

impl Control {
    pub fn new(rec: Recorder) -> Arc<Self> {
        Arc::new(Self {
            rec,
            attempts: Mutex::new(HashMap::new()),
            proxy: Mutex::new(None),
        })
    }

    /// Gives the control plane the proxy it answers for (oracle calls go through it).
    pub fn set_proxy(&self, proxy: ProxyHandle) {
        if let Ok(mut slot) = self.proxy.lock() {
            *slot = Some(proxy);
        }
    }

    /// Forgets the proxy (after it has shut down).
    pub fn release_proxy(&self) {
        if let Ok(mut slot) = self.proxy.lock() {
            *slot = None;
        }
    }

    pub(super) fn get(&self, id: &str) -> Option<Arc<AttemptControl>> {
        self.attempts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
            .cloned()
    }

    pub(super) fn insert(&self, id: &str, c: Arc<AttemptControl>) {
        self.attempts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.to_owned(), c);
    }

    pub(super) fn remove(&self, id: &str) -> Option<Arc<AttemptControl>> {
        self.attempts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id)
    }

    async fn attest(&self, id: &str, c: &AttemptControl, body: &[u8]) -> (http::StatusCode, Value) {
        let parsed: Result<AttestReport, _> = serde_json::from_slice(body);
        let (ok, reported, problems) = match parsed {
            Ok(r) => {
                let mismatches = r.mismatches(&c.expected);
                let reported = r
                    .digests()
                    .into_iter()
                    .map(|(k, v)| (k, v.unwrap_or_else(|| "absent".into())))
                    .collect();
                let problems = mismatches
                    .iter()
                    .map(|p| format!("{p}: reported digest differs from the frozen one"))
                    .collect::<Vec<_>>();
                (problems.is_empty(), reported, problems)
            }
            Err(e) => (
                false,
                BTreeMap::new(),
                vec![format!("malformed attestation: {e}")],
            ),
        };
        let payload = Attestation {
            schema: events::SCHEMA,
            attempt: id.to_owned(),
            ok,
            image: c.image.clone(),
            reported,
            expected: c
                .expected
                .iter()
                .map(|(k, v)| (k.clone(), v.clone().unwrap_or_else(|| "absent".into())))
                .collect(),
            problems: problems.clone(),
        };
        let digest = eval_evidence::canonical::to_vec(&payload)
            .map(|b| Digest::of(&b).to_string())
            .unwrap_or_default();
        let recorded = self.rec.append(events::ATTESTATION, &payload).await.is_ok();
        *c.attested.lock().unwrap_or_else(|p| p.into_inner()) = Some((ok && recorded, digest));
        if ok && recorded {
            (http::StatusCode::OK, json!({"ok": true}))
        } else {
            (
                http::StatusCode::FORBIDDEN,
                json!({"ok": false, "problems": problems}),
            )
        }
    }

    async fn clarify(
        &self,
        id: &str,
        c: &AttemptControl,
        body: &[u8],
    ) -> (http::StatusCode, Value) {
        let question = serde_json::from_slice::<Value>(body)
            .ok()
            .and_then(|v| v.get("question").and_then(Value::as_str).map(str::to_owned))
            .unwrap_or_default();
        let index = c.asked.fetch_add(1, Ordering::SeqCst) + 1;
        let (answer, source) = if c.max_questions == 0 {
            (None, "refused_no_oracle")
        } else if index > c.max_questions {
            (None, "refused_limit")
        } else if let Some(o) = &c.oracle {
            match self.ask_model(id, o, &question).await {
                Ok(a) => (Some(a), "oracle_model"),
                Err(e) => {
                    tracing::warn!("attempt {id}: the oracle model did not answer: {e}");
                    c.oracle_failed.store(true, Ordering::SeqCst);
                    (None, "oracle_unavailable")
                }
            }
        } else {
            let a = c
                .answers
                .get(&question)
                .cloned()
                .unwrap_or_else(|| "No further information.".to_owned());
            (Some(a), "scripted")
        };
        let payload = Clarification {
            schema: events::SCHEMA,
            attempt: id.to_owned(),
            index,
            question,
            answer: answer.clone(),
            source: source.to_owned(),
        };
        if self
            .rec
            .append(events::CLARIFICATION, &payload)
            .await
            .is_err()
        {
            return (
                http::StatusCode::SERVICE_UNAVAILABLE,
                json!({"error": "cannot record the question"}),
            );
        }
        match answer {
            Some(a) => {
                c.answered.fetch_add(1, Ordering::SeqCst);
                (http::StatusCode::OK, json!({"answer": a}))
            }
            None if source == "oracle_unavailable" => (
                http::StatusCode::SERVICE_UNAVAILABLE,
                json!({"error": "the oracle could not answer"}),
            ),
            None => (
                http::StatusCode::TOO_MANY_REQUESTS,
                json!({"error": format!("clarifying question refused: {source} (at most {} per attempt)", c.max_questions)}),
            ),
        }
    }
}

impl ControlPlane for Control {
    fn handle<'a>(
        &'a self,
        attempt_id: &'a str,
        path: &'a str,
        body: bytes::Bytes,
    ) -> ControlFuture<'a> {
        Box::pin(async move {
            let Some(c) = self.get(attempt_id) else {
                return (
                    http::StatusCode::NOT_FOUND,
                    json!({"error": "unknown attempt"}),
                );
            };
            match path {
                "/_eval/attest" => self.attest(attempt_id, &c, &body).await,
                "/_eval/clarify" => self.clarify(attempt_id, &c, &body).await,
                _ => (
                    http::StatusCode::NOT_FOUND,
                    json!({"error": format!("no control path {path}")}),
                ),
            }
        })
    }
}
