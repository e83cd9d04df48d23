//! The fixture agent's own metrics file (`<workspace>/.eval-agent/metrics.json`): what the
//! harness saw, for the controller's accounting cross-check against the proxy's meter.

use serde::{Deserialize, Serialize};

/// Directory (relative to the workspace) holding the agent's metrics; not part of the graded tree.
pub const AGENT_DIR: &str = ".eval-agent";
/// The metrics file, relative to the workspace.
pub const METRICS_PATH: &str = ".eval-agent/metrics.json";

/// The contents of the metrics file: the agent's own account of its run.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentMetrics {
    /// File format version (1).
    pub format: u32,
    /// The name of the fixture profile the agent ran.
    pub profile: String,
    /// Model calls answered with status 200.
    pub model_turns: u64,
    /// Prompt tokens, summed from the upstream's usage in the answers.
    pub prompt_tokens: u64,
    /// Completion tokens, summed likewise.
    pub completion_tokens: u64,
    /// Total tokens, summed likewise (what the controller compares with the proxy's meter).
    pub total_tokens: u64,
    /// Questions the agent asked the oracle.
    pub clarification_questions: u64,
    /// False when the agent stopped early (refused call, bad answer, turn bound).
    pub finished: bool,
    /// Why the agent stopped early, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The escape attempts an adversarial profile made, with their results.
    #[serde(default)]
    pub probes: Vec<Probe>,
}

/// One escape attempt of an adversarial profile; `ok: true` means the escape succeeded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Probe {
    /// The probe's name (what it tried).
    pub probe: String,
    /// True when the escape succeeded (a policy failure).
    pub ok: bool,
    /// What happened, for the report and test messages.
    pub detail: String,
}
