//! The caller's role, apart from the configuration so that records (`record.rs`) name it without
//! importing the configuration that names the record sink.

use serde::{Deserialize, Serialize};

/// Who is calling the model on behalf of an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The harness under test, through the attempt's socket or token.
    Agent,
    /// The model answering the agent's clarifying questions, called by the controller through
    /// [`crate::ProxyHandle::oracle_call`]; never reachable from the agent's socket.
    Oracle,
}

impl Role {
    /// The role's name in records and contracts: `agent` or `oracle`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Agent => "agent",
            Role::Oracle => "oracle",
        }
    }
}
