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
    /// Scripted answers, relative to the bundle; must be under `hidden/`. When a model answers,
    /// this file's text is the model's brief.
    pub answers: String,
    /// Questions one attempt may ask; further ones are refused.
    pub max_questions: u32,
    /// Who answers: `scripted` (exact-match `[[qa]]` of `answers`) or `model` (the protocol's
    /// `[models.oracle]`, through the proxy, in the attempt's `oracle` role).
    #[serde(default)]
    pub answered_by: OracleAnswerer,
}

/// Who answers oracle questions (`answered_by`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OracleAnswerer {
    /// Exact-match answers from the `answers` file; no model is called.
    #[default]
    Scripted,
    /// The protocol's `[models.oracle]` model, briefed with the `answers` file.
    Model,
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
