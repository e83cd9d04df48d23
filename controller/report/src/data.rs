//! Builds the report input ([`RunData`]) from a run's ledger — the only place reports read it.
//! The ledger is verified first; a broken chain still yields data (with `ledger_verified =
//! false` and the reason) so the report can say what is wrong, and `eval report` exits 3.
//!
//! Before anything is computed, two checks refuse outright (an `Integrity` error, so nothing is
//! written, appended or recorded): when the freeze preregisters a public key, every checkpoint
//! must verify with it and a finished run must be signed to its end; and every artifact the
//! ledger references must still hash to its digest.

use eval_core::fault::FaultCode;
use eval_evidence::ledger::{self, Digest, Entry, LedgerReader};
use eval_evidence::report::{
    self as rd, AttemptData, LedgerHeadRef, RunData, SignedEvidence, SlotData, StatPlan, SuiteData,
};
use eval_protocols::{Project, Registry};
use eval_runlog::events;
use eval_runlog::replay::RunState;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What only the running binary knows and the report needs to judge drift since the freeze:
/// its own driver digest and how it resolves an arm's image (both the controller's, handed in
/// so this crate never builds images nor knows how the binary was built).
pub struct Running<'a> {
    pub driver: Digest,
    pub resolve_image: eval_protocols::ImageResolver<'a>,
}

/// Why a run's report input could not be assembled. Each kind's exit status is decided in
/// `exit::report_status`: the project's files and a run that is not there are input; the
/// ledger, its signatures, its artifacts and the registry are evidence.
#[derive(Debug, thiserror::Error)]
pub enum ReportDataError {
    #[error("no run of matrix {matrix:?} in {state} (no ledger at {path})")]
    NoRun {
        matrix: String,
        state: String,
        path: String,
    },
    #[error("{path}: no run_started entry")]
    NoRunStarted { path: PathBuf },
    /// The protocol the run names does not load from the project.
    #[error("{0}")]
    Protocol(eval_protocols::ProtocolError),
    #[error("arm {arm}: {runtime}: {source}")]
    RuntimeDef {
        arm: String,
        runtime: String,
        #[source]
        source: Box<eval_runtimes::definition::DefinitionError>,
    },
    /// The ledger cannot be verified or read at all.
    #[error("{0}")]
    Ledger(#[from] eval_evidence::LedgerError),
    /// The registry cannot be read (it cannot then say whether the protocol is frozen).
    #[error("{0}")]
    Registry(eval_protocols::ProtocolError),
    /// An entry replay accepted does not parse here: the attempt would be missing.
    #[error("ledger seq {seq} (attempt_started): {source}")]
    AttemptStarted {
        seq: u64,
        #[source]
        source: serde_json::Error,
    },
    /// An artifact the ledger references is missing or altered (`seq` references it).
    #[error("{message}")]
    Artifact { seq: u64, message: String },
    #[error("cannot read the preregistered public key of {protocol}: {source}")]
    PublicKeyUnreadable {
        protocol: String,
        #[source]
        source: eval_protocols::ProtocolError,
    },
    #[error("the preregistered public key of {protocol} cannot verify signatures: {source}")]
    PublicKeyUnusable {
        protocol: String,
        #[source]
        source: eval_evidence::signing::SigningError,
    },
    /// `--public-key` names another key than the one the freeze preregisters.
    #[error(
        "--public-key {named}: protocol {protocol} preregisters {frozen}; only that key can make its evidence signed"
    )]
    NamedKeyNotPreregistered {
        protocol: String,
        named: String,
        frozen: String,
    },
    #[error(
        "{path}: the evidence does not verify with the preregistered public key {key}: {message} ({reason}); no report was computed"
    )]
    SignaturesDoNotVerify {
        path: PathBuf,
        key: String,
        message: String,
        reason: &'static str,
    },
}

/// Reads `STATE/<matrix>/ledger.sqlite`, verifies it, and assembles the report input with the
/// protocol (from the project at `root`), the freeze and the registry.
pub fn build(
    root: &Path,
    state: &Path,
    matrix: &str,
    running: &Running<'_>,
) -> Result<RunData, ReportDataError> {
    build_with_key(root, state, matrix, None, running)
}

/// [`build`] verifying the signatures with `named` (`eval report --public-key`) when the freeze
/// preregisters no key; a named key other than a preregistered one is refused.
pub fn build_with_key(
    root: &Path,
    state: &Path,
    matrix: &str,
    named: Option<&eval_evidence::signing::PublicKey>,
    running: &Running<'_>,
) -> Result<RunData, ReportDataError> {
    let path = eval_runlog::layout::ledger_path(state, matrix);
    if !path.exists() {
        return Err(ReportDataError::NoRun {
            matrix: matrix.into(),
            state: state.display().to_string(),
            path: path.display().to_string(),
        });
    }
    // The ledger is read once (one SELECT: one SQLite read transaction) and every check — chain,
    // signatures, artifacts — and the report itself run on that snapshot: a file swapped
    // between two opens could otherwise show one ledger to the checks and another to the report.
    let all = LedgerReader::open(&path).and_then(|r| r.entries())?;
    test_swap_hook(&path);
    let verified = ledger::verify_entries(&all, None);
    let mut problems: Vec<String> = verified.error.iter().map(|e| e.to_string()).collect();
    // Only the verified prefix is evidence.
    let entries = &all[..all.len().min(verified.entries as usize)];
    let st = match RunState::replay(entries) {
        Ok(st) => st,
        Err(e) => {
            problems.push(e.to_string());
            RunState::default()
        }
    };
    let started = st
        .started
        .clone()
        .ok_or_else(|| ReportDataError::NoRunStarted { path: path.clone() })?;
    let signed_evidence = verify_signatures(state, &path, &all, &started, named)?;
    let artifacts_verified =
        verify_artifacts_at(entries, &eval_runlog::layout::artifacts_dir(state, matrix))
            .map_err(|(seq, message)| ReportDataError::Artifact { seq, message })?;
    let project = Project::open(root);
    let loaded = project
        .load(&started.protocol)
        .map_err(ReportDataError::Protocol)?;
    let p = &loaded.protocol;
    let (drift, retired) = freeze_drift(&project, state, &started, running)?;
    let suites = suite_data(&loaded);
    let slots = slot_data(&st);
    let declared = declared_metrics(root, p)?;
    let attempts = attempt_data(entries, &st, &loaded, &started, &declared)?;
    let wire_anomalies = transcript_cross_checks(
        entries,
        &st,
        &loaded,
        &eval_runlog::layout::artifacts_dir(state, matrix),
    );
    Ok(RunData {
        version: rd::RUN_DATA_VERSION,
        matrix: started.matrix.clone(),
        protocol: started.protocol.clone(),
        identity: started.identity.clone(),
        driver_digest: started.driver.clone(),
        ledger_head: LedgerHeadRef {
            seq: verified.head.seq,
            hash: verified.head.hash.to_string(),
        },
        ledger_verified: verified.ok && problems.is_empty(),
        ledger_problems: problems,
        freeze_drift: drift,
        identity_retired: retired,
        // Any session on the fixture makes the whole run fixture evidence, not just the latest.
        fixture_upstream: started.fixture_evidence
            || st.upstreams.iter().any(|u| u.kind == "fixture"),
        upstream: upstream_evidence(p, &st.upstreams),
        // Replay keeps it sticky across sessions (`RunState::apply`).
        model_free_upstream: started.model_free_evidence,
        model_free_protocol: p.model_free,
        wire_anomalies,
        preconditions: precondition_evidence(&started),
        // The fixture's report never releases anyway; others re-check by signed evidence now.
        preconditions_unmet: if started.fixture_evidence {
            Vec::new()
        } else {
            eval_runlog::preconditions::recheck(state, p)
        },
        signed_evidence,
        allow_unsigned: false,
        artifacts_verified: Some(artifacts_verified),
        plan: stat_plan(p),
        gates: p.gates.clone(),
        power: crate::power::power_rows(&loaded),
        rerunnable_fault_codes: {
            let mut c = p.reruns.codes.clone();
            c.push(FaultCode::InterruptedBeforeModelCall);
            c.push(FaultCode::UpstreamAccountRefused);
            c
        },
        max_reruns_per_slot: Some(p.reruns.max_reruns_per_slot),
        max_infra_attempts: Some(p.reruns.max_infra_attempts.max(1)),
        suites,
        slots,
        attempts,
        sequential: p.sequential.clone(),
        looks_taken: eval_runlog::looks::looks_taken(entries),
    })
}

/// The protocol's preregistered upstream beside the URL of every session that used neither the
/// fixture nor the model-free upstream (which have rules of their own), for the report's
/// upstream check (the protocol is the frozen one: drift is checked beside this).
fn upstream_evidence(
    p: &eval_protocols::Protocol,
    sessions: &[events::UpstreamRecord],
) -> rd::UpstreamEvidence {
    use eval_protocols::protocol::normalize_url;
    rd::UpstreamEvidence {
        preregistered: p.upstream.as_ref().map(|u| u.normalized_url().to_owned()),
        tls_spki_sha256: p
            .upstream
            .as_ref()
            .map(|u| u.tls_spki_sha256.clone())
            .unwrap_or_default(),
        sessions: sessions
            .iter()
            .filter(|u| u.kind != "fixture" && u.kind != eval_runlog::layout::MODEL_FREE)
            .map(|u| normalize_url(&u.url).to_owned())
            .collect(),
    }
}

/// Whether the run's evidence still stands on its freeze: the drift `eval verify` would list
/// when the run's identity is the frozen one (else why it is not), and whether that identity
/// is retired.
fn freeze_drift(
    project: &Project,
    state: &Path,
    started: &events::RunStarted,
    running: &Running<'_>,
) -> Result<(Vec<String>, bool), ReportDataError> {
    let reg = Registry::open(state).map_err(ReportDataError::Registry)?;
    let frozen = reg.frozen_identity(&started.protocol);
    let mut drift = Vec::new();
    match &frozen {
        Some(id) if id.to_string() == started.identity => {
            match eval_protocols::verify(
                project,
                &started.protocol,
                state,
                running.driver,
                running.resolve_image,
            ) {
                Ok(r) => drift.extend(r.drift.iter().map(|d| format!("{} ({})", d.path, d.change))),
                Err(e) => drift.push(e.to_string()),
            }
        }
        Some(id) => drift.push(format!(
            "the run used identity {}, but {} is now frozen as {id}",
            started.identity, started.protocol
        )),
        None => drift.push(format!("protocol {} is not frozen", started.protocol)),
    }
    let retired = frozen.is_some_and(|id| reg.retirement(&id).is_some());
    Ok((drift, retired))
}

/// Each suite of the matrix with its protocol's metrics, oracle budget and controls.
fn suite_data(loaded: &eval_protocols::Loaded) -> Vec<SuiteData> {
    let p = &loaded.protocol;
    loaded
        .matrix
        .suites
        .iter()
        .map(|s| SuiteData {
            id: s.id.clone(),
            tasks: s.tasks.clone(),
            baseline: s.baseline.clone(),
            candidate: s.candidate.clone(),
            other_arms: s
                .arms
                .iter()
                .filter(|a| **a != s.baseline && **a != s.candidate)
                .cloned()
                .collect(),
            repetitions: s.repetitions,
            metrics: p
                .suites
                .get(&s.id)
                .map(|x| x.metrics.clone())
                .unwrap_or_default(),
            max_oracle_calls: p.suites.get(&s.id).map_or(0, |x| x.max_oracle_calls),
            pass_mark: p.suites.get(&s.id).and_then(|x| x.pass_mark),
            controls: p.suites.get(&s.id).and_then(|x| x.control_arms()).map(|c| {
                eval_evidence::report::ControlsData {
                    arms: c.arms.clone(),
                    metric: c.metric.clone(),
                    // Required with arms (validated on load).
                    pass_at_least: c.pass_at_least.unwrap_or(f64::INFINITY),
                    also_report: c.also_report.clone(),
                }
            }),
            controls_off: p
                .suites
                .get(&s.id)
                .and_then(|x| x.controls_off())
                .map(str::to_owned),
        })
        .collect()
}

/// A pilot's run data for `eval plan --calibrate`: its slots, attempts and suites (from its own
/// ledger and protocol, loaded from the project at `root`) under the evaluated protocol's
/// statistical plan and gates (`target`). Nothing here is a report: the chain is verified, but
/// signatures and artifacts are not checked.
pub fn pilot_run_data(
    root: &Path,
    pilot: &Path,
    target: &eval_protocols::Loaded,
) -> Result<RunData, ReportDataError> {
    let all = LedgerReader::open(pilot).and_then(|r| r.entries())?;
    let verified = ledger::verify_entries(&all, None);
    let entries = &all[..all.len().min(verified.entries as usize)];
    let st = RunState::replay(entries).unwrap_or_default();
    let started = st
        .started
        .clone()
        .ok_or_else(|| ReportDataError::NoRunStarted {
            path: pilot.to_path_buf(),
        })?;
    let loaded = Project::open(root)
        .load(&started.protocol)
        .map_err(ReportDataError::Protocol)?;
    let declared = declared_metrics(root, &loaded.protocol)?;
    let attempts = attempt_data(entries, &st, &loaded, &started, &declared)?;
    let t = &target.protocol;
    Ok(RunData {
        version: rd::RUN_DATA_VERSION,
        matrix: started.matrix.clone(),
        protocol: started.protocol.clone(),
        identity: started.identity.clone(),
        driver_digest: started.driver.clone(),
        ledger_head: LedgerHeadRef {
            seq: verified.head.seq,
            hash: verified.head.hash.to_string(),
        },
        ledger_verified: verified.ok,
        ledger_problems: Vec::new(),
        freeze_drift: Vec::new(),
        identity_retired: false,
        fixture_upstream: false,
        upstream: rd::UpstreamEvidence::default(),
        model_free_upstream: false,
        model_free_protocol: false,
        wire_anomalies: Vec::new(),
        preconditions: Vec::new(),
        preconditions_unmet: Vec::new(),
        signed_evidence: None,
        allow_unsigned: true,
        artifacts_verified: None,
        plan: stat_plan(t),
        gates: t.gates.clone(),
        power: Vec::new(),
        rerunnable_fault_codes: t.reruns.codes.clone(),
        max_reruns_per_slot: Some(t.reruns.max_reruns_per_slot),
        max_infra_attempts: Some(t.reruns.max_infra_attempts.max(1)),
        suites: suite_data(&loaded),
        slots: slot_data(&st),
        attempts,
        sequential: None,
        looks_taken: Vec::new(),
    })
}

/// The run's scheduled slots, as replay read them.
fn slot_data(st: &RunState) -> Vec<SlotData> {
    st.slots
        .iter()
        .map(|s| SlotData {
            id: s.id.clone(),
            phase: s.phase,
            suite: s.suite.clone(),
            task: s.task.clone(),
            arm: s.arm.clone(),
            rep: s.rep,
        })
        .collect()
}

/// Whether each arm's runtime declares a harness metrics file: how ledgers written before
/// outcomes recorded `accounting` are judged. A definition that cannot be read is an error, not
/// an arm without a metrics file: that would judge its accounting by the wrong rule.
fn declared_metrics<'p>(
    root: &Path,
    p: &'p eval_protocols::Protocol,
) -> Result<BTreeMap<&'p str, bool>, ReportDataError> {
    p.arms
        .iter()
        .map(|a| {
            eval_runtimes::RuntimeDef::load(&root.join(&a.runtime))
                .map(|d| (a.id.as_str(), d.def.metrics_path.is_some()))
                .map_err(|source| ReportDataError::RuntimeDef {
                    arm: a.id.clone(),
                    runtime: a.runtime.clone(),
                    source: Box::new(source),
                })
        })
        .collect()
}

/// One row per `attempt_started` entry, with its outcome when it has one.
fn attempt_data(
    entries: &[Entry],
    st: &RunState,
    loaded: &eval_protocols::Loaded,
    started: &events::RunStarted,
    declared: &BTreeMap<&str, bool>,
) -> Result<Vec<AttemptData>, ReportDataError> {
    let spend = spend_by_attempt(entries);
    let waited = upstream_wait_by_attempt(entries);
    // Metrics from the wire, for the suites that list one: computed here from the recorded
    // requests, never taken from anything the attempt reported.
    let wire = crate::wire_metrics::Wire::new(entries, &loaded.protocol, &loaded.tasks);
    let mut attempts = Vec::new();
    for e in entries.iter().filter(|e| e.kind == events::ATTEMPT_STARTED) {
        // Replay accepted the ledger, so this parses; were it not, the attempt would be missing
        // from the report, so it is an integrity failure rather than a skip.
        let a = serde_json::from_slice::<events::AttemptStarted>(&e.payload)
            .map_err(|source| ReportDataError::AttemptStarted { seq: e.seq, source })?;
        let o = st
            .attempts
            .get(&a.slot)
            .and_then(|v| v.iter().find(|x| x.number == a.number))
            .and_then(|x| x.outcome.as_ref());
        attempts.push(AttemptData {
            slot: a.slot.clone(),
            phase: a.phase,
            suite: a.suite.clone(),
            task: a.task.clone(),
            arm: a.arm.clone(),
            rep: a.rep,
            attempt: a.number,
            outcome: o.map(|o| o.outcome),
            infra_fault: o.and_then(|o| o.infra_fault),
            rerun_of: a.rerun_of,
            metrics: wire.apply(&a, o.map(|o| o.metrics.clone()).unwrap_or_default()),
            model_turns: o.map_or(0, |o| o.model_turns),
            tokens: o.map(|o| o.tokens).unwrap_or_default(),
            duration_seconds: o.map_or(0.0, |o| o.duration_seconds),
            upstream_wait_seconds: Some(waited.get(&a.attempt).copied().unwrap_or(0.0)),
            oracle_calls: o.map_or(0, |o| o.clarification_questions.max(o.oracle_calls) as u32),
            harness_turns: o.and_then(|o| o.harness.map(|h| h.model_turns)),
            harness_tokens: o.and_then(|o| o.harness.map(|h| h.total_tokens)),
            upstream: started.upstream.url.clone(),
            accounting: o.and_then(|o| o.accounting.clone()),
            metrics_declared: declared.get(a.arm.as_str()).copied(),
            spend_usd: spend.get(&a.attempt).copied().unwrap_or(0.0),
            before_container: o.is_some_and(|o| o.before_container),
            incomplete_calls: o.and_then(|o| o.incomplete).map_or(0, |i| i.calls),
            incomplete_reserved_tokens: o
                .and_then(|o| o.incomplete)
                .map_or(0, |i| i.reserved_tokens),
        });
    }
    Ok(attempts)
}

/// The Harness transcript's first `request/header` against the wire's first request with tools,
/// for every attempt whose route a wire metric reads and that left a transcript: each
/// disagreement is an anomaly of the report (`wire_metrics::cross_check`). The wire decides the
/// metric; the transcript, agent-written, only cross-checks it.
fn transcript_cross_checks(
    entries: &[Entry],
    st: &RunState,
    loaded: &eval_protocols::Loaded,
    artifacts: &Path,
) -> Vec<String> {
    let wire = crate::wire_metrics::Wire::new(entries, &loaded.protocol, &loaded.tasks);
    let mut out = Vec::new();
    let mut store = None;
    for e in entries.iter().filter(|e| e.kind == events::ATTEMPT_STARTED) {
        let Ok(a) = serde_json::from_slice::<events::AttemptStarted>(&e.payload) else {
            continue;
        };
        let Some(route) = wire.route(&a.suite, &a.attempt) else {
            continue;
        };
        let Some(digest) = st
            .attempts
            .get(&a.slot)
            .and_then(|v| v.iter().find(|x| x.number == a.number))
            .and_then(|x| x.outcome.as_ref())
            .and_then(|o| o.artifacts.transcript.as_deref())
        else {
            continue;
        };
        if store.is_none() {
            store = eval_evidence::artifacts::ArtifactStore::open(artifacts).ok();
        }
        // The artifacts were re-hashed before this runs, so a read failure is a fault of the
        // store now; it is shown, never taken for agreement.
        let bytes = match (store.as_ref(), Digest::parse(digest)) {
            (Some(store), Some(d)) => store.get(&d).map_err(|e| e.to_string()),
            _ => Err(format!("transcript {digest} cannot be read")),
        };
        match bytes {
            Ok(b) => out.extend(crate::wire_metrics::cross_check(&a.attempt, route, &b)),
            Err(why) => out.push(format!(
                "attempt {}: the transcript cannot be cross-checked with the wire ({why})",
                a.attempt
            )),
        }
    }
    out
}

/// The preconditions the run met, each by the report entry of the evidence that met it.
fn precondition_evidence(started: &events::RunStarted) -> Vec<rd::PreconditionEvidence> {
    started
        .preconditions
        .iter()
        .map(|m| rd::PreconditionEvidence {
            protocol: m.protocol.clone(),
            identity: m.identity.to_string(),
            report_seq: m.report_seq,
            report_entry_hash: m.report_entry_hash.to_string(),
            report_digest: m.report_digest.clone(),
        })
        .collect()
}

/// The preregistered statistical plan.
fn stat_plan(p: &eval_protocols::Protocol) -> StatPlan {
    StatPlan {
        resamples: p.statistics.resamples,
        seed: p.statistics.seed,
        confidence: p.statistics.confidence,
        method: p.statistics.method.clone(),
        exact: p.statistics.exact.clone(),
        min_suite_tasks: p.statistics.min_suite_tasks as usize,
        false_fail_bound: p.statistics.false_fail_bound,
        missing_metric_values: p.missing_data.values.clone(),
        seed_string: p.statistics.seed_string.clone(),
        report_methods: p.statistics.report_methods.clone(),
    }
}

/// A swap point for the custody tests: `EVAL_TEST_SWAP_LEDGER=<file>` renames `<file>` over the
/// ledger right after the report has read it, as an operator racing the report would. Only debug
/// builds read the variable.
fn test_swap_hook(ledger: &Path) {
    if !cfg!(debug_assertions) {
        return;
    }
    if let Some(from) = std::env::var_os("EVAL_TEST_SWAP_LEDGER") {
        // A failed swap leaves the honest ledger in place, which the test then notices.
        let _ = std::fs::rename(from, ledger);
    }
}

/// With a preregistered public key: every checkpoint verifies with it (signature, root,
/// consistency) and a finished run is covered to its end. Without one: `None` (unsigned).
fn verify_signatures(
    state: &Path,
    ledger_path: &Path,
    entries: &[Entry],
    started: &events::RunStarted,
    named: Option<&eval_evidence::signing::PublicKey>,
) -> Result<Option<SignedEvidence>, ReportDataError> {
    let protocol = started.protocol.as_str();
    let reg = Registry::open(state).map_err(ReportDataError::Registry)?;
    if reg.frozen_identity(protocol).is_none() {
        // Not frozen: the report's drift check says so and exits 3.
        return Ok(None);
    }
    // A frozen protocol whose freeze cannot be read must not be reported as merely unsigned.
    let key = eval_protocols::frozen_public_key(state, protocol).map_err(|source| {
        ReportDataError::PublicKeyUnreadable {
            protocol: protocol.to_owned(),
            source,
        }
    })?;
    let verifier = match (key, named) {
        (None, None) => return Ok(None),
        // No key preregistered: the key the caller names is the one the evidence must verify
        // with (the report shows which key that was).
        (None, Some(named)) => named.clone(),
        (Some(key), named) => {
            let frozen = eval_evidence::signing::PublicKey::try_from(&key).map_err(|source| {
                ReportDataError::PublicKeyUnusable {
                    protocol: protocol.to_owned(),
                    source,
                }
            })?;
            if let Some(n) = named
                && *n != frozen
            {
                return Err(ReportDataError::NamedKeyNotPreregistered {
                    protocol: protocol.to_owned(),
                    named: n.to_string(),
                    frozen: frozen.to_string(),
                });
            }
            frozen
        }
    };
    let r = eval_evidence::signing::verify_entry_signatures(entries, &verifier, None);
    if let Some(f) = &r.error {
        return Err(ReportDataError::SignaturesDoNotVerify {
            path: ledger_path.to_path_buf(),
            key: verifier.to_string(),
            message: f.message.clone(),
            reason: f.reason,
        });
    }
    let last = r.last_checkpoint.as_ref();
    // Signed, but under a smoke run's (or another identity's) log: not this run's evidence.
    if let Some(cp) = last
        && let Err(e) = eval_evidence::signing::check_evidence_origin(&cp.origin, &started.identity)
    {
        return Err(ReportDataError::SignaturesDoNotVerify {
            path: ledger_path.to_path_buf(),
            key: verifier.to_string(),
            message: e.to_string(),
            reason: "origin",
        });
    }
    Ok(Some(SignedEvidence {
        key: verifier.to_string(),
        checkpoints: r.checkpoints,
        last_checkpoint_seq: last.map_or(0, |c| c.seq),
        covered: last.map_or(0, |c| c.tree_size),
        unsigned_from: r.first_unsigned_evidence,
    }))
}

/// An artifact a ledger entry references by digest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArtifactRef {
    pub seq: u64,
    pub kind: String,
    /// The payload's `attempt`, when it has one.
    pub attempt: Option<String>,
    /// The key under `artifacts` (`workspace`, `grader_output`, …).
    pub name: String,
    pub digest: String,
}

impl std::fmt::Display for ArtifactRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "artifact {} ({}) referenced by seq {} ({}{})",
            self.digest,
            self.name,
            self.seq,
            self.kind,
            self.attempt
                .as_ref()
                .map(|a| format!(" of {a}"))
                .unwrap_or_default()
        )
    }
}

/// Every artifact the ledger references: each string value of a payload's top-level `artifacts`
/// object (the `attempt_outcome` receipt's digests, and any later kind that follows the shape).
pub fn referenced_artifacts(entries: &[Entry]) -> Vec<ArtifactRef> {
    let mut out = Vec::new();
    for e in entries {
        let Ok(v) = e.payload_json() else { continue };
        let Some(arts) = v.get("artifacts").and_then(|a| a.as_object()) else {
            continue;
        };
        for (name, d) in arts {
            if let Some(d) = d.as_str() {
                out.push(ArtifactRef {
                    seq: e.seq,
                    kind: e.kind.clone(),
                    attempt: v.get("attempt").and_then(|a| a.as_str()).map(str::to_owned),
                    name: name.clone(),
                    digest: d.to_owned(),
                });
            }
        }
    }
    out
}

/// Re-hashes every artifact the ledger references in the store at `dir`; the first one that is
/// missing, altered or malformed is the error: the seq of the entry that references it, and a
/// message naming its digest and the entry. Returns how many references were checked.
pub fn verify_artifacts_at(entries: &[Entry], dir: &Path) -> Result<u64, (u64, String)> {
    let refs = referenced_artifacts(entries);
    if refs.is_empty() {
        return Ok(0);
    }
    if !dir.is_dir() {
        return Err((
            refs[0].seq,
            format!(
                "{}: {} is missing: the artifact store {} does not exist",
                refs[0].digest,
                refs[0],
                dir.display()
            ),
        ));
    }
    let store = eval_evidence::artifacts::ArtifactStore::open(dir)
        .map_err(|e| (refs[0].seq, e.to_string()))?;
    let mut checked = std::collections::BTreeSet::new();
    for r in &refs {
        let digest = Digest::parse(&r.digest)
            .ok_or_else(|| (r.seq, format!("{r}: {:?} is not a sha256 digest", r.digest)))?;
        if checked.contains(&digest) {
            continue;
        }
        store.verify(&digest).map_err(|e| {
            let m = match e {
                eval_evidence::artifacts::ArtifactError::Missing { .. } => {
                    format!("{r} is missing from {}", dir.display())
                }
                eval_evidence::artifacts::ArtifactError::Corrupt { actual, .. } => {
                    format!("{r} was altered: its bytes now hash to {actual}")
                }
                other => format!("{r}: {other}"),
            };
            (r.seq, m)
        })?;
        checked.insert(digest);
    }
    Ok(refs.len() as u64)
}

/// USD per attempt id, summed over its `model_call` records as the proxy priced them.
fn spend_by_attempt(entries: &[Entry]) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for e in entries.iter().filter(|e| e.kind == events::MODEL_CALL) {
        let Ok(v) = e.payload_json() else { continue };
        let (Some(a), Some(usd)) = (
            v.get("attempt").and_then(|a| a.as_str()),
            v.pointer("/record/spend_usd").and_then(|x| x.as_f64()),
        ) else {
            continue;
        };
        *out.entry(a.to_owned()).or_insert(0.0) += usd;
    }
    out
}

/// Seconds each attempt's model calls (every role) spent in the proxy, request arrival to the
/// end of the response: the proxy record's `latency_ms` (the entry's rounded one when the record
/// has none), summed.
fn upstream_wait_by_attempt(entries: &[Entry]) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for e in entries.iter().filter(|e| e.kind == events::MODEL_CALL) {
        let Ok(v) = e.payload_json() else { continue };
        let Some(a) = v.get("attempt").and_then(|a| a.as_str()) else {
            continue;
        };
        let ms = v
            .pointer("/record/latency_ms")
            .and_then(|x| x.as_f64())
            .or_else(|| v.get("latency_ms").and_then(|x| x.as_f64()))
            .filter(|ms| ms.is_finite() && *ms >= 0.0)
            .unwrap_or(0.0);
        *out.entry(a.to_owned()).or_insert(0.0) += ms / 1e3;
    }
    out
}

/// Total seconds attempts spent inside containers, from the ledger (for `eval demo`'s figures).
/// A display figure only: what cannot be read counts 0 here, and the demo verifies the same
/// ledger (exit 3 on failure) before it prints this.
pub fn container_seconds(path: &Path) -> f64 {
    LedgerReader::open(path)
        .and_then(|r| r.entries())
        .map(|entries| {
            entries
                .iter()
                .filter(|e| e.kind == events::ATTEMPT_OUTCOME)
                .filter_map(|e| serde_json::from_slice::<events::AttemptOutcome>(&e.payload).ok())
                .map(|o| o.container_seconds)
                .sum()
        })
        .unwrap_or(0.0)
}
