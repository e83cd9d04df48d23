//! Replay: the state of a run, rebuilt from nothing but its ledger entries. Resume, `eval status`
//! and the report all read the run through this, so they can never disagree.
//!
//! Pure functions over [`Entry`] values: no I/O, unit-tested without a ledger file.

use crate::events::{self, AttemptOutcome, AttemptStarted, RunStarted, SlotRecord};
use eval_core::attempt::AttemptId;
use eval_core::fault::FaultCode;
use eval_core::outcome::Outcome;
use eval_core::phase::Phase;
use eval_core::tokens::TokenCounts;
use eval_evidence::ledger::Entry;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("ledger seq {seq} ({kind}): {reason}")]
    Malformed {
        seq: u64,
        kind: String,
        reason: String,
    },
    #[error(
        "ledger seq {seq}: payload schema {found} is newer than this eval understands ({known})"
    )]
    NewerSchema { seq: u64, found: u32, known: u32 },
}

/// One attempt as the ledger tells it.
#[derive(Clone, Debug, PartialEq)]
pub struct AttemptState {
    pub slot: String,
    pub number: u32,
    pub rerun_of: Option<u32>,
    pub started_seq: u64,
    /// The seqs of this attempt's `model_call` entries (any role), in ledger order: the
    /// receipt's `model_calls`.
    pub model_call_seqs: Vec<u64>,
    /// `model_call_started` entries: calls the proxy forwarded (or was about to), finished or not.
    pub calls_started: u64,
    pub outcome: Option<AttemptOutcome>,
}

impl AttemptState {
    /// True once any model call of this attempt may have reached the upstream: from then on an
    /// interruption is the attempt's outcome, never a reason to rerun it (a paid call is not
    /// repeated, and killing an unfavourable attempt must not be a way to redraw it).
    pub fn may_have_spent(&self) -> bool {
        !self.model_call_seqs.is_empty() || self.calls_started > 0
    }
}

impl AttemptState {
    pub fn id(&self) -> String {
        AttemptId::new(&self.slot, self.number).to_string()
    }
}

/// Rules that decide what a faulted attempt leads to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RerunRules {
    pub codes: BTreeSet<FaultCode>,
    /// Reruns allowed per statistical slot (attempts per slot ≤ 1 + this).
    pub max_reruns: u32,
    /// Attempts allowed per infrastructure slot.
    pub max_infra_attempts: u32,
}

/// Where a slot stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SlotStatus {
    /// No attempt yet.
    Pending,
    /// An attempt started and has no outcome (running now, or lost to a crash).
    Running { number: u32 },
    /// The last attempt faulted in a way that may be rerun; the next attempt's number.
    NeedsRerun { next: u32, code: String },
    /// Resolved: the slot's final attempt and its outcome (may be a non-rerunnable infra fault).
    Final { number: u32, outcome: Outcome },
    /// An infrastructure slot that used up its reruns without completing.
    Failed { number: u32 },
}

/// The whole run, rebuilt from the ledger.
#[derive(Clone, Debug, Default)]
pub struct RunState {
    /// The latest `run_started` payload (the schedule and rules of the run).
    pub started: Option<RunStarted>,
    /// Every session's upstream, in ledger order (a report judges them all, not the latest).
    pub upstreams: Vec<events::UpstreamRecord>,
    pub sessions: u32,
    pub slots: Vec<SlotRecord>,
    /// Attempts per slot, in number order.
    pub attempts: BTreeMap<String, Vec<AttemptState>>,
    pub finished_sessions: u32,
    pub report_entries: u64,
    /// USD of every recorded `model_call` (any phase and role), as the proxy priced it: what
    /// the run budget's spend has used, shown against it on the progress line.
    pub spend_usd: f64,
}

fn parse<T: serde::de::DeserializeOwned>(e: &Entry) -> Result<T, ReplayError> {
    let value: serde_json::Value =
        serde_json::from_slice(&e.payload).map_err(|err| ReplayError::Malformed {
            seq: e.seq,
            kind: e.kind.clone(),
            reason: err.to_string(),
        })?;
    if let Some(schema) = value.get("schema").and_then(|s| s.as_u64())
        && schema > u64::from(events::SCHEMA)
    {
        return Err(ReplayError::NewerSchema {
            seq: e.seq,
            found: schema as u32,
            known: events::SCHEMA,
        });
    }
    serde_json::from_value(value).map_err(|err| ReplayError::Malformed {
        seq: e.seq,
        kind: e.kind.clone(),
        reason: err.to_string(),
    })
}

fn malformed(e: &Entry, reason: impl Into<String>) -> ReplayError {
    ReplayError::Malformed {
        seq: e.seq,
        kind: e.kind.clone(),
        reason: reason.into(),
    }
}

impl RunState {
    /// Rebuilds the state, checking the rules a correct controller never breaks (contiguous
    /// numbers, one outcome per attempt, reruns only of faulted attempts).
    pub fn replay<'a>(entries: impl IntoIterator<Item = &'a Entry>) -> Result<Self, ReplayError> {
        let mut st = RunState::default();
        for e in entries {
            st.apply(e)?;
        }
        Ok(st)
    }

    /// Applies one entry (in ledger order).
    pub fn apply(&mut self, e: &Entry) -> Result<(), ReplayError> {
        match e.kind.as_str() {
            events::RUN_STARTED => {
                let mut p: RunStarted = parse(e)?;
                // Model-free evidence is sticky: attempts a model-free session answered stay in
                // the run whatever upstream a later session resumes with.
                p.model_free_evidence |=
                    self.started.as_ref().is_some_and(|s| s.model_free_evidence);
                if self.slots.is_empty() {
                    self.slots = p.slots.clone();
                } else if self.slots != p.slots {
                    return Err(malformed(e, "a resumed session changed the schedule"));
                }
                self.sessions += 1;
                self.upstreams.push(p.upstream.clone());
                self.started = Some(p);
            }
            events::ATTEMPT_STARTED => {
                let p: AttemptStarted = parse(e)?;
                let list = self.attempts.entry(p.slot.clone()).or_default();
                let expected = list.len() as u32 + 1;
                if p.number != expected {
                    return Err(malformed(
                        e,
                        format!(
                            "attempt {} is not contiguous: expected number {expected}",
                            p.attempt
                        ),
                    ));
                }
                if let Some(last) = list.last()
                    && last.outcome.is_none()
                {
                    return Err(malformed(
                        e,
                        format!("{} started while {} had no outcome", p.attempt, last.id()),
                    ));
                }
                list.push(AttemptState {
                    slot: p.slot,
                    number: p.number,
                    rerun_of: p.rerun_of,
                    started_seq: e.seq,
                    model_call_seqs: Vec::new(),
                    calls_started: 0,
                    outcome: None,
                });
            }
            events::MODEL_CALL | events::MODEL_CALL_STARTED => {
                let v = e
                    .payload_json()
                    .map_err(|err| malformed(e, err.to_string()))?;
                let id = v
                    .get("attempt")
                    .and_then(|a| a.as_str())
                    .ok_or_else(|| malformed(e, format!("{} without attempt", e.kind)))?;
                if let Some(a) = self.attempt_mut(id) {
                    if e.kind == events::MODEL_CALL {
                        a.model_call_seqs.push(e.seq);
                        self.spend_usd += v
                            .pointer("/record/spend_usd")
                            .and_then(|x| x.as_f64())
                            .filter(|x| x.is_finite())
                            .unwrap_or(0.0)
                            .max(0.0);
                    } else {
                        a.calls_started += 1;
                    }
                }
            }
            events::ATTEMPT_OUTCOME => {
                let p: AttemptOutcome = parse(e)?;
                let a = self
                    .attempt_mut(&p.attempt)
                    .ok_or_else(|| malformed(e, format!("outcome for unknown {}", p.attempt)))?;
                if a.outcome.is_some() {
                    return Err(malformed(e, format!("second outcome for {}", p.attempt)));
                }
                a.outcome = Some(p);
            }
            // Reruns are counted from attempt numbers (see `summary`): an old ledger may hold a
            // `rerun` entry twice for one attempt (a crash between two separate appends).
            events::RERUN => {}
            events::RUN_FINISHED => self.finished_sessions += 1,
            events::REPORT => self.report_entries += 1,
            _ => {}
        }
        Ok(())
    }

    /// The attempt with this id, if the ledger has started it.
    pub fn attempt(&self, id: &str) -> Option<&AttemptState> {
        let id: AttemptId = id.parse().ok()?;
        self.attempts
            .get(id.slot())?
            .iter()
            .find(|a| a.number == id.number())
    }

    fn attempt_mut(&mut self, id: &str) -> Option<&mut AttemptState> {
        let id: AttemptId = id.parse().ok()?;
        self.attempts
            .get_mut(id.slot())?
            .iter_mut()
            .find(|a| a.number == id.number())
    }

    pub fn rules(&self) -> RerunRules {
        match &self.started {
            Some(s) => RerunRules {
                codes: s.rerunnable_codes.iter().cloned().collect(),
                max_reruns: s.max_reruns,
                max_infra_attempts: s.max_infra_attempts,
            },
            None => RerunRules {
                codes: BTreeSet::new(),
                max_reruns: 0,
                max_infra_attempts: 1,
            },
        }
    }

    /// Attempts that started and never got an outcome (lost to a crash or still running).
    pub fn unfinished(&self) -> Vec<&AttemptState> {
        self.attempts
            .values()
            .flat_map(|v| v.iter())
            .filter(|a| a.outcome.is_none())
            .collect()
    }

    pub fn status_of(&self, slot: &SlotRecord, rules: &RerunRules) -> SlotStatus {
        let Some(list) = self.attempts.get(&slot.id) else {
            return SlotStatus::Pending;
        };
        let Some(last) = list.last() else {
            return SlotStatus::Pending;
        };
        let Some(out) = &last.outcome else {
            return SlotStatus::Running {
                number: last.number,
            };
        };
        // Attempts that failed before any container of theirs existed are retried apart: the
        // agent never ran, so they cannot be a redraw it chose, and they use none of the reruns.
        let unprepared = list.iter().filter(|a| is_unprepared(a)).count() as u32;
        if is_unprepared(last) {
            if unprepared < MAX_PREPARATION_FAILURES {
                return SlotStatus::NeedsRerun {
                    next: last.number + 1,
                    code: out
                        .infra_fault
                        .map_or(out.outcome.as_str(), FaultCode::as_str)
                        .to_owned(),
                };
            }
            // Out of preparation retries: the slot ends on this fault, whatever its phase.
            return match slot.phase {
                Phase::Control | Phase::Infrastructure => SlotStatus::Failed {
                    number: last.number,
                },
                Phase::Statistical => SlotStatus::Final {
                    number: last.number,
                    outcome: out.outcome,
                },
            };
        }
        let counted = list.len() as u32 - unprepared;
        let reruns_left = counted <= rules.max_reruns;
        match slot.phase {
            // An infrastructure slot is done once an attempt completed; a control attempt's score
            // is final whatever it is (a failing grade is the finding), so only an infrastructure
            // fault (the grader never ran) is rerun. Both rerun up to the infrastructure limit.
            Phase::Infrastructure | Phase::Control => {
                let done = match slot.phase {
                    Phase::Infrastructure => out.outcome == Outcome::Completed,
                    _ => out.outcome != Outcome::InfraFault,
                };
                if done {
                    SlotStatus::Final {
                        number: last.number,
                        outcome: out.outcome,
                    }
                } else if counted < rules.max_infra_attempts {
                    SlotStatus::NeedsRerun {
                        next: last.number + 1,
                        code: out
                            .infra_fault
                            .map_or(out.outcome.as_str(), FaultCode::as_str)
                            .to_owned(),
                    }
                } else {
                    SlotStatus::Failed {
                        number: last.number,
                    }
                }
            }
            Phase::Statistical => {
                if out.outcome == Outcome::InfraFault
                    && let Some(code) = out.infra_fault
                    && is_rerunnable(code, rules)
                    && reruns_left
                {
                    return SlotStatus::NeedsRerun {
                        next: last.number + 1,
                        code: code.to_string(),
                    };
                }
                SlotStatus::Final {
                    number: last.number,
                    outcome: out.outcome,
                }
            }
        }
    }

    /// Status of every slot, in schedule order.
    pub fn statuses(&self) -> Vec<(&SlotRecord, SlotStatus)> {
        let rules = self.rules();
        self.slots
            .iter()
            .map(|s| (s, self.status_of(s, &rules)))
            .collect()
    }

    pub fn summary(&self) -> StatusSummary {
        let mut sum = StatusSummary {
            spend_usd: self.spend_usd,
            ..StatusSummary::default()
        };
        let rules = self.rules();
        if let Some(s) = &self.started {
            sum.matrix = s.matrix.clone();
            sum.identity = s.identity.clone();
            sum.fixture_evidence = s.fixture_evidence;
            sum.model_free_evidence = s.model_free_evidence;
        }
        sum.sessions = self.sessions;
        sum.reruns = self
            .attempts
            .values()
            .flat_map(|v| v.iter())
            .filter(|a| a.number > 1)
            .count() as u64;
        let mut infra_done = true;
        for slot in &self.slots {
            let status = self.status_of(slot, &rules);
            match slot.phase {
                // Control slots are counted with the infrastructure phase they belong to.
                Phase::Control | Phase::Infrastructure => {
                    sum.infra_total += 1;
                    match status {
                        SlotStatus::Final { .. } => sum.infra_completed += 1,
                        SlotStatus::Failed { .. } => {
                            infra_done = false;
                            sum.infra_failed += 1;
                        }
                        _ => infra_done = false,
                    }
                }
                Phase::Statistical => {
                    let group = sum
                        .groups
                        .entry(format!("{}/{}", slot.suite, slot.arm))
                        .or_default();
                    sum.total += 1;
                    group.total += 1;
                    match status {
                        SlotStatus::Final { outcome, .. } => {
                            sum.resolved += 1;
                            if outcome != Outcome::InfraFault {
                                sum.done += 1;
                                group.done += 1;
                            }
                        }
                        SlotStatus::Running { .. } => {}
                        _ => {}
                    }
                }
            }
        }
        for list in self.attempts.values() {
            for a in list {
                match &a.outcome {
                    None => sum.running.push(a.id()),
                    Some(o) => {
                        *sum.by_outcome
                            .entry(o.outcome.as_str().to_owned())
                            .or_default() += 1;
                        if o.outcome == Outcome::InfraFault {
                            sum.infra_faults += 1;
                            let code = o.infra_fault.map_or_else(String::new, |c| c.to_string());
                            *sum.infra_fault_codes.entry(code).or_default() += 1;
                        }
                        sum.attempts += 1;
                        let slot = self.slots.iter().find(|s| s.id == a.slot);
                        // Infrastructure attempts are not part of any statistical group; their
                        // tokens are kept apart so the groups and `tokens` add up to the
                        // statistical attempts alone.
                        if slot.is_none_or(|s| s.phase != Phase::Statistical) {
                            sum.infra_tokens.add(&o.tokens);
                            continue;
                        }
                        sum.tokens.add(&o.tokens);
                        if let Some(slot) = slot {
                            let g = sum
                                .groups
                                .entry(format!("{}/{}", slot.suite, slot.arm))
                                .or_default();
                            g.tokens += o.tokens.total();
                            if o.outcome == Outcome::InfraFault {
                                g.infra_faults += 1;
                            }
                        }
                    }
                }
            }
        }
        sum.infra_complete = infra_done && sum.infra_total > 0 || sum.infra_total == 0;
        sum.complete = !self.slots.is_empty() && sum.infra_complete && sum.resolved == sum.total;
        sum
    }
}

pub use eval_core::fault::MAX_PREPARATION_FAILURES;

/// An attempt that ended in an infra fault before any container of it existed, of a code
/// [`FaultCode::retried_before_container`] retries.
fn is_unprepared(a: &AttemptState) -> bool {
    a.outcome.as_ref().is_some_and(|o| {
        o.before_container
            && o.outcome == Outcome::InfraFault
            && !o.closed_by_controller
            && !a.may_have_spent()
            && o.infra_fault
                .is_some_and(FaultCode::retried_before_container)
    })
}

/// `interrupted_before_model_call` is rerun by rule (nothing was spent and the agent never got
/// a chance to act), and so is `upstream_account_refused` (the run's key or balance failed,
/// which stopped the run; no agent can cause it); every other code only when the protocol
/// lists it.
pub fn is_rerunnable(code: FaultCode, rules: &RerunRules) -> bool {
    matches!(
        code,
        FaultCode::InterruptedBeforeModelCall | FaultCode::UpstreamAccountRefused
    ) || rules.codes.contains(&code)
}

/// How a started-but-unfinished attempt is closed on resume or Ctrl-C.
pub fn closing_outcome(a: &AttemptState) -> (Outcome, Option<FaultCode>) {
    if !a.may_have_spent() {
        (
            Outcome::InfraFault,
            Some(FaultCode::InterruptedBeforeModelCall),
        )
    } else {
        (Outcome::Interrupted, None)
    }
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct GroupSummary {
    pub total: u64,
    pub done: u64,
    pub infra_faults: u64,
    pub tokens: u64,
}

/// What `eval status --json` prints.
#[derive(Clone, Debug, Default, Serialize)]
pub struct StatusSummary {
    pub matrix: String,
    pub identity: String,
    pub fixture_evidence: bool,
    /// The run's upstream is the built-in model-free one (evidence only for a model-free protocol).
    pub model_free_evidence: bool,
    pub sessions: u32,
    /// Statistical slots.
    pub total: u64,
    /// Statistical slots with a final non-infra outcome.
    pub done: u64,
    /// Statistical slots resolved (done, or a final non-rerunnable infra fault).
    pub resolved: u64,
    pub complete: bool,
    pub infra_total: u64,
    pub infra_completed: u64,
    pub infra_failed: u64,
    pub infra_complete: bool,
    /// Attempts that ended as `infra_fault`.
    pub infra_faults: u64,
    pub infra_fault_codes: BTreeMap<String, u64>,
    /// Attempts numbered above 1 (counted from numbers, not from `rerun` entries).
    pub reruns: u64,
    /// Finished attempts of every phase (infrastructure included), and their outcomes.
    pub attempts: u64,
    pub by_outcome: BTreeMap<String, u64>,
    pub running: Vec<String>,
    /// Tokens of the statistical attempts (every attempt of a statistical slot, reruns too).
    pub tokens: TokenCounts,
    /// Tokens of the infrastructure attempts, kept out of `tokens` and `groups`.
    pub infra_tokens: TokenCounts,
    /// USD of every recorded model call (all phases): the run budget's spend so far.
    pub spend_usd: f64,
    /// `suite/arm` → progress of its statistical slots (infrastructure slots are in no group).
    pub groups: BTreeMap<String, GroupSummary>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::*;
    use eval_evidence::ledger::{Digest, entry_hash};

    pub(crate) struct Builder {
        pub entries: Vec<Entry>,
    }

    impl Builder {
        pub fn new() -> Self {
            Self {
                entries: Vec::new(),
            }
        }

        pub fn push<T: serde::Serialize>(&mut self, kind: &str, p: &T) -> &mut Self {
            let payload = eval_evidence::canonical::to_vec(p).unwrap();
            let prev = self.entries.last().map(|e| e.hash).unwrap_or(Digest::ZERO);
            let seq = self.entries.len() as u64 + 1;
            self.entries.push(Entry {
                seq,
                prev,
                kind: kind.into(),
                hash: entry_hash(&prev, seq, kind, &payload),
                payload,
                recorded_at: String::new(),
            });
            self
        }
    }

    pub(crate) fn slots() -> Vec<SlotRecord> {
        let mut v = vec![SlotRecord {
            id: "infra-s-t1-a-r0".into(),
            phase: Phase::Infrastructure,
            suite: "s".into(),
            task: "t1".into(),
            arm: "a".into(),
            rep: 0,
        }];
        for (task, arm) in [("t1", "a"), ("t1", "b"), ("t2", "a")] {
            v.push(SlotRecord {
                id: format!("stat-s-{task}-{arm}-r1"),
                phase: Phase::Statistical,
                suite: "s".into(),
                task: task.into(),
                arm: arm.into(),
                rep: 1,
            });
        }
        v
    }

    pub(crate) fn started(codes: &[&str], max_reruns: u32) -> RunStarted {
        RunStarted {
            schema: SCHEMA,
            session: 1,
            matrix: "m".into(),
            protocol: "p".into(),
            identity: "sha256:00".into(),
            driver: "sha256:11".into(),
            upstream: UpstreamRecord {
                kind: "fixture".into(),
                url: "http://127.0.0.1:1".into(),
                ..Default::default()
            },
            fixture_evidence: true,
            model_free_evidence: false,
            concurrency: 1,
            rerunnable_codes: codes.iter().map(|s| s.parse().unwrap()).collect(),
            max_reruns,
            max_infra_attempts: max_reruns + 1,
            slots: slots(),
            started_at: now_rfc3339(),
            preconditions: vec![],
        }
    }

    pub(crate) fn start(slot: &str, n: u32, rerun_of: Option<u32>) -> AttemptStarted {
        AttemptStarted {
            schema: SCHEMA,
            attempt: AttemptId::new(slot, n).to_string(),
            slot: slot.into(),
            number: n,
            phase: if slot.starts_with("infra") {
                Phase::Infrastructure
            } else {
                Phase::Statistical
            },
            suite: "s".into(),
            task: "t".into(),
            arm: "a".into(),
            rep: 1,
            rerun_of,
            session: 1,
            started_at: now_rfc3339(),
        }
    }

    pub(crate) fn outcome(slot: &str, n: u32, o: Outcome, code: Option<&str>) -> AttemptOutcome {
        AttemptOutcome {
            schema: SCHEMA,
            attempt: AttemptId::new(slot, n).to_string(),
            slot: slot.into(),
            number: n,
            arm: "a".into(),
            outcome: o,
            infra_fault: code.map(|c| c.parse().unwrap()),
            detail: None,
            image: None,
            attestation: None,
            bundle_digest: None,
            model_calls: vec![],
            model_turns: 0,
            incomplete: None,
            tokens: TokenCounts {
                input: 10,
                output: 5,
                cached: 0,
                reasoning: 0,
            },
            oracle_calls: 0,
            clarification_questions: 0,
            harness: None,
            accounting: None,
            metrics: BTreeMap::new(),
            artifacts: ArtifactDigests::default(),
            duration_seconds: 1.0,
            prepare_seconds: 0.0,
            container_seconds: 0.5,
            upstream: "fixture".into(),
            closed_by_controller: false,
            before_container: false,
            finished_at: now_rfc3339(),
        }
    }

    fn call(attempt: &str) -> serde_json::Value {
        serde_json::json!({"schema": 1, "attempt": attempt, "role": "agent"})
    }

    #[test]
    fn statuses_follow_the_rerun_rules() {
        let mut b = Builder::new();
        b.push(RUN_STARTED, &started(&["container_runtime_failure"], 2));
        // infra slot: agent_error then completed (infra slots rerun after any failure).
        b.push(ATTEMPT_STARTED, &start("infra-s-t1-a-r0", 1, None));
        b.push(
            ATTEMPT_OUTCOME,
            &outcome("infra-s-t1-a-r0", 1, Outcome::AgentError, None),
        );
        b.push(ATTEMPT_STARTED, &start("infra-s-t1-a-r0", 2, Some(1)));
        b.push(
            ATTEMPT_OUTCOME,
            &outcome("infra-s-t1-a-r0", 2, Outcome::Completed, None),
        );
        // stat slot 1: a listed fault → needs rerun.
        b.push(ATTEMPT_STARTED, &start("stat-s-t1-a-r1", 1, None));
        b.push(
            ATTEMPT_OUTCOME,
            &outcome(
                "stat-s-t1-a-r1",
                1,
                Outcome::InfraFault,
                Some("container_runtime_failure"),
            ),
        );
        // stat slot 2: an unlisted fault → final.
        b.push(ATTEMPT_STARTED, &start("stat-s-t1-b-r1", 1, None));
        b.push(
            ATTEMPT_OUTCOME,
            &outcome(
                "stat-s-t1-b-r1",
                1,
                Outcome::InfraFault,
                Some("attestation_mismatch"),
            ),
        );
        // stat slot 3: timeout is an outcome, never rerun.
        b.push(ATTEMPT_STARTED, &start("stat-s-t2-a-r1", 1, None));
        b.push(
            ATTEMPT_OUTCOME,
            &outcome("stat-s-t2-a-r1", 1, Outcome::Timeout, None),
        );

        let st = RunState::replay(&b.entries).unwrap();
        let s: Vec<SlotStatus> = st.statuses().into_iter().map(|(_, s)| s).collect();
        assert_eq!(
            s,
            vec![
                SlotStatus::Final {
                    number: 2,
                    outcome: Outcome::Completed
                },
                SlotStatus::NeedsRerun {
                    next: 2,
                    code: "container_runtime_failure".into()
                },
                SlotStatus::Final {
                    number: 1,
                    outcome: Outcome::InfraFault
                },
                SlotStatus::Final {
                    number: 1,
                    outcome: Outcome::Timeout
                },
            ]
        );
        let sum = st.summary();
        assert_eq!(sum.total, 3);
        assert_eq!(sum.done, 1);
        assert_eq!(sum.resolved, 2);
        assert!(!sum.complete);
        assert_eq!(sum.infra_faults, 2);
        assert_eq!(sum.by_outcome["agent_error"], 1);
        // Two infrastructure attempts, three statistical ones (10 input tokens each): the
        // statistical totals and groups hold only the latter.
        assert_eq!(sum.tokens.input, 30);
        assert_eq!(sum.infra_tokens.input, 20);
        let group_tokens: u64 = sum.groups.values().map(|g| g.tokens).sum();
        assert_eq!(group_tokens, 45);
        assert_eq!(sum.groups.values().map(|g| g.total).sum::<u64>(), 3);
    }

    #[test]
    fn infrastructure_slots_make_no_status_group_of_their_own() {
        // An arm that only has an infrastructure slot must not appear as a statistical group.
        let mut b = Builder::new();
        let mut st = started(&[], 0);
        st.slots[0].arm = "only-infra".into();
        b.push(RUN_STARTED, &st);
        b.push(ATTEMPT_STARTED, &start("infra-s-t1-a-r0", 1, None));
        b.push(
            ATTEMPT_OUTCOME,
            &outcome("infra-s-t1-a-r0", 1, Outcome::Completed, None),
        );
        let sum = RunState::replay(&b.entries).unwrap().summary();
        assert!(!sum.groups.contains_key("s/only-infra"), "{:?}", sum.groups);
        assert_eq!(sum.tokens.total(), 0);
        assert_eq!(sum.infra_tokens.total(), 15);
    }

    #[test]
    fn reruns_are_counted_by_attempt_numbers_not_by_rerun_entries() {
        // A ledger written before `rerun` and `attempt_started` were one batch may hold the same
        // `rerun` twice (a crash between the two appends, then resume announced it again).
        let slot = "stat-s-t1-a-r1";
        let rerun = Rerun {
            schema: SCHEMA,
            attempt: AttemptId::new(slot, 2).to_string(),
            slot: slot.into(),
            number: 2,
            reruns: AttemptId::new(slot, 1).to_string(),
            rerun_of: 1,
            code: FaultCode::InterruptedBeforeModelCall.to_string(),
            reason: "r".into(),
        };
        let mut b = Builder::new();
        b.push(RUN_STARTED, &started(&[], 2));
        b.push(ATTEMPT_STARTED, &start(slot, 1, None));
        b.push(
            ATTEMPT_OUTCOME,
            &outcome(
                slot,
                1,
                Outcome::InfraFault,
                Some("interrupted_before_model_call"),
            ),
        );
        b.push(RERUN, &rerun);
        b.push(RUN_STARTED, &started(&[], 2));
        b.push(RERUN, &rerun);
        b.push(ATTEMPT_STARTED, &start(slot, 2, Some(1)));
        b.push(ATTEMPT_OUTCOME, &outcome(slot, 2, Outcome::Completed, None));
        let sum = RunState::replay(&b.entries).unwrap().summary();
        assert_eq!(sum.reruns, 1);
        assert_eq!(sum.attempts, 2);
    }

    #[test]
    fn rerun_limit_is_enforced() {
        let mut b = Builder::new();
        b.push(RUN_STARTED, &started(&["filesystem_capacity"], 1));
        let slot = "stat-s-t1-a-r1";
        b.push(ATTEMPT_STARTED, &start(slot, 1, None));
        b.push(
            ATTEMPT_OUTCOME,
            &outcome(slot, 1, Outcome::InfraFault, Some("filesystem_capacity")),
        );
        b.push(ATTEMPT_STARTED, &start(slot, 2, Some(1)));
        b.push(
            ATTEMPT_OUTCOME,
            &outcome(slot, 2, Outcome::InfraFault, Some("filesystem_capacity")),
        );
        let st = RunState::replay(&b.entries).unwrap();
        let rec = st.slots.iter().find(|s| s.id == slot).unwrap();
        assert_eq!(
            st.status_of(rec, &st.rules()),
            SlotStatus::Final {
                number: 2,
                outcome: Outcome::InfraFault
            }
        );
        // An infra slot out of reruns is Failed, which blocks statistical slots.
        let mut b = Builder::new();
        b.push(RUN_STARTED, &started(&[], 0));
        b.push(ATTEMPT_STARTED, &start("infra-s-t1-a-r0", 1, None));
        b.push(
            ATTEMPT_OUTCOME,
            &outcome("infra-s-t1-a-r0", 1, Outcome::AgentError, None),
        );
        let st = RunState::replay(&b.entries).unwrap();
        assert_eq!(st.statuses()[0].1, SlotStatus::Failed { number: 1 });
        assert!(!st.summary().infra_complete);
    }

    /// The summary's spend is every recorded call's price, infrastructure slots included (the
    /// run budget counts them too); a started call without its record adds nothing yet.
    #[test]
    fn the_summary_spends_what_the_recorded_calls_were_priced() {
        let priced = |attempt: &str, usd: f64| {
            let mut c = call(attempt);
            c["record"] = serde_json::json!({"spend_usd": usd});
            c
        };
        let mut b = Builder::new();
        b.push(RUN_STARTED, &started(&[], 2));
        b.push(ATTEMPT_STARTED, &start("infra-s-t1-a-r0", 1, None));
        b.push(MODEL_CALL, &priced("infra-s-t1-a-r0#1", 0.5));
        b.push(ATTEMPT_STARTED, &start("stat-s-t1-a-r1", 1, None));
        b.push(MODEL_CALL_STARTED, &call("stat-s-t1-a-r1#1"));
        b.push(MODEL_CALL, &priced("stat-s-t1-a-r1#1", 0.25));
        b.push(MODEL_CALL_STARTED, &call("stat-s-t1-a-r1#1"));
        let st = RunState::replay(&b.entries).unwrap();
        assert_eq!(st.summary().spend_usd, 0.75);
    }

    #[test]
    fn a_call_started_but_never_finished_counts_as_spent() {
        // SIGKILL after the proxy forwarded a call but before its record arrived: the committed
        // `model_call_started` entry is enough to make the interruption final, never a rerun.
        let mut b = Builder::new();
        b.push(RUN_STARTED, &started(&[], 2));
        b.push(ATTEMPT_STARTED, &start("stat-s-t1-a-r1", 1, None));
        b.push(MODEL_CALL_STARTED, &call("stat-s-t1-a-r1#1"));
        let st = RunState::replay(&b.entries).unwrap();
        let a = st.attempt("stat-s-t1-a-r1#1").unwrap();
        assert!(a.model_call_seqs.is_empty());
        assert!(a.may_have_spent());
        assert_eq!(closing_outcome(a), (Outcome::Interrupted, None));
    }

    #[test]
    fn unfinished_attempts_close_by_the_model_call_rule() {
        let mut b = Builder::new();
        b.push(RUN_STARTED, &started(&[], 2));
        b.push(ATTEMPT_STARTED, &start("stat-s-t1-a-r1", 1, None));
        b.push(ATTEMPT_STARTED, &start("stat-s-t1-b-r1", 1, None));
        b.push(MODEL_CALL, &call("stat-s-t1-b-r1#1"));
        let st = RunState::replay(&b.entries).unwrap();
        let open = st.unfinished();
        assert_eq!(open.len(), 2);
        let a = open.iter().find(|a| a.slot == "stat-s-t1-a-r1").unwrap();
        let b2 = open.iter().find(|a| a.slot == "stat-s-t1-b-r1").unwrap();
        assert_eq!(
            closing_outcome(a),
            (
                Outcome::InfraFault,
                Some(FaultCode::InterruptedBeforeModelCall)
            )
        );
        assert_eq!(closing_outcome(b2), (Outcome::Interrupted, None));
        assert_eq!(st.summary().running.len(), 2);

        // After closing, the first needs a rerun (by rule, though the protocol lists no codes)
        // and the second is final.
        b.push(
            ATTEMPT_OUTCOME,
            &outcome(
                "stat-s-t1-a-r1",
                1,
                Outcome::InfraFault,
                Some("interrupted_before_model_call"),
            ),
        );
        b.push(
            ATTEMPT_OUTCOME,
            &outcome("stat-s-t1-b-r1", 1, Outcome::Interrupted, None),
        );
        let st = RunState::replay(&b.entries).unwrap();
        let s: Vec<SlotStatus> = st.statuses().into_iter().map(|(_, s)| s).collect();
        assert!(matches!(s[1], SlotStatus::NeedsRerun { next: 2, .. }));
        assert_eq!(
            s[2],
            SlotStatus::Final {
                number: 1,
                outcome: Outcome::Interrupted
            }
        );
    }

    #[test]
    fn broken_rules_are_refused() {
        // Non-contiguous attempt numbers.
        let mut b = Builder::new();
        b.push(RUN_STARTED, &started(&[], 2));
        b.push(ATTEMPT_STARTED, &start("stat-s-t1-a-r1", 2, None));
        assert!(RunState::replay(&b.entries).is_err());
        // Two outcomes for one attempt.
        let mut b = Builder::new();
        b.push(RUN_STARTED, &started(&[], 2));
        b.push(ATTEMPT_STARTED, &start("stat-s-t1-a-r1", 1, None));
        b.push(
            ATTEMPT_OUTCOME,
            &outcome("stat-s-t1-a-r1", 1, Outcome::Timeout, None),
        );
        b.push(
            ATTEMPT_OUTCOME,
            &outcome("stat-s-t1-a-r1", 1, Outcome::Completed, None),
        );
        assert!(RunState::replay(&b.entries).is_err());
        // A rerun started while the previous attempt was still open.
        let mut b = Builder::new();
        b.push(RUN_STARTED, &started(&[], 2));
        b.push(ATTEMPT_STARTED, &start("stat-s-t1-a-r1", 1, None));
        b.push(ATTEMPT_STARTED, &start("stat-s-t1-a-r1", 2, Some(1)));
        assert!(RunState::replay(&b.entries).is_err());
        // A newer schema.
        let mut b = Builder::new();
        let mut s = started(&[], 2);
        s.schema = 99;
        b.push(RUN_STARTED, &s);
        assert!(matches!(
            RunState::replay(&b.entries),
            Err(ReplayError::NewerSchema { .. })
        ));
    }

    #[test]
    fn complete_when_every_slot_is_resolved() {
        let mut b = Builder::new();
        b.push(RUN_STARTED, &started(&[], 0));
        for s in slots() {
            b.push(ATTEMPT_STARTED, &start(&s.id, 1, None));
            b.push(
                ATTEMPT_OUTCOME,
                &outcome(&s.id, 1, Outcome::Completed, None),
            );
        }
        let sum = RunState::replay(&b.entries).unwrap().summary();
        assert!(sum.complete);
        assert_eq!(sum.done, 3);
        assert_eq!(sum.by_outcome["completed"], 4);
    }
}
