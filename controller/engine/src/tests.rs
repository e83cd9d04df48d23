#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The runner against a scripted executor and a real ledger file.

use super::runner::run_session;
use super::*;
use eval_core::attempt::AttemptId;
use eval_core::phase::Phase;
use eval_core::tokens::TokenCounts;
use eval_evidence::ledger::{self, LedgerReader};
use eval_runlog::events::*;
use eval_runlog::replay::{self, RunState, SlotStatus};
use std::sync::atomic::{AtomicUsize, Ordering};

#[derive(Clone, Copy, Debug)]
enum Script {
    Outcome(Outcome, u64),
    Fault(&'static str),
    /// An infra fault before any container existed (the image did not load, say).
    Unprepared(&'static str),
    WaitForCancel(u64),
    /// One model call is recorded, a second cannot be (the executor only logs that, as the
    /// proxy's record sink does), then the attempt "completes".
    RecordFails,
    /// The executor itself reports that something (an artifact, say) could not be recorded.
    ReportsRecordingFailure,
}

/// A generous bound on waits that only a deadlock (a broken runner) can reach: it turns a hang
/// into a failure with a message, and a passing run never comes near it, however loaded.
const HANG_GUARD: std::time::Duration = std::time::Duration::from_secs(120);

/// Holds the first `size` attempts of `phase` until all of them are running at once, so a test
/// proves that the runner uses its concurrency without assuming how fast attempts start.
struct Gate {
    phase: Phase,
    size: usize,
    arrivals: AtomicUsize,
    barrier: tokio::sync::Barrier,
}

struct Scripted {
    script: Box<dyn Fn(&AttemptSpec) -> Script + Send + Sync>,
    order: Mutex<Vec<String>>,
    swept: AtomicUsize,
    running: AtomicUsize,
    max_running: AtomicUsize,
    gates: Vec<Gate>,
    /// One permit per attempt that has reached its wait for cancellation (after its calls).
    waiting_for_cancel: tokio::sync::Semaphore,
}

impl Scripted {
    fn new(f: impl Fn(&AttemptSpec) -> Script + Send + Sync + 'static) -> Arc<Self> {
        Self::gated(&[], f)
    }

    fn gated(
        gates: &[(Phase, usize)],
        f: impl Fn(&AttemptSpec) -> Script + Send + Sync + 'static,
    ) -> Arc<Self> {
        Arc::new(Self {
            script: Box::new(f),
            order: Mutex::new(Vec::new()),
            swept: AtomicUsize::new(0),
            running: AtomicUsize::new(0),
            max_running: AtomicUsize::new(0),
            gates: gates
                .iter()
                .map(|&(phase, size)| Gate {
                    phase,
                    size,
                    arrivals: AtomicUsize::new(0),
                    barrier: tokio::sync::Barrier::new(size),
                })
                .collect(),
            waiting_for_cancel: tokio::sync::Semaphore::new(0),
        })
    }

    async fn pass_gate(&self, spec: &AttemptSpec) {
        let Some(gate) = self.gates.iter().find(|g| g.phase == spec.slot.phase) else {
            return;
        };
        if gate.arrivals.fetch_add(1, Ordering::SeqCst) >= gate.size {
            return;
        }
        if tokio::time::timeout(HANG_GUARD, gate.barrier.wait())
            .await
            .is_err()
        {
            panic!(
                "{} never had {} attempts running at once (running now: {}): the runner does not \
                 use its concurrency",
                spec.attempt,
                gate.size,
                self.running.load(Ordering::SeqCst)
            );
        }
    }

    /// Waits until `n` attempts are parked waiting for cancellation (hang-guarded).
    async fn until_waiting_for_cancel(&self, n: u32) {
        let parked = tokio::time::timeout(HANG_GUARD, self.waiting_for_cancel.acquire_many(n))
            .await
            .unwrap_or_else(|_| panic!("{n} attempts never reached their wait for cancellation"))
            .unwrap();
        parked.forget();
    }
}

async fn model_call(rec: &Recorder, attempt: &str, seq: u64) {
    rec.append(
        MODEL_CALL,
        &ModelCall {
            schema: SCHEMA,
            attempt: attempt.into(),
            role: "agent".into(),
            seq,
            model: Some("m".into()),
            status: 200,
            result: "ok".into(),
            tokens: TokenCounts {
                input: 7,
                output: 3,
                cached: 0,
                reasoning: 0,
            },
            metered: true,
            latency_ms: 1,
            record: serde_json::json!({}),
            artifacts: Default::default(),
            wire_log: None,
        },
    )
    .await
    .unwrap();
}

impl AttemptExecutor for Scripted {
    fn run<'a>(
        &'a self,
        spec: &'a AttemptSpec,
        rec: Recorder,
        cancel: CancellationToken,
    ) -> BoxFuture<'a, AttemptReport> {
        Box::pin(async move {
            self.order.lock().unwrap().push(spec.attempt.clone());
            let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
            self.max_running.fetch_max(now, Ordering::SeqCst);
            self.pass_gate(spec).await;
            let r = match (self.script)(spec) {
                Script::Outcome(o, calls) => {
                    for i in 0..calls {
                        model_call(&rec, &spec.attempt, i + 1).await;
                    }
                    let mut r = AttemptReport::outcome(o);
                    r.model_turns = calls;
                    r
                }
                Script::Fault(code) => AttemptReport::infra(code.parse().unwrap(), "scripted"),
                Script::Unprepared(code) => AttemptReport {
                    before_container: true,
                    ..AttemptReport::infra(code.parse().unwrap(), "scripted")
                },
                Script::RecordFails => {
                    model_call(&rec, &spec.attempt, 1).await;
                    // An entry kind the ledger refuses stands in for a full disk or a broken
                    // ledger file: the append fails and the caller can do no more than log it.
                    let lost = rec
                        .append("Not A Kind", &serde_json::json!({"attempt": spec.attempt}))
                        .await;
                    assert!(lost.is_err());
                    AttemptReport::outcome(Outcome::Completed)
                }
                Script::ReportsRecordingFailure => {
                    model_call(&rec, &spec.attempt, 1).await;
                    AttemptReport {
                        recording_failure: Some("the workspace artifact was not stored".into()),
                        ..AttemptReport::outcome(Outcome::Completed)
                    }
                }
                Script::WaitForCancel(calls) => {
                    for i in 0..calls {
                        model_call(&rec, &spec.attempt, i + 1).await;
                    }
                    self.waiting_for_cancel.add_permits(1);
                    cancel.cancelled().await;
                    AttemptReport {
                        cancelled: true,
                        ..AttemptReport::default()
                    }
                }
            };
            self.running.fetch_sub(1, Ordering::SeqCst);
            r
        })
    }

    fn sweep(&self) -> BoxFuture<'_, Result<usize, eval_runtimes::RuntimeError>> {
        self.swept.fetch_add(1, Ordering::SeqCst);
        Box::pin(async { Ok(0) })
    }
}

fn slots() -> Vec<SlotRecord> {
    let mut v = Vec::new();
    for (task, arm) in [("t1", "base"), ("t1", "cand")] {
        v.push(SlotRecord {
            id: format!("infra-s-{task}-{arm}-r0"),
            phase: Phase::Infrastructure,
            suite: "s".into(),
            task: task.into(),
            arm: arm.into(),
            rep: 0,
        });
    }
    for task in ["t1", "t2"] {
        for arm in ["base", "cand"] {
            for rep in 1..=2 {
                v.push(SlotRecord {
                    id: format!("stat-s-{task}-{arm}-r{rep}"),
                    phase: Phase::Statistical,
                    suite: "s".into(),
                    task: task.into(),
                    arm: arm.into(),
                    rep,
                });
            }
        }
    }
    // A fixed "shuffled" order for the statistical part.
    let (infra, mut stat): (Vec<_>, Vec<_>) = v
        .into_iter()
        .partition(|s| s.phase == Phase::Infrastructure);
    stat.reverse();
    infra.into_iter().chain(stat).collect()
}

fn started(concurrency: usize, codes: &[&str], max_reruns: u32) -> RunStarted {
    RunStarted {
        schema: SCHEMA,
        session: 0,
        matrix: "m".into(),
        protocol: "p".into(),
        identity: "sha256:00".into(),
        driver: "sha256:11".into(),
        upstream: UpstreamRecord {
            kind: "fixture".into(),
            url: "http://127.0.0.1:1/v1".into(),
            ..Default::default()
        },
        fixture_evidence: true,
        model_free_evidence: false,
        concurrency,
        rerunnable_codes: codes.iter().map(|c| c.parse().unwrap()).collect(),
        max_reruns,
        max_infra_attempts: max_reruns + 1,
        slots: slots(),
        started_at: now_rfc3339(),
        preconditions: vec![],
    }
}

async fn session(
    path: &std::path::Path,
    st: RunStarted,
    exec: Arc<Scripted>,
    cancel: CancellationToken,
) -> runner::SessionEnd {
    let entries = if path.exists() {
        LedgerReader::open(path).unwrap().entries().unwrap()
    } else {
        Vec::new()
    };
    let writer = LedgerWriter::open(path).unwrap();
    let rec = Recorder::new(writer.clone(), &entries, "fixture").unwrap();
    let end = run_session(rec, st, exec, Arc::new(QuietProgress), cancel)
        .await
        .unwrap();
    writer.close();
    end
}

fn replayed(path: &std::path::Path) -> (RunState, Vec<Entry>) {
    let report = ledger::verify(path, None).unwrap();
    assert!(report.ok, "{:?}", report.error);
    let entries = LedgerReader::open(path).unwrap().entries().unwrap();
    (RunState::replay(&entries).unwrap(), entries)
}

fn kinds_of(entries: &[Entry], kind: &str) -> Vec<serde_json::Value> {
    entries
        .iter()
        .filter(|e| e.kind == kind)
        .map(|e| e.payload_json().unwrap())
        .collect()
}

#[tokio::test]
async fn runs_infra_first_then_the_schedule_order_at_concurrency_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.sqlite");
    let exec = Scripted::new(|_| Script::Outcome(Outcome::Completed, 2));
    let end = session(
        &path,
        started(1, &[], 1),
        exec.clone(),
        CancellationToken::new(),
    )
    .await;
    assert!(end.complete, "{end:?}");
    let expected: Vec<String> = slots()
        .iter()
        .map(|s| AttemptId::new(&s.id, 1).to_string())
        .collect();
    assert_eq!(*exec.order.lock().unwrap(), expected);
    let (st, entries) = replayed(&path);
    let sum = st.summary();
    assert_eq!((sum.total, sum.done, sum.infra_completed), (8, 8, 2));
    assert!(sum.complete);
    // Each outcome lists exactly its own model calls.
    for o in kinds_of(&entries, ATTEMPT_OUTCOME) {
        assert_eq!(o["model_calls"].as_array().unwrap().len(), 2, "{o}");
    }
    assert_eq!(kinds_of(&entries, RUN_FINISHED)[0]["complete"], true);
}

#[tokio::test]
async fn concurrency_is_bounded_and_used() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.sqlite");
    // Both infrastructure attempts, then the first three statistical ones, are held until they
    // all run at once (so reaching the bound is proven, not hoped for); nothing may exceed it.
    let exec = Scripted::gated(
        &[(Phase::Infrastructure, 2), (Phase::Statistical, 3)],
        |_| Script::Outcome(Outcome::Completed, 0),
    );
    let end = session(
        &path,
        started(3, &[], 1),
        exec.clone(),
        CancellationToken::new(),
    )
    .await;
    assert!(end.complete);
    assert_eq!(exec.max_running.load(Ordering::SeqCst), 3);
    assert_eq!(exec.order.lock().unwrap().len(), slots().len());
}

#[tokio::test]
async fn only_listed_faults_are_rerun_and_reruns_are_linked() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.sqlite");
    let exec = Scripted::new(|spec| match (spec.slot.id.as_str(), spec.number) {
        ("stat-s-t1-base-r1", 1) => Script::Fault("container_runtime_failure"),
        ("stat-s-t1-base-r2", _) => Script::Fault("attestation_mismatch"),
        ("stat-s-t2-cand-r1", _) => Script::Outcome(Outcome::AgentError, 1),
        ("stat-s-t2-cand-r2", _) => Script::Fault("container_runtime_failure"),
        _ => Script::Outcome(Outcome::Completed, 1),
    });
    let end = session(
        &path,
        started(2, &["container_runtime_failure"], 2),
        exec,
        CancellationToken::new(),
    )
    .await;
    assert!(end.complete);
    let (st, entries) = replayed(&path);
    let reruns = kinds_of(&entries, RERUN);
    // t1-base-r1: one rerun; t2-cand-r2: two reruns (limit), then final infra fault.
    assert_eq!(reruns.len(), 3, "{reruns:?}");
    let r = reruns
        .iter()
        .find(|r| r["slot"] == "stat-s-t1-base-r1")
        .unwrap();
    assert_eq!(r["reruns"], "stat-s-t1-base-r1#1");
    assert_eq!(r["attempt"], "stat-s-t1-base-r1#2");
    let statuses: BTreeMap<String, SlotStatus> = st
        .statuses()
        .into_iter()
        .map(|(s, x)| (s.id.clone(), x))
        .collect();
    assert_eq!(
        statuses["stat-s-t1-base-r1"],
        SlotStatus::Final {
            number: 2,
            outcome: Outcome::Completed
        }
    );
    assert_eq!(
        statuses["stat-s-t1-base-r2"],
        SlotStatus::Final {
            number: 1,
            outcome: Outcome::InfraFault
        }
    );
    assert_eq!(
        statuses["stat-s-t2-cand-r1"],
        SlotStatus::Final {
            number: 1,
            outcome: Outcome::AgentError
        }
    );
    assert_eq!(
        statuses["stat-s-t2-cand-r2"],
        SlotStatus::Final {
            number: 3,
            outcome: Outcome::InfraFault
        }
    );
    let sum = st.summary();
    assert_eq!(sum.reruns, 3);
    assert_eq!(sum.infra_faults, 5);
    assert_eq!(sum.done, 6);
    // The rerun entry precedes its attempt, and numbers are contiguous (replay checks both).
    let started_kinds: Vec<&Entry> = entries
        .iter()
        .filter(|e| e.kind == ATTEMPT_STARTED || e.kind == RERUN)
        .collect();
    for pair in started_kinds.windows(2) {
        if pair[0].kind == RERUN {
            assert_eq!(pair[1].kind, ATTEMPT_STARTED);
        }
    }
}

#[tokio::test]
async fn an_infra_slot_is_rerun_after_a_task_failure_and_blocks_when_it_never_completes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.sqlite");
    let exec = Scripted::new(|spec| match (spec.slot.id.as_str(), spec.number) {
        ("infra-s-t1-base-r0", 1) => Script::Outcome(Outcome::AgentError, 1),
        _ => Script::Outcome(Outcome::Completed, 0),
    });
    let end = session(&path, started(1, &[], 1), exec, CancellationToken::new()).await;
    assert!(end.complete, "{end:?}");

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.sqlite");
    let exec = Scripted::new(|spec| {
        if spec.slot.id == "infra-s-t1-cand-r0" {
            Script::Outcome(Outcome::Timeout, 0)
        } else {
            Script::Outcome(Outcome::Completed, 0)
        }
    });
    let end = session(
        &path,
        started(1, &[], 2),
        exec.clone(),
        CancellationToken::new(),
    )
    .await;
    assert!(!end.complete);
    assert!(end.stopped.unwrap().contains("infra-s-t1-cand-r0"));
    // No statistical attempt ran.
    assert!(
        exec.order
            .lock()
            .unwrap()
            .iter()
            .all(|a| a.starts_with("infra-"))
    );
    let (st, _) = replayed(&path);
    assert_eq!(st.attempts["infra-s-t1-cand-r0"].len(), 3);
}

/// An image that fails to load for the first attempt of an arm, then loads: the fault came
/// before any container, so the slot is retried without using a rerun — with no reruns allowed
/// and no listed codes, statistical and infrastructure slots alike still complete. A failure
/// that never goes away ends the slot after `MAX_PREPARATION_FAILURES`.
#[tokio::test]
async fn a_failure_before_any_container_is_retried_without_using_a_rerun() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.sqlite");
    let exec = Scripted::new(|spec| match (spec.slot.id.as_str(), spec.number) {
        ("infra-s-t1-base-r0" | "stat-s-t1-base-r1", 1) => Script::Unprepared("image_missing"),
        ("stat-s-t2-cand-r1", _) => Script::Unprepared("image_missing"),
        // A real attempt's fault after the retry still has its rerun budget (none here).
        ("stat-s-t1-base-r2", 1) => Script::Unprepared("container_runtime_failure"),
        ("stat-s-t1-base-r2", 2) => Script::Fault("container_runtime_failure"),
        _ => Script::Outcome(Outcome::Completed, 1),
    });
    let end = session(&path, started(1, &[], 0), exec, CancellationToken::new()).await;
    assert!(end.complete, "{end:?}");
    let (st, entries) = replayed(&path);
    let status = |slot: &str| {
        st.statuses()
            .into_iter()
            .find(|(s, _)| s.id == slot)
            .map(|(_, x)| x)
            .unwrap()
    };
    let done = |number| SlotStatus::Final {
        number,
        outcome: Outcome::Completed,
    };
    assert_eq!(status("infra-s-t1-base-r0"), done(2));
    assert_eq!(status("stat-s-t1-base-r1"), done(2));
    assert_eq!(
        status("stat-s-t1-base-r2"),
        SlotStatus::Final {
            number: 2,
            outcome: Outcome::InfraFault
        }
    );
    assert_eq!(
        status("stat-s-t2-cand-r1"),
        SlotStatus::Final {
            number: replay::MAX_PREPARATION_FAILURES,
            outcome: Outcome::InfraFault
        }
    );
    let outcome = kinds_of(&entries, ATTEMPT_OUTCOME)
        .into_iter()
        .find(|o| o["attempt"] == "stat-s-t1-base-r1#1")
        .unwrap();
    assert_eq!(outcome["before_container"], true);
    let rerun = kinds_of(&entries, RERUN)
        .into_iter()
        .find(|r| r["attempt"] == "stat-s-t1-base-r1#2")
        .unwrap();
    assert!(
        rerun["reason"]
            .as_str()
            .unwrap()
            .contains("before any container"),
        "{rerun}"
    );
}

/// A host capacity fault (`filesystem_capacity`: the state disk is full, before a container
/// or while archiving) pauses the run, named, instead of spending the slot's retries while
/// every other attempt fails the same way: nothing more starts, no `rerun` is written, the
/// session ends stopped (exit 2), and the same command continues once there is room. Before,
/// each slot was retried until out of attempts and the run ended "complete".
#[tokio::test]
async fn a_host_capacity_fault_pauses_the_run_named_and_resume_continues() {
    for (fault, before) in [
        (Script::Unprepared("filesystem_capacity"), true),
        (Script::Fault("filesystem_capacity"), false),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.sqlite");
        let first_stat = slots()
            .into_iter()
            .find(|s| s.phase == Phase::Statistical)
            .unwrap()
            .id;
        let full = first_stat.clone();
        let exec = Scripted::new(move |spec| {
            if spec.slot.id == full {
                fault
            } else {
                Script::Outcome(Outcome::Completed, 1)
            }
        });
        let end = session(
            &path,
            started(1, &["filesystem_capacity"], 2),
            exec.clone(),
            CancellationToken::new(),
        )
        .await;
        assert!(!end.complete, "{end:?}");
        let why = end.stopped.clone().unwrap_or_default();
        assert!(why.contains("ran out of capacity"), "{why}");
        assert!(why.contains(&format!("{first_stat}#1")), "{why}");
        // Nothing after the full disk started: the infrastructure slots and that attempt.
        let order = exec.order.lock().unwrap().clone();
        assert_eq!(
            order.last().map(String::as_str),
            Some(format!("{first_stat}#1").as_str()),
            "before_container {before}: {order:?}"
        );
        let (_, entries) = replayed(&path);
        assert!(kinds_of(&entries, RERUN).is_empty(), "{before}");
        let finished = kinds_of(&entries, RUN_FINISHED);
        assert_eq!(finished.last().unwrap()["stopped"], why.as_str());

        // Room again: the same command goes on and finishes.
        let exec = Scripted::new(|_| Script::Outcome(Outcome::Completed, 1));
        let end = session(
            &path,
            started(1, &["filesystem_capacity"], 2),
            exec,
            CancellationToken::new(),
        )
        .await;
        assert!(end.complete, "{end:?}");
    }
}

#[tokio::test]
async fn ctrl_c_closes_running_attempts_by_the_model_call_rule_and_resume_finishes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.sqlite");
    let cancel = CancellationToken::new();
    let exec = Scripted::new(|spec| match spec.slot.id.as_str() {
        // Two stat attempts hang until Ctrl-C: one after a model call, one before.
        "stat-s-t2-cand-r2" => Script::WaitForCancel(1),
        "stat-s-t2-cand-r1" => Script::WaitForCancel(0),
        _ => Script::Outcome(Outcome::Completed, 1),
    });
    // Ctrl-C arrives once both hanging attempts are parked (the one with a call has recorded it).
    // Joined, not spawned, so a hang-guard failure fails the test instead of hanging the session.
    let ctrl_c = async {
        exec.until_waiting_for_cancel(2).await;
        cancel.cancel();
    };
    let (end, ()) = tokio::join!(
        session(&path, started(2, &[], 1), exec.clone(), cancel.clone()),
        ctrl_c
    );
    assert!(!end.complete);
    let (st, _) = replayed(&path);
    let statuses: BTreeMap<String, SlotStatus> = st
        .statuses()
        .into_iter()
        .map(|(s, x)| (s.id.clone(), x))
        .collect();
    assert_eq!(
        statuses["stat-s-t2-cand-r2"],
        SlotStatus::Final {
            number: 1,
            outcome: Outcome::Interrupted
        }
    );
    assert!(matches!(
        statuses["stat-s-t2-cand-r1"],
        SlotStatus::NeedsRerun { next: 2, .. }
    ));

    // Resume: everything else runs, the interrupted-before-call slot is rerun, the other not.
    let exec = Scripted::new(|_| Script::Outcome(Outcome::Completed, 1));
    let end = session(
        &path,
        started(2, &[], 1),
        exec.clone(),
        CancellationToken::new(),
    )
    .await;
    assert!(end.complete, "{end:?}");
    assert!(
        !exec
            .order
            .lock()
            .unwrap()
            .iter()
            .any(|a| a.starts_with("stat-s-t2-cand-r2"))
    );
    assert!(
        exec.order
            .lock()
            .unwrap()
            .contains(&"stat-s-t2-cand-r1#2".to_owned())
    );
    let (st, entries) = replayed(&path);
    assert!(st.summary().complete);
    assert_eq!(st.sessions, 2);
    // Exactly one outcome per attempt, every started attempt has one.
    let started_n = entries.iter().filter(|e| e.kind == ATTEMPT_STARTED).count();
    let outcome_n = entries.iter().filter(|e| e.kind == ATTEMPT_OUTCOME).count();
    assert_eq!(started_n, outcome_n);
}

#[tokio::test]
async fn resume_after_a_crash_closes_lost_attempts_and_sweeps() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.sqlite");
    // Simulate a crash: a session that started two attempts and never finished them.
    {
        let writer = LedgerWriter::open(&path).unwrap();
        let rec = Recorder::new(writer.clone(), &[], "fixture").unwrap();
        let mut s = started(1, &[], 1);
        s.session = 1;
        rec.append(RUN_STARTED, &s).await.unwrap();
        for (slot, calls) in [("infra-s-t1-base-r0", 0u64), ("infra-s-t1-cand-r0", 2)] {
            let spec = slots().into_iter().find(|x| x.id == slot).unwrap();
            rec.append(
                ATTEMPT_STARTED,
                &AttemptStarted {
                    schema: SCHEMA,
                    attempt: AttemptId::new(slot, 1).to_string(),
                    slot: slot.into(),
                    number: 1,
                    phase: spec.phase,
                    suite: spec.suite,
                    task: spec.task,
                    arm: spec.arm,
                    rep: 0,
                    rerun_of: None,
                    session: 1,
                    started_at: now_rfc3339(),
                },
            )
            .await
            .unwrap();
            for i in 0..calls {
                model_call(&rec, &AttemptId::new(slot, 1).to_string(), i + 1).await;
            }
        }
        drop(rec);
        writer.close();
    }
    let exec = Scripted::new(|_| Script::Outcome(Outcome::Completed, 1));
    let end = session(
        &path,
        started(1, &[], 1),
        exec.clone(),
        CancellationToken::new(),
    )
    .await;
    assert_eq!(end.closed_on_resume, 2);
    assert_eq!(exec.swept.load(Ordering::SeqCst), 1);
    assert!(end.complete);
    let (st, entries) = replayed(&path);
    let closed: Vec<serde_json::Value> = kinds_of(&entries, ATTEMPT_OUTCOME)
        .into_iter()
        .filter(|o| o["closed_by_controller"] == true)
        .collect();
    assert_eq!(closed.len(), 2);
    let a = closed
        .iter()
        .find(|o| o["slot"] == "infra-s-t1-base-r0")
        .unwrap();
    assert_eq!(a["infra_fault"], "interrupted_before_model_call");
    let b = closed
        .iter()
        .find(|o| o["slot"] == "infra-s-t1-cand-r0")
        .unwrap();
    assert_eq!(b["outcome"], "interrupted");
    // Infra slots are rerun after any failure, so both got a second attempt.
    assert_eq!(st.attempts["infra-s-t1-base-r0"].len(), 2);
    assert_eq!(st.attempts["infra-s-t1-cand-r0"].len(), 2);
}

#[tokio::test]
async fn every_append_of_a_signing_run_is_signed_in_its_own_transaction() {
    use eval_evidence::signing::{
        Checkpointer, KEY_NAME, SigningKeyPair, origin_for_identity, verify_ledger_signatures,
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.sqlite");
    let writer = LedgerWriter::open(&path).unwrap();
    let key = Arc::new(SigningKeyPair::generate(KEY_NAME).unwrap());
    let st = started(2, &[], 1);
    let origin = origin_for_identity(&st.identity).unwrap();
    let c = Checkpointer::open(key.clone(), &origin, &writer).unwrap();
    let rec = Recorder::new(writer.clone(), &[], "fixture")
        .unwrap()
        .with_checkpointer(c);
    let exec = Scripted::new(|_| Script::Outcome(Outcome::Completed, 1));
    let end = run_session(
        rec,
        st,
        exec,
        Arc::new(QuietProgress),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    writer.close();
    assert!(end.complete);
    let (_, entries) = replayed(&path);
    let kinds: Vec<&str> = entries.iter().map(|e| e.kind.as_str()).collect();
    let outcomes = kinds.iter().filter(|k| **k == ATTEMPT_OUTCOME).count();
    let checkpoints = kinds.iter().filter(|k| **k == "checkpoint").count();
    assert!(checkpoints > outcomes, "{kinds:?}");
    // Each checkpoint signs everything before it, and the run ends with one, so at no point
    // was an entry committed outside a signature.
    let mut last_checkpoint = 0;
    for e in &entries {
        if e.kind == "checkpoint" {
            let v = e.payload_json().unwrap();
            assert_eq!(v["tree_size"].as_u64().unwrap(), e.seq - 1, "seq {}", e.seq);
            last_checkpoint = e.seq;
        }
    }
    assert_eq!(last_checkpoint, entries.len() as u64);
    let r = verify_ledger_signatures(&path, key.public()).unwrap();
    assert!(r.ok, "{r:?}");
    assert_eq!(r.first_unsigned_evidence, None);
    assert_eq!(*kinds.last().unwrap(), "checkpoint");
    assert_eq!(kinds[kinds.len() - 2], RUN_FINISHED);
}

#[tokio::test]
async fn a_recording_failure_stops_the_run_with_an_integrity_error_and_resume_closes_the_attempt() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.sqlite");
    let exec = Scripted::new(|spec| match spec.slot.id.as_str() {
        "infra-s-t1-cand-r0" => Script::RecordFails,
        _ => Script::Outcome(Outcome::Completed, 1),
    });
    let writer = LedgerWriter::open(&path).unwrap();
    let rec = Recorder::new(writer.clone(), &[], "fixture").unwrap();
    let err = run_session(
        rec,
        started(1, &[], 1),
        exec.clone(),
        Arc::new(QuietProgress),
        CancellationToken::new(),
    )
    .await
    .unwrap_err();
    writer.close();
    assert!(matches!(err, RunError::Record(_)), "{err}");
    assert!(err.to_string().contains("Not A Kind"), "{err}");
    let (st, entries) = replayed(&path);
    // The failed attempt got no outcome (its evidence is incomplete), nothing started after it,
    // and the session is not presented as having finished normally.
    assert!(
        st.attempt("infra-s-t1-cand-r0#1")
            .unwrap()
            .outcome
            .is_none()
    );
    assert_eq!(
        exec.order.lock().unwrap().clone(),
        vec!["infra-s-t1-base-r0#1", "infra-s-t1-cand-r0#1"]
    );
    assert!(kinds_of(&entries, RUN_FINISHED).is_empty());

    // Resume closes it by the model-call rule (a call was recorded: interrupted, spent).
    let exec = Scripted::new(|_| Script::Outcome(Outcome::Completed, 1));
    let end = session(&path, started(1, &[], 1), exec, CancellationToken::new()).await;
    assert_eq!(end.closed_on_resume, 1);
    let (st, _) = replayed(&path);
    let closed = st.attempt("infra-s-t1-cand-r0#1").unwrap();
    assert_eq!(
        closed.outcome.as_ref().unwrap().outcome,
        Outcome::Interrupted
    );
}

#[tokio::test]
async fn an_executor_reported_recording_failure_stops_the_run_without_an_outcome() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.sqlite");
    let exec = Scripted::new(|spec| match spec.slot.id.as_str() {
        "infra-s-t1-base-r0" => Script::ReportsRecordingFailure,
        _ => Script::Outcome(Outcome::Completed, 1),
    });
    let writer = LedgerWriter::open(&path).unwrap();
    let rec = Recorder::new(writer.clone(), &[], "fixture").unwrap();
    let err = run_session(
        rec,
        started(1, &[], 1),
        exec.clone(),
        Arc::new(QuietProgress),
        CancellationToken::new(),
    )
    .await
    .unwrap_err();
    writer.close();
    assert!(
        err.to_string()
            .contains("workspace artifact was not stored"),
        "{err}"
    );
    let (st, entries) = replayed(&path);
    assert!(kinds_of(&entries, ATTEMPT_OUTCOME).is_empty());
    assert!(
        st.attempt("infra-s-t1-base-r0#1")
            .unwrap()
            .outcome
            .is_none()
    );
    assert_eq!(exec.order.lock().unwrap().len(), 1);
}

#[test]
fn duration_is_the_container_run_and_preparation_is_recorded_apart() {
    let spec = AttemptSpec::bare("stat-s-t-a-r1", 1);
    // The runner's wall time (99 s here) includes image loading and preparation: it is not the
    // duration when the executor measured the container's run.
    let measured = AttemptReport {
        duration_seconds: Some(2.5),
        prepare_seconds: 40.0,
        container_seconds: 3.0,
        ..AttemptReport::outcome(Outcome::Completed)
    };
    let o = measured.into_outcome(&spec, "a", "fixture", 99.0);
    assert_eq!(
        (o.duration_seconds, o.prepare_seconds, o.container_seconds),
        (2.5, 40.0, 3.0)
    );
    // An executor that does not measure keeps the wall time.
    let o = AttemptReport::outcome(Outcome::Completed).into_outcome(&spec, "a", "fixture", 99.0);
    assert_eq!((o.duration_seconds, o.prepare_seconds), (99.0, 0.0));
    // A receipt written before `prepare_seconds` existed still reads, as 0.
    let mut v = serde_json::to_value(&o).unwrap();
    v.as_object_mut().unwrap().remove("prepare_seconds");
    let old: AttemptOutcome = serde_json::from_value(v).unwrap();
    assert_eq!((old.prepare_seconds, old.duration_seconds), (0.0, 99.0));
}
