//! The engine: the orchestrated, resumable matrix run (`eval run`, `eval demo`, `eval regrade`):
//! admission, the session (upstream, proxy, recorder, control plane), the schedule runner and
//! the attempt lifecycle in containers.
//!
//! Architecture invariants:
//! - This is the only crate that starts containers or the proxy (checked by
//!   controller/tests/it/architecture.rs). Progress and the driver digest are handed in.
//! - The ledger is the only memory of a run. Resume, `eval status` and the report read the run
//!   through [`eval_runlog::replay::RunState`]; nothing is kept in side files.
//! - Every attempt gets exactly one `attempt_outcome`. An attempt that started and was lost is
//!   closed by rule ([`eval_runlog::replay::closing_outcome`]) before anything else is started.
//! - Only [`eval_runlog::replay::is_rerunnable`] decides reruns; agent failures are outcomes, never reruns.
//! - Every append goes through one [`Recorder`] (one ledger writer), which also keeps the
//!   in-memory [`eval_runlog::replay::RunState`] by applying the very entries it appended.

pub mod admission;
pub mod attempt;
pub mod controls;
pub mod environment_image;
pub mod image_record;
pub mod inputs;
pub mod owner;
pub mod regrade;
pub mod runner;
pub mod session;

use eval_core::attempt::AttemptId;
use eval_core::fault::FaultCode;
use eval_core::outcome::Outcome;
use eval_core::tokens::TokenCounts;
use eval_evidence::ledger::{Digest, Entry, LedgerError, LedgerWriter, NewEntry};
use eval_runlog::events::{ArtifactDigests, AttemptOutcome, HarnessAccount, SlotRecord};
use eval_runlog::replay::{ReplayError, RunState, StatusSummary};
use serde::Serialize;
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio_util::sync::CancellationToken;

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    #[error(transparent)]
    Replay(#[from] ReplayError),
    /// The container engine failed outside an attempt (the sweep of a previous session's
    /// containers): an environment problem unless the runtime says the evidence is at fault.
    #[error("container runtime: {0}")]
    Runtime(#[from] eval_runtimes::RuntimeError),
    /// A checkpoint could not be signed: the run's evidence would end unsigned.
    #[error("signing a checkpoint: {0}")]
    Signing(#[from] eval_evidence::signing::SigningError),
    /// Something of the run could not be recorded (a model call the proxy saw, an artifact, an
    /// attempt's note): the evidence would be incomplete, so the run stops instead of going on
    /// without it. The text is the first such failure, already typed where it happened.
    #[error("the run stopped because its evidence could not be recorded: {0}")]
    Record(String),
}

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One attempt to run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttemptSpec {
    pub slot: SlotRecord,
    pub number: u32,
    /// `<slot>#<n>`.
    pub attempt: String,
    pub rerun_of: Option<u32>,
}

impl AttemptSpec {
    pub(crate) fn bare(slot: &str, number: u32) -> Self {
        Self {
            slot: SlotRecord {
                id: slot.to_owned(),
                phase: eval_core::phase::Phase::Statistical,
                suite: String::new(),
                task: String::new(),
                arm: String::new(),
                rep: 0,
            },
            number,
            attempt: AttemptId::new(slot, number).to_string(),
            rerun_of: None,
        }
    }
}

/// What an executor says about an attempt it ran.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AttemptReport {
    pub outcome: Option<Outcome>,
    pub infra_fault: Option<FaultCode>,
    pub detail: Option<String>,
    pub image: Option<String>,
    pub attestation: Option<String>,
    pub model_turns: u64,
    pub tokens: TokenCounts,
    /// See [`eval_runlog::events::IncompleteCalls`]; `None` when there were none.
    pub incomplete: Option<eval_runlog::events::IncompleteCalls>,
    pub oracle_calls: u64,
    pub clarification_questions: u64,
    pub harness: Option<HarnessAccount>,
    /// See [`AttemptOutcome::accounting`].
    pub accounting: Option<String>,
    pub metrics: BTreeMap<String, f64>,
    pub artifacts: ArtifactDigests,
    pub container_seconds: f64,
    /// The agent container's run, from its start to its exit (0 when none started). `None`:
    /// the executor does not measure it, and the runner's wall time of the attempt stands.
    pub duration_seconds: Option<f64>,
    /// From the attempt's beginning to its container's start: image check and load, host
    /// preparation, proxy registration, create and the policy check.
    pub prepare_seconds: f64,
    /// Stopped by the cancellation token before it ended on its own.
    pub cancelled: bool,
    /// Something of this attempt (a model call, its start, an attestation, a question, a note,
    /// an artifact) could not be recorded: the evidence is incomplete, so the run must stop with
    /// an integrity error (exit 3) instead of writing this attempt's outcome as if it were whole.
    pub recording_failure: Option<String>,
    /// See [`AttemptOutcome::before_container`].
    pub before_container: bool,
    /// See [`AttemptOutcome::bundle_digest`].
    pub bundle_digest: Option<String>,
}

impl AttemptReport {
    #[cfg(test)]
    pub fn outcome(o: Outcome) -> Self {
        Self {
            outcome: Some(o),
            ..Self::default()
        }
    }

    pub fn infra(code: FaultCode, detail: impl Into<String>) -> Self {
        Self {
            outcome: Some(Outcome::InfraFault),
            infra_fault: Some(code),
            detail: Some(detail.into()),
            ..Self::default()
        }
    }

    pub(crate) fn closed(o: Outcome, code: Option<FaultCode>, detail: &str) -> Self {
        Self {
            outcome: Some(o),
            infra_fault: code,
            detail: Some(detail.to_owned()),
            ..Self::default()
        }
    }

    pub(crate) fn into_outcome(
        self,
        spec: &AttemptSpec,
        arm: &str,
        upstream: &str,
        duration_seconds: f64,
    ) -> AttemptOutcome {
        let outcome = self.outcome.unwrap_or(Outcome::InfraFault);
        let infra_fault = match outcome {
            Outcome::InfraFault => Some(self.infra_fault.unwrap_or(FaultCode::ControllerError)),
            _ => None,
        };
        let mut metrics = self.metrics;
        metrics.insert(
            "clarification_questions".into(),
            self.clarification_questions as f64,
        );
        AttemptOutcome {
            schema: eval_runlog::events::SCHEMA,
            attempt: spec.attempt.clone(),
            slot: spec.slot.id.clone(),
            number: spec.number,
            arm: arm.to_owned(),
            outcome,
            infra_fault,
            detail: self.detail,
            image: self.image,
            attestation: self.attestation,
            bundle_digest: self.bundle_digest,
            model_calls: Vec::new(),
            model_turns: self.model_turns,
            tokens: self.tokens,
            incomplete: self.incomplete,
            oracle_calls: self.oracle_calls,
            clarification_questions: self.clarification_questions,
            harness: self.harness,
            accounting: self.accounting,
            metrics,
            artifacts: self.artifacts,
            duration_seconds: self.duration_seconds.unwrap_or(duration_seconds),
            prepare_seconds: self.prepare_seconds,
            container_seconds: self.container_seconds,
            upstream: upstream.to_owned(),
            closed_by_controller: false,
            before_container: self.before_container
                && outcome == Outcome::InfraFault
                && self.model_turns == 0,
            finished_at: eval_runlog::events::now_rfc3339(),
        }
    }
}

/// Runs attempts. The Docker + proxy implementation lives in `attempt.rs`; tests use scripted
/// ones. `run` never fails: every failure is an outcome (typed infra fault codes included).
pub trait AttemptExecutor: Send + Sync + 'static {
    fn run<'a>(
        &'a self,
        spec: &'a AttemptSpec,
        rec: Recorder,
        cancel: CancellationToken,
    ) -> BoxFuture<'a, AttemptReport>;

    /// Removes every container this run's label set names (left over by a crash); returns how
    /// many.
    fn sweep(&self) -> BoxFuture<'_, Result<usize, eval_runtimes::RuntimeError>>;
}

/// Where progress goes (a terminal display or log lines; see `commands/run.rs`).
pub trait ProgressSink: Send + Sync {
    fn session_started(&self, summary: &StatusSummary);
    fn attempt_started(&self, attempt: &str);
    fn attempt_finished(&self, attempt: &str, outcome: &AttemptOutcome, summary: &StatusSummary);
    fn rerun(&self, attempt: &str, code: &str);
    fn error(&self, message: &str);
    fn session_finished(&self, summary: &StatusSummary);
}

/// A progress sink that says nothing.
/// A sink that draws nothing (tests, and sessions run inside another command).
pub struct QuietProgress;

impl ProgressSink for QuietProgress {
    fn session_started(&self, _: &StatusSummary) {}
    fn attempt_started(&self, _: &str) {}
    fn attempt_finished(&self, _: &str, _: &AttemptOutcome, _: &StatusSummary) {}
    fn rerun(&self, _: &str, _: &str) {}
    fn error(&self, _: &str) {}
    fn session_finished(&self, _: &StatusSummary) {}
}

struct RecorderInner {
    /// The run's state, the one copy of it: fed with the very entries this recorder appended.
    state: RunState,
}

/// The one way the run writes its ledger. Cloneable; every clone shares the writer and state.
#[derive(Clone)]
pub struct Recorder {
    ledger: LedgerWriter,
    inner: Arc<Mutex<RecorderInner>>,
    upstream_kind: Arc<str>,
    /// Present when the run signs: every append is then signed by the writer in the transaction
    /// that records it (`LedgerWriter::append_signed`), so no committed entry of a signing run is
    /// ever outside a checkpoint, and a resumed session can refuse every entry that is.
    checkpointer: Option<Arc<eval_evidence::signing::Checkpointer>>,
    /// The first recording failure, sticky: once set, the runner records no further outcome
    /// and ends the session with [`RunError::Record`].
    fatal: Arc<Mutex<Option<String>>>,
    /// Why the run stops because of the upstream account (its key refused, its balance gone):
    /// sticky; no attempt starts after it, and attempts it cancels close as
    /// `upstream_account_refused`.
    account_stop: Arc<Mutex<Option<String>>>,
    /// Why the run pauses because the host ran out of capacity (`filesystem_capacity`: the
    /// state directory's file system, never an agent's own): sticky; no attempt starts after
    /// it, the attempts in flight finish.
    host_stop: Arc<Mutex<Option<String>>>,
    /// A test-only crash point (see [`crash_point`]), read once at construction.
    crash_at: Option<Arc<CrashPoint>>,
}

impl Recorder {
    /// `entries` are the ledger's existing entries (already verified by admission).
    pub fn new(
        ledger: LedgerWriter,
        entries: &[Entry],
        upstream_kind: &str,
    ) -> Result<Self, RunError> {
        let state = RunState::replay(entries)?;
        Ok(Self {
            ledger,
            inner: Arc::new(Mutex::new(RecorderInner { state })),
            upstream_kind: upstream_kind.into(),
            checkpointer: None,
            fatal: Arc::new(Mutex::new(None)),
            account_stop: Arc::new(Mutex::new(None)),
            host_stop: Arc::new(Mutex::new(None)),
            crash_at: CrashPoint::from_env().map(Arc::new),
        })
    }

    /// Signs every append from now on; `c` must be attached to this recorder's writer.
    pub fn with_checkpointer(mut self, c: eval_evidence::signing::Checkpointer) -> Self {
        self.checkpointer = Some(Arc::new(c));
        self
    }

    fn lock(&self) -> MutexGuard<'_, RecorderInner> {
        // A poisoned lock only means another task panicked mid-update of an in-memory mirror;
        // the ledger itself is intact, so keep going with what is there.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A read guard on the replayed state.
    pub fn state(&self) -> StateGuard<'_> {
        StateGuard(self.lock())
    }

    pub fn upstream_kind(&self) -> String {
        self.upstream_kind.to_string()
    }

    /// Appends one entry and applies it to the in-memory state. A failure is also remembered
    /// as fatal (see [`Self::fatal`]): callers that can only log it (the proxy's record sink)
    /// still stop the run.
    pub async fn append<T: Serialize + ?Sized>(
        &self,
        kind: &str,
        payload: &T,
    ) -> Result<u64, RunError> {
        let entry = NewEntry::new(kind, payload)
            .map_err(|e| self.failed(kind, LedgerError::from(e).into()))?;
        let seqs = self.append_entries(vec![entry]).await?;
        seqs.first()
            .copied()
            .ok_or_else(|| self.failed(kind, RunError::Record("empty acknowledgement".into())))
    }

    /// Appends entries atomically (one transaction, contiguous seqs) and applies them in order.
    pub async fn append_batch(&self, entries: Vec<NewEntry>) -> Result<Vec<u64>, RunError> {
        self.append_entries(entries).await
    }

    async fn append_entries(&self, entries: Vec<NewEntry>) -> Result<Vec<u64>, RunError> {
        let kinds: Vec<String> = entries.iter().map(|e| e.kind().to_owned()).collect();
        let what = kinds.join("+");
        let copies: Vec<(String, Vec<u8>)> = entries
            .iter()
            .map(|e| (e.kind().to_owned(), e.payload().to_vec()))
            .collect();
        if let Some(c) = &self.crash_at {
            c.check("before", &copies);
        }
        let appended = if self.checkpointer.is_some() {
            self.ledger.append_signed(entries).await.map(|(a, _)| a)
        } else {
            self.ledger.append_batch(entries).await
        }
        .map_err(|e| self.failed(&what, e.into()))?;
        if appended.len() != copies.len() {
            return Err(self.failed(
                &what,
                RunError::Record(format!(
                    "{} entries acknowledged for {} appended",
                    appended.len(),
                    copies.len()
                )),
            ));
        }
        {
            let mut inner = self.lock();
            for ((kind, payload), a) in copies.iter().zip(&appended) {
                let e = Entry {
                    seq: a.seq,
                    prev: Digest::ZERO,
                    kind: kind.clone(),
                    payload: payload.clone(),
                    hash: a.hash,
                    recorded_at: String::new(),
                };
                if let Err(err) = inner.state.apply(&e) {
                    drop(inner);
                    return Err(self.failed(kind, err.into()));
                }
            }
        }
        if let Some(c) = &self.crash_at {
            c.check("after", &copies);
        }
        Ok(appended.iter().map(|a| a.seq).collect())
    }

    /// Remembers the first recording failure and hands the error back.
    fn failed(&self, what: &str, e: RunError) -> RunError {
        self.record_failed(&format!("recording {what}: {e}"));
        e
    }

    /// Marks the run as unable to record its evidence (for failures outside the ledger, e.g. an
    /// artifact that could not be stored). The runner stops the run at the next attempt boundary
    /// with [`RunError::Record`].
    pub fn record_failed(&self, what: &str) {
        let mut f = self.fatal.lock().unwrap_or_else(|p| p.into_inner());
        if f.is_none() {
            *f = Some(what.to_owned());
        }
    }

    /// Stops the run for the upstream account's sake (the first reason stays).
    pub fn stop_for_account(&self, why: &str) {
        let mut f = self.account_stop.lock().unwrap_or_else(|p| p.into_inner());
        if f.is_none() {
            *f = Some(why.to_owned());
        }
    }

    /// See [`Recorder::stop_for_account`].
    pub fn account_stop(&self) -> Option<String> {
        self.account_stop
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Pauses the run for the host's capacity (the first reason stays).
    pub fn stop_for_host(&self, why: &str) {
        let mut f = self.host_stop.lock().unwrap_or_else(|p| p.into_inner());
        if f.is_none() {
            *f = Some(why.to_owned());
        }
    }

    /// See [`Recorder::stop_for_host`].
    pub fn host_stop(&self) -> Option<String> {
        self.host_stop
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The first recording failure of this session, if any.
    pub fn fatal(&self) -> Option<String> {
        self.fatal.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// See [`eval_runlog::replay::AttemptState::may_have_spent`].
    pub fn may_have_spent(&self, attempt: &str) -> bool {
        self.lock()
            .state
            .attempt(attempt)
            .is_some_and(|a| a.may_have_spent())
    }

    /// The seqs of the attempt's `model_call` entries, as the run's state holds them.
    pub fn model_call_seqs_of(&self, attempt: &str) -> Vec<u64> {
        self.lock()
            .state
            .attempt(attempt)
            .map(|a| a.model_call_seqs.clone())
            .unwrap_or_default()
    }
}

/// A crash point for the crash-safety tests: `EVAL_TEST_CRASH_AT=<when>:<kind>[@<attempt part>]`
/// (`when` is `before` or `after`) kills this process with SIGKILL right before or right after
/// the first append of an entry of `kind` whose `attempt` contains `<attempt part>`. Only debug
/// builds read the variable, so a release binary has no way to be crashed on purpose.
#[derive(Debug)]
struct CrashPoint {
    when: String,
    kind: String,
    attempt: Option<String>,
}

impl CrashPoint {
    fn from_env() -> Option<Self> {
        if !cfg!(debug_assertions) {
            return None;
        }
        let v = std::env::var("EVAL_TEST_CRASH_AT").ok()?;
        Self::parse(&v)
    }

    fn parse(v: &str) -> Option<Self> {
        let (when, rest) = v.split_once(':')?;
        let (kind, attempt) = match rest.split_once('@') {
            Some((k, a)) => (k, Some(a.to_owned())),
            None => (rest, None),
        };
        Some(Self {
            when: when.to_owned(),
            kind: kind.to_owned(),
            attempt,
        })
    }

    fn matches(&self, when: &str, entries: &[(String, Vec<u8>)]) -> bool {
        self.when == when
            && entries.iter().any(|(kind, payload)| {
                *kind == self.kind
                    && self.attempt.as_deref().is_none_or(|want| {
                        serde_json::from_slice::<serde_json::Value>(payload)
                            .ok()
                            .and_then(|v| v.get("attempt")?.as_str().map(|a| a.contains(want)))
                            .unwrap_or(false)
                    })
            })
    }

    fn check(&self, when: &str, entries: &[(String, Vec<u8>)]) {
        if self.matches(when, entries) {
            crash_point();
        }
    }
}

/// Dies the way a `kill -9` kills: no destructor, no flush, no further write.
fn crash_point() {
    // SIGKILL to ourselves: a system call, no `kill` process to find on the PATH or spawn.
    let _ = rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
    // Refused (it cannot be for our own pid): abort is the nearest thing (no unwinding, no
    // destructors).
    std::process::abort();
}

pub struct StateGuard<'a>(MutexGuard<'a, RecorderInner>);

impl std::ops::Deref for StateGuard<'_> {
    type Target = RunState;
    fn deref(&self) -> &RunState {
        &self.0.state
    }
}

#[cfg(test)]
mod tests;
