//! Views of a run for gates and reports: each slot's final attempt, the pairs of a suite
//! (baseline and gated candidate matched by task and repetition) and metric lookup with the
//! protocol's missing-data rule.

use std::collections::BTreeMap;

use crate::report::{AttemptData, RunData, SuiteData};
use eval_core::outcome::Outcome;
use eval_core::phase::Phase;

/// The value of `metric` for a finished attempt: the grader's metric, else a built-in, else the
/// protocol's missing-data value; `Err` explains why there is none.
pub fn metric_value(run: &RunData, a: &AttemptData, metric: &str) -> Result<f64, String> {
    if let Some(v) = a.metrics.get(metric) {
        return Ok(*v);
    }
    let builtin = builtin_value(a, metric);
    if let Some(v) = builtin {
        return Ok(v);
    }
    run.plan
        .missing_metric_values
        .get(metric)
        .copied()
        .ok_or_else(|| {
            format!(
                "attempt {} (#{}) has no metric {metric:?} and the protocol declares no missing-data value for it",
                a.slot, a.attempt
            )
        })
}

/// A built-in metric (one of [`eval_core::budget::BUILTIN_METRICS`]) read from the attempt's
/// accounting, for run data whose metrics map lacks it; `None` for any other name.
fn builtin_value(a: &AttemptData, metric: &str) -> Option<f64> {
    match metric {
        "model_turns" => Some(a.model_turns as f64),
        "tokens" => Some(a.tokens.total() as f64),
        "input_tokens" => Some(a.tokens.input as f64),
        "output_tokens" => Some(a.tokens.output as f64),
        "duration_seconds" => Some(a.duration_seconds),
        // What the arm controls: the wall time less the time its calls waited on the upstream
        // (never below 0: calls made in parallel can wait longer than the run lasted).
        "harness_seconds" => Some(harness_seconds(a)),
        // The run data's oracle count is already the larger of the oracle role's calls and the
        // questions the controller answered, which is what the clarification count measures.
        "oracle_calls" | "clarification_questions" => Some(f64::from(a.oracle_calls)),
        _ => None,
    }
}

/// `duration_seconds` less the time the attempt waited on the upstream, at least 0.
pub fn harness_seconds(a: &AttemptData) -> f64 {
    (a.duration_seconds - a.upstream_wait_seconds.unwrap_or(0.0)).max(0.0)
}

/// Whether an attempt's outcome settles its slot (any recorded outcome but an infrastructure
/// fault).
pub fn is_final(a: &AttemptData) -> bool {
    matches!(&a.outcome, Some(o) if *o != Outcome::InfraFault)
}

/// Each slot's final attempt (highest attempt number with a non-infra outcome), by slot id.
pub fn final_attempts(run: &RunData) -> BTreeMap<&str, &AttemptData> {
    let mut out: BTreeMap<&str, &AttemptData> = BTreeMap::new();
    for a in run.attempts.iter().filter(|a| is_final(a)) {
        match out.get(a.slot.as_str()) {
            Some(prev) if prev.attempt >= a.attempt => {}
            _ => {
                out.insert(&a.slot, a);
            }
        }
    }
    out
}

/// The baseline and candidate final attempts of one (task, repetition), as far as they exist.
type PairSlot<'a> = (Option<&'a AttemptData>, Option<&'a AttemptData>);

/// One baseline/candidate pair of a suite.
#[derive(Clone, Debug)]
pub struct Pair<'a> {
    /// The task both attempts ran.
    pub task: &'a str,
    /// The repetition index within the task.
    pub rep: u32,
    /// The baseline arm's final attempt.
    pub baseline: &'a AttemptData,
    /// The gated candidate's final attempt.
    pub candidate: &'a AttemptData,
}

/// A suite's statistical view: pairs in the order their first slot was scheduled (v0.4's
/// "pairs in statistical order"), and each arm's final statistical attempts.
pub struct SuiteView<'a> {
    /// The suite viewed.
    pub suite: &'a SuiteData,
    /// Complete pairs only (both arms have a final attempt), in statistical order.
    pub pairs: Vec<Pair<'a>>,
    /// Each arm's final statistical attempts, by arm id.
    pub arm_attempts: BTreeMap<&'a str, Vec<&'a AttemptData>>,
}

impl<'a> SuiteView<'a> {
    /// The view of the suite's own baseline against its gated candidate.
    pub fn new(run: &'a RunData, suite: &'a SuiteData) -> Self {
        Self::for_arms(run, suite, &suite.baseline, &suite.candidate)
    }

    /// Pairs of `baseline` against any arm `candidate` of the suite.
    pub fn for_arms(
        run: &'a RunData,
        suite: &'a SuiteData,
        baseline: &str,
        candidate: &str,
    ) -> Self {
        let finals = final_attempts(run);
        let position: BTreeMap<&str, usize> = run
            .slots
            .iter()
            .enumerate()
            .map(|(i, s)| (s.id.as_str(), i))
            .collect();
        let mut arm_attempts: BTreeMap<&str, Vec<&AttemptData>> = BTreeMap::new();
        let mut by_key: BTreeMap<(&str, u32), PairSlot> = BTreeMap::new();
        for slot in run
            .slots
            .iter()
            .filter(|s| s.phase == Phase::Statistical && s.suite == suite.id)
        {
            let Some(a) = finals.get(slot.id.as_str()) else {
                continue;
            };
            arm_attempts.entry(slot.arm.as_str()).or_default().push(a);
            let e = by_key.entry((slot.task.as_str(), slot.rep)).or_default();
            if slot.arm == baseline {
                e.0 = Some(a);
            } else if slot.arm == candidate {
                e.1 = Some(a);
            }
        }
        let mut pairs: Vec<(usize, Pair)> = by_key
            .into_iter()
            .filter_map(|((task, rep), (b, c))| {
                let (b, c) = (b?, c?);
                let first = position
                    .get(b.slot.as_str())
                    .copied()
                    .unwrap_or(usize::MAX)
                    .min(position.get(c.slot.as_str()).copied().unwrap_or(usize::MAX));
                Some((
                    first,
                    Pair {
                        task,
                        rep,
                        baseline: b,
                        candidate: c,
                    },
                ))
            })
            .collect();
        pairs.sort_by_key(|(p, _)| *p);
        Self {
            suite,
            pairs: pairs.into_iter().map(|(_, p)| p).collect(),
            arm_attempts,
        }
    }

    /// Distinct tasks of the pairs, in first-appearance order.
    pub fn tasks(&self) -> Vec<&'a str> {
        let mut out: Vec<&str> = Vec::new();
        for p in &self.pairs {
            if !out.contains(&p.task) {
                out.push(p.task);
            }
        }
        out
    }

    /// Task-level arm means of `metric` over the pairs (repetitions averaged), in task order.
    pub fn task_means(&self, run: &RunData, metric: &str) -> Result<TaskMeans, String> {
        let tasks = self.tasks();
        let mut b = vec![Vec::new(); tasks.len()];
        let mut c = vec![Vec::new(); tasks.len()];
        let mut diffs = Vec::with_capacity(self.pairs.len());
        let mut clusters = Vec::with_capacity(self.pairs.len());
        for p in &self.pairs {
            let i = tasks.iter().position(|t| *t == p.task).unwrap_or(0);
            let vb = metric_value(run, p.baseline, metric)?;
            let vc = metric_value(run, p.candidate, metric)?;
            b[i].push(vb);
            c[i].push(vc);
            diffs.push(vc - vb);
            clusters.push(p.task.to_string());
        }
        Ok(TaskMeans {
            tasks: tasks.iter().map(|t| t.to_string()).collect(),
            baseline: b.iter().map(|v| crate::stats::data::mean(v)).collect(),
            candidate: c.iter().map(|v| crate::stats::data::mean(v)).collect(),
            reps: b.iter().zip(&c).map(|(b, c)| (b.len(), c.len())).collect(),
            pair_diffs: diffs,
            pair_tasks: clusters,
        })
    }
}

/// Task-level means of one metric for both arms of a suite view, tasks in first-appearance order.
#[derive(Clone, Debug)]
pub struct TaskMeans {
    /// Task ids, in first-appearance order; the other vectors are indexed like it.
    pub tasks: Vec<String>,
    /// The baseline's mean per task (repetitions averaged).
    pub baseline: Vec<f64>,
    /// The candidate's mean per task.
    pub candidate: Vec<f64>,
    /// (baseline, candidate) number of repetitions averaged per task.
    pub reps: Vec<(usize, usize)>,
    /// Pair differences in pair order with their task, for v0.4's bootstrap.
    pub pair_diffs: Vec<f64>,
    /// The task of each entry of `pair_diffs`.
    pub pair_tasks: Vec<String>,
}
