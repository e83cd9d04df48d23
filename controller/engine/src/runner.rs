//! The schedule runner: closes what a crash left open, then runs infrastructure slots, then
//! statistical slots in schedule order, up to `concurrency` attempts at once, rerunning by rule.

use super::{AttemptExecutor, AttemptReport, AttemptSpec, ProgressSink, Recorder, RunError};
use eval_core::attempt::AttemptId;
use eval_core::fault::FaultCode;
use eval_core::outcome::Outcome;
use eval_core::phase::Phase;
use eval_evidence::ledger::{LedgerError, NewEntry};
use eval_runlog::events::{
    self, AttemptOutcome, AttemptStarted, Rerun, RunFinished, RunStarted, SlotRecord,
};
use eval_runlog::replay::{self, ReplayError, SlotStatus};
use std::sync::Arc;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// What a session ended with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionEnd {
    pub complete: bool,
    pub stopped: Option<String>,
    pub closed_on_resume: usize,
    pub swept_containers: usize,
}

/// Closes every attempt that started and never finished, by the rule in
/// [`replay::closing_outcome`]. Returns how many were closed.
pub async fn close_unfinished(rec: &Recorder, detail: &str) -> Result<usize, RunError> {
    let open: Vec<(String, u32, String, Outcome, Option<FaultCode>)> = {
        let st = rec.state();
        st.unfinished()
            .into_iter()
            .map(|a| {
                let (o, code) = replay::closing_outcome(a);
                // Closing it with an empty arm would record an outcome nobody can attribute.
                let arm = st
                    .slots
                    .iter()
                    .find(|s| s.id == a.slot)
                    .map(|s| s.arm.clone())
                    .ok_or_else(|| ReplayError::Malformed {
                        seq: a.started_seq,
                        kind: events::ATTEMPT_STARTED.into(),
                        reason: format!(
                            "attempt {} of slot {} that the run's schedule does not have",
                            a.number, a.slot
                        ),
                    })?;
                Ok((a.slot.clone(), a.number, arm, o, code))
            })
            .collect::<Result<_, ReplayError>>()?
    };
    for (slot, number, arm, outcome, code) in &open {
        let mut p = AttemptReport::closed(*outcome, *code, detail).into_outcome(
            &AttemptSpec::bare(slot, *number),
            arm,
            &rec.upstream_kind(),
            0.0,
        );
        p.closed_by_controller = true;
        rec.append(events::ATTEMPT_OUTCOME, &p).await?;
    }
    Ok(open.len())
}

/// Runs one session of the run: the caller has replayed the ledger into `rec` and admitted it.
pub async fn run_session(
    rec: Recorder,
    mut started: RunStarted,
    exec: Arc<dyn AttemptExecutor>,
    progress: Arc<dyn ProgressSink>,
    cancel: CancellationToken,
) -> Result<SessionEnd, RunError> {
    let closed = close_unfinished(
        &rec,
        "the controller stopped (crash, kill or Ctrl-C) before this attempt finished",
    )
    .await?;
    let swept = exec.sweep().await?;
    {
        let st = rec.state();
        if !st.slots.is_empty() && st.slots != started.slots {
            return Err(RunError::Replay(ReplayError::Malformed {
                seq: 0,
                kind: events::RUN_STARTED.into(),
                reason: "the matrix now expands to another schedule than the one this ledger ran"
                    .into(),
            }));
        }
        started.session = st.sessions + 1;
    }
    let concurrency = started.concurrency.max(1);
    rec.append(events::RUN_STARTED, &started).await?;
    progress.session_started(&rec.state().summary());

    let sem = Arc::new(Semaphore::new(concurrency));
    let tracker = TaskTracker::new();
    let mut stopped: Option<String> = None;

    for phase in Phase::ALL {
        let todo = slots_to_run(&rec, phase);
        start_slots(todo, &rec, &exec, &progress, &cancel, &sem, &tracker).await;
        // Barrier: no statistical slot starts before every infrastructure attempt has ended.
        tracker.close();
        tracker.wait().await;
        tracker.reopen();
        if let Some(why) = phase_stop(&rec, &cancel, phase) {
            stopped = Some(why);
            break;
        }
    }
    // A recording failure ends the session as an integrity error, without a `run_finished` that
    // would present the session as closed normally.
    if let Some(why) = rec.fatal() {
        return Err(RunError::Record(why));
    }
    let summary = rec.state().summary();
    let complete = summary.complete;
    rec.append(
        events::RUN_FINISHED,
        &RunFinished {
            schema: events::SCHEMA,
            session: started.session,
            complete,
            stopped: stopped.clone(),
            finished_at: events::now_rfc3339(),
        },
    )
    .await?;
    progress.session_finished(&summary);
    Ok(SessionEnd {
        complete,
        stopped,
        closed_on_resume: closed,
        swept_containers: swept,
    })
}

/// The slots of `phase` that still need an attempt (never run, or owed a rerun), in schedule
/// order.
fn slots_to_run(rec: &Recorder, phase: Phase) -> Vec<SlotRecord> {
    let st = rec.state();
    st.statuses()
        .into_iter()
        .filter(|(s, status)| {
            s.phase == phase
                && matches!(status, SlotStatus::Pending | SlotStatus::NeedsRerun { .. })
        })
        .map(|(s, _)| s.clone())
        .collect()
}

/// Spawns `todo`'s slots on `tracker`, each once a permit of `sem` is free; stops starting on
/// cancellation or when the host ran out of capacity. The caller waits for the tracker.
async fn start_slots(
    todo: Vec<SlotRecord>,
    rec: &Recorder,
    exec: &Arc<dyn AttemptExecutor>,
    progress: &Arc<dyn ProgressSink>,
    cancel: &CancellationToken,
    sem: &Arc<Semaphore>,
    tracker: &TaskTracker,
) {
    for slot in todo {
        // Permits are taken here, in schedule order, so attempts start in that order.
        let permit = tokio::select! {
            p = sem.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
            _ = cancel.cancelled() => break,
        };
        // The host ran out of capacity: nothing more starts (see `host_stop` below).
        if rec.host_stop().is_some() {
            break;
        }
        let (rec, exec, progress, cancel) =
            (rec.clone(), exec.clone(), progress.clone(), cancel.clone());
        tracker.spawn(async move {
            let result = run_slot(&rec, &slot, exec.as_ref(), progress.as_ref(), &cancel).await;
            drop(permit);
            if let Err(e) = result {
                progress.error(&format!("{}: {e}", slot.id));
                // Any failure of the runner itself is a recording failure: the whole run
                // stops, and the session ends as an integrity error.
                rec.record_failed(&format!("{}: {e}", slot.id));
                cancel.cancel();
            }
        });
    }
}

/// Why the session stops after `phase` has ended, if it does: the host ran out of capacity,
/// the run was cancelled (by the account or Ctrl-C), or an infrastructure slot never completed.
fn phase_stop(rec: &Recorder, cancel: &CancellationToken, phase: Phase) -> Option<String> {
    if let Some(why) = rec.host_stop()
        && !cancel.is_cancelled()
    {
        return Some(format!(
            "paused: the host ran out of capacity ({why}); no further attempt was started and \
             the attempts in flight finished; free space on the state directory's file \
             system (`eval gc` frees what no run needs), then run the same command again to \
             continue"
        ));
    }
    if cancel.is_cancelled() {
        return Some(match rec.account_stop() {
            Some(why) => format!(
                "{why}; no further attempt was started and the attempts in flight were \
                 closed as upstream_account_refused; fix the account, then run the same \
                 command again to continue"
            ),
            None => "interrupted (Ctrl-C or a fatal error); run the same command again to continue"
                .into(),
        });
    }
    if phase != Phase::Statistical {
        let st = rec.state();
        let failed: Vec<String> = st
            .statuses()
            .into_iter()
            .filter(|(s, status)| s.phase == phase && !matches!(status, SlotStatus::Final { .. }))
            .map(|(s, _)| s.id.clone())
            .collect();
        if !failed.is_empty() {
            return Some(format!(
                "infrastructure slot(s) {} did not complete within the rerun limit; statistical slots are refused until they do",
                failed.join(", ")
            ));
        }
    }
    None
}

/// Runs a slot's attempts until it is final (or needs nothing), rerunning by rule.
async fn run_slot(
    rec: &Recorder,
    slot: &SlotRecord,
    exec: &dyn AttemptExecutor,
    progress: &dyn ProgressSink,
    cancel: &CancellationToken,
) -> Result<(), RunError> {
    loop {
        if cancel.is_cancelled() {
            return Ok(());
        }
        if let Some(why) = rec.fatal() {
            return Err(RunError::Record(why));
        }
        let status = {
            let st = rec.state();
            st.status_of(slot, &st.rules())
        };
        let (number, rerun_of) = match status {
            SlotStatus::Pending => (1, None),
            SlotStatus::NeedsRerun { next, code } => (next, Some((next - 1, code))),
            _ => return Ok(()),
        };
        let spec = AttemptSpec {
            slot: slot.clone(),
            number,
            attempt: AttemptId::new(&slot.id, number).to_string(),
            rerun_of: rerun_of.as_ref().map(|(n, _)| *n),
        };
        announce_attempt(rec, slot, &spec, &rerun_of).await?;
        if let Some((_, code)) = &rerun_of {
            progress.rerun(&spec.attempt, code);
        }
        progress.attempt_started(&spec.attempt);
        let t0 = std::time::Instant::now();
        let report = exec.run(&spec, rec.clone(), cancel.clone()).await;
        let elapsed = t0.elapsed().as_secs_f64();
        // Something of this attempt (or of another one) could not be recorded: its outcome
        // would stand on incomplete evidence. It stays open, and resume closes it by rule.
        if let Some(why) = &report.recording_failure {
            rec.record_failed(&format!("{}: {why}", spec.attempt));
        }
        if let Some(why) = rec.fatal() {
            return Err(RunError::Record(why));
        }
        let mut report = report;
        settle_cancelled(rec, &spec, &mut report);
        let mut p: AttemptOutcome =
            report
                .clone()
                .into_outcome(&spec, &slot.arm, &rec.upstream_kind(), elapsed);
        p.closed_by_controller = report.cancelled;
        p.model_calls = rec.model_call_seqs_of(&spec.attempt);
        rec.append(events::ATTEMPT_OUTCOME, &p).await?;
        progress.attempt_finished(&spec.attempt, &p, &rec.state().summary());
        if slot_stops_after(rec, &spec, &p, report.cancelled, cancel) {
            return Ok(());
        }
    }
}

/// Records the start of an attempt, with the `rerun` that explains it when it is one.
/// Kept apart from [`run_slot`] because the two entries must be written as one batch; the
/// `attempt_started` entry is built first, so its `started_at` precedes the rerun's reasoning.
async fn announce_attempt(
    rec: &Recorder,
    slot: &SlotRecord,
    spec: &AttemptSpec,
    rerun_of: &Option<(u32, String)>,
) -> Result<(), RunError> {
    let number = spec.number;
    let session = rec.state().sessions;
    let attempt_started = NewEntry::new(
        events::ATTEMPT_STARTED,
        &AttemptStarted {
            schema: events::SCHEMA,
            attempt: spec.attempt.clone(),
            slot: slot.id.clone(),
            number,
            phase: slot.phase,
            suite: slot.suite.clone(),
            task: slot.task.clone(),
            arm: slot.arm.clone(),
            rep: slot.rep,
            rerun_of: spec.rerun_of,
            session,
            started_at: events::now_rfc3339(),
        },
    )
    .map_err(LedgerError::from)?;
    // A rerun and the attempt it starts are one batch: a crash can leave neither or both,
    // never a `rerun` whose attempt resume would announce a second time.
    let mut batch = Vec::with_capacity(2);
    if let Some((of, code)) = rerun_of {
        batch.push(
            NewEntry::new(
                events::RERUN,
                &Rerun {
                    schema: events::SCHEMA,
                    attempt: spec.attempt.clone(),
                    slot: slot.id.clone(),
                    number,
                    reruns: AttemptId::new(&slot.id, *of).to_string(),
                    rerun_of: *of,
                    code: code.clone(),
                    reason: rerun_reason(rec, slot, code),
                },
            )
            .map_err(LedgerError::from)?,
        );
    }
    batch.push(attempt_started);
    rec.append_batch(batch).await?;
    Ok(())
}

/// Why the slot's previous attempt may be rerun, in the words the `rerun` entry records.
fn rerun_reason(rec: &Recorder, slot: &SlotRecord, code: &str) -> String {
    let unprepared = rec
        .state()
        .attempts
        .get(&slot.id)
        .and_then(|v| v.last())
        .and_then(|a| a.outcome.as_ref())
        .is_some_and(|o| o.before_container);
    if unprepared {
        format!(
            "infra fault {code} happened before any container existed (the agent never ran); a preparation retry, not one of the slot's reruns"
        )
    } else if slot.phase == Phase::Infrastructure {
        "infrastructure slots may be rerun after any failure, up to the limit".to_owned()
    } else if slot.phase == Phase::Control {
        "control slots may be rerun after an infrastructure fault, up to the limit".to_owned()
    } else {
        format!("infra fault {code} is rerunnable")
    }
}

/// Gives a cancelled attempt the outcome its cause earns: the account's refusal when the run
/// stopped for it, else Ctrl-C's (an infra fault when no model call can have been spent).
fn settle_cancelled(rec: &Recorder, spec: &AttemptSpec, report: &mut AttemptReport) {
    let account_stop = rec.account_stop();
    if report.cancelled
        && let Some(why) = &account_stop
    {
        // Stopped because another attempt found the account refused: the same cause.
        report.outcome = Some(Outcome::InfraFault);
        report.infra_fault = Some(FaultCode::UpstreamAccountRefused);
        report.detail = Some(format!("the run stopped: {why}"));
    } else if report.cancelled {
        let (o, code) = if !rec.may_have_spent(&spec.attempt) {
            (
                Outcome::InfraFault,
                Some(FaultCode::InterruptedBeforeModelCall),
            )
        } else {
            (Outcome::Interrupted, None)
        };
        report.outcome = Some(o);
        report.infra_fault = code;
        report.detail = Some("stopped by Ctrl-C".into());
    }
}

/// Whether the slot starts no further attempt after the outcome `p` was recorded: the attempt
/// was cancelled, or its fault is the run's (the account) or the host's (capacity), which stop
/// the run or pause it as a side effect here.
fn slot_stops_after(
    rec: &Recorder,
    spec: &AttemptSpec,
    p: &AttemptOutcome,
    cancelled: bool,
    cancel: &CancellationToken,
) -> bool {
    if p.infra_fault == Some(FaultCode::UpstreamAccountRefused) && !cancelled {
        // The account is the run's, not the attempt's: every further call would be refused
        // too. Stop starting attempts and close the ones in flight.
        rec.stop_for_account(
            p.detail
                .as_deref()
                .unwrap_or("the upstream refused the account"),
        );
        cancel.cancel();
        return true;
    }
    if cancelled {
        return true;
    }
    if p.infra_fault == Some(FaultCode::FilesystemCapacity) {
        // The host's, never the agent's (its writes go to its own filesystem): every
        // further attempt would fail the same way, or be rerun until its slot is out of
        // attempts. The run pauses, named, until the host has room again.
        rec.stop_for_host(&format!(
            "{}: {}",
            spec.attempt,
            p.detail.as_deref().unwrap_or("filesystem_capacity")
        ));
        return true;
    }
    false
}
