//! The paired estimator on task-level data: everything `eval stats paired` prints, and what the
//! report shows per suite.

use serde::{Deserialize, Serialize};

use super::data::{PairedTasks, mean};
use super::error::StatsError;
use super::interval::{Intervals, intervals};
use super::resample::{ResampleConfig, ResampleKind, multiset_count, resample};
use super::signflip::{SignFlip, sign_flip};

/// `eval stats paired --json` output (schema version 1).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PairedSummary {
    /// Document schema, `eval.stats.paired/1`.
    pub schema: String,
    /// Number of tasks (the independent unit).
    pub n_tasks: usize,
    /// The baseline arm's id.
    pub baseline: String,
    /// The candidate arm's id.
    pub candidate: String,
    /// The metric compared.
    pub metric: String,
    /// Mean over tasks of the baseline's task means.
    pub mean_baseline: f64,
    /// Mean over tasks of the candidate's task means.
    pub mean_candidate: f64,
    /// `mean_candidate − mean_baseline`.
    pub mean_diff: f64,
    /// (mean_candidate − mean_baseline) / mean_baseline; `null` when the baseline mean is 0.
    pub relative_improvement: Option<f64>,
    /// Why `relative_improvement` is `null`, when it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub relative_improvement_note: Option<String>,
    /// Intervals of the mean difference.
    pub ci: CiOut,
    /// Intervals of the relative improvement; `null` when a resample's baseline mean is 0.
    pub relative_ci: Option<CiOut>,
    /// Why `relative_ci` is `null`, when it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub relative_ci_note: Option<String>,
    /// `sampled` or `exact`.
    pub method: ResampleKind,
    /// `bootstrap` (ChaCha8, percentile and BCa) or `v04-percentile`.
    pub interval_method: String,
    /// B (sampled), or the number of distinct multisets enumerated (exact).
    pub resamples: u64,
    /// Exact mode: nⁿ, the ordered resamples the multisets stand for (as a decimal string).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ordered_resamples: Option<String>,
    /// The seed the resamples used: a number, or the seed string for `v04-percentile`.
    pub seed: serde_json::Value,
    /// One-sided sign-flip p-value for an improvement (repeated from `sign_flip`).
    pub sign_flip_p: f64,
    /// The sign-flip test in full.
    pub sign_flip: SignFlip,
    /// One row per task, in first-appearance order.
    pub tasks: Vec<TaskRow>,
    /// Honesty notes (small n, exactness, degeneracy).
    pub notes: Vec<String>,
}

/// Intervals of one statistic as printed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CiOut {
    /// Two-sided confidence level.
    pub level: f64,
    /// Percentile interval [lower, upper].
    pub percentile: [f64; 2],
    /// `null` for `v04-percentile`.
    pub bca: Option<[f64; 2]>,
    /// BCa bias correction z₀ (`null` for `v04-percentile`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub z0: Option<f64>,
    /// BCa acceleration â (`null` for `v04-percentile`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub acceleration: Option<f64>,
    /// Every resample gave the estimate, so the intervals are a single point.
    pub degenerate: bool,
}

impl From<&Intervals> for CiOut {
    fn from(i: &Intervals) -> Self {
        Self {
            level: i.level,
            percentile: i.percentile,
            bca: Some(i.bca),
            z0: Some(i.z0),
            acceleration: Some(i.acceleration),
            degenerate: i.degenerate,
        }
    }
}

/// One task's line of the summary.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskRow {
    /// The task id.
    pub task: String,
    /// The baseline's mean over its repetitions.
    pub baseline: f64,
    /// The candidate's mean over its repetitions.
    pub candidate: f64,
    /// `candidate − baseline`.
    pub diff: f64,
    /// Repetitions averaged: [baseline, candidate].
    pub reps: [usize; 2],
}

/// How [`paired_summary`] resamples and what it calls small.
pub struct PairedConfig {
    /// Resampling settings (B, seed, exactness, threads).
    pub resample: ResampleConfig,
    /// Two-sided confidence level, in (0, 1).
    pub confidence: f64,
    /// Suites with fewer tasks get a robustness-check note.
    pub min_tasks: usize,
}

/// Relative improvement of arm means; `Err(note)` when undefined.
pub fn relative(mb: f64, mc: f64) -> Result<f64, String> {
    if mb == 0.0 {
        Err(if mc == 0.0 {
            "baseline and candidate means are both 0: relative improvement undefined (0/0)".into()
        } else {
            "baseline mean is 0: relative improvement undefined (division by zero); read mean_diff or a contrast rule instead".into()
        })
    } else {
        Ok((mc - mb) / mb)
    }
}

/// Computes the summary of `data`; the arm and metric names are only labels.
pub fn paired_summary(
    data: &PairedTasks,
    baseline: &str,
    candidate: &str,
    metric: &str,
    cfg: &PairedConfig,
) -> Result<PairedSummary, StatsError> {
    let n = data.n();
    let diffs = data.differences();
    let cols: [&[f64]; 3] = [&data.baseline, &data.candidate, &diffs];
    let dist = resample(&cols, &cfg.resample)?;
    let diff_ci = intervals(&cols, &dist, &|m: &[f64]| m[2], cfg.confidence)?;
    let mb = mean(&data.baseline);
    let mc = mean(&data.candidate);
    let (rel, rel_note) = match relative(mb, mc) {
        Ok(r) => (Some(r), None),
        Err(e) => (None, Some(e)),
    };
    let (rel_ci, rel_ci_note) = if rel.is_none() {
        (
            None,
            Some("undefined because the relative improvement is".to_string() + " undefined"),
        )
    } else {
        let zero = (0..dist.len()).filter(|&r| dist.row(r)[0] == 0.0).count();
        if zero > 0 {
            (
                None,
                Some(format!(
                    "{zero} resamples have a baseline mean of 0, where the ratio is undefined; gate relative improvement as a contrast (m_c − k·m_b)"
                )),
            )
        } else {
            let i = intervals(
                &cols,
                &dist,
                &|m: &[f64]| (m[1] - m[0]) / m[0],
                cfg.confidence,
            )?;
            (Some(CiOut::from(&i)), None)
        }
    };
    let sf = sign_flip(&diffs, cfg.resample.resamples, cfg.resample.seed);
    let mut notes = honesty_notes(n, cfg.min_tasks, dist.kind, &sf, cfg.confidence);
    if diff_ci.degenerate {
        notes.push("every resample gives the same mean difference (all task differences equal or one task): the interval has zero width and says nothing about uncertainty".into());
    }
    let (resamples, ordered) = match dist.kind {
        ResampleKind::Sampled => (cfg.resample.resamples, None),
        ResampleKind::Exact => (multiset_count(n) as u64, Some(dist.total.to_string())),
    };
    Ok(PairedSummary {
        schema: "eval.stats.paired/1".into(),
        n_tasks: n,
        baseline: baseline.into(),
        candidate: candidate.into(),
        metric: metric.into(),
        mean_baseline: mb,
        mean_candidate: mc,
        mean_diff: mean(&diffs),
        relative_improvement: rel,
        relative_improvement_note: rel_note,
        ci: CiOut::from(&diff_ci),
        relative_ci: rel_ci,
        relative_ci_note: rel_ci_note,
        method: dist.kind,
        interval_method: "bootstrap".into(),
        resamples,
        ordered_resamples: ordered,
        seed: serde_json::Value::from(cfg.resample.seed),
        sign_flip_p: sf.p,
        sign_flip: sf,
        tasks: (0..n)
            .map(|i| TaskRow {
                task: data.tasks[i].clone(),
                baseline: data.baseline[i],
                candidate: data.candidate[i],
                diff: diffs[i],
                reps: [data.reps[i].0, data.reps[i].1],
            })
            .collect(),
        notes,
    })
}

/// The notes every small suite carries.
pub fn honesty_notes(
    n: usize,
    min_tasks: usize,
    kind: ResampleKind,
    sf: &SignFlip,
    confidence: f64,
) -> Vec<String> {
    let mut notes = Vec::new();
    if n < min_tasks {
        notes.push(format!(
            "robustness check: {n} tasks is below the protocol's minimum of {min_tasks}; not population-calibrated evidence"
        ));
    }
    if kind == ResampleKind::Exact {
        notes.push(format!(
            "exact enumeration of all {} multisets of {n} tasks: the interval describes these tasks exactly and is not population-calibrated",
            multiset_count(n)
        ));
    }
    let alpha = (1.0 - confidence) / 2.0;
    if sf.min_attainable_p > alpha {
        notes.push(format!(
            "insufficient tasks: with {n} tasks no sign-flip test can reach p ≤ {} (smallest attainable p = 2^-{n} = {})",
            (alpha * 1e12).round() / 1e12,
            sf.min_attainable_p
        ));
    }
    if n < 10 {
        notes.push(format!(
            "with {n} tasks a bootstrap bound is poorly calibrated (run `eval stats calibrate --n {n}`)"
        ));
    }
    notes
}
