//! The rule language of release gates, as a protocol declares them (TOML or JSON):
//!
//! ```toml
//! [[gates]]
//! id = "icae"
//! suite = "icae"                # omitted for run-wide integrity gates
//! [[gates.rules]]
//! id = "hidden_score_ratio"
//! statistic = "arm_mean_ratio"  # see `Statistic`
//! metric = "hidden_score"
//! op = ">="
//! threshold = 1.5
//! ```
//!
//! Pairs match the suite's baseline and gated candidate by task and repetition. Overhead of a pair
//! is (candidate − baseline) / baseline (0 when both are 0, +∞ when only the baseline is 0);
//! reduction rate is (mean baseline − mean candidate) / mean baseline (1 when both are 0). Medians
//! and P95 interpolate linearly between order statistics. NaN or ±∞ fails a rule.

use serde::{Deserialize, Serialize};

/// A release gate: a named set of rules that must all pass for the gate to pass.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gate {
    /// The gate's name in the protocol, the report and error messages; unique within a protocol.
    pub id: String,
    /// The suite whose baseline/candidate pairs the rules read; `None` for integrity gates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suite: Option<String>,
    /// Free text shown in the report next to the gate's verdict; not evaluated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The rules, all of which must hold; `validate` rejects an empty list.
    pub rules: Vec<Rule>,
}

/// One comparison inside a gate: `statistic(metric, arm) op threshold`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// The rule's name, unique within its gate; reports and errors cite it as `gate/rule`.
    pub id: String,
    /// What is computed from the run's attempts (see [`Statistic`]).
    pub statistic: Statistic,
    /// The metric the statistic reads (required by every statistic over scores).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric: Option<String>,
    /// Which arm, for statistics of one arm's attempts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arm: Option<ArmRole>,
    /// How the statistic's value is compared with `threshold`; integrity statistics take `is_true`.
    pub op: Op,
    /// Required for every comparison except `is_true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold: Option<f64>,
    /// For bootstrap statistics: `v04-percentile`, `percentile` or `bca` (default: the protocol's
    /// statistical plan).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// For `contrast_lower`: k in m_candidate − k · m_baseline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub factor: Option<f64>,
}

/// Which side of a suite's baseline/candidate comparison a one-arm statistic reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ArmRole {
    /// The suite's reference arm (the thing the candidate is compared against).
    Baseline,
    /// The arm being gated.
    Candidate,
}

/// Comparison of a statistic's value (left) with the rule's threshold (right).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    /// `value >= threshold`.
    #[serde(rename = ">=")]
    Ge,
    /// `value > threshold`.
    #[serde(rename = ">")]
    Gt,
    /// `value <= threshold`.
    #[serde(rename = "<=")]
    Le,
    /// `value < threshold`.
    #[serde(rename = "<")]
    Lt,
    /// `value == threshold`, exact floating-point equality (meant for counts).
    #[serde(rename = "==")]
    Eq,
    /// The integrity check found no problem; takes no threshold.
    #[serde(rename = "is_true")]
    IsTrue,
}

/// The quantity a rule computes; its snake_case name is what a protocol writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Statistic {
    // Over the pairs' differences (candidate − baseline) of `metric`.
    /// Mean of the pairs' differences.
    PairDiffMean,
    /// Median of the pairs' differences.
    PairDiffMedian,
    /// 95th percentile of the pairs' differences.
    PairDiffP95,
    /// Smallest pair difference.
    PairDiffMin,
    /// Largest pair difference.
    PairDiffMax,
    // Over the pairs' overheads (candidate − baseline) / baseline of `metric`.
    /// Mean of the pairs' overheads (a ratio: 0.1 is 10 % more than baseline).
    PairOverheadMean,
    /// Median of the pairs' overheads.
    PairOverheadMedian,
    /// 95th percentile of the pairs' overheads.
    PairOverheadP95,
    /// Smallest pair overhead.
    PairOverheadMin,
    /// Largest pair overhead.
    PairOverheadMax,
    /// mean(candidate) / mean(baseline) of `metric`.
    ArmMeanRatio,
    /// (mean baseline − mean candidate) / mean baseline of a count `metric`.
    ReductionRate,
    /// Number of matched baseline/candidate pairs (takes no metric).
    PairCount,
    /// Number of distinct tasks among the pairs (takes no metric).
    TaskCount,
    // Statistics of one arm's attempts (`arm`) of `metric`.
    /// Mean of `metric` over the arm's attempts.
    ArmMean,
    /// Median of `metric` over the arm's attempts.
    ArmMedian,
    /// Smallest value of `metric` among the arm's attempts.
    ArmMin,
    /// Largest value of `metric` among the arm's attempts.
    ArmMax,
    /// Share of the arm's attempts whose 0/1 `metric` is 1 (a rate over the suite's tasks,
    /// reported with its exact Clopper–Pearson interval at the plan's confidence).
    ArmRate,
    /// Number of the arm's attempts whose 0/1 `metric` is 1 (with the same interval of the rate).
    ArmCount,
    /// Lower / upper bound of the paired-bootstrap interval of the task-level mean difference.
    BootstrapLower,
    /// See [`Statistic::BootstrapLower`].
    BootstrapUpper,
    /// Lower bound of the interval of mean(m_candidate − factor · m_baseline) over tasks.
    ContrastLower,
    /// Sign-flip (paired permutation) p-value of the task-level mean difference.
    SignFlipP,
    // Run-wide integrity statistics (op = is_true).
    /// Every infrastructure-phase slot has an attempt that completed.
    InfraSlotsCompleted,
    /// Every statistical-phase slot has a final outcome that is not an infrastructure fault.
    StatisticalSlotsResolved,
    /// Each slot's attempts are numbered 1, 2, …, every rerun names its predecessor, and each
    /// predecessor's outcome allowed a rerun (a rerunnable infra fault in the statistical phase,
    /// any non-completed outcome in the infrastructure phase).
    RerunsAuthorized,
    /// All attempts went to the same upstream endpoint.
    SingleEndpoint,
    /// Every attempt's model turns, tokens and oracle calls are accounted for and within the
    /// suite's limits.
    AccountingComplete,
    /// Every declared control arm was graded: every oracle passes, every nop fails, and no
    /// exploit scores above its task's nop (see `eval_core::controls`).
    GraderValid,
}

impl Statistic {
    /// Whether a rule with this statistic must name a `metric` (false for counts and integrity
    /// checks).
    pub fn needs_metric(self) -> bool {
        !matches!(
            self,
            Statistic::PairCount
                | Statistic::TaskCount
                | Statistic::InfraSlotsCompleted
                | Statistic::StatisticalSlotsResolved
                | Statistic::RerunsAuthorized
                | Statistic::SingleEndpoint
                | Statistic::AccountingComplete
                | Statistic::GraderValid
        )
    }

    /// Whether a rule with this statistic must name an `arm` (the `arm_*` statistics).
    pub fn needs_arm(self) -> bool {
        matches!(
            self,
            Statistic::ArmMean
                | Statistic::ArmMedian
                | Statistic::ArmMin
                | Statistic::ArmMax
                | Statistic::ArmRate
                | Statistic::ArmCount
        )
    }

    /// Whether this is a run-wide integrity check, which takes `op = "is_true"` and no suite.
    pub fn is_integrity(self) -> bool {
        matches!(
            self,
            Statistic::InfraSlotsCompleted
                | Statistic::StatisticalSlotsResolved
                | Statistic::RerunsAuthorized
                | Statistic::SingleEndpoint
                | Statistic::AccountingComplete
                | Statistic::GraderValid
        )
    }

    /// The snake_case name a protocol writes (e.g. `pair_diff_mean`); empty only if serde fails.
    pub fn name(self) -> String {
        serde_json::to_value(self)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default()
    }
}

/// A gate declaration that cannot be evaluated; the message names the gate and rule.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("gate {gate:?}, rule {rule:?}: {reason}")]
pub struct GateSchemaError {
    /// The offending gate's id.
    pub gate: String,
    /// The offending rule's id; empty when the problem is the gate itself (no rules).
    pub rule: String,
    /// What is wrong, for the user to fix in the protocol.
    pub reason: String,
}

impl Gate {
    /// Checks the shape of every rule. `metrics` lists the metrics the gate's suite emits (or
    /// `None` to skip that check, e.g. for integrity gates).
    pub fn validate(&self, metrics: Option<&[String]>) -> Result<(), GateSchemaError> {
        let err = |rule: &Rule, reason: String| GateSchemaError {
            gate: self.id.clone(),
            rule: rule.id.clone(),
            reason,
        };
        if self.rules.is_empty() {
            return Err(GateSchemaError {
                gate: self.id.clone(),
                rule: String::new(),
                reason: "a gate needs at least one rule".into(),
            });
        }
        for rule in &self.rules {
            let s = rule.statistic;
            if s.is_integrity() != (rule.op == Op::IsTrue) {
                return Err(err(
                    rule,
                    format!(
                        "op {:?} does not fit statistic {}: integrity statistics take `is_true`, all others a comparison",
                        rule.op,
                        s.name()
                    ),
                ));
            }
            if rule.op != Op::IsTrue {
                match rule.threshold {
                    Some(t) if t.is_finite() => {}
                    Some(t) => return Err(err(rule, format!("threshold {t} is not finite"))),
                    None => return Err(err(rule, "threshold is missing".into())),
                }
            }
            if !s.is_integrity() && self.suite.is_none() {
                return Err(err(
                    rule,
                    format!("statistic {} needs the gate to name a suite", s.name()),
                ));
            }
            match (&rule.metric, s.needs_metric()) {
                (None, true) => {
                    return Err(err(rule, format!("statistic {} needs a metric", s.name())));
                }
                (Some(m), true) => {
                    if let Some(known) = metrics
                        && !known.iter().any(|k| k == m)
                    {
                        return Err(err(
                            rule,
                            format!(
                                "unknown metric {m:?} (the suite's metrics: {})",
                                known.join(", ")
                            ),
                        ));
                    }
                }
                (Some(m), false) => {
                    return Err(err(
                        rule,
                        format!("statistic {} takes no metric (got {m:?})", s.name()),
                    ));
                }
                (None, false) => {}
            }
            if s.needs_arm() != rule.arm.is_some() {
                return Err(err(
                    rule,
                    if s.needs_arm() {
                        format!("statistic {} needs arm = baseline|candidate", s.name())
                    } else {
                        format!("statistic {} takes no arm", s.name())
                    },
                ));
            }
            if (s == Statistic::ContrastLower) != rule.factor.is_some() {
                return Err(err(
                    rule,
                    "`factor` goes with contrast_lower, and only with it".into(),
                ));
            }
            if let Some(m) = &rule.method
                && !matches!(m.as_str(), "v04-percentile" | "percentile" | "bca")
            {
                return Err(err(
                    rule,
                    format!("unknown method {m:?} (v04-percentile, percentile, bca)"),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate(toml_rules: &str) -> Gate {
        serde_json::from_str(toml_rules).unwrap()
    }

    #[test]
    fn rejects_unknown_metric_and_missing_threshold() {
        let g = gate(
            r#"{"id":"simple","suite":"simple","rules":[{"id":"r","statistic":"pair_diff_mean","metric":"scroe","op":">=","threshold":-2}]}"#,
        );
        let e = g.validate(Some(&["score".to_string()])).unwrap_err();
        assert!(e.to_string().contains("unknown metric \"scroe\""), "{e}");
        let g = gate(
            r#"{"id":"simple","suite":"simple","rules":[{"id":"r","statistic":"pair_diff_mean","metric":"score","op":">="}]}"#,
        );
        assert!(g.validate(None).unwrap_err().reason.contains("threshold"));
    }

    #[test]
    fn unknown_statistic_is_a_parse_error_naming_it() {
        let e = serde_json::from_str::<Gate>(
            r#"{"id":"g","suite":"s","rules":[{"id":"r","statistic":"mean_of_vibes","op":">=","threshold":1}]}"#,
        )
        .unwrap_err();
        assert!(e.to_string().contains("mean_of_vibes"), "{e}");
    }

    #[test]
    fn integrity_rules_take_is_true() {
        let g = gate(
            r#"{"id":"integrity","rules":[{"id":"infra","statistic":"infra_slots_completed","op":"is_true"}]}"#,
        );
        g.validate(None).unwrap();
        let g = gate(
            r#"{"id":"integrity","rules":[{"id":"infra","statistic":"infra_slots_completed","op":">=","threshold":1}]}"#,
        );
        assert!(g.validate(None).is_err());
    }
}
