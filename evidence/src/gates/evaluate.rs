//! Mechanical evaluation of declared gates against a run: every rule gets its value, its
//! verdict and, when it does not pass, the reason.
//!
//! Verdicts: `pass`; `fail` (the comparison is false); `not_computable` (NaN, ±∞, no pairs, a
//! missing metric — never a pass); `insufficient_tasks` (an interval or sign-flip rule whose level
//! α cannot be reached with n tasks because 2⁻ⁿ > α; for interval rules α = (1 − confidence)/2).

use serde::{Deserialize, Serialize};

use super::pairs::{SuiteView, TaskMeans, final_attempts, is_final, metric_value};
use crate::report::RunData;
use crate::stats::data::mean;
use crate::stats::interval::intervals;
use crate::stats::quantile::v04_percentile;
use crate::stats::resample::{ExactMode, ResampleConfig, resample};
use crate::stats::signflip::sign_flip;
use crate::stats::v04::{v04_interval, v04_interval_units};
use eval_core::gates::{ArmRole, Gate, Op, Rule, Statistic};
use eval_core::outcome::Outcome;
use eval_core::phase::Phase;

/// The outcome of one rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The statistic was computed and meets the threshold.
    Pass,
    /// The statistic was computed and does not meet the threshold (or an integrity check found
    /// problems).
    Fail,
    /// The statistic could not be computed (no pairs, a missing metric, NaN); counts as not passed.
    NotComputable,
    /// Too few tasks for the sign-flip test ever to reach the gate's level; counts as not passed.
    InsufficientTasks,
}

/// One rule's evaluation, as the report shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RuleResult {
    /// The rule's id.
    pub id: String,
    /// The statistic computed.
    pub statistic: Statistic,
    /// The metric it read, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metric: Option<String>,
    /// The arm it read, for one-arm statistics.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arm: Option<ArmRole>,
    /// The comparison applied.
    pub op: Op,
    /// The threshold compared with (absent for `is_true`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub threshold: Option<f64>,
    /// The statistic's value; `null` when it is NaN or could not be computed (see `reason`).
    pub value: Option<f64>,
    /// The value as text (keeps `inf`, `-inf`, `NaN` visible).
    pub value_text: String,
    /// The rule's verdict.
    pub verdict: Verdict,
    /// Why it did not pass (or what an integrity check found), when there is something to say.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Interval method used (bootstrap statistics only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// Tasks behind a task-level statistic.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub n_tasks: Option<usize>,
    /// For `arm_rate` / `arm_count`: the successes, the trials and the exact interval of the rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binomial: Option<Binomial>,
}

/// An exact (Clopper–Pearson) two-sided interval of a binomial rate `successes / trials`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Binomial {
    /// Attempts whose 0/1 metric is 1.
    pub successes: u64,
    /// Attempts read.
    pub trials: u64,
    /// The interval's two-sided confidence level.
    pub level: f64,
    /// Lower bound of the rate (0 when there are no successes).
    pub lower: f64,
    /// Upper bound of the rate (1 when every trial is a success).
    pub upper: f64,
}

/// The Clopper–Pearson interval of `k` successes in `n > 0` trials at two-sided `level`:
/// `[Beta(k, n−k+1).quantile(α/2), Beta(k+1, n−k).quantile(1−α/2)]`, with 0 and 1 at the edges.
pub fn clopper_pearson(k: u64, n: u64, level: f64) -> Option<Binomial> {
    use statrs::distribution::{Beta, ContinuousCDF};
    if n == 0 || k > n || !(0.0..1.0).contains(&level) || level <= 0.0 {
        return None;
    }
    let alpha = 1.0 - level;
    let (kf, nf) = (k as f64, n as f64);
    let lower = if k == 0 {
        0.0
    } else {
        Beta::new(kf, nf - kf + 1.0).ok()?.inverse_cdf(alpha / 2.0)
    };
    let upper = if k == n {
        1.0
    } else {
        Beta::new(kf + 1.0, nf - kf)
            .ok()?
            .inverse_cdf(1.0 - alpha / 2.0)
    };
    Some(Binomial {
        successes: k,
        trials: n,
        level,
        lower,
        upper,
    })
}

/// One gate's evaluation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GateResult {
    /// The gate's id.
    pub id: String,
    /// The suite it reads, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub suite: Option<String>,
    /// The gate's description from the protocol.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// True only if the gate has rules and every one passed.
    pub passed: bool,
    /// Each rule's result, in protocol order.
    pub rules: Vec<RuleResult>,
}

/// Evaluates every gate of `run.gates`.
pub fn evaluate_gates(run: &RunData) -> Vec<GateResult> {
    run.gates.iter().map(|g| evaluate_gate(run, g)).collect()
}

/// Evaluates one gate of `run`.
pub fn evaluate_gate(run: &RunData, gate: &Gate) -> GateResult {
    let rules: Vec<RuleResult> = gate
        .rules
        .iter()
        .map(|r| evaluate_rule(run, gate, r))
        .collect();
    GateResult {
        id: gate.id.clone(),
        suite: gate.suite.clone(),
        description: gate.description.clone(),
        passed: !rules.is_empty() && rules.iter().all(|r| r.verdict == Verdict::Pass),
        rules,
    }
}

/// What a statistic computes to before the comparison.
enum Computed {
    Value {
        v: f64,
        n_tasks: Option<usize>,
        method: Option<String>,
    },
    Truth {
        ok: bool,
        reasons: Vec<String>,
    },
    Insufficient {
        v: Option<f64>,
        n: usize,
        level: f64,
        method: Option<String>,
    },
    None(String),
    /// A rate or count with its binomial interval (compared like a value).
    Rate {
        v: f64,
        b: Binomial,
    },
}

fn evaluate_rule(run: &RunData, gate: &Gate, rule: &Rule) -> RuleResult {
    let mut out = RuleResult {
        id: rule.id.clone(),
        statistic: rule.statistic,
        metric: rule.metric.clone(),
        arm: rule.arm,
        op: rule.op,
        threshold: rule.threshold,
        value: None,
        value_text: "—".into(),
        verdict: Verdict::NotComputable,
        reason: None,
        method: None,
        n_tasks: None,
        binomial: None,
    };
    if let Err(e) = gate.validate(None) {
        out.reason = Some(format!("invalid gate: {e}"));
        return out;
    }
    let computed = if rule.statistic.is_integrity() {
        integrity(run, rule.statistic)
    } else {
        match gate
            .suite
            .as_deref()
            .and_then(|s| run.suites.iter().find(|x| x.id == s))
        {
            None => Computed::None(format!(
                "the run has no suite {:?}",
                gate.suite.as_deref().unwrap_or("")
            )),
            Some(suite) => {
                let view = SuiteView::new(run, suite);
                suite_statistic(run, &view, rule)
            }
        }
    };
    let computed = match computed {
        Computed::Rate { v, b } => {
            out.binomial = Some(b);
            Computed::Value {
                v,
                n_tasks: None,
                method: None,
            }
        }
        c => c,
    };
    match computed {
        // Turned into a value just above.
        Computed::Rate { .. } => {}
        Computed::None(reason) => out.reason = Some(reason),
        Computed::Truth { ok, reasons } => {
            out.value = Some(if ok { 1.0 } else { 0.0 });
            out.value_text = ok.to_string();
            out.verdict = if ok { Verdict::Pass } else { Verdict::Fail };
            if !ok {
                out.reason = Some(reasons.join("; "));
            }
        }
        Computed::Insufficient {
            v,
            n,
            level,
            method,
        } => {
            out.value = v.filter(|x| x.is_finite());
            out.value_text = v.map_or("—".into(), fmt_value);
            out.verdict = Verdict::InsufficientTasks;
            out.method = method;
            out.n_tasks = Some(n);
            out.reason = Some(format!(
                "insufficient tasks: with {n} tasks the smallest attainable sign-flip p is 2^-{n} = {}, above the gate's level {}",
                0.5f64.powi(n as i32),
                (level * 1e12).round() / 1e12
            ));
        }
        Computed::Value { v, n_tasks, method } => {
            out.value_text = fmt_value(v);
            out.n_tasks = n_tasks;
            out.method = method;
            if !v.is_finite() {
                out.reason = Some(format!(
                    "the value is {} (a NaN or infinite value fails)",
                    fmt_value(v)
                ));
                return out;
            }
            out.value = Some(v);
            let t = rule.threshold.unwrap_or(f64::NAN);
            let ok = match rule.op {
                Op::Ge => v >= t,
                Op::Gt => v > t,
                Op::Le => v <= t,
                Op::Lt => v < t,
                Op::Eq => v == t,
                Op::IsTrue => v != 0.0,
            };
            out.verdict = if ok { Verdict::Pass } else { Verdict::Fail };
            if !ok {
                out.reason = Some(format!(
                    "{} {} {} is false",
                    fmt_value(v),
                    op_text(rule.op),
                    fmt_value(t)
                ));
            }
        }
    }
    out
}

/// The operator as a protocol writes it.
pub fn op_text(op: Op) -> &'static str {
    match op {
        Op::Ge => ">=",
        Op::Gt => ">",
        Op::Le => "<=",
        Op::Lt => "<",
        Op::Eq => "==",
        Op::IsTrue => "is_true",
    }
}

/// A value as text for reports: `NaN`, `+inf`, `-inf` spelled out.
pub fn fmt_value(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v == f64::INFINITY {
        "+inf".into()
    } else if v == f64::NEG_INFINITY {
        "-inf".into()
    } else {
        format!("{v}")
    }
}

/// Overhead of a pair: (c − b) / b; 0 when both are 0; +∞ when only b is 0.
pub fn overhead(candidate: f64, baseline: f64) -> f64 {
    if baseline == 0.0 {
        if candidate == 0.0 { 0.0 } else { f64::INFINITY }
    } else {
        (candidate - baseline) / baseline
    }
}

/// Reduction rate of means: (b − c) / b; 1 when both are 0; −∞ when only b is 0 (v0.4).
pub fn reduction_rate(candidate_mean: f64, baseline_mean: f64) -> f64 {
    if baseline_mean == 0.0 {
        if candidate_mean == 0.0 {
            1.0
        } else {
            f64::NEG_INFINITY
        }
    } else {
        (baseline_mean - candidate_mean) / baseline_mean
    }
}

fn summary(values: &[f64], which: Statistic) -> Result<f64, String> {
    if values.is_empty() {
        return Err("no values (no pairs or attempts)".into());
    }
    let s = match which {
        Statistic::PairDiffMean | Statistic::PairOverheadMean | Statistic::ArmMean => mean(values),
        Statistic::PairDiffMedian | Statistic::PairOverheadMedian | Statistic::ArmMedian => {
            v04_percentile(values, 0.5).unwrap_or(f64::NAN)
        }
        Statistic::PairDiffP95 | Statistic::PairOverheadP95 => {
            v04_percentile(values, 0.95).unwrap_or(f64::NAN)
        }
        Statistic::PairDiffMin | Statistic::PairOverheadMin | Statistic::ArmMin => {
            values.iter().copied().fold(f64::INFINITY, f64::min)
        }
        _ => values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
    };
    Ok(s)
}

fn suite_statistic(run: &RunData, view: &SuiteView, rule: &Rule) -> Computed {
    use Statistic as S;
    let metric = rule.metric.as_deref().unwrap_or("");
    let value = |v: f64| Computed::Value {
        v,
        n_tasks: None,
        method: None,
    };
    let pair_values = |f: &dyn Fn(f64, f64) -> f64| -> Result<Vec<f64>, String> {
        view.pairs
            .iter()
            .map(|p| {
                Ok(f(
                    metric_value(run, p.candidate, metric)?,
                    metric_value(run, p.baseline, metric)?,
                ))
            })
            .collect()
    };
    let s = rule.statistic;
    match s {
        S::PairCount => value(view.pairs.len() as f64),
        S::TaskCount => value(view.tasks().len() as f64),
        S::PairDiffMean | S::PairDiffMedian | S::PairDiffP95 | S::PairDiffMin | S::PairDiffMax => {
            match pair_values(&|c, b| c - b).and_then(|v| summary(&v, s)) {
                Ok(v) => value(v),
                Err(e) => Computed::None(e),
            }
        }
        S::PairOverheadMean
        | S::PairOverheadMedian
        | S::PairOverheadP95
        | S::PairOverheadMin
        | S::PairOverheadMax => match pair_values(&overhead).and_then(|v| summary(&v, s)) {
            Ok(v) => value(v),
            Err(e) => Computed::None(e),
        },
        S::ArmMeanRatio | S::ReductionRate => {
            let cs = pair_values(&|c, _| c);
            let bs = pair_values(&|_, b| b);
            match (cs, bs) {
                (Ok(c), Ok(b)) if !c.is_empty() => {
                    let (mc, mb) = (mean(&c), mean(&b));
                    if s == S::ReductionRate {
                        value(reduction_rate(mc, mb))
                    } else if mb == 0.0 {
                        Computed::Value {
                            v: if mc == 0.0 { f64::NAN } else { f64::INFINITY },
                            n_tasks: None,
                            method: None,
                        }
                    } else {
                        value(mc / mb)
                    }
                }
                (Err(e), _) | (_, Err(e)) => Computed::None(e),
                _ => Computed::None("no pairs".into()),
            }
        }
        S::ArmRate | S::ArmCount => {
            let arm = match rule.arm {
                Some(ArmRole::Baseline) => &view.suite.baseline,
                _ => &view.suite.candidate,
            };
            let vals: Result<Vec<f64>, String> = view
                .arm_attempts
                .get(arm.as_str())
                .map(|v| v.iter().map(|a| metric_value(run, a, metric)).collect())
                .unwrap_or_else(|| Ok(Vec::new()));
            match vals {
                Err(e) => Computed::None(e),
                Ok(v) if v.is_empty() => Computed::None("no attempts of the arm".into()),
                Ok(v) if v.iter().any(|x| *x != 0.0 && *x != 1.0) => Computed::None(format!(
                    "{} needs a 0/1 metric; {metric:?} has other values",
                    s.name()
                )),
                Ok(v) => {
                    let k = v.iter().filter(|x| **x == 1.0).count() as u64;
                    let n = v.len() as u64;
                    match clopper_pearson(k, n, run.plan.confidence) {
                        None => Computed::None(format!(
                            "no binomial interval at confidence {}",
                            run.plan.confidence
                        )),
                        Some(b) => Computed::Rate {
                            v: if s == S::ArmRate {
                                k as f64 / n as f64
                            } else {
                                k as f64
                            },
                            b,
                        },
                    }
                }
            }
        }
        S::ArmMean | S::ArmMedian | S::ArmMin | S::ArmMax => {
            let arm = match rule.arm {
                Some(ArmRole::Baseline) => &view.suite.baseline,
                _ => &view.suite.candidate,
            };
            let vals: Result<Vec<f64>, String> = view
                .arm_attempts
                .get(arm.as_str())
                .map(|v| v.iter().map(|a| metric_value(run, a, metric)).collect())
                .unwrap_or_else(|| Ok(Vec::new()));
            match vals.and_then(|v| summary(&v, s)) {
                Ok(v) => value(v),
                Err(e) => Computed::None(e),
            }
        }
        S::BootstrapLower | S::BootstrapUpper | S::ContrastLower | S::SignFlipP => {
            match view.task_means(run, metric) {
                Err(e) => Computed::None(e),
                Ok(tm) if tm.tasks.is_empty() => Computed::None("no pairs".into()),
                Ok(tm) => task_level(run, view, rule, &tm),
            }
        }
        _ => Computed::None(format!("{} is an integrity statistic", s.name())),
    }
}

fn task_level(run: &RunData, view: &SuiteView, rule: &Rule, tm: &TaskMeans) -> Computed {
    let n = tm.tasks.len();
    let min_p = 0.5f64.powi(n as i32);
    let plan = &run.plan;
    let diffs: Vec<f64> = tm
        .candidate
        .iter()
        .zip(&tm.baseline)
        .map(|(c, b)| c - b)
        .collect();
    if rule.statistic == Statistic::SignFlipP {
        let sf = sign_flip(&diffs, plan.resamples, plan.seed);
        let t = rule.threshold.unwrap_or(0.0);
        let unreachable = match rule.op {
            Op::Lt => min_p >= t,
            Op::Le => min_p > t,
            _ => false,
        };
        return if unreachable {
            Computed::Insufficient {
                v: Some(sf.p),
                n,
                level: t,
                method: Some(sf.method),
            }
        } else {
            Computed::Value {
                v: sf.p,
                n_tasks: Some(n),
                method: Some(sf.method),
            }
        };
    }
    let method = rule.method.clone().unwrap_or_else(|| plan.method.clone());
    let level = (1.0 - plan.confidence) / 2.0;
    let factor = rule.factor.unwrap_or(1.0);
    let col: Vec<f64> = if rule.statistic == Statistic::ContrastLower {
        tm.candidate
            .iter()
            .zip(&tm.baseline)
            .map(|(c, b)| c - factor * b)
            .collect()
    } else {
        diffs
    };
    let upper = rule.statistic == Statistic::BootstrapUpper;
    let bound: Result<f64, String> = if method == "v04-percentile" {
        let seed = plan
            .seed_string
            .as_deref()
            .unwrap_or("{identity}:{suite}")
            .replace(
                "{identity}",
                run.identity
                    .strip_prefix("sha256:")
                    .unwrap_or(&run.identity),
            )
            .replace("{suite}", &view.suite.id);
        let r = if rule.statistic == Statistic::ContrastLower {
            v04_interval_units(&col, col.len(), &seed, plan.confidence, plan.resamples)
        } else {
            let clusters: Vec<&str> = tm.pair_tasks.iter().map(String::as_str).collect();
            v04_interval(
                &tm.pair_diffs,
                &clusters,
                &seed,
                plan.confidence,
                plan.resamples,
            )
        };
        r.map(|r| if upper { r.upper } else { r.lower })
            .ok_or_else(|| "no pairs".to_string())
    } else {
        let exact = plan.exact.parse::<ExactMode>().unwrap_or(ExactMode::Auto);
        let cfg = ResampleConfig {
            resamples: plan.resamples,
            seed: plan.seed,
            exact,
            threads: 0,
        };
        resample(&[&col], &cfg)
            .and_then(|d| intervals(&[&col], &d, &|m: &[f64]| m[0], plan.confidence))
            .map(|i| {
                let iv = if method == "percentile" {
                    i.percentile
                } else {
                    i.bca
                };
                if upper { iv[1] } else { iv[0] }
            })
            .map_err(|e| e.to_string())
    };
    match bound {
        Err(e) => Computed::None(e),
        Ok(v) if min_p > level => Computed::Insufficient {
            v: Some(v),
            n,
            level,
            method: Some(method),
        },
        Ok(v) => Computed::Value {
            v,
            n_tasks: Some(n),
            method: Some(method),
        },
    }
}

fn integrity(run: &RunData, s: Statistic) -> Computed {
    let mut reasons = Vec::new();
    let finals = final_attempts(run);
    match s {
        Statistic::InfraSlotsCompleted => {
            for slot in run
                .slots
                .iter()
                .filter(|s| s.phase == Phase::Infrastructure)
            {
                let done = run
                    .attempts
                    .iter()
                    .any(|a| a.slot == slot.id && a.outcome == Some(Outcome::Completed));
                if !done {
                    reasons.push(format!("infrastructure slot {} has not completed", slot.id));
                }
            }
        }
        Statistic::StatisticalSlotsResolved => {
            for slot in run.slots.iter().filter(|s| s.phase == Phase::Statistical) {
                if !finals.contains_key(slot.id.as_str()) {
                    reasons.push(format!(
                        "statistical slot {} has no final non-infra outcome",
                        slot.id
                    ));
                }
            }
        }
        Statistic::RerunsAuthorized => reasons = rerun_problems(run),
        Statistic::GraderValid => reasons = super::controls::grader_problems(run),
        Statistic::SingleEndpoint => {
            let mut eps: Vec<&str> = run.attempts.iter().map(|a| a.upstream.as_str()).collect();
            eps.sort_unstable();
            eps.dedup();
            if eps.len() > 1 {
                reasons.push(format!(
                    "{} upstream endpoints: {}",
                    eps.len(),
                    eps.join(", ")
                ));
            }
        }
        Statistic::AccountingComplete => {
            for a in &run.attempts {
                let limit = run
                    .suites
                    .iter()
                    .find(|s| s.id == a.suite)
                    .map_or(0, |s| s.max_oracle_calls);
                if a.oracle_calls > limit {
                    reasons.push(format!(
                        "{} #{}: {} oracle calls, the suite allows {limit}",
                        a.slot, a.attempt, a.oracle_calls
                    ));
                }
                // The attempt's own file missing or unreadable (its agent deleted or mangled
                // it, or its time limit cut the harness off) is that attempt's gap: counted and
                // shown in the report (`accounting_unchecked`), never a veto one attempt of
                // either arm could cast on the whole run. The proxy's meter stands for it.
                if crate::report::attempt_accounting_gap(a) {
                    continue;
                }
                if let Some(why) = crate::report::accounting_gap(a) {
                    reasons.push(format!("{} #{}: {why}", a.slot, a.attempt));
                }
                if a.outcome == Some(Outcome::AccountingMismatch) {
                    reasons.push(format!("{} #{}: accounting mismatch", a.slot, a.attempt));
                }
                if let Some(t) = a.harness_turns
                    && t != a.model_turns
                {
                    reasons.push(format!(
                        "{} #{}: harness counted {t} model turns, the proxy {}",
                        a.slot, a.attempt, a.model_turns
                    ));
                }
                if let Some(t) = a.harness_tokens
                    && t != a.tokens.total()
                {
                    reasons.push(format!(
                        "{} #{}: harness counted {t} tokens, the provider's usage {}",
                        a.slot,
                        a.attempt,
                        a.tokens.total()
                    ));
                }
            }
        }
        _ => return Computed::None(format!("{} is not an integrity statistic", s.name())),
    }
    Computed::Truth {
        ok: reasons.is_empty(),
        reasons,
    }
}

/// Reruns must follow the rules: attempt numbers 1, 2, … per slot; attempt k > 1 names k − 1
/// as `rerun_of`; the rerun attempt ended in an infra fault whose code the protocol lists
/// (infrastructure slots: any non-completed outcome); no attempt follows a statistical slot's
/// final outcome; at most `max_reruns_per_slot` reruns (statistical) or `max_infra_attempts`
/// attempts (infrastructure).
pub fn rerun_problems(run: &RunData) -> Vec<String> {
    let mut problems = Vec::new();
    let mut by_slot: std::collections::BTreeMap<&str, Vec<&crate::report::AttemptData>> =
        std::collections::BTreeMap::new();
    for a in &run.attempts {
        by_slot.entry(&a.slot).or_default().push(a);
    }
    for (slot, mut atts) in by_slot {
        atts.sort_by_key(|a| a.attempt);
        for (i, a) in atts.iter().enumerate() {
            let want = i as u32 + 1;
            if a.attempt != want {
                problems.push(format!(
                    "{slot}: attempt numbers are not contiguous (found #{} where #{want} belongs)",
                    a.attempt
                ));
                break;
            }
            if i == 0 {
                if a.rerun_of.is_some() {
                    problems.push(format!("{slot} #1 claims to be a rerun"));
                }
                continue;
            }
            let prev = atts[i - 1];
            if a.rerun_of != Some(prev.attempt) {
                problems.push(format!(
                    "{slot} #{}: a rerun must name attempt #{} (rerun_of = {:?})",
                    a.attempt, prev.attempt, a.rerun_of
                ));
            }
            let allowed = match (&prev.outcome, a.phase) {
                _ if prev.unprepared() => true,
                (Some(Outcome::InfraFault), Phase::Statistical) => prev
                    .infra_fault
                    .is_some_and(|c| run.rerunnable_fault_codes.contains(&c)),
                (Some(Outcome::Completed), Phase::Infrastructure) => false,
                (Some(_), Phase::Infrastructure) => true,
                (Some(Outcome::InfraFault), Phase::Control) => true,
                _ => false,
            };
            if !allowed {
                problems.push(format!(
                    "{slot} #{}: rerun of #{} is not authorized ({})",
                    a.attempt,
                    prev.attempt,
                    match (&prev.outcome, &prev.infra_fault) {
                        (Some(Outcome::InfraFault), Some(c)) =>
                            format!("fault code \"{c}\" is not rerunnable"),
                        (Some(Outcome::InfraFault), None) => "the fault has no code".into(),
                        (Some(o), _) => format!("previous outcome {o:?} is final"),
                        (None, _) => "the previous attempt never ended".into(),
                    }
                ));
            }
            if is_final(prev) && a.phase == Phase::Statistical {
                problems.push(format!("{slot} #{}: follows a final outcome", a.attempt));
            }
        }
        // Preparation retries use no rerun (the agent never ran), up to their own bound.
        let unprepared = atts.iter().filter(|a| a.unprepared()).count() as u32;
        if unprepared > eval_core::fault::MAX_PREPARATION_FAILURES {
            problems.push(format!(
                "{slot}: {unprepared} preparation failures, at most {} are retried",
                eval_core::fault::MAX_PREPARATION_FAILURES
            ));
        }
        let counted = atts.len() as u32 - unprepared.min(atts.len() as u32);
        let infra = atts.first().is_some_and(|a| a.phase != Phase::Statistical);
        if infra {
            if let Some(max) = run.max_infra_attempts
                && counted > max
            {
                problems.push(format!(
                    "{slot}: {counted} attempts, the protocol allows {max} per infrastructure slot"
                ));
            }
        } else if let Some(max) = run.max_reruns_per_slot
            && counted > max + 1
        {
            problems.push(format!(
                "{slot}: {} reruns, the protocol allows {max}",
                counted - 1
            ));
        }
    }
    problems
}
