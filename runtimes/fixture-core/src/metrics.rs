//! The fixture agent's own metrics file (`<workspace>/.eval-agent/metrics.json`): what the
//! harness saw, for the controller's accounting cross-check against the proxy's meter.

use serde::{Deserialize, Serialize};

/// Directory (relative to the workspace) holding the agent's metrics; not part of the graded tree.
pub const AGENT_DIR: &str = ".eval-agent";
/// The metrics file, relative to the workspace.
pub const METRICS_PATH: &str = ".eval-agent/metrics.json";

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentMetrics {
    pub format: u32,
    pub profile: String,
    /// Model calls answered with status 200.
    pub model_turns: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
    pub clarification_questions: u64,
    /// False when the agent stopped early (refused call, bad answer, turn bound).
    pub finished: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default)]
    pub probes: Vec<Probe>,
}

/// One escape attempt of an adversarial profile; `ok: true` means the escape succeeded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Probe {
    pub probe: String,
    pub ok: bool,
    pub detail: String,
}
