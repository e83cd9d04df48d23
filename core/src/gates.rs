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

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gate {
    pub id: String,
    /// The suite whose baseline/candidate pairs the rules read; `None` for integrity gates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suite: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub rules: Vec<Rule>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    pub id: String,
    pub statistic: Statistic,
    /// The metric the statistic reads (required by every statistic over scores).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric: Option<String>,
    /// Which arm, for statistics of one arm's attempts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arm: Option<ArmRole>,
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

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ArmRole {
    Baseline,
    Candidate,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    #[serde(rename = ">=")]
    Ge,
    #[serde(rename = ">")]
    Gt,
    #[serde(rename = "<=")]
    Le,
    #[serde(rename = "<")]
    Lt,
    #[serde(rename = "==")]
    Eq,
    #[serde(rename = "is_true")]
    IsTrue,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Statistic {
    // Over the pairs' differences (candidate − baseline) of `metric`.
    PairDiffMean,
    PairDiffMedian,
    PairDiffP95,
    PairDiffMin,
    PairDiffMax,
    // Over the pairs' overheads (candidate − baseline) / baseline of `metric`.
    PairOverheadMean,
    PairOverheadMedian,
    PairOverheadP95,
    PairOverheadMin,
    PairOverheadMax,
    /// mean(candidate) / mean(baseline) of `metric`.
    ArmMeanRatio,
    /// (mean baseline − mean candidate) / mean baseline of a count `metric`.
    ReductionRate,
    PairCount,
    TaskCount,
    // Statistics of one arm's attempts (`arm`) of `metric`.
    ArmMean,
    ArmMedian,
    ArmMin,
    ArmMax,
    /// Lower / upper bound of the paired-bootstrap interval of the task-level mean difference.
    BootstrapLower,
    BootstrapUpper,
    /// Lower bound of the interval of mean(m_candidate − factor · m_baseline) over tasks.
    ContrastLower,
    /// Sign-flip (paired permutation) p-value of the task-level mean difference.
    SignFlipP,
    // Run-wide integrity statistics (op = is_true).
    InfraSlotsCompleted,
    StatisticalSlotsResolved,
    RerunsAuthorized,
    SingleEndpoint,
    AccountingComplete,
}

impl Statistic {
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
        )
    }

    pub fn needs_arm(self) -> bool {
        matches!(
            self,
            Statistic::ArmMean | Statistic::ArmMedian | Statistic::ArmMin | Statistic::ArmMax
        )
    }

    pub fn is_integrity(self) -> bool {
        matches!(
            self,
            Statistic::InfraSlotsCompleted
                | Statistic::StatisticalSlotsResolved
                | Statistic::RerunsAuthorized
                | Statistic::SingleEndpoint
                | Statistic::AccountingComplete
        )
    }

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
    pub gate: String,
    pub rule: String,
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
