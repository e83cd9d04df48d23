//! Task-level paired data: repetitions averaged within (task, arm), then one pair of arm means
//! per task. The task is the independent unit; everything resamples tasks.

use std::collections::BTreeMap;

use super::error::StatsError;

/// One observation: a score of one repetition of one arm on one task.
#[derive(Clone, Debug, PartialEq)]
pub struct Observation {
    /// The task id.
    pub task: String,
    /// The arm id.
    pub arm: String,
    /// The repetition label (text: only used to tell repetitions apart).
    pub rep: String,
    /// The observed value of the metric.
    pub score: f64,
    /// Where it came from (e.g. `file.csv:12`), for error messages.
    pub origin: String,
}

/// Per-task arm means, tasks in order of first appearance.
#[derive(Clone, Debug, PartialEq)]
pub struct PairedTasks {
    /// Task ids; the other vectors are indexed like it.
    pub tasks: Vec<String>,
    /// The baseline arm's mean per task.
    pub baseline: Vec<f64>,
    /// The candidate arm's mean per task.
    pub candidate: Vec<f64>,
    /// Repetitions averaged per task: (baseline, candidate).
    pub reps: Vec<(usize, usize)>,
}

impl PairedTasks {
    /// Builds task means from finite observations; other arms are ignored. Missing repetitions
    /// are not imputed here: a task's arm mean is the mean of the repetitions present (the
    /// protocol's missing-data rule is applied before, when the data come from a run).
    pub fn from_observations(
        obs: &[Observation],
        baseline: &str,
        candidate: &str,
    ) -> Result<Self, StatsError> {
        if baseline == candidate {
            return Err(StatsError::Input(format!(
                "baseline and candidate are the same arm {baseline:?}"
            )));
        }
        let mut order: Vec<String> = Vec::new();
        // task -> (baseline scores, candidate scores, first origin)
        let mut by_task: BTreeMap<&str, (Vec<f64>, Vec<f64>, &str)> = BTreeMap::new();
        let mut seen_rep: BTreeMap<(&str, &str, &str), &str> = BTreeMap::new();
        let mut arms_seen: Vec<&str> = Vec::new();
        for o in obs {
            if !arms_seen.contains(&o.arm.as_str()) {
                arms_seen.push(&o.arm);
            }
            if o.arm != baseline && o.arm != candidate {
                continue;
            }
            if !o.score.is_finite() {
                return Err(StatsError::Input(format!(
                    "{}: score {} is not a finite number",
                    o.origin, o.score
                )));
            }
            if let Some(prev) = seen_rep.insert((&o.task, &o.arm, &o.rep), &o.origin) {
                return Err(StatsError::Input(format!(
                    "{}: task {:?}, arm {:?}, rep {:?} appears twice (first at {prev})",
                    o.origin, o.task, o.arm, o.rep
                )));
            }
            let entry = by_task.entry(&o.task).or_insert_with(|| {
                order.push(o.task.clone());
                (Vec::new(), Vec::new(), &o.origin)
            });
            if o.arm == baseline {
                entry.0.push(o.score);
            } else {
                entry.1.push(o.score);
            }
        }
        for arm in [baseline, candidate] {
            if !arms_seen.contains(&arm) {
                return Err(StatsError::Input(format!(
                    "arm {arm:?} has no rows (arms present: {})",
                    arms_seen.join(", ")
                )));
            }
        }
        let mut out = PairedTasks {
            tasks: Vec::with_capacity(order.len()),
            baseline: Vec::with_capacity(order.len()),
            candidate: Vec::with_capacity(order.len()),
            reps: Vec::with_capacity(order.len()),
        };
        for task in order {
            let Some((b, c, origin)) = by_task.get(task.as_str()) else {
                continue;
            };
            let missing = match (b.is_empty(), c.is_empty()) {
                (true, _) => Some(baseline),
                (_, true) => Some(candidate),
                _ => None,
            };
            if let Some(arm) = missing {
                return Err(StatsError::Input(format!(
                    "{origin}: task {task:?} has no rows for arm {arm:?} (every task needs both arms)"
                )));
            }
            out.baseline.push(mean(b));
            out.candidate.push(mean(c));
            out.reps.push((b.len(), c.len()));
            out.tasks.push(task);
        }
        if out.tasks.is_empty() {
            return Err(StatsError::Input("no tasks".into()));
        }
        Ok(out)
    }

    /// Builds from task means already computed (one repetition each is recorded); lengths must
    /// agree and every mean be finite.
    pub fn from_means(
        tasks: Vec<String>,
        baseline: Vec<f64>,
        candidate: Vec<f64>,
    ) -> Result<Self, StatsError> {
        if tasks.len() != baseline.len() || tasks.len() != candidate.len() {
            return Err(StatsError::Input(
                "tasks and arm means differ in length".into(),
            ));
        }
        if tasks.is_empty() {
            return Err(StatsError::Input("no tasks".into()));
        }
        if let Some(i) =
            (0..tasks.len()).find(|&i| !(baseline[i].is_finite() && candidate[i].is_finite()))
        {
            return Err(StatsError::Input(format!(
                "task {:?}: arm mean is not finite",
                tasks[i]
            )));
        }
        let reps = vec![(1, 1); tasks.len()];
        Ok(Self {
            tasks,
            baseline,
            candidate,
            reps,
        })
    }

    /// Number of tasks.
    pub fn n(&self) -> usize {
        self.tasks.len()
    }

    /// Candidate minus baseline, per task.
    pub fn differences(&self) -> Vec<f64> {
        self.candidate
            .iter()
            .zip(&self.baseline)
            .map(|(c, b)| c - b)
            .collect()
    }
}

/// Sum left to right, divided by the count (v0.4's `mean`).
pub fn mean(v: &[f64]) -> f64 {
    v.iter().fold(0.0, |a, x| a + x) / v.len() as f64
}
