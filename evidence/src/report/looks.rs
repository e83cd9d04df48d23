//! Preregistered interim looks (`[sequential]`): the look statistic, the decision at a look, and
//! the account of every look taken that the report shows.
//!
//! The look statistic is the studentised task-level difference of the watched gate's first
//! task-level rule, t = (mean(d) − threshold)/(sd(d)/√n), dᵢ the candidate's minus the
//! baseline's task mean of the rule's metric over the tasks with complete pairs so far, put on
//! the normal scale by its Student-t tail (z = Φ⁻¹(F_{n−1}(t))). Efficacy also needs enough
//! tasks for the gate's task-level rule to reach the look's level (2⁻ⁿ ≤ nominal α/2); with
//! fewer the look continues and says why. It is
//! compared with the design's efficacy boundary at that look (`stats::sequential`), with
//! α = 1 − the plan's confidence. Looks are recorded by the controller (one ledger entry each)
//! and come back in [`RunData::looks_taken`]; this module never reads a ledger.

use serde::{Deserialize, Serialize};

use super::run_data::RunData;
use crate::gates::Statistic;
use crate::gates::pairs::{SuiteView, final_attempts};
use crate::stats::sequential::{Boundaries, LookDecision, boundaries, decide};
use eval_core::phase::Phase;

pub use eval_core::sequential::SequentialPlan;

pub use super::look_taken::LookTaken;

/// The sequential design and every look taken, as the report shows them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SequentialReport {
    /// The preregistered design.
    pub plan: SequentialPlan,
    /// Its efficacy boundaries (`None` when the design could not be computed; see `summary`).
    pub boundaries: Option<Boundaries>,
    /// Every look taken, in order.
    pub looks: Vec<LookTaken>,
    /// The look the run stopped at, if it stopped before the last.
    pub stopped_at: Option<u32>,
    /// One sentence: where the design stands.
    pub summary: String,
}

/// The design's boundaries at α = 1 − confidence.
pub fn design(run: &RunData, plan: &SequentialPlan) -> Result<Boundaries, String> {
    boundaries(&plan.looks, plan.spending, 1.0 - run.plan.confidence).map_err(|e| e.to_string())
}

/// Statistical slots resolved (a final non-infra attempt) and scheduled.
pub fn slots_resolved(run: &RunData) -> (usize, usize) {
    let finals = final_attempts(run);
    let stat = run.slots.iter().filter(|s| s.phase == Phase::Statistical);
    let total = stat.clone().count();
    let resolved = stat.filter(|s| finals.contains_key(s.id.as_str())).count();
    (resolved, total)
}

/// The look statistic and its number of tasks.
pub fn look_statistic(run: &RunData, plan: &SequentialPlan) -> Result<(f64, usize), String> {
    let gate = run
        .gates
        .iter()
        .find(|g| g.id == plan.gate)
        .ok_or_else(|| {
            format!(
                "the sequential gate {:?} is not a gate of the protocol",
                plan.gate
            )
        })?;
    let rule = gate
        .rules
        .iter()
        .find(|r| {
            matches!(
                r.statistic,
                Statistic::BootstrapLower | Statistic::ContrastLower | Statistic::SignFlipP
            )
        })
        .ok_or_else(|| format!("gate {:?} has no task-level rule to watch", plan.gate))?;
    let metric = rule
        .metric
        .as_deref()
        .ok_or_else(|| format!("gate {:?} rule {:?} names no metric", gate.id, rule.id))?;
    let suite = gate
        .suite
        .as_deref()
        .and_then(|s| run.suites.iter().find(|x| x.id == s))
        .ok_or_else(|| format!("gate {:?} names no suite of the run", gate.id))?;
    let tm = SuiteView::new(run, suite).task_means(run, metric)?;
    let d: Vec<f64> = tm
        .candidate
        .iter()
        .zip(&tm.baseline)
        .map(|(c, b)| c - b)
        .collect();
    let n = d.len();
    if n < 2 {
        return Err(format!(
            "{n} task(s) with complete pairs: the look needs two"
        ));
    }
    // A contrast rule gates mean(c̄) − k·mean(b̄) > threshold; a sign-flip rule a difference > 0.
    let shift = match rule.statistic {
        Statistic::BootstrapLower => rule.threshold.unwrap_or(0.0),
        _ => 0.0,
    };
    let mean = d.iter().sum::<f64>() / n as f64;
    let var = d.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    let se = (var / n as f64).sqrt();
    let z = if se > 0.0 {
        t_to_z((mean - shift) / se, (n - 1) as f64)
    } else if mean > shift {
        f64::INFINITY
    } else if mean < shift {
        f64::NEG_INFINITY
    } else {
        0.0
    };
    Ok((z, n))
}

/// The normal score with the same one-sided tail as Student's t on `df` degrees of freedom, so a
/// handful of tasks is not read as if their spread were known.
fn t_to_z(t: f64, df: f64) -> f64 {
    use statrs::distribution::{ContinuousCDF, StudentsT};
    match StudentsT::new(0.0, 1.0, df) {
        // The upper tail, mapped back (sf keeps precision far out in the tail).
        Ok(d) if t >= 0.0 => -crate::stats::interval::ndtri(d.sf(t)),
        Ok(d) => crate::stats::interval::ndtri(d.cdf(t)),
        Err(_) => f64::NAN,
    }
}

/// Why look `look` (1-based) may not be taken now, if it may not: the design has no such look,
/// it was taken already (a look is never taken twice), an earlier look is missing, the run
/// stopped at an earlier look, or fewer slots are resolved than the look's fraction.
pub fn look_refusal(run: &RunData, plan: &SequentialPlan, look: u32) -> Option<String> {
    let k = plan.looks.len();
    if look == 0 || look as usize > k {
        return Some(format!("the design has looks 1..={k}, not {look}"));
    }
    if let Some(t) = run.looks_taken.iter().find(|t| t.look == look) {
        return Some(format!(
            "look {look} was already taken ({:?}); a look is never taken twice",
            t.decision
        ));
    }
    if let Some(t) = run.looks_taken.iter().find(|t| stops(t.decision)) {
        return Some(format!(
            "the run stopped at look {} ({:?})",
            t.look, t.decision
        ));
    }
    let taken = run.looks_taken.iter().map(|t| t.look).max().unwrap_or(0);
    if look != taken + 1 {
        return Some(format!("the next look is {}, not {look}", taken + 1));
    }
    let (resolved, total) = slots_resolved(run);
    let need = (plan.looks[look as usize - 1] * total as f64).ceil() as usize;
    (resolved < need).then(|| {
        format!("look {look} needs {need} of {total} statistical slots resolved; {resolved} are")
    })
}

fn stops(d: LookDecision) -> bool {
    matches!(d, LookDecision::StopEfficacy | LookDecision::StopFutility)
}

/// Takes look `look` (1-based) on the data so far: what its ledger entry records.
pub fn take_look(run: &RunData, plan: &SequentialPlan, look: u32) -> Result<LookTaken, String> {
    if let Some(why) = look_refusal(run, plan, look) {
        return Err(why);
    }
    let b = design(run, plan)?;
    let i = look as usize - 1;
    let (resolved_slots, total_slots) = slots_resolved(run);
    let boundary = b.z.get(i).copied().unwrap_or(f64::INFINITY);
    let (z, tasks, note) = match look_statistic(run, plan) {
        Ok((z, n)) => (Some(z), n, None),
        Err(e) => (None, 0, Some(e)),
    };
    let level = b.nominal_alpha.get(i).copied().unwrap_or(0.0) / 2.0;
    let too_few = tasks > 0 && 0.5f64.powi(i32::try_from(tasks).unwrap_or(i32::MAX)) > level;
    let mut note = note;
    let decision = match z {
        Some(z) => match decide(&b, i, z, plan.futility_z) {
            LookDecision::StopEfficacy if too_few => {
                note = Some(format!(
                    "{tasks} tasks cannot reach the look's one-sided level {level:.4} (2^-{tasks} > it): no stop for efficacy"
                ));
                if i + 1 == b.z.len() {
                    LookDecision::FinalNotShown
                } else {
                    LookDecision::Continue
                }
            }
            d => d,
        },
        // No statistic: never a stop for efficacy.
        None if i + 1 == b.z.len() => LookDecision::FinalNotShown,
        None => LookDecision::Continue,
    };
    Ok(LookTaken {
        look,
        resolved_slots,
        total_slots,
        tasks,
        z: z.filter(|z| z.is_finite())
            .or(z.map(|z| z.signum() * f64::MAX)),
        boundary,
        decision,
        note,
    })
}

/// The report's account of the design and the looks taken; `None` without `[sequential]`.
pub fn sequential_report(run: &RunData) -> Option<SequentialReport> {
    let plan = run.sequential.clone()?;
    let b = design(run, &plan);
    let k = plan.looks.len();
    let stopped = run.looks_taken.iter().find(|t| stops(t.decision));
    let summary = match (&b, stopped) {
        (Err(e), _) => format!("the sequential design cannot be computed: {e}"),
        (Ok(_), Some(t)) => format!(
            "stopped at look {} of {k} for {} ({} of {} statistical slots resolved)",
            t.look,
            if t.decision == LookDecision::StopEfficacy {
                "efficacy"
            } else {
                "futility"
            },
            t.resolved_slots,
            t.total_slots
        ),
        (Ok(_), None) if run.looks_taken.is_empty() => format!("no look of {k} taken"),
        (Ok(_), None) => format!(
            "{} of {k} looks taken, none stopped the run",
            run.looks_taken.len()
        ),
    };
    Some(SequentialReport {
        boundaries: b.ok(),
        looks: run.looks_taken.clone(),
        stopped_at: stopped.map(|t| t.look),
        summary,
        plan,
    })
}

/// One look as the reports print it.
pub fn look_line(t: &LookTaken) -> String {
    format!(
        "look {}: {}/{} slots, {} tasks, z = {}, boundary {:.3} → {}{}",
        t.look,
        t.resolved_slots,
        t.total_slots,
        t.tasks,
        t.z.map_or("—".into(), |z| format!("{z:.3}")),
        t.boundary,
        match t.decision {
            LookDecision::StopEfficacy => "stop for efficacy",
            LookDecision::StopFutility => "stop for futility",
            LookDecision::Continue => "continue",
            LookDecision::FinalNotShown => "final look, not shown",
        },
        t.note
            .as_ref()
            .map(|n| format!(" ({n})"))
            .unwrap_or_default()
    )
}

/// The run data the gates are evaluated on after a look: the latest look's (on a complete run
/// that did not stop, the final look's) adjusted level in
/// place of the plan's (interval rules at confidence 1 − the look's nominal α, sign-flip
/// thresholds scaled by nominal α / α); `None` when no look was taken or the design cannot be
/// computed (the report then says why in its sequential section).
pub fn adjusted_for_looks(run: &RunData) -> Option<RunData> {
    let plan = run.sequential.as_ref()?;
    let mut last = run.looks_taken.iter().map(|t| t.look).max()?;
    let b = design(run, plan).ok()?;
    // A complete run that did not stop is analysed at the final look's level.
    let (resolved, total) = slots_resolved(run);
    if resolved == total && stopped_for_efficacy(run).is_none() {
        last = u32::try_from(b.z.len()).unwrap_or(last);
    }
    let nominal = *b.nominal_alpha.get((last as usize).checked_sub(1)?)?;
    let alpha = 1.0 - run.plan.confidence;
    let mut adjusted = run.clone();
    adjusted.plan.confidence = 1.0 - nominal;
    for rule in adjusted
        .gates
        .iter_mut()
        .flat_map(|g| g.rules.iter_mut())
        .filter(|r| r.statistic == Statistic::SignFlipP)
    {
        rule.threshold = rule.threshold.map(|t| t * nominal / alpha);
    }
    Some(adjusted)
}

/// The look the run stopped at for efficacy, if it did.
pub fn stopped_for_efficacy(run: &RunData) -> Option<&LookTaken> {
    run.sequential.as_ref()?;
    run.looks_taken
        .iter()
        .find(|t| t.decision == LookDecision::StopEfficacy)
}

/// The look `looks` stopped the run at (efficacy or futility), if one did: such a run stays
/// stopped (`eval run` refuses to continue it).
pub fn stopped_at(looks: &[LookTaken]) -> Option<&LookTaken> {
    looks.iter().find(|t| stops(t.decision))
}
