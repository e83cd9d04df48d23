//! How an attempt ended.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::name::UnknownName;

/// The outcome of one attempt (DESIGN.md "Failures stay"): exactly one per attempt, written in
/// the ledger's `attempt_outcome` and read back into the report. Not to be confused with the
/// proxy's per-call result, which is a different vocabulary.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The agent exited 0 after attesting, and its work was graded.
    Completed,
    /// The agent failed by itself (non-zero exit, no attestation, unscorable work).
    AgentError,
    /// The agent was killed at the task's time limit.
    Timeout,
    /// The proxy refused a call over the attempt's budget.
    BudgetExhausted,
    /// A call broke the model contract (model, parameters, API shape).
    ContractViolation,
    /// The harness's own accounting disagrees with the proxy's meter.
    AccountingMismatch,
    /// The controller stopped the attempt after it may have spent (Ctrl-C, resume).
    Interrupted,
    /// A cause the agent cannot produce; the code is beside it, a [`crate::fault::FaultCode`].
    InfraFault,
}

impl Outcome {
    /// Every outcome, in declaration order.
    pub const ALL: [Outcome; 8] = [
        Outcome::Completed,
        Outcome::AgentError,
        Outcome::Timeout,
        Outcome::BudgetExhausted,
        Outcome::ContractViolation,
        Outcome::AccountingMismatch,
        Outcome::Interrupted,
        Outcome::InfraFault,
    ];

    /// The snake_case name the ledger writes.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Completed => "completed",
            Outcome::AgentError => "agent_error",
            Outcome::Timeout => "timeout",
            Outcome::BudgetExhausted => "budget_exhausted",
            Outcome::ContractViolation => "contract_violation",
            Outcome::AccountingMismatch => "accounting_mismatch",
            Outcome::Interrupted => "interrupted",
            Outcome::InfraFault => "infra_fault",
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Outcome {
    type Err = UnknownName;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        crate::name::parse("outcome", s, &Self::ALL, Self::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn text_serde_and_parse_agree_for_every_outcome() {
        let mut names = BTreeSet::new();
        for o in Outcome::ALL {
            let json = serde_json::to_value(o).unwrap();
            assert_eq!(json, serde_json::Value::String(o.to_string()));
            assert_eq!(o.as_str().parse::<Outcome>().unwrap(), o);
            assert_eq!(serde_json::from_value::<Outcome>(json).unwrap(), o);
            assert!(names.insert(o.as_str()), "{o:?} shares its name");
        }
    }

    #[test]
    fn ledger_names_are_the_ones_old_ledgers_hold() {
        assert_eq!(Outcome::AgentError.as_str(), "agent_error");
        assert_eq!(Outcome::InfraFault.as_str(), "infra_fault");
        assert_eq!(
            serde_json::from_str::<Outcome>("\"accounting_mismatch\"").unwrap(),
            Outcome::AccountingMismatch
        );
    }

    #[test]
    fn unknown_outcome_is_refused_naming_the_value() {
        let e = "crashed".parse::<Outcome>().unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("outcome \"crashed\""), "{msg}");
        assert!(msg.contains("agent_error"), "{msg}");
        assert!(serde_json::from_str::<Outcome>("\"AgentError\"").is_err());
    }
}
