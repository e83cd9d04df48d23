//! The run ledger's event schema: one payload type per entry kind the orchestrator writes.
//!
//! Every payload that concerns one attempt names it in `attempt` (`<slot>#<n>`), so
//! `eval ledger show --attempt` and replay can find it without knowing the kind. Payloads carry
//! `schema` = [`SCHEMA`]; replay refuses a newer one. Times are RFC 3339 UTC inside the payload
//! (the entry's `recorded_at` is not hashed).

use eval_core::fault::FaultCode;
use eval_core::outcome::Outcome;
use eval_core::phase::Phase;
use eval_core::tokens::TokenCounts;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Version of these payload shapes.
pub const SCHEMA: u32 = 1;

pub const RUN_STARTED: &str = "run_started";
pub const ATTEMPT_STARTED: &str = "attempt_started";
pub const ATTESTATION: &str = "attestation";
pub const MODEL_CALL: &str = "model_call";
/// Written, and committed, before the proxy forwards a call: a call in flight when the
/// controller dies is still known to have been made.
pub const MODEL_CALL_STARTED: &str = "model_call_started";
pub const CLARIFICATION: &str = "clarification";
pub const ATTEMPT_OUTCOME: &str = "attempt_outcome";
pub const RERUN: &str = "rerun";
pub const RUN_FINISHED: &str = "run_finished";
pub const REPORT: &str = "report";
/// Something the agent did that the controller refused (a second attestation, a refused
/// clarifying question): recorded by digest and length, never by its body.
pub const AGENT_EVENT: &str = "agent_event";
/// What the controller noticed about an attempt without it changing the outcome (archive notes,
/// artifacts it could not store), written before the attempt's outcome.
pub const ATTEMPT_NOTE: &str = "attempt_note";
/// A multi-round attempt's round began: its prompt was delivered (docs/rounds.md).
pub const ROUND_STARTED: &str = "round_started";
/// A multi-round attempt's round ended: how its harness ended, its grade, its snapshot; or that
/// it was never reached.
pub const ROUND_FINISHED: &str = "round_finished";

/// One slot of the expanded schedule, as recorded in `run_started` (so `eval status` and the
/// report need nothing but the ledger).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotRecord {
    pub id: String,
    pub phase: Phase,
    pub suite: String,
    pub task: String,
    pub arm: String,
    pub rep: u32,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpstreamRecord {
    /// `fixture` for the embedded fixture upstream, `model-free` for the built-in model-free
    /// one, `remote` otherwise.
    pub kind: String,
    /// The base URL (never a key); for the fixture, its loopback address.
    pub url: String,
    /// The protocol's `[upstream]` names this URL (absent in ledgers from before upstreams were
    /// preregistered, and for a protocol that preregisters none: then no release).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub preregistered: bool,
    /// The preregistered TLS key pins the proxy enforced (`sha256:<hex>`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tls_spki_sha256: Vec<String>,
}

/// `run_started`: one per invocation of `eval run` (a resume starts a new session).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunStarted {
    pub schema: u32,
    pub session: u32,
    pub matrix: String,
    pub protocol: String,
    pub identity: String,
    pub driver: String,
    pub upstream: UpstreamRecord,
    /// True when the upstream is the fixture: this run can never be evidence for a release.
    pub fixture_evidence: bool,
    /// True when the upstream is the built-in model-free one (a plain stop to every request):
    /// evidence only for a protocol that declares `model_free = true`. Absent (false) in
    /// ledgers from before it existed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub model_free_evidence: bool,
    pub concurrency: usize,
    pub rerunnable_codes: Vec<FaultCode>,
    /// Reruns allowed per statistical slot.
    pub max_reruns: u32,
    /// Attempts allowed per infrastructure slot (rerun after any failure).
    pub max_infra_attempts: u32,
    pub slots: Vec<SlotRecord>,
    pub started_at: String,
    /// The preconditions met when this session was admitted, each with the registry `report`
    /// entry that met it (absent in ledgers from before preconditions were pinned, and when the
    /// protocol has none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub preconditions: Vec<eval_protocols::Met>,
}

/// `attempt_started`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptStarted {
    pub schema: u32,
    pub attempt: String,
    pub slot: String,
    pub number: u32,
    pub phase: Phase,
    pub suite: String,
    pub task: String,
    pub arm: String,
    pub rep: u32,
    /// The attempt number this one reruns (the faulted attempt stays in the ledger).
    pub rerun_of: Option<u32>,
    pub session: u32,
    pub started_at: String,
}

/// `attestation`: what the shim reported and whether it matched the frozen values.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attestation {
    pub schema: u32,
    pub attempt: String,
    pub ok: bool,
    pub image: String,
    /// Path → digest reported by the shim.
    pub reported: BTreeMap<String, String>,
    /// Path → digest frozen for this arm.
    pub expected: BTreeMap<String, String>,
    /// Why not ok (mismatched, missing or extra paths; candidate bytes in a baseline arm).
    pub problems: Vec<String>,
}

/// `model_call_started`: the proxy is about to forward a call of this attempt (it waits for
/// this entry to commit first).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelCallStarted {
    pub schema: u32,
    pub attempt: String,
    /// `agent` or `oracle`.
    pub role: String,
    pub seq: u64,
    /// `None` when the request named no model (e.g. `GET /v1/models`).
    pub model: Option<String>,
    pub path: String,
    pub stream: bool,
    pub reserved_tokens: u64,
}

/// `model_call`: one call metered by the proxy, bridged from its record sink.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelCall {
    pub schema: u32,
    pub attempt: String,
    /// `agent` or `oracle`.
    pub role: String,
    pub seq: u64,
    /// `None` when the request named no model.
    pub model: Option<String>,
    pub status: u16,
    /// `ok`, `contract_violation`, `budget_exhausted`, `upstream_error`, …
    pub result: String,
    pub tokens: TokenCounts,
    pub metered: bool,
    pub latency_ms: u64,
    /// The proxy's full record (redacted), for audit.
    pub record: serde_json::Value,
    /// The call's wire log (`run/wire_log.rs`): `request` (a request node), `request_head`,
    /// `request_tail` or `request_raw`, and `reply` (a reassembled stream) or `response` (a
    /// whole body). Re-hashed like every artifact the ledger references. Absent in ledgers
    /// from before the wire log, and when nothing was stored.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub artifacts: BTreeMap<String, String>,
    /// What the wire log kept of this call (absent when it kept nothing of it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wire_log: Option<crate::wire_log::WireNote>,
}

/// `clarification`: one question the agent asked and what it was told.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Clarification {
    pub schema: u32,
    pub attempt: String,
    /// 1-based index among this attempt's questions (including refused ones).
    pub index: u32,
    pub question: String,
    /// `None` when refused.
    pub answer: Option<String>,
    /// `scripted`, `oracle_model`, `oracle_stateful`, `oracle_malformed` (a stateful reply that
    /// did not parse: the agent got the task's fallback answer), `oracle_unavailable` or
    /// `oracle_refused` (refused questions are `agent_event`s, without their text).
    pub source: String,
    /// A stateful oracle's: `sha256:` of the question's text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub question_sha256: Option<String>,
    /// A stateful oracle's: the exchange's place in the attempt's conversation (1-based; the
    /// conversation holds only answered exchanges).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<u32>,
    /// A stateful oracle's: `sha256:` of its whole reply text, as the model gave it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_sha256: Option<String>,
    /// A stateful JSON oracle's `record_field` value (ICAE: the constraint ids the question
    /// triggered); absent when the reply had none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recorded: Option<serde_json::Value>,
    /// Why the reply was malformed or lacked its record field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub malformed: Option<String>,
    /// With `[oracle.constraints]`: the elements of the reply's record field that `recorded`
    /// does not keep (not an id of the brief, a repeat, or beyond the suite's
    /// `oracle_guard.max_triggers_per_question`), as the model gave them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dropped: Option<Vec<serde_json::Value>>,
    /// A stateful oracle's: the share of the brief's 8-word runs its reply quotes, in
    /// thousandths, when above the suite's `oracle_guard.max_brief_overlap` (the reply is flagged
    /// as reciting the brief; an integer, as every number of a ledger entry).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub brief_overlap_permille: Option<u32>,
}

/// `agent_event`: a refused request from the agent, as a digest and a length only.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentEvent {
    pub schema: u32,
    pub attempt: String,
    /// `attest_again` or `question_refused`.
    pub event: String,
    /// `sha256:<hex>` of the request body.
    pub body_sha256: String,
    pub len: u64,
    /// Why it was refused (`too_large`, `limit`, `no_oracle`, `malformed`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `attempt_note`: notes about an attempt that do not change its outcome.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptNote {
    pub schema: u32,
    pub attempt: String,
    pub notes: Vec<String>,
}

/// `round_started`: round `round` (1-based) of `rounds` began; the agent can read its prompt
/// from now on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoundStarted {
    pub schema: u32,
    pub attempt: String,
    pub round: u32,
    pub rounds: u32,
    /// The round's harness limit (`rounds[k].timeout_seconds`, else the task's).
    pub timeout_seconds: u64,
    /// The round's token budget, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// sha256 of the prompt delivered.
    pub prompt_digest: String,
    pub started_at: String,
}

/// How a round's harness ended, as the shim reported it (agent-side: evidence of what the agent
/// did, never of a fault), or as the container ended when it ended inside the round.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoundHarness {
    pub exit: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
    /// The round ended with the agent's container (its end, its time limit, a cancellation)
    /// rather than with a report of the shim.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub with_container: bool,
}

/// What a round left, in the artifact store.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoundArtifacts {
    /// The workspace as the round left it (a deterministic tar, as `workspace` of an outcome).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grader_output: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grader_log: Option<String>,
    /// What the round's tests printed and the reward file they wrote, when the grader left them
    /// in its output (`test-stdout.txt`, `reward.txt`: the Harbor format of
    /// `eval import v04-evocode`): the inputs of the attempt's round metrics
    /// (`eval_core::round_metrics`), stored so that a reviewer can recompute them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test_output: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reward: Option<String>,
}

/// `round_finished`: round `round`'s end. `status` is `passed`, `failed` (see `failures`) or
/// `unreached` (the attempt ended before it began: no harness, no grade).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RoundFinished {
    pub schema: u32,
    pub attempt: String,
    pub round: u32,
    pub status: String,
    /// Why a failed round failed: `timed_out`, `exit`, `over_budget`, `unscorable`,
    /// `grader_not_run`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failures: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub harness: Option<RoundHarness>,
    /// `scored`, `unscorable`, `not_run` or `unreached`.
    pub graded: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The round's grader's `score.json` metrics (empty unless scored).
    pub metrics: BTreeMap<String, f64>,
    /// The agent's model turns and tokens (input + output) within this round, from the proxy's
    /// meter.
    pub model_turns: u64,
    pub tokens: u64,
    pub artifacts: RoundArtifacts,
    pub finished_at: String,
}

/// Digests of what the attempt left behind, all in the artifact store.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArtifactDigests {
    pub workspace: Option<String>,
    pub grader_output: Option<String>,
    pub agent_log: Option<String>,
    pub grader_log: Option<String>,
    pub agent_metrics: Option<String>,
    /// The harness's own session transcript (`metrics_format = "dsh-session-jsonl"`); absent
    /// from the record otherwise, so receipts of other runtimes keep their form.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transcript: Option<String>,
}

/// What the harness said it used (its metrics file), for the accounting cross-check.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HarnessAccount {
    pub model_turns: u64,
    pub total_tokens: u64,
}

/// The agent's 2xx calls that are not model turns: answers that did not end as the API defines an
/// end (cut, stalled, reset, closed before `[DONE]`) or carried no usage. A harness counts none
/// of them (the DeepSeek Harness writes a usage chunk only at `[DONE]`), so the meter's turns and
/// tokens leave them out and they are recorded here, at what the budget held for them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IncompleteCalls {
    pub calls: u64,
    /// Their reservations (input estimate + bounded max output), what the budget counted.
    pub reserved_tokens: u64,
    /// Upstream bytes they streamed before they broke off.
    pub streamed_bytes: u64,
    /// Usage they showed before they broke off (input + output), if any.
    pub seen_tokens: u64,
}

/// `attempt_outcome`: the attempt's receipt.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AttemptOutcome {
    pub schema: u32,
    pub attempt: String,
    pub slot: String,
    pub number: u32,
    pub arm: String,
    pub outcome: Outcome,
    /// The typed fault code when `outcome` is `infra_fault`.
    pub infra_fault: Option<FaultCode>,
    pub detail: Option<String>,
    pub image: Option<String>,
    /// Digest of the canonical `attestation` payload (when attestation happened).
    pub attestation: Option<String>,
    /// The digest of the staged task bundle (`STATE/<matrix>/inputs/<hex>/`) as re-hashed right
    /// before the attempt was prepared and again before it was graded (`run::inputs`): the bytes
    /// it was given and graded with. Absent in ledgers written before it was recorded, and for an
    /// attempt that ended before its preparation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bundle_digest: Option<String>,
    /// Ledger seqs of this attempt's `model_call` entries.
    pub model_calls: Vec<u64>,
    pub model_turns: u64,
    pub tokens: TokenCounts,
    /// Calls that are not turns (see [`IncompleteCalls`]); absent when there were none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incomplete: Option<IncompleteCalls>,
    pub oracle_calls: u64,
    pub clarification_questions: u64,
    pub harness: Option<HarnessAccount>,
    /// The accounting cross-check's result: `matched`, `mismatch`, `metrics_missing`,
    /// `metrics_unreadable` (the declared file is absent, not a regular file, too large or not
    /// JSON) or `not_declared` (the runtime names no metrics file: not cross-checked). `None` in
    /// ledgers written before this field existed, and for an attempt that ended before the
    /// cross-check (an infrastructure fault, or closed by the controller).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accounting: Option<String>,
    pub metrics: BTreeMap<String, f64>,
    pub artifacts: ArtifactDigests,
    /// The agent container's run, from its start to its exit: no image build or load, no
    /// preparation, no grading (0 when no container started).
    pub duration_seconds: f64,
    /// Before the agent container started: image check and load, host preparation, proxy
    /// registration, create and policy check. 0 in ledgers written before this field existed.
    #[serde(default)]
    pub prepare_seconds: f64,
    /// Seconds spent inside containers (agent + grader, each from start to exit), for the
    /// overhead benchmark.
    pub container_seconds: f64,
    pub upstream: String,
    /// True when written by resume or Ctrl-C rather than by the attempt itself.
    pub closed_by_controller: bool,
    /// The attempt failed while it was being prepared (image, host, proxy), before any
    /// container of it existed: the agent never ran, so the fault is retried without using one
    /// of the slot's reruns (see `replay::MAX_PREPARATION_FAILURES`). Absent (false) in ledgers
    /// written before this field existed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub before_container: bool,
    pub finished_at: String,
}

/// `rerun`: the decision to rerun a faulted attempt, written before the new attempt starts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rerun {
    pub schema: u32,
    pub attempt: String,
    pub slot: String,
    pub number: u32,
    pub reruns: String,
    pub rerun_of: u32,
    pub code: String,
    pub reason: String,
}

/// `run_finished`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunFinished {
    pub schema: u32,
    pub session: u32,
    pub complete: bool,
    /// Why the session stopped early (Ctrl-C, a failed infrastructure slot …).
    pub stopped: Option<String>,
    pub finished_at: String,
}

pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}
