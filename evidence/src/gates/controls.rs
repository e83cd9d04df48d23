//! The grader-validity table and the `grader_valid` integrity rule: every control arm a suite
//! declares (`eval_core::controls`), graded in the control phase, judged against the suite's
//! pass mark — every oracle passes, every nop fails, no exploit scores above its task's nop.

use super::pairs::{final_attempts, metric_value};
use crate::report::RunData;
use eval_core::controls::ControlArm;
use eval_core::outcome::Outcome;
use eval_core::phase::Phase;
use serde::{Deserialize, Serialize};

/// One cell of the table: a task under a control arm.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ControlCell {
    /// The suite.
    pub suite: String,
    /// The task.
    pub task: String,
    /// `oracle`, `nop` or `exploit:<name>`.
    pub arm: String,
    /// The control's score on the suite's control metric (`None`: not graded).
    pub score: Option<f64>,
    /// The final attempt's outcome (`None`: no final attempt).
    pub outcome: Option<Outcome>,
    /// Which grading this row is: `gating` (the one `grader_valid` reads) or another grading the
    /// grader emitted beside it (its metric name).
    pub grading: String,
    /// What the arm must do: `pass`, `fail`, `<= nop`.
    pub expected: String,
    /// Whether the cell meets its expectation.
    pub ok: bool,
    /// Why not, naming the task and the arm (empty when `ok`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub problem: String,
}

/// Every declared control, in the order the schedule ran them. `extra_metrics` adds, per cell,
/// rows for other gradings the grader emitted (informational: never gating).
pub fn grader_validity(run: &RunData) -> Vec<ControlCell> {
    let finals = final_attempts(run);
    let mut out = Vec::new();
    for suite in &run.suites {
        let Some(c) = &suite.controls else { continue };
        let mut gradings = vec![c.metric.clone()];
        gradings.extend(c.also_report.iter().cloned());
        for (gi, metric) in gradings.iter().enumerate() {
            for task in &suite.tasks {
                let score_of = |arm: &str| -> (Option<f64>, Option<Outcome>, bool) {
                    let slot = run.slots.iter().find(|s| {
                        s.phase == Phase::Control
                            && s.suite == suite.id
                            && s.task == *task
                            && s.arm == arm
                    });
                    let Some(slot) = slot else {
                        return (None, None, false);
                    };
                    match finals.get(slot.id.as_str()) {
                        Some(a) => (metric_value(run, a, metric).ok(), a.outcome, true),
                        None => (None, None, true),
                    }
                };
                let (nop, _, _) = score_of("nop");
                for arm_text in &c.arms {
                    let (score, outcome, scheduled) = score_of(arm_text);
                    let Ok(arm) = arm_text.parse::<ControlArm>() else {
                        continue;
                    };
                    let passes = score.is_some_and(|s| s >= c.pass_at_least);
                    let (expected, ok, why) = match &arm {
                        ControlArm::Oracle => (
                            "pass".to_owned(),
                            passes,
                            format!(
                                "the oracle (reference solution) of {}/{task} scored {} — below the pass mark {}",
                                suite.id,
                                show(score),
                                c.pass_at_least
                            ),
                        ),
                        ControlArm::Nop => (
                            "fail".to_owned(),
                            !passes,
                            format!(
                                "the nop (unchanged workspace) of {}/{task} scored {} — it passes (mark {})",
                                suite.id,
                                show(score),
                                c.pass_at_least
                            ),
                        ),
                        ControlArm::Exploit(_) => {
                            let above = match (score, nop) {
                                (None, _) => false,
                                (Some(s), Some(n)) => s > n,
                                (Some(_), None) => true,
                            };
                            (
                                "<= nop".to_owned(),
                                !above,
                                format!(
                                    "{arm_text} scored {} on {}/{task}, above its nop ({})",
                                    show(score),
                                    suite.id,
                                    show(nop)
                                ),
                            )
                        }
                    };
                    let (ok, problem) = if outcome.is_none() {
                        (
                            false,
                            format!(
                                "{arm_text} on {}/{task} was {}",
                                suite.id,
                                if scheduled {
                                    "not graded (no final attempt)"
                                } else {
                                    "not scheduled"
                                }
                            ),
                        )
                    } else if ok {
                        (true, String::new())
                    } else {
                        (false, why)
                    };
                    out.push(ControlCell {
                        suite: suite.id.clone(),
                        task: task.clone(),
                        arm: arm_text.clone(),
                        score,
                        outcome,
                        grading: if gi == 0 {
                            "gating".to_owned()
                        } else {
                            metric.clone()
                        },
                        expected,
                        ok,
                        problem,
                    });
                }
            }
        }
    }
    out
}

fn show(v: Option<f64>) -> String {
    v.map_or_else(|| "nothing".to_owned(), |v| format!("{v}"))
}

/// The `grader_valid` rule's problems: every gating cell that is not ok.
pub fn grader_problems(run: &RunData) -> Vec<String> {
    let cells = grader_validity(run);
    let mut problems: Vec<String> = cells
        .into_iter()
        .filter(|c| c.grading == "gating" && !c.ok)
        .map(|c| c.problem)
        .collect();
    if !run.suites.iter().any(|s| s.controls.is_some()) {
        problems.push("no suite declares control arms".into());
    }
    problems
}
