//! `build_report`: statistics, gates and the release verdict of one run, from [`RunData`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::run_data::{LedgerHeadRef, PreconditionEvidence, RUN_DATA_VERSION, RunData, StatPlan};
use crate::gates::pairs::{SuiteView, final_attempts, metric_value};
use crate::gates::{GateResult, Statistic, Verdict, evaluate_gates};
use crate::stats::PairedTasks;
use crate::stats::paired::{PairedConfig, PairedSummary, paired_summary};
use crate::stats::resample::{ExactMode, ResampleConfig};
use eval_core::fault::FaultCode;
use eval_core::outcome::Outcome;
use eval_core::phase::Phase;

/// Schema id of the JSON report; bump the number on any change. `/2` added `verdict`,
/// `evidence`, `anomalies` and the per-arm outcome breakdown, spend and anomalies; a `/1`
/// document still reads (the new fields default to empty).
pub const REPORT_SCHEMA: &str = "eval.report/2";
/// Every schema [`Report::from_json`] reads.
pub const REPORT_SCHEMAS_READ: &[&str] = &["eval.report/1", REPORT_SCHEMA];

/// Why a report could not be built, rendered or read.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The run data were made by a newer eval (the version found is given).
    #[error("run data version {0} is newer than this eval understands ({RUN_DATA_VERSION})")]
    Version(u32),
    /// The report could not be written or parsed as JSON.
    #[error("cannot serialise the report: {0}")]
    Json(#[from] serde_json::Error),
    /// A JSON report of a schema this eval does not read.
    #[error("report schema {found:?} is not one this eval reads ({known})")]
    Schema {
        /// The schema the document declares.
        found: String,
        /// The schemas this eval reads, comma-separated.
        known: String,
    },
}

/// The report (JSON schema `eval.report/1`; see docs/gates.md "The report").
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// The report's schema ([`REPORT_SCHEMA`] when built by this eval).
    pub schema: String,
    /// The matrix name.
    pub matrix: String,
    /// The protocol name.
    pub protocol: String,
    /// The frozen protocol identity the run was made under.
    pub identity: String,
    /// The digest of the controller source that ran.
    pub driver_digest: String,
    /// The ledger head the report was computed from.
    pub ledger_head: LedgerHeadRef,
    /// True only when every gate passed, the run is complete and the evidence holds (`reasons` is
    /// empty).
    pub release_allowed: bool,
    /// The verdict line as every rendering shows it: the verdict, then whether the evidence is
    /// signed and how many anomalies are flagged.
    #[serde(default)]
    pub verdict: String,
    /// Every reason release is not allowed (empty when allowed).
    pub reasons: Vec<String>,
    /// What a reader should look at even when the gates passed: unsigned evidence, attempts
    /// that made no model call, contract violations, budget exhaustions, accounting that was not
    /// cross-checked (each also listed per arm in `accounting`).
    #[serde(default)]
    pub anomalies: Vec<String>,
    /// What the protocol knowingly left unchecked, disclosed in every rendering: each suite it
    /// runs without control arms (`[suites.<id>.controls] off`), with its stated reason. They
    /// do not stop a release (the protocol said so before the run), but a reader must see them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// What was verified about the evidence before anything was computed.
    #[serde(default)]
    pub evidence: Option<EvidenceCheck>,
    /// The other protocols' evidence that unlocked this run (its met preconditions).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unlocked_by: Vec<PreconditionEvidence>,
    /// The ledger does not verify, the freeze drifted or the identity is retired (exit 3).
    pub integrity_failure: bool,
    /// The individual checks behind `release_allowed`.
    pub checks: Checks,
    /// How many slots were resolved, and which were not.
    pub completeness: Completeness,
    /// Every gate's evaluation, in protocol order.
    pub gates: Vec<GateResult>,
    /// Per-suite statistics and task tables.
    pub suites: Vec<SuiteReport>,
    /// Per suite and arm: what the attempts consumed and how they ended.
    pub accounting: Vec<ArmAccounting>,
    /// Every attempt that ended in an infrastructure fault.
    pub infra_faults: Vec<FaultRow>,
    /// Every attempt that reran an earlier one.
    pub reruns: Vec<RerunRow>,
    /// The statistical plan the numbers were computed with.
    pub plan: StatPlan,
    /// The grader-validity table: every task under every control arm, with its score and
    /// whether it met its expectation (empty when no suite declares control arms).
    #[serde(default)]
    pub grader_validity: Vec<crate::gates::controls::ControlCell>,
    /// Per interval rule: the power at its declared effect and the minimum detectable effect at
    /// 80 % power, the figures `eval freeze` printed (see docs/gates.md "Calibration
    /// and power at freeze time"); additive, so `eval.report/2` documents without it still read.
    #[serde(default)]
    pub power: Vec<crate::stats::power::RulePower>,
    /// `eval regrade`'s re-gradings of this run with other graders, attached by the controller
    /// after the verdict was decided (`build_report` leaves it empty and nothing that decides the
    /// verdict reads it); additive, absent when there is none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sensitivity: Vec<super::sensitivity::Sensitivity>,
    /// With `[statistics] false_fail_bound`: every suite rule's false-fail rate under no effect
    /// on this run's own noise (`report::false_fail`, [`FALSE_FAIL_REPLICATES`] replicates, the
    /// plan's seed); absent otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub false_fail: Vec<super::false_fail::FalseFail>,
    /// The preregistered interim looks and every look taken (absent: a fixed design).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequential: Option<super::looks::SequentialReport>,
}

/// How the evidence was checked before the report was computed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EvidenceCheck {
    /// Every checkpoint verified with the preregistered public key (`false`: the protocol
    /// preregisters no key, so only the hash chain was checked).
    pub signed: bool,
    /// The preregistered public key, when there is one.
    pub public_key: Option<String>,
    /// Checkpoints verified with it.
    pub checkpoints: u64,
    /// Entries `1..covered_entries` are covered by the last signed checkpoint.
    pub covered_entries: u64,
    /// Artifacts re-hashed against the digests the ledger records.
    pub artifacts_verified: Option<u64>,
    /// The protocol's preregistered upstream URL (absent: it preregisters none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream: Option<String>,
    /// The preregistered TLS key pins the proxy enforced on it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tls_spki_sha256: Vec<String>,
}

/// The checks that decide release, one flag each.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Checks {
    /// Every gate passed.
    pub all_gates_passed: bool,
    /// Every statistical slot resolved and every infrastructure slot completed.
    pub run_complete: bool,
    /// The ledger verified end to end.
    pub ledger_verified: bool,
    /// Why it did not (empty when it did).
    pub ledger_problems: Vec<String>,
    /// Inputs that drifted from the freeze (empty: none).
    pub freeze_drift: Vec<String>,
    /// The identity has been retired.
    pub identity_retired: bool,
    /// The run used the fixture upstream, so it is never release evidence.
    pub fixture_upstream: bool,
    /// The run used the built-in model-free upstream: release evidence only for a protocol that
    /// declares itself model-free (absent in reports from before it existed).
    #[serde(default)]
    pub model_free_upstream: bool,
}

/// How far the run's schedule got.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Completeness {
    /// Statistical slots scheduled.
    pub statistical_total: usize,
    /// Statistical slots with a final outcome that is not an infrastructure fault.
    pub statistical_resolved: usize,
    /// Infrastructure slots scheduled.
    pub infrastructure_total: usize,
    /// Infrastructure slots with a completed attempt.
    pub infrastructure_completed: usize,
    /// Slots not resolved / not completed.
    pub missing: Vec<String>,
}

/// One suite's results.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SuiteReport {
    /// The suite id.
    pub id: String,
    /// The baseline arm.
    pub baseline: String,
    /// The gated candidate arm.
    pub candidate: String,
    /// Arms run and compared with the baseline but never gated.
    pub other_arms: Vec<String>,
    /// The metric of the forest plot and the task tables.
    pub metric: String,
    /// Tasks behind the gated comparison's summary (0 when it could not be computed).
    pub n_tasks: usize,
    /// Fewer tasks than the protocol's minimum: a robustness check, not population-calibrated.
    pub robustness_check: bool,
    /// Every non-baseline arm against the baseline (the gated candidate first).
    pub comparisons: Vec<Comparison>,
    /// One row per task, in matrix order.
    pub tasks: Vec<TaskTableRow>,
    /// What a repetition must reach on `metric` to count as a pass in `reliability`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pass_mark: Option<f64>,
    /// Per arm (baseline first): pass@k, pass^k over the repetitions and the share of tasks
    /// whose outcome flips between them (see `stats::reliability`); empty in older reports.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reliability: Vec<crate::stats::reliability::Reliability>,
}

/// One arm against the suite's baseline.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    /// The compared arm.
    pub arm: String,
    /// Whether this arm is the suite's gated candidate.
    pub gated: bool,
    /// The paired summary; `None` when it could not be computed (see `error`).
    pub summary: Option<PairedSummary>,
    /// Why there is no summary.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One task's row of a suite's table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskTableRow {
    /// The task id.
    pub task: String,
    /// arm → the metric's value per repetition (`null` where missing) and the outcome of each.
    pub arms: BTreeMap<String, Vec<RepCell>>,
}

/// One repetition's cell in a task table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RepCell {
    /// The repetition number.
    pub rep: u32,
    /// The metric's value; `None` where the attempt has none.
    pub value: Option<f64>,
    /// The final attempt's outcome; `None` when the slot has not ended.
    pub outcome: Option<Outcome>,
}

/// What one arm consumed in one suite, summed over its attempts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ArmAccounting {
    /// The suite.
    pub suite: String,
    /// The arm.
    pub arm: String,
    /// Every attempt (reruns and faulted ones included).
    pub attempts: usize,
    /// Model turns metered by the proxy.
    pub model_turns: u64,
    /// Input tokens, from the upstream's usage.
    pub input_tokens: u64,
    /// Output tokens, from the upstream's usage.
    pub output_tokens: u64,
    /// Input tokens the provider served from its cache (part of `input_tokens`).
    pub cached_tokens: u64,
    /// Reasoning tokens (part of `output_tokens`).
    pub reasoning_tokens: u64,
    /// Oracle (clarifying-question) calls.
    pub oracle_calls: u64,
    /// Wall-clock seconds of the agent runs.
    pub duration_seconds: f64,
    /// Those seconds less the time the runs' model calls waited on the upstream (the sum of
    /// the attempts' `harness_seconds`); absent in older reports.
    #[serde(default)]
    pub harness_seconds: f64,
    /// Attempts per outcome (`completed`, `contract_violation`, `infra_fault`, …).
    #[serde(default)]
    pub outcomes: BTreeMap<String, usize>,
    /// USD spent on model calls, as the proxy priced them.
    #[serde(default)]
    pub spend_usd: f64,
    /// Attempts that ended by themselves (not an infra fault) without a single model turn.
    #[serde(default)]
    pub zero_turn_attempts: usize,
    /// Attempts whose accounting was not cross-checked with the harness's metrics file.
    #[serde(default)]
    pub accounting_unchecked: usize,
    /// Calls without a complete answer (cut, stalled, reset, no usage), not in the turns or
    /// tokens above.
    #[serde(default)]
    pub incomplete_calls: u64,
    /// Their reserved tokens (what the budget counted them at).
    #[serde(default)]
    pub incomplete_reserved_tokens: u64,
    /// What a reader should look at for this arm (zero-turn attempts, unchecked accounting, …).
    #[serde(default)]
    pub anomalies: Vec<String>,
}

/// One attempt that ended in an infrastructure fault.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FaultRow {
    /// The slot id.
    pub slot: String,
    /// The attempt number within the slot.
    pub attempt: u32,
    /// The fault code, when one was recorded.
    pub code: Option<FaultCode>,
    /// Whether a later attempt of the same slot reran this one.
    pub rerun: bool,
}

/// One rerun attempt.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RerunRow {
    /// The slot id.
    pub slot: String,
    /// Its attempt number.
    pub attempt: u32,
    /// The attempt it reran.
    pub rerun_of: Option<u32>,
    /// How it ended (`None` while running).
    pub outcome: Option<Outcome>,
}

/// Computes the report from run data alone (gates, statistics, accounting, completeness); fails
/// only for run data of a newer version.
pub fn build_report(run: &RunData) -> Result<Report, ReportError> {
    if run.version > RUN_DATA_VERSION {
        return Err(ReportError::Version(run.version));
    }
    // After an interim look the gates are held to that look's adjusted level.
    let adjusted = super::looks::adjusted_for_looks(run);
    let gates = evaluate_gates(adjusted.as_ref().unwrap_or(run));
    let completeness = completeness(run);
    let stopped = super::looks::stopped_for_efficacy(run);
    let run_complete = completeness.missing.is_empty();
    let all_gates_passed = gates.iter().all(|g| g.passed);
    let mut reasons = Vec::new();
    if run.gates.is_empty() {
        reasons.push("the protocol declares no gates".to_string());
    }
    for g in gates.iter().filter(|g| !g.passed) {
        for r in g.rules.iter().filter(|r| r.verdict != Verdict::Pass) {
            reasons.push(format!(
                "gate {} rule {} ({}): {}",
                g.id,
                r.id,
                verdict_text(r.verdict),
                r.reason.as_deref().unwrap_or("")
            ));
        }
    }
    // Slots left unrun because the preregistered design stopped for efficacy are not missing.
    if !run_complete && stopped.is_none() {
        reasons.push(format!(
            "run incomplete: {} of {} statistical slots resolved, {} of {} infrastructure slots completed",
            completeness.statistical_resolved,
            completeness.statistical_total,
            completeness.infrastructure_completed,
            completeness.infrastructure_total
        ));
    }
    if !run.ledger_verified {
        reasons.push(format!(
            "the ledger does not verify: {}",
            if run.ledger_problems.is_empty() {
                "(no detail)".into()
            } else {
                run.ledger_problems.join("; ")
            }
        ));
    }
    if !run.freeze_drift.is_empty() {
        reasons.push(format!(
            "the freeze drifted: {}",
            run.freeze_drift.join(", ")
        ));
    }
    if run.identity_retired {
        reasons.push(format!("identity {} is retired", run.identity));
    }
    reasons.extend(grader_unchecked_reasons(run));
    reasons.extend(run.preconditions_unmet.iter().cloned());
    if run.fixture_upstream {
        reasons
            .push("the upstream was the fixture: fixture evidence never allows a release".into());
    } else if !(run.model_free_upstream && run.upstream.sessions.is_empty()) {
        // A run wholly on the model-free upstream has its own rule (`model_free_refusal`): it
        // reaches no model, so there is no model API to preregister.
        reasons.extend(upstream_reasons(&run.upstream));
    }
    if let Some(why) = model_free_refusal(run) {
        reasons.push(why);
    }
    if let Some(e) = &run.signed_evidence
        && let Some(seq) = e.unsigned_from
    {
        reasons.push(format!(
            "the evidence is partly unsigned: entries from seq {seq} on are covered by no signed checkpoint"
        ));
    }
    if run.signed_evidence.is_none() && !run.allow_unsigned {
        reasons.push(UNSIGNED_REASON.into());
    }
    let release_allowed = reasons.is_empty();
    let accounting = accounting(run);
    let mut anomalies = Vec::new();
    match &run.signed_evidence {
        None => anomalies.push(UNSIGNED.to_string()),
        Some(e) => {
            if let Some(seq) = e.unsigned_from {
                anomalies.push(format!(
                    "evidence partly unsigned: entries from seq {seq} on are covered by no signed checkpoint (the run has not finished)"
                ));
            }
        }
    }
    if let Some(t) = stopped {
        anomalies.push(format!(
            "the run stopped at interim look {} for efficacy: {} of {} statistical slots resolved, the rest not run by the preregistered design; gates held to the look's adjusted level",
            t.look, t.resolved_slots, t.total_slots
        ));
    } else if let Some(last) = run.looks_taken.last()
        && adjusted.is_some()
    {
        anomalies.push(format!(
            "gates held to interim look {}'s adjusted level",
            last.look
        ));
    }
    let false_fail = match run.plan.false_fail_bound {
        Some(bound) => {
            let rates =
                super::false_fail::false_fail_rates(run, FALSE_FAIL_REPLICATES, run.plan.seed);
            anomalies.extend(rates.iter().filter(|r| r.rate > bound).map(|r| {
                format!(
                    "gate {} rule {} ({}) fails {:.3} of the time under no effect on this run's noise ({} replicates), above the preregistered bound {bound}",
                    r.gate, r.rule, r.subject, r.rate, r.replicates
                )
            }));
            rates
        }
        None => Vec::new(),
    };
    anomalies.extend(run.wire_anomalies.iter().map(|a| format!("wire: {a}")));
    for a in &accounting {
        anomalies.extend(
            a.anomalies
                .iter()
                .map(|x| format!("suite {} arm {}: {x}", a.suite, a.arm)),
        );
    }
    let mut verdict = verdict_text_of(
        release_allowed,
        integrity_failure(run),
        run.signed_evidence.is_some(),
        anomalies.len(),
    );
    if run.signed_evidence.is_none() && run.allow_unsigned {
        verdict = verdict.replacen(
            " — evidence UNSIGNED",
            " — evidence UNSIGNED (accepted by --allow-unsigned)",
            1,
        );
    }
    Ok(Report {
        schema: REPORT_SCHEMA.into(),
        matrix: run.matrix.clone(),
        protocol: run.protocol.clone(),
        identity: run.identity.clone(),
        driver_digest: run.driver_digest.clone(),
        ledger_head: run.ledger_head.clone(),
        release_allowed,
        verdict,
        reasons,
        anomalies,
        warnings: grader_off_warnings(run),
        evidence: Some(EvidenceCheck {
            signed: run.signed_evidence.is_some(),
            public_key: run.signed_evidence.as_ref().map(|e| e.key.clone()),
            checkpoints: run.signed_evidence.as_ref().map_or(0, |e| e.checkpoints),
            covered_entries: run.signed_evidence.as_ref().map_or(0, |e| e.covered),
            artifacts_verified: run.artifacts_verified,
            upstream: run.upstream.preregistered.clone(),
            tls_spki_sha256: run.upstream.tls_spki_sha256.clone(),
        }),
        unlocked_by: run.preconditions.clone(),
        integrity_failure: integrity_failure(run),
        checks: Checks {
            all_gates_passed,
            run_complete,
            ledger_verified: run.ledger_verified,
            ledger_problems: run.ledger_problems.clone(),
            freeze_drift: run.freeze_drift.clone(),
            identity_retired: run.identity_retired,
            fixture_upstream: run.fixture_upstream,
            model_free_upstream: run.model_free_upstream,
        },
        completeness,
        gates,
        suites: run.suites.iter().map(|s| suite_report(run, s)).collect(),
        accounting,
        infra_faults: run
            .attempts
            .iter()
            .filter(|a| a.outcome == Some(Outcome::InfraFault))
            .map(|a| FaultRow {
                slot: a.slot.clone(),
                attempt: a.attempt,
                code: a.infra_fault,
                rerun: run
                    .attempts
                    .iter()
                    .any(|b| b.slot == a.slot && b.rerun_of == Some(a.attempt)),
            })
            .collect(),
        reruns: run
            .attempts
            .iter()
            .filter(|a| a.rerun_of.is_some())
            .map(|a| RerunRow {
                slot: a.slot.clone(),
                attempt: a.attempt,
                rerun_of: a.rerun_of,
                outcome: a.outcome,
            })
            .collect(),
        plan: run.plan.clone(),
        grader_validity: crate::gates::controls::grader_validity(run),
        power: run.power.clone(),
        sensitivity: Vec::new(),
        sequential: super::looks::sequential_report(run),
        false_fail,
    })
}

/// One reason per suite whose grader's validity nothing checks: it declares no control arms
/// (so no `grader_valid` evidence) and the protocol does not say `[suites.<id>.controls] off`.
/// A grader trusted by default is never a silent pass.
pub fn grader_unchecked_reasons(run: &RunData) -> Vec<String> {
    run.suites
        .iter()
        .filter(|s| s.controls.is_none() && s.controls_off.is_none())
        .map(|s| {
            format!(
                "grader validity unchecked: suite {} has no control arms",
                s.id
            )
        })
        .collect()
}

/// One warning per suite the protocol runs without control arms by its own statement (`off`).
pub fn grader_off_warnings(run: &RunData) -> Vec<String> {
    run.suites
        .iter()
        .filter(|s| s.controls.is_none())
        .filter_map(|s| {
            s.controls_off.as_ref().map(|why| {
                format!(
                    "grader validity not checked for suite {}, by the protocol: {why}",
                    s.id
                )
            })
        })
        .collect()
}

/// Why the upstream does not make the run release evidence: the protocol preregisters none, or a
/// session used another one (each named).
fn upstream_reasons(u: &crate::report::UpstreamEvidence) -> Vec<String> {
    match &u.preregistered {
        None => vec![
            "the protocol preregisters no upstream ([upstream] url): a run against an unregistered server, a scripted one included, is never release evidence".into(),
        ],
        Some(want) => u
            .sessions
            .iter()
            .enumerate()
            .filter(|(_, got)| *got != want)
            .map(|(i, got)| {
                format!(
                    "session {} ran against {got}, not the preregistered upstream {want}",
                    i + 1
                )
            })
            .collect(),
    }
}

/// No-effect replicates behind the report's false-fail rates.
pub const FALSE_FAIL_REPLICATES: u32 = 200;

/// Why unsigned evidence blocks a release unless the caller accepts it.
pub const UNSIGNED_REASON: &str = "the evidence is unsigned: no preregistered or named (--public-key) key verified it; a release needs signed evidence (or --allow-unsigned, which the verdict then states)";
/// The anomaly (and verdict-line note) of a run whose protocol preregisters no public key.
pub const UNSIGNED: &str = "evidence unsigned: the protocol preregisters no public key, so only the hash chain was checked";

fn integrity_failure(run: &RunData) -> bool {
    !run.ledger_verified || !run.freeze_drift.is_empty() || run.identity_retired
}

fn verdict_text_of(allowed: bool, integrity: bool, signed: bool, anomalies: usize) -> String {
    let mut v = if allowed {
        "RELEASE ALLOWED".to_string()
    } else if integrity {
        "RELEASE NOT ALLOWED (integrity failure)".to_string()
    } else {
        "RELEASE NOT ALLOWED".to_string()
    };
    v.push_str(if signed {
        " — evidence signed"
    } else {
        " — evidence UNSIGNED"
    });
    if anomalies > 0 {
        v.push_str(&format!(
            " — {anomalies} anomal{} flagged",
            if anomalies == 1 { "y" } else { "ies" }
        ));
    }
    v
}

impl Report {
    /// Reads a JSON report of any schema this eval knows (older ones get empty new fields).
    pub fn from_json(bytes: &[u8]) -> Result<Report, ReportError> {
        let v: serde_json::Value = serde_json::from_slice(bytes)?;
        let found = v
            .get("schema")
            .and_then(|s| s.as_str())
            .unwrap_or("")
            .to_string();
        if !REPORT_SCHEMAS_READ.contains(&found.as_str()) {
            return Err(ReportError::Schema {
                found,
                known: REPORT_SCHEMAS_READ.join(", "),
            });
        }
        Ok(serde_json::from_value(v)?)
    }

    /// The verdict line; reports of schema `/1` did not store one.
    pub fn verdict_line(&self) -> String {
        if !self.verdict.is_empty() {
            return self.verdict.clone();
        }
        verdict_text_of(
            self.release_allowed,
            self.integrity_failure,
            self.evidence.as_ref().is_some_and(|e| e.signed),
            self.anomalies.len(),
        )
    }

    /// 0 release allowed · 1 not allowed · 3 integrity failure.
    pub fn exit_status(&self) -> u8 {
        if self.integrity_failure {
            3
        } else if self.release_allowed {
            0
        } else {
            1
        }
    }
}

/// A verdict as reports print it.
pub fn verdict_text(v: Verdict) -> &'static str {
    match v {
        Verdict::Pass => "pass",
        Verdict::Fail => "fail",
        Verdict::NotComputable => "not computable",
        Verdict::InsufficientTasks => "insufficient tasks",
    }
}

fn completeness(run: &RunData) -> Completeness {
    let finals = final_attempts(run);
    let mut c = Completeness {
        statistical_total: 0,
        statistical_resolved: 0,
        infrastructure_total: 0,
        infrastructure_completed: 0,
        missing: Vec::new(),
    };
    for s in &run.slots {
        match s.phase {
            Phase::Statistical => {
                c.statistical_total += 1;
                if finals.contains_key(s.id.as_str()) {
                    c.statistical_resolved += 1;
                } else {
                    c.missing.push(s.id.clone());
                }
            }
            Phase::Control => {
                c.infrastructure_total += 1;
                if finals.contains_key(s.id.as_str()) {
                    c.infrastructure_completed += 1;
                } else {
                    c.missing.push(s.id.clone());
                }
            }
            Phase::Infrastructure => {
                c.infrastructure_total += 1;
                if run
                    .attempts
                    .iter()
                    .any(|a| a.slot == s.id && a.outcome == Some(Outcome::Completed))
                {
                    c.infrastructure_completed += 1;
                } else {
                    c.missing.push(s.id.clone());
                }
            }
        }
    }
    c
}

/// The suite's headline metric: that of its first task-level gate rule, else of its first pair
/// rule, else its first declared metric, else `score`.
pub fn primary_metric(run: &RunData, suite: &str) -> String {
    let rules: Vec<_> = run
        .gates
        .iter()
        .filter(|g| g.suite.as_deref() == Some(suite))
        .flat_map(|g| g.rules.iter())
        .collect();
    let task_level = [
        Statistic::BootstrapLower,
        Statistic::BootstrapUpper,
        Statistic::ContrastLower,
        Statistic::SignFlipP,
    ];
    rules
        .iter()
        .find(|r| task_level.contains(&r.statistic))
        .or_else(|| {
            rules
                .iter()
                .find(|r| r.statistic == Statistic::PairDiffMean)
        })
        .and_then(|r| r.metric.clone())
        .or_else(|| {
            run.suites
                .iter()
                .find(|s| s.id == suite)
                .and_then(|s| s.metrics.first().cloned())
        })
        .unwrap_or_else(|| "score".into())
}

fn suite_report(run: &RunData, suite: &super::run_data::SuiteData) -> SuiteReport {
    let metric = primary_metric(run, &suite.id);
    let exact = run
        .plan
        .exact
        .parse::<ExactMode>()
        .unwrap_or(ExactMode::Auto);
    let cfg = PairedConfig {
        resample: ResampleConfig {
            resamples: run.plan.resamples,
            seed: run.plan.seed,
            exact,
            threads: 0,
        },
        confidence: run.plan.confidence,
        min_tasks: run.plan.min_suite_tasks,
    };
    let mut arms = vec![suite.candidate.clone()];
    arms.extend(
        suite
            .other_arms
            .iter()
            .filter(|a| **a != suite.candidate)
            .cloned(),
    );
    let comparisons: Vec<Comparison> = arms
        .iter()
        .map(|arm| {
            let view = SuiteView::for_arms(run, suite, &suite.baseline, arm);
            let result = view
                .task_means(run, &metric)
                .and_then(|tm| {
                    PairedTasks::from_means(tm.tasks, tm.baseline, tm.candidate)
                        .map_err(|e| e.to_string())
                })
                .and_then(|pt| {
                    paired_summary(&pt, &suite.baseline, arm, &metric, &cfg)
                        .map_err(|e| e.to_string())
                });
            match result {
                Ok(s) => Comparison {
                    arm: arm.clone(),
                    gated: *arm == suite.candidate,
                    summary: Some(s),
                    error: None,
                },
                Err(e) => Comparison {
                    arm: arm.clone(),
                    gated: *arm == suite.candidate,
                    summary: None,
                    error: Some(e),
                },
            }
        })
        .collect();
    let finals = final_attempts(run);
    let mut all_arms = vec![suite.baseline.clone()];
    all_arms.extend(arms.iter().cloned());
    let tasks: Vec<TaskTableRow> = suite
        .tasks
        .iter()
        .map(|task| {
            let mut by_arm = BTreeMap::new();
            for arm in &all_arms {
                let cells = run
                    .slots
                    .iter()
                    .filter(|s| {
                        s.phase == Phase::Statistical
                            && s.suite == suite.id
                            && s.task == *task
                            && s.arm == *arm
                    })
                    .map(|s| {
                        let a = finals.get(s.id.as_str());
                        RepCell {
                            rep: s.rep,
                            // A display cell: a value that cannot be computed stays empty;
                            // the gates compute their metrics themselves and fail on the error.
                            value: a.and_then(|a| metric_value(run, a, &metric).ok()),
                            outcome: a.and_then(|a| a.outcome),
                        }
                    })
                    .collect();
                let mut cells: Vec<RepCell> = cells;
                cells.sort_by_key(|c| c.rep);
                by_arm.insert(arm.clone(), cells);
            }
            TaskTableRow {
                task: task.clone(),
                arms: by_arm,
            }
        })
        .collect();
    let n_tasks = comparisons
        .first()
        .and_then(|c| c.summary.as_ref())
        .map_or(0, |s| s.n_tasks);
    let pass_mark = pass_mark(suite);
    let reliability = all_arms
        .iter()
        .map(|arm| {
            let per_task: Vec<Vec<bool>> = tasks
                .iter()
                .map(|t| {
                    t.arms
                        .get(arm)
                        .map(|cells| {
                            cells
                                .iter()
                                .filter(|c| c.outcome.is_some())
                                .map(|c| c.value.is_some_and(|v| v >= pass_mark))
                                .collect()
                        })
                        .unwrap_or_default()
                })
                .collect();
            crate::stats::reliability::reliability(arm, &per_task)
        })
        .collect();
    SuiteReport {
        id: suite.id.clone(),
        baseline: suite.baseline.clone(),
        candidate: suite.candidate.clone(),
        other_arms: suite.other_arms.clone(),
        metric,
        n_tasks,
        robustness_check: suite.tasks.len() < run.plan.min_suite_tasks,
        comparisons,
        tasks,
        pass_mark: Some(pass_mark),
        reliability,
    }
}

/// What a repetition must reach on the suite's headline metric to pass: the suite's declared
/// pass mark, else the control arms' when it declares controls, else full marks (scores are
/// points out of 100).
fn pass_mark(suite: &super::run_data::SuiteData) -> f64 {
    suite
        .pass_mark
        .or(suite.controls.as_ref().map(|c| c.pass_at_least))
        .unwrap_or(100.0)
}

fn accounting(run: &RunData) -> Vec<ArmAccounting> {
    let mut out: Vec<ArmAccounting> = Vec::new();
    // Control attempts run no agent and make no model call: they are the grader-validity table's.
    for a in run.attempts.iter().filter(|a| a.phase != Phase::Control) {
        let i = match out
            .iter()
            .position(|x| x.suite == a.suite && x.arm == a.arm)
        {
            Some(i) => i,
            None => {
                out.push(ArmAccounting {
                    suite: a.suite.clone(),
                    arm: a.arm.clone(),
                    attempts: 0,
                    model_turns: 0,
                    input_tokens: 0,
                    output_tokens: 0,
                    cached_tokens: 0,
                    reasoning_tokens: 0,
                    oracle_calls: 0,
                    duration_seconds: 0.0,
                    harness_seconds: 0.0,
                    outcomes: BTreeMap::new(),
                    spend_usd: 0.0,
                    zero_turn_attempts: 0,
                    accounting_unchecked: 0,
                    incomplete_calls: 0,
                    incomplete_reserved_tokens: 0,
                    anomalies: Vec::new(),
                });
                out.len() - 1
            }
        };
        let x = &mut out[i];
        x.attempts += 1;
        x.model_turns += a.model_turns;
        x.input_tokens += a.tokens.input;
        x.output_tokens += a.tokens.output;
        x.cached_tokens += a.tokens.cached;
        x.reasoning_tokens += a.tokens.reasoning;
        x.oracle_calls += u64::from(a.oracle_calls);
        x.duration_seconds += a.duration_seconds;
        x.harness_seconds += crate::gates::pairs::harness_seconds(a);
        x.spend_usd += a.spend_usd;
        x.incomplete_calls += a.incomplete_calls;
        x.incomplete_reserved_tokens += a.incomplete_reserved_tokens;
        *x.outcomes
            .entry(a.outcome.map_or("open", Outcome::as_str).to_string())
            .or_default() += 1;
        if a.cross_checkable() && a.model_turns == 0 {
            x.zero_turn_attempts += 1;
        }
        if super::run_data::accounting_gap(a).is_some() {
            x.accounting_unchecked += 1;
        }
    }
    for x in &mut out {
        let n = x.attempts;
        let count = |o: &str| x.outcomes.get(o).copied().unwrap_or(0);
        if x.incomplete_calls > 0 {
            x.anomalies.push(format!(
                "{} call(s) without a complete answer (cut, stalled, reset or no usage), not in \
                 the turns or tokens; {} tokens reserved for them",
                x.incomplete_calls, x.incomplete_reserved_tokens
            ));
        }
        if x.zero_turn_attempts > 0 {
            x.anomalies.push(format!(
                "{} of {n} attempts made no model call",
                x.zero_turn_attempts
            ));
        }
        for (o, what) in [
            ("contract_violation", "ended in a contract violation"),
            ("budget_exhausted", "exhausted their budget"),
            (
                "accounting_mismatch",
                "had accounting that disagreed with the proxy",
            ),
        ] {
            if count(o) > 0 {
                x.anomalies
                    .push(format!("{} of {n} attempts {what}", count(o)));
            }
        }
        if x.accounting_unchecked > 0 {
            x.anomalies.push(format!(
                "{} of {n} attempts' accounting was not cross-checked with the harness's metrics file",
                x.accounting_unchecked
            ));
        }
    }
    out
}

/// Payload of the `report` ledger entry the controller appends after writing a report.
pub fn report_entry_payload(report: &Report) -> Result<serde_json::Value, ReportError> {
    let bytes = crate::canonical::to_vec(report)?;
    Ok(serde_json::json!({
        "report_schema": report.schema,
        "report_digest": crate::ledger::Digest::of(&bytes).to_string(),
        "ledger_head": report.ledger_head,
        "identity": report.identity,
        "release_allowed": report.release_allowed,
    }))
}

/// Why model-free evidence may not release this protocol, if it may not: the model-free upstream
/// answers every request with a plain stop, so only a protocol that declares `model_free = true`
/// (whose metrics, loading checked, read only what the harness sent) is measured by it. The
/// fixture's own rule stands beside this one, unchanged.
pub fn model_free_refusal(run: &RunData) -> Option<String> {
    (run.model_free_upstream && !run.model_free_protocol).then(|| {
        format!(
            "the upstream was model-free (a plain stop to every request), but protocol {} does not declare model_free = true: model-free evidence passes no gate of it",
            run.protocol
        )
    })
}
