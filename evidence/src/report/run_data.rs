//! `RunData`: the plain, ledger-independent input a report is computed from.
//!
//! The controller builds it from a verified ledger (plus the freeze and the identity registry);
//! nothing in `report` reads a ledger itself. It is serde so that fixtures and other tools can
//! feed the report engine from JSON. Field meanings are documented here; docs/gates.md
//! ("Statistics, gates and the report") says how the controller fills them.

use std::collections::BTreeMap;

use eval_core::fault::FaultCode;
use eval_core::outcome::Outcome;
use eval_core::phase::Phase;
use eval_core::tokens::TokenCounts;
use serde::{Deserialize, Serialize};

use crate::gates::Gate;

/// Version of the `RunData` shape; bump on any incompatible change.
pub const RUN_DATA_VERSION: u32 = 1;

/// Which model API the evidence came from.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamEvidence {
    /// The frozen protocol's `[upstream] url` (normalised: no trailing `/`); `None` when it
    /// preregisters none, and then no run of it is release evidence.
    #[serde(default)]
    pub preregistered: Option<String>,
    /// The preregistered TLS key pins (`sha256:<hex>`), which the proxy enforced.
    #[serde(default)]
    pub tls_spki_sha256: Vec<String>,
    /// The upstream URL of every session that did not use the fixture, in ledger order
    /// (normalised like `preregistered`).
    #[serde(default)]
    pub sessions: Vec<String>,
}

/// Everything a report needs about one matrix run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunData {
    /// The shape version ([`RUN_DATA_VERSION`]); newer versions are refused.
    pub version: u32,
    /// Matrix name (e.g. `v0.4`).
    pub matrix: String,
    /// Protocol name (e.g. `v0.4`).
    pub protocol: String,
    /// Frozen protocol identity (`sha256:<hex>` root digest of the freeze manifest).
    pub identity: String,
    /// Digest of the controller ("driver") source embedded in the `eval` binary that ran.
    pub driver_digest: String,
    /// The ledger head the data was read from.
    pub ledger_head: LedgerHeadRef,
    /// The ledger was verified end to end (every hash recomputed) before this was built.
    pub ledger_verified: bool,
    /// Why the ledger did not verify (empty when it did).
    #[serde(default)]
    pub ledger_problems: Vec<String>,
    /// Paths/digests that drifted from the freeze (empty = no drift).
    #[serde(default)]
    pub freeze_drift: Vec<String>,
    /// The identity has a `retire` entry in the registry.
    pub identity_retired: bool,
    /// The run used the embedded fixture upstream (never release evidence).
    pub fixture_upstream: bool,
    /// The upstream the run's sessions used, beside the one the frozen protocol preregisters.
    /// Absent (data from before upstreams were preregistered): no upstream is preregistered, so
    /// no release.
    #[serde(default)]
    pub upstream: UpstreamEvidence,
    /// Some session of the run used the built-in model-free upstream (a plain stop to every
    /// request): release evidence only when [`Self::model_free_protocol`] is true too.
    #[serde(default)]
    pub model_free_upstream: bool,
    /// The frozen protocol declares `model_free = true` (its metrics read only the wire, which
    /// loading enforces).
    #[serde(default)]
    pub model_free_protocol: bool,
    /// Disagreements between what the wire recorded and what the harness's own transcript says
    /// it sent (the first request's tools), one sentence each; shown as anomalies.
    #[serde(default)]
    pub wire_anomalies: Vec<String>,
    /// The preconditions that were met when the run was admitted, each with the evidence that
    /// met it (empty when the protocol has none, or the data predates pinned preconditions).
    #[serde(default)]
    pub preconditions: Vec<PreconditionEvidence>,
    /// The protocol's preconditions the registry does not meet by signed evidence now, when the
    /// report is computed (`eval report` re-checks what admitted the run), one sentence each:
    /// each one is a reason. Empty in data from before the re-check.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub preconditions_unmet: Vec<String>,
    /// What the preregistered public key verified before this was built; `None` when the
    /// protocol preregisters no key (the evidence is unsigned, and the report says so).
    #[serde(default)]
    pub signed_evidence: Option<SignedEvidence>,
    /// The caller accepted unsigned evidence (`eval report --allow-unsigned`); without it
    /// evidence no key verified never allows a release.
    #[serde(default)]
    pub allow_unsigned: bool,
    /// Artifacts the ledger references that were re-hashed against their digests before this was
    /// built (`None` in data from before artifacts were checked).
    #[serde(default)]
    pub artifacts_verified: Option<u64>,
    /// The protocol's statistical plan.
    pub plan: StatPlan,
    /// The protocol's release gates, in declaration order.
    pub gates: Vec<Gate>,
    /// Every interval rule's power at its declared effect and minimum detectable effect, computed
    /// from the frozen protocol by the same function as `eval freeze`'s `power:` lines (empty in
    /// data from before the report showed power).
    #[serde(default)]
    pub power: Vec<crate::stats::power::RulePower>,
    /// Infra fault codes the protocol allows to be rerun.
    pub rerunnable_fault_codes: Vec<FaultCode>,
    /// Maximum reruns per statistical slot (protocol limit); `None` = no limit declared.
    #[serde(default)]
    pub max_reruns_per_slot: Option<u32>,
    /// Maximum attempts per infrastructure slot; `None` = no limit declared.
    #[serde(default)]
    pub max_infra_attempts: Option<u32>,
    /// The matrix's suites, in matrix order.
    pub suites: Vec<SuiteData>,
    /// Every slot of the expanded matrix (infrastructure and statistical), in schedule order.
    pub slots: Vec<SlotData>,
    /// Every attempt recorded in the ledger, in ledger order (reruns and faulted attempts
    /// included).
    pub attempts: Vec<AttemptData>,
    /// The protocol's preregistered interim looks (`[sequential]`); `None`: a fixed design.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequential: Option<super::looks::SequentialPlan>,
    /// Every look taken, from the ledger's `look` entries, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub looks_taken: Vec<super::look_taken::LookTaken>,
}

/// One met precondition: the other protocol's pinned identity and the registry `report` entry
/// (a passed report) that met it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PreconditionEvidence {
    /// The precondition's protocol name (e.g. `router`).
    pub protocol: String,
    /// Its pinned, frozen identity.
    pub identity: String,
    /// The seq of the passed `report` entry in the identity registry.
    pub report_seq: u64,
    /// That entry's chain hash.
    pub report_entry_hash: String,
    /// The report's digest, when the entry names one.
    #[serde(default)]
    pub report_digest: Option<String>,
}

/// The signed evidence a report rests on: every checkpoint verified with the preregistered key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignedEvidence {
    /// The preregistered public key (C2SP note form).
    pub key: String,
    /// Checkpoints verified.
    pub checkpoints: u64,
    /// Seq of the last checkpoint entry.
    pub last_checkpoint_seq: u64,
    /// Entries `1..covered` are covered by the last checkpoint's signature.
    pub covered: u64,
    /// The first evidence entry no checkpoint covers: only possible on a run that has not
    /// finished (a finished one with such an entry is refused before a report exists).
    #[serde(default)]
    pub unsigned_from: Option<u64>,
}

/// A ledger head by value: the last entry's seq and hash.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LedgerHeadRef {
    /// The last entry's sequence number.
    pub seq: u64,
    /// `sha256:<hex>`.
    pub hash: String,
}

/// The protocol's statistical plan, as far as the report needs it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatPlan {
    /// Bootstrap resamples (B).
    pub resamples: u64,
    /// Seed of the ChaCha8 resampler.
    pub seed: u64,
    /// Two-sided confidence level, e.g. 0.95.
    pub confidence: f64,
    /// Default interval method of bootstrap rules: `bca`, `percentile` or `v04-percentile`.
    pub method: String,
    /// For `v04-percentile`: the mulberry32 seed string, `{identity}` standing for the identity's
    /// hex digest (no `sha256:` prefix) and `{suite}` for the suite id. Default
    /// `{identity}:{suite}` (v0.4's).
    #[serde(default)]
    pub seed_string: Option<String>,
    /// Interval methods reported beside the gating one (informational).
    #[serde(default)]
    pub report_methods: Vec<String>,
    /// `auto` | `always` | `never`: exact multiset enumeration.
    #[serde(default = "default_exact")]
    pub exact: String,
    /// Suites with fewer tasks are robustness checks, not population-calibrated evidence.
    pub min_suite_tasks: usize,
    /// `[statistics] false_fail_bound`: a suite rule whose false-fail rate under no effect, on
    /// this run's own noise (`report::false_fail`), exceeds it is an anomaly; `None`: not checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub false_fail_bound: Option<f64>,
    /// Missing-data rule: value used for a metric that a final non-infra attempt did not emit
    /// (e.g. `score = 0` for a crashed agent). A metric missing with no rule makes every
    /// statistic that reads it NaN, which fails its gate with the reason shown.
    #[serde(default)]
    pub missing_metric_values: BTreeMap<String, f64>,
}

fn default_exact() -> String {
    "auto".into()
}

/// One suite of the matrix: its tasks, arms and limits.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SuiteData {
    /// The suite id.
    pub id: String,
    /// Task ids in matrix order.
    pub tasks: Vec<String>,
    /// The arm the candidate is compared against.
    pub baseline: String,
    /// The gated candidate.
    pub candidate: String,
    /// Arms run and reported but never gated.
    #[serde(default)]
    pub other_arms: Vec<String>,
    /// Repetitions per (task, arm) in the statistical phase.
    pub repetitions: u32,
    /// Metric names the suite's grader emits.
    #[serde(default)]
    pub metrics: Vec<String>,
    /// Oracle (clarifying-question) calls allowed per attempt (0 = no oracle).
    #[serde(default)]
    pub max_oracle_calls: u32,
    /// The suite's control arms and their pass mark; `None`: the suite declares none.
    #[serde(default)]
    pub controls: Option<ControlsData>,
    /// The protocol's `[suites.<id>.controls] off` reason: it runs the suite knowingly without
    /// control arms (the report discloses it as a warning). `None` with no `controls` either:
    /// grader validity is unchecked, a reason release is not allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controls_off: Option<String>,
    /// The protocol's `[suites.<id>] pass_mark` for pass@k / pass^k; `None`: not declared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pass_mark: Option<f64>,
}

/// A suite's declared control arms (the protocol's `[suites.<id>.controls]`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ControlsData {
    /// `oracle`, `nop`, `exploit:<name>`, in declared order.
    pub arms: Vec<String>,
    /// The metric `grader_valid` judges by.
    pub metric: String,
    /// A score at least this passes.
    pub pass_at_least: f64,
    /// Other gradings shown beside the gating one (never gating).
    #[serde(default)]
    pub also_report: Vec<String>,
}

/// One scheduled unit of work: an arm on a task, one repetition, in one phase.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlotData {
    /// `stat-<suite>-<task>-<arm>-r<rep>` / `infra-…-r0`.
    pub id: String,
    /// Infrastructure or statistical.
    pub phase: Phase,
    /// The slot's suite.
    pub suite: String,
    /// The slot's task.
    pub task: String,
    /// The slot's arm.
    pub arm: String,
    /// The repetition number (0 for infrastructure slots).
    pub rep: u32,
}

/// One attempt at a slot, as the ledger records it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttemptData {
    /// The slot id.
    pub slot: String,
    /// The slot's phase (repeated so the attempt reads alone).
    pub phase: Phase,
    /// The slot's suite.
    pub suite: String,
    /// The slot's task.
    pub task: String,
    /// The slot's arm.
    pub arm: String,
    /// The slot's repetition.
    pub rep: u32,
    /// 1, 2, … per slot (contiguous when reruns are well-formed).
    pub attempt: u32,
    /// `None` while the attempt has started but not ended.
    #[serde(default)]
    pub outcome: Option<Outcome>,
    /// The typed fault code when `outcome == InfraFault`.
    #[serde(default)]
    pub infra_fault: Option<FaultCode>,
    /// The attempt number (same slot) this one reruns, if a rerun.
    #[serde(default)]
    pub rerun_of: Option<u32>,
    /// Grader metrics (e.g. `score`, `hidden_score`, `critical_misses`, `regressions`,
    /// `clarification_questions`).
    #[serde(default)]
    pub metrics: BTreeMap<String, f64>,
    /// Model turns metered by the proxy for the agent role.
    pub model_turns: u64,
    /// Total tokens metered by the proxy (input + output, from the upstream's usage).
    pub tokens: TokenCounts,
    /// Wall-clock duration of the agent run, seconds.
    pub duration_seconds: f64,
    /// Seconds the attempt's model calls spent in the proxy, from each request's arrival to the
    /// end of its response (the meter's per-call `latency_ms`, summed): the time the run waited
    /// on the upstream. `None` in data from before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_wait_seconds: Option<f64>,
    /// Calls in the oracle role (clarifying questions answered by a model or a script).
    pub oracle_calls: u32,
    /// The harness's own count of model turns / tokens, when the runtime reported it.
    #[serde(default)]
    pub harness_turns: Option<u64>,
    /// The harness's own total token count, when the runtime reported it.
    #[serde(default)]
    pub harness_tokens: Option<u64>,
    /// Upstream endpoint the proxy forwarded to (e.g. `https://api.deepseek.com`, `fixture`).
    pub upstream: String,
    /// The accounting cross-check's result as the outcome records it: `matched`, `mismatch`,
    /// `metrics_missing`, `metrics_unreadable` or `not_declared`; `None` in older ledgers.
    #[serde(default)]
    pub accounting: Option<String>,
    /// Whether the arm's runtime declares a harness metrics file (for older ledgers without
    /// `accounting`); `None` when unknown.
    #[serde(default)]
    pub metrics_declared: Option<bool>,
    /// Spend in USD of this attempt's model calls, as the proxy priced them.
    #[serde(default)]
    pub spend_usd: f64,
    /// The attempt failed before any container of it existed (the agent never ran): the next
    /// attempt is a preparation retry, not one of the slot's reruns.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub before_container: bool,
    /// 2xx calls without a complete answer (cut, stalled, reset, no usage): in neither
    /// `model_turns` nor `tokens`, counted apart at their reservation.
    #[serde(default)]
    pub incomplete_calls: u64,
    /// The incomplete calls' reserved tokens (what the budget counted them at).
    #[serde(default)]
    pub incomplete_reserved_tokens: u64,
}

impl AttemptData {
    /// An infra fault before any container existed, of a code retried without a rerun.
    pub fn unprepared(&self) -> bool {
        self.before_container
            && self.outcome == Some(Outcome::InfraFault)
            && self.model_turns == 0
            && self
                .infra_fault
                .is_some_and(FaultCode::retried_before_container)
    }

    /// The attempt ran an agent whose accounting can be cross-checked: it ended by itself with a
    /// non-infrastructure outcome (an infra fault or an attempt closed by the controller never
    /// reached the cross-check).
    pub fn cross_checkable(&self) -> bool {
        // A control attempt runs no agent: there is no harness to cross-check.
        self.phase != Phase::Control
            && matches!(
                self.outcome,
                Some(
                    Outcome::Completed
                        | Outcome::AgentError
                        | Outcome::Timeout
                        | Outcome::BudgetExhausted
                        | Outcome::ContractViolation
                        | Outcome::AccountingMismatch
                )
            )
    }
}

/// The attempt's accounting gap is its own: its declared file was missing or unreadable, or it
/// accounts for less than the proxy metered — all of which the agent can do to its own file (and
/// a time limit does to the harness). Counted in the report; not a veto of the run's
/// `accounting_complete`, unlike a runtime that declares no file or a file that accounts for
/// more than the meter saw.
pub fn attempt_accounting_gap(a: &AttemptData) -> bool {
    a.cross_checkable()
        && match a.accounting.as_deref() {
            Some("metrics_missing" | "metrics_unreadable") => true,
            Some("mismatch") => short_of_the_meter(a),
            _ => false,
        }
}

/// The harness accounts for no more than the proxy metered, and for less of at least one of
/// calls or tokens: what deleting or truncating its own file, or a time limit cutting the
/// harness off, gives. (More than the meter would be calls the proxy did not see.)
fn short_of_the_meter(a: &AttemptData) -> bool {
    match (a.harness_turns, a.harness_tokens) {
        (Some(t), Some(k)) => t <= a.model_turns && k <= a.tokens.total(),
        (Some(t), None) => t <= a.model_turns,
        (None, Some(k)) => k <= a.tokens.total(),
        (None, None) => false,
    }
}

/// Why an attempt's accounting was not cross-checked with the harness's own metrics file, if it
/// was not: the declared file was missing or unreadable, or the runtime declares none. Ledgers
/// written before outcomes recorded `accounting` are judged from `harness` and the runtime's
/// declaration: a declared file with no harness figures is a missing file.
pub fn accounting_gap(a: &AttemptData) -> Option<String> {
    if !a.cross_checkable() {
        return None;
    }
    match a.accounting.as_deref() {
        Some("mismatch") if short_of_the_meter(a) => Some(
            "the harness's account is short of the proxy's meter (truncated, or cut off at the time limit)"
                .into(),
        ),
        Some("matched") | Some("mismatch") => None,
        Some("metrics_missing") => Some("the declared harness metrics file is missing".into()),
        Some("metrics_unreadable") => {
            Some("the declared harness metrics file is unreadable".into())
        }
        Some("not_declared") => Some(
            "accounting not cross-checked: the runtime declares no harness metrics file".into(),
        ),
        Some(other) => Some(format!("unknown accounting result {other:?}")),
        None => match (a.metrics_declared, a.harness_turns.is_some()) {
            (_, true) => None,
            (Some(true), false) => {
                Some("the declared harness metrics file is missing or unreadable".into())
            }
            (Some(false), false) => Some(
                "accounting not cross-checked: the runtime declares no harness metrics file".into(),
            ),
            // Data from elsewhere that says nothing about the declaration: nothing to judge by.
            (None, false) => None,
        },
    }
}
