//! Each gate's false-fail rate under no effect, by resampling a pilot's task-level noise.
//!
//! A replicate draws the suite's tasks with replacement (n of n) and, within every (task,
//! repetition) pair, swaps the baseline's and the candidate's results with probability ½: under
//! no effect the two arms are exchangeable, so each replicate is a run the pilot's noise could
//! have produced with nothing differing. The protocol's gates are evaluated on it by their own
//! procedure (`evaluate_gates`); the share of replicates in which a rule does not pass is its
//! false-fail rate. An A/A pilot (the baseline against an identical copy of itself) is the
//! natural input; any pilot works, since the swap removes its effect. Replicates are keyed by the
//! seed (ChaCha8 stream `PURPOSE_GATE_CALIBRATION`, chunk = replicate), so the figures are a pure
//! function of the run data, the seed and the number of replicates.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::run_data::{AttemptData, RunData, SlotData};
use crate::gates::pairs::final_attempts;
use crate::gates::{Verdict, evaluate_gates};
use crate::stats::rng::{ChaChaStream, PURPOSE_GATE_CALIBRATION};
use eval_core::phase::Phase;

/// One suite rule's false-fail rate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FalseFail {
    /// The gate.
    pub gate: String,
    /// The rule.
    pub rule: String,
    /// The rule's statistic and metric, as reports name them.
    pub subject: String,
    /// Replicates that did not pass.
    pub fails: u32,
    /// Replicates.
    pub replicates: u32,
    /// `fails / replicates`.
    pub rate: f64,
    /// Its binomial standard error.
    pub se: f64,
}

impl FalseFail {
    /// One line, as `eval plan --calibrate` prints it.
    pub fn line(&self) -> String {
        format!(
            "false-fail: gate {} rule {} ({}): {:.3} ± {:.3} under no effect ({} of {} replicates)",
            self.gate, self.rule, self.subject, self.rate, self.se, self.fails, self.replicates
        )
    }
}

/// One no-effect replicate of `run`.
pub fn null_replicate(run: &RunData, seed: u64, replicate: u64) -> RunData {
    let mut rng = ChaChaStream::new(seed, PURPOSE_GATE_CALIBRATION, replicate);
    let finals = final_attempts(run);
    let mut out = run.clone();
    out.slots.retain(|s| s.phase != Phase::Statistical);
    out.attempts.retain(|a| a.phase != Phase::Statistical);
    out.looks_taken.clear();
    for suite in &mut out.suites {
        suite.other_arms.clear();
        let tasks = suite.tasks.clone();
        let mut drawn = Vec::with_capacity(tasks.len());
        let n = u32::try_from(tasks.len()).unwrap_or(u32::MAX);
        for j in 0..tasks.len() {
            let t = &tasks[rng.below(n) as usize];
            let name = format!("{t}~{j}");
            // (rep → (baseline's final attempt, candidate's)).
            let mut pairs: BTreeMap<u32, [Option<&AttemptData>; 2]> = BTreeMap::new();
            for s in run
                .slots
                .iter()
                .filter(|s| s.phase == Phase::Statistical && s.suite == suite.id && s.task == *t)
            {
                let side = if s.arm == suite.baseline {
                    0
                } else if s.arm == suite.candidate {
                    1
                } else {
                    continue;
                };
                pairs.entry(s.rep).or_default()[side] = finals.get(s.id.as_str()).copied();
            }
            for (rep, mut pair) in pairs {
                if rng.below(2) == 1 {
                    pair.swap(0, 1);
                }
                for (arm, a) in [&suite.baseline, &suite.candidate].into_iter().zip(pair) {
                    let id = format!("stat-{}-{name}-{arm}-r{rep}", suite.id);
                    out.slots.push(SlotData {
                        id: id.clone(),
                        phase: Phase::Statistical,
                        suite: suite.id.clone(),
                        task: name.clone(),
                        arm: arm.clone(),
                        rep,
                    });
                    if let Some(a) = a {
                        let mut a = a.clone();
                        a.slot = id;
                        a.task = name.clone();
                        a.arm = arm.clone();
                        a.attempt = 1;
                        a.rerun_of = None;
                        out.attempts.push(a);
                    }
                }
            }
            drawn.push(name);
        }
        suite.tasks = drawn;
    }
    out
}

/// Every suite rule's false-fail rate over `replicates` no-effect replicates of `run`.
pub fn false_fail_rates(run: &RunData, replicates: u32, seed: u64) -> Vec<FalseFail> {
    let mut fails: Vec<(String, String, String, u32)> = Vec::new();
    for r in 0..replicates {
        let rep = null_replicate(run, seed, u64::from(r));
        for g in evaluate_gates(&rep) {
            let Some(gate) = run.gates.iter().find(|x| x.id == g.id) else {
                continue;
            };
            if gate.suite.is_none() {
                continue;
            }
            for rule in &g.rules {
                let i = match fails.iter().position(|f| f.0 == g.id && f.1 == rule.id) {
                    Some(i) => i,
                    None => {
                        let mut subject = rule.statistic.name();
                        if let Some(m) = &rule.metric {
                            subject.push_str(&format!("({m})"));
                        }
                        fails.push((g.id.clone(), rule.id.clone(), subject, 0));
                        fails.len() - 1
                    }
                };
                if rule.verdict != Verdict::Pass {
                    fails[i].3 += 1;
                }
            }
        }
    }
    fails
        .into_iter()
        .map(|(gate, rule, subject, fails)| {
            let n = f64::from(replicates.max(1));
            let rate = f64::from(fails) / n;
            FalseFail {
                gate,
                rule,
                subject,
                fails,
                replicates,
                rate,
                se: (rate * (1.0 - rate) / n).sqrt(),
            }
        })
        .collect()
}
