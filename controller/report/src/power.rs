//! Power at the declared effect of every interval rule (a bootstrap or contrast lower bound):
//! what `eval freeze` prints before any run and the report shows beside each verdict.

/// Every interval rule (a bootstrap or contrast lower bound) of a gate on a suite, with the
/// suite's number of tasks: the rules `eval freeze` prints calibration and power for and the
/// report shows power for.
pub fn interval_rules(
    loaded: &eval_protocols::Loaded,
) -> Vec<(&eval_core::gates::Gate, &eval_core::gates::Rule, usize)> {
    use eval_evidence::gates::Statistic;
    let mut out = Vec::new();
    for gate in &loaded.protocol.gates {
        let Some(suite) = gate.suite.as_deref() else {
            continue;
        };
        let Some(n) = loaded
            .matrix
            .suites
            .iter()
            .find(|s| s.id == suite)
            .map(|s| s.tasks.len())
        else {
            continue;
        };
        for rule in &gate.rules {
            if matches!(
                rule.statistic,
                Statistic::BootstrapLower | Statistic::ContrastLower
            ) {
                out.push((gate, rule, n));
            }
        }
    }
    out
}

/// The rule's power at the declared effect (`[power.<gate>]`) and its minimum detectable effect
/// at 80 % power, from one simulation of the gate's own interval at n tasks (see
/// `eval_evidence::stats::power::rule_power`). Without a declaration the effect is in task-level
/// sd units. The one computation behind both freeze's `power:` line and the report's table.
pub fn rule_power(
    loaded: &eval_protocols::Loaded,
    gate: &eval_core::gates::Gate,
    rule: &eval_core::gates::Rule,
    n: usize,
) -> Result<eval_evidence::stats::power::RulePower, eval_evidence::stats::StatsError> {
    let plan = &loaded.protocol.statistics;
    let method = rule.method.as_deref().unwrap_or(&plan.method);
    eval_evidence::stats::power::rule_power(&eval_evidence::stats::power::RulePowerInput {
        gate: &gate.id,
        rule: &rule.id,
        method,
        n,
        confidence: plan.confidence,
        seed: plan.seed,
        threshold: rule.threshold.unwrap_or(0.0),
        declared: loaded
            .protocol
            .power
            .get(&gate.id)
            .map(|s| (s.effect, s.sd)),
    })
}

/// Power of every interval rule, for the report. A rule whose simulation cannot run (a suite
/// with no tasks) has no row — at freeze the same rule made `eval freeze` fail.
pub fn power_rows(loaded: &eval_protocols::Loaded) -> Vec<eval_evidence::stats::power::RulePower> {
    interval_rules(loaded)
        .into_iter()
        .filter_map(|(gate, rule, n)| rule_power(loaded, gate, rule, n).ok())
        .collect()
}
