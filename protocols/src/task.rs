//! A task bundle: `task.toml`, `prompt.md`, `workspace/` (what the agent starts from) and
//! `hidden/` (grader-only files, never mounted into an agent's container).
//!
//! ```toml
//! id = "simple-js-clamp"
//! suite = "simple"
//! timeout_seconds = 3600
//! metrics = ["score", "checks_passed", "checks_total", "critical_missed", "regressions"]
//! stand_in = true            # a small bundle standing in for the real benchmark task
//! workspace_git = false      # true only if the workspace may carry a `.git` directory
//!
//! [grader]
//! runtime = "runtimes/fixture/runtime.toml"
//! command = ["/usr/local/bin/eval-fixture-grader", "--workspace", "{workspace}",
//!            "--hidden", "{hidden}", "--out", "{out}"]
//!
//! [oracle]                   # optional: clarifying questions answered from hidden/oracle.toml
//! answers = "hidden/oracle.toml"
//! max_questions = 5
//! answered_by = "scripted"   # or "model": [models.oracle] answers, with the file as its brief
//!                            # or "stateful": a conversation per attempt ([oracle.stateful])
//! catch_all = "No further information."   # scripted: the answer to a question not listed
//! grader_reads_record = false # true: the grader gets /oracle/record.json ({oracle_record})
//! ```
//!
//! A stateful oracle (ICAE's simulated user) is briefed with `answers` and keeps the attempt's
//! conversation; its replies may be JSON of which one field reaches the agent:
//!
//! ```toml
//! [oracle]
//! answers = "hidden/oracle/oracle_data.json"   # the brief: the task's hidden data
//! max_questions = 5
//! answered_by = "stateful"
//!
//! [oracle.stateful]
//! system_prompt = "hidden/oracle/init.md"      # frozen; the brief follows it
//! brief_heading = "# Injected oracle_data (your single source of truth)"
//! brief_fence = "json"                          # the brief inside a ```json block
//! reply = "json"                                # or "text"
//! reply_field = "reply"                         # passed back to the agent
//! record_field = "_internal_log.triggers_hit"   # recorded in the ledger, per question
//! fallback_answer = "No further information."   # for a malformed reply (the oracle's failure)
//! max_tokens = 200000                           # the oracle role's tokens per attempt
//!
//! [oracle.constraints]                          # metrics oracle_constraints_missed{,_substantive}
//! list = "hidden_constraints"                   # where in the (JSON) brief
//! id_field = "constraint_id"
//! scaffolding = ["ARCH001", "HARNESS*", "TC_*"] # ids (or prefixes*) the _substantive count ignores
//! ```
//!
//! A multi-round task (docs/rounds.md) declares `[[rounds]]` instead of having a `prompt.md`:
//! round k's prompt is `rounds/<k>/prompt.md` (outside `workspace/`, never mounted before round k
//! begins) and its hidden tests are `hidden/rounds/<k>/` (the only hidden files round k's grader
//! sees; never an agent). `timeout_seconds` then bounds the agent's whole attempt.
//!
//! ```toml
//! after_failed_round = "continue"   # or "stop": what a failed round does to the rest
//!
//! [[rounds]]                        # round 1
//! timeout_seconds = 600             # optional: this round's harness limit (default: the task's)
//! max_tokens = 200000               # optional: this round's token budget (checked at its end)
//!
//! [[rounds]]                        # round 2
//! ```

use serde::{Deserialize, Serialize};

/// A bundle's `task.toml`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskSpec {
    /// The task id; must equal the bundle's directory name.
    pub id: String,
    /// The suite the task belongs to; must be the suite the matrix runs it in.
    pub suite: String,
    /// Wall-clock limit of one attempt at this task, in seconds: positive and at most the
    /// protocol's `budgets.attempt.wall_seconds`.
    pub timeout_seconds: u64,
    /// Metric names the grader emits (in its `score.json` `metrics`).
    pub metrics: Vec<String>,
    /// How the attempt's final workspace is scored.
    pub grader: Grader,
    /// Clarifying questions the agent may ask; absent: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oracle: Option<Oracle>,
    /// Free text for reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// True for a small bundle standing in for the real benchmark task (reports say so).
    #[serde(default)]
    pub stand_in: bool,
    /// A workspace with a `.git` directory exposes history the agent should not see; it is refused
    /// at freeze time unless the task declares it here.
    #[serde(default)]
    pub workspace_git: bool,
    /// What the wire metrics compare against (`eval_core::budget::WIRE_METRICS`); absent: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wire: Option<WireExpectation>,
    /// `[[rounds]]`: a multi-round attempt, one entry per round in order; empty (absent): the
    /// single-round task of `prompt.md` and `hidden/`, serialised and frozen as before.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rounds: Vec<Round>,
    /// What a failed round does to the rounds after it; only with `rounds`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_failed_round: Option<AfterFailedRound>,
}

/// The most rounds a task may declare.
pub const MAX_ROUNDS: usize = 64;

/// One `[[rounds]]` entry: round `k` (1-based, its position) reads its prompt from
/// [`round_prompt`] and is graded with [`round_hidden`] only.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Round {
    /// The harness's time limit in this round, in seconds; absent: the task's `timeout_seconds`.
    /// Positive and at most the task's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<u64>,
    /// The most tokens (input + output, the proxy's count) the agent may use in this round; a
    /// round over it fails (`over_budget`). Absent: only the attempt's budget applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
}

/// `after_failed_round`: a round fails when its harness timed out or exited non-zero, its tokens
/// passed its `max_tokens`, or its grader gave no usable `score.json` (a workspace that does not
/// build). The round is recorded either way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AfterFailedRound {
    /// The next round begins as if the round had passed.
    #[default]
    Continue,
    /// The attempt ends; the rounds after it are recorded unreached.
    Stop,
}

/// Round `k`'s (1-based) prompt, relative to the bundle.
pub fn round_prompt(k: usize) -> String {
    format!("rounds/{k}/prompt.md")
}

/// Round `k`'s (1-based) hidden directory, relative to the bundle: all its grader sees as
/// `/hidden`.
pub fn round_hidden(k: usize) -> String {
    format!("hidden/rounds/{k}")
}

impl TaskSpec {
    /// How many times the harness runs in one attempt: the declared rounds, or 1.
    pub fn round_count(&self) -> usize {
        self.rounds.len().max(1)
    }

    /// True for a task declaring `[[rounds]]`.
    pub fn is_multi_round(&self) -> bool {
        !self.rounds.is_empty()
    }

    /// Round `k`'s (1-based) harness time limit, in seconds.
    pub fn round_timeout(&self, k: usize) -> u64 {
        k.checked_sub(1)
            .and_then(|i| self.rounds.get(i))
            .and_then(|r| r.timeout_seconds)
            .unwrap_or(self.timeout_seconds)
    }
}

/// `[wire]`: the route (and clarification policy) the harness's first request should show.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WireExpectation {
    /// One of `eval_core::budget::WIRE_ROUTES`.
    pub expected_route: String,
    /// One of `eval_core::budget::WIRE_CLARIFICATIONS`; absent: not compared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_clarification: Option<String>,
}

/// `[grader]`: the container that scores a finished attempt.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Grader {
    /// Runtime definition of the grader's container (frozen like the arms' runtimes).
    pub runtime: String,
    /// Argument vector run in the grader container; `{workspace}`, `{hidden}` and `{out}` are
    /// replaced by the runtime's fixed mount points (as in a runtime definition's `[grader]`).
    pub command: Vec<String>,
}

/// `[oracle]`: who answers an attempt's clarifying questions, from what, and how many.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Oracle {
    /// Scripted answers, relative to the bundle; must be under `hidden/`. When a model answers
    /// (`model`, `stateful`), this file's text is the model's brief.
    pub answers: String,
    /// Questions one attempt may ask; further ones are refused.
    pub max_questions: u32,
    /// Who answers: `scripted` (exact-match `[[qa]]` of `answers`), `model` (the protocol's
    /// `[models.oracle]`, through the proxy, in the attempt's `oracle` role, each question
    /// alone) or `stateful` (the same model, keeping the attempt's conversation).
    #[serde(default)]
    pub answered_by: OracleAnswerer,
    /// A scripted oracle's answer to a question its file does not list; absent:
    /// [`DEFAULT_CATCH_ALL`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub catch_all: Option<String>,
    /// How a `stateful` oracle is asked and answers; required for it, refused for the others.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stateful: Option<StatefulOracle>,
    /// Where the brief lists its hidden constraints, for the oracle metrics.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub constraints: Option<OracleConstraints>,
    /// The grader may read the attempt's oracle record: `record.json` (every answered
    /// question's ledger entry, and the constraints missed) mounted read-only at `/oracle`
    /// (`{oracle_record}` in the grader's command).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub grader_reads_record: bool,
}

/// What a scripted oracle answers to a question its file does not list, unless the task says.
pub const DEFAULT_CATCH_ALL: &str = "No further information.";

/// v0.4's one answer to every question in its EvoCode runs (Plan Lattice 0414dfa,
/// `eval/v0.4/driver/support-plugin/index.js`, `closedWorldAnswer`): the `catch_all` an
/// imported EvoCode task declares.
pub const V04_CLOSED_WORLD_ANSWER: &str = "No additional requirement is available. Preserve every requirement supplied in the current and earlier rounds, and make only reversible assumptions that do not conflict with them.";

impl Oracle {
    /// The scripted oracle's answer to an unlisted question.
    pub fn catch_all(&self) -> &str {
        self.catch_all.as_deref().unwrap_or(DEFAULT_CATCH_ALL)
    }
}

/// `[oracle.stateful]`: ICAE's simulated user (`user_agent/user_agent.py`): one system message
/// (the frozen prompt, the heading, the brief), then every earlier question and reply of the
/// attempt, then the new question.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatefulOracle {
    /// The oracle's frozen system prompt, relative to the bundle; must be under `hidden/`.
    pub system_prompt: String,
    /// The line between the system prompt and the brief (ICAE: `# Injected oracle_data (your
    /// single source of truth)`).
    pub brief_heading: String,
    /// When set, the brief is inside a fenced block with this info string (ICAE: `json`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub brief_fence: Option<String>,
    /// The reply's format.
    pub reply: ReplyFormat,
    /// `json`: the dotted path of the string passed back to the agent (ICAE: `reply`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_field: Option<String>,
    /// `json`: the dotted path of the value recorded per question (ICAE:
    /// `_internal_log.triggers_hit`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record_field: Option<String>,
    /// What the agent is told when the oracle's reply is malformed (not JSON, no reply field).
    pub fallback_answer: String,
    /// The oracle role's token budget per attempt (the resent conversation grows); absent: the
    /// attempt's `budgets.attempt.max_tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
}

/// A stateful oracle's reply format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplyFormat {
    /// The whole reply is the answer.
    Text,
    /// A JSON object (ICAE's parse: the text from its first `{` to its last `}`).
    Json,
}

/// `[oracle.constraints]`: the hidden constraints of a JSON brief, for
/// `oracle_constraints_missed` (every id no question's recorded field names) and
/// `oracle_constraints_missed_substantive` (the same without the `scaffolding` ids).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OracleConstraints {
    /// The dotted path of the brief's array of constraints (ICAE: `hidden_constraints`).
    pub list: String,
    /// The string field of each constraint that is its id (ICAE: `constraint_id`).
    pub id_field: String,
    /// Ids the substantive count leaves out: exact, or a prefix ending in `*`.
    #[serde(default)]
    pub scaffolding: Vec<String>,
}

impl OracleConstraints {
    /// The ids the brief lists, in its order, or why it lists none.
    pub fn ids(&self, brief: &str) -> Result<Vec<String>, String> {
        let v: serde_json::Value =
            serde_json::from_str(brief).map_err(|e| format!("the brief is not JSON: {e}"))?;
        let list = dotted(&v, &self.list)
            .and_then(serde_json::Value::as_array)
            .ok_or_else(|| format!("the brief has no array at {:?}", self.list))?;
        let mut ids = Vec::new();
        for (i, c) in list.iter().enumerate() {
            match c.get(&self.id_field).and_then(serde_json::Value::as_str) {
                Some(id) if !id.is_empty() => ids.push(id.to_owned()),
                _ => {
                    return Err(format!(
                        "{}[{i}] has no string {:?}",
                        self.list, self.id_field
                    ));
                }
            }
        }
        if ids.is_empty() {
            return Err(format!("{:?} lists no constraint", self.list));
        }
        Ok(ids)
    }

    /// Whether `id` is a declared scaffolding id.
    pub fn is_scaffolding(&self, id: &str) -> bool {
        self.scaffolding.iter().any(|s| match s.strip_suffix('*') {
            Some(prefix) => id.starts_with(prefix),
            None => id == s,
        })
    }
}

/// The value at a dotted path (`a.b.c`) of a JSON object; `None` when any step is missing.
pub fn dotted<'a>(v: &'a serde_json::Value, path: &str) -> Option<&'a serde_json::Value> {
    path.split('.').try_fold(v, |v, key| v.get(key))
}

/// Who answers oracle questions (`answered_by`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OracleAnswerer {
    /// Exact-match answers from the `answers` file; no model is called.
    #[default]
    Scripted,
    /// The protocol's `[models.oracle]` model, briefed with the `answers` file, each question
    /// alone.
    Model,
    /// The protocol's `[models.oracle]` model as ICAE's simulated user: `[oracle.stateful]`'s
    /// system prompt and the brief, the attempt's whole conversation resent each question.
    Stateful,
}

/// A loaded bundle.
#[derive(Clone, Debug, PartialEq)]
pub struct TaskBundle {
    /// The suite from the matrix (equal to `spec.suite`).
    pub suite: String,
    /// The task id (equal to `spec.id`).
    pub id: String,
    /// The bundle directory relative to the project root.
    pub dir: String,
    /// The parsed and checked `task.toml`.
    pub spec: TaskSpec,
}
