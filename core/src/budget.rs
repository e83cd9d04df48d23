//! The run-wide budget and the metrics the controller records itself: what a protocol declares,
//! what the proxy enforces, and what gates may name without any grader emitting it.

use serde::{Deserialize, Serialize};

/// Limits across all attempts of a run, as the protocol's `[budgets.run]` table declares them.
/// Both are required there: a preregistered run always has a ceiling. A proxy started outside a
/// run (its own tests, a tool) has no run budget at all — `ProxyConfig::run_budget` is an
/// `Option` — rather than a budget with individual limits switched off, so there is one shape.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunBudget {
    /// Tokens (input + output) all attempts of the run together may use.
    pub max_tokens: u64,
    /// In US dollars, priced with the protocol's prices; a call to a model without a price is
    /// refused, because its spend could not be bounded.
    pub max_spend_usd: f64,
}

/// Metrics the controller records for every attempt (from the proxy's meter, the clock and the
/// oracle): a suite may list them, and a gate may name them, without any task emitting them.
/// Validation (`eval-protocols`) and evaluation (`eval-evidence`) read this one list.
pub const BUILTIN_METRICS: &[&str] = &[
    "model_turns",
    "tokens",
    "input_tokens",
    "output_tokens",
    "duration_seconds",
    "harness_seconds",
    "oracle_calls",
    "clarification_questions",
];

/// Metrics `eval` computes from a stateful oracle's records of one attempt (a task's
/// `[oracle.constraints]`): the brief's constraint ids that no question's recorded field (ICAE:
/// `_internal_log.triggers_hit`) names — v0.4's `criticalRequirementsMissed` — and the same
/// without the task's declared scaffolding ids. A suite may list them only when every one of
/// its tasks declares the constraints.
pub const ORACLE_METRICS: &[&str] = &[
    "oracle_constraints_missed",
    "oracle_constraints_missed_substantive",
];

/// Metrics `eval` computes from what the harness sent, as the proxy recorded it (the `wire` of
/// the attempt's `model_call` entries): the initial route of a Plan Lattice-style router, read
/// from the `lattice_*` tools of the first agent request that carries tools. 1 or 0 per attempt;
/// absent when no recorded request carries tools or its `lattice_*` subset is no known route.
/// - `wire_routed`: the initial route is not `bypass` (probe counts as routed).
/// - `wire_bypassed`: the initial route is `bypass`.
/// - `wire_route_matches`: the route (and, when the task declares one, the clarification
///   policy) equals the task's `[wire]` expectation; every task of a suite listing it must
///   declare `[wire] expected_route`.
pub const WIRE_METRICS: &[&str] = &["wire_routed", "wire_bypassed", "wire_route_matches"];

/// The routes [`WIRE_METRICS`] distinguish, as a task's `[wire] expected_route` names them.
pub const WIRE_ROUTES: &[&str] = &["bypass", "probe", "contract", "lattice"];

/// The clarification policies a task's `[wire] expected_clarification` may name.
pub const WIRE_CLARIFICATIONS: &[&str] = &["never", "critical", "always"];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_budget_keeps_the_protocol_file_form_and_refuses_unknown_or_missing_fields() {
        let b: RunBudget =
            serde_json::from_str(r#"{"max_tokens": 1000, "max_spend_usd": 2.5}"#).expect("parses");
        assert_eq!(
            b,
            RunBudget {
                max_tokens: 1000,
                max_spend_usd: 2.5
            }
        );
        assert!(serde_json::from_str::<RunBudget>(r#"{"max_tokens": 1000}"#).is_err());
        assert!(
            serde_json::from_str::<RunBudget>(
                r#"{"max_tokens": 1, "max_spend_usd": 1.0, "max_calls": 3}"#
            )
            .is_err()
        );
    }

    #[test]
    fn builtin_metrics_are_distinct() {
        let mut names = BUILTIN_METRICS.to_vec();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), BUILTIN_METRICS.len());
    }
}
