//! `eval plan --matrix NAME --power --pilot LEDGER`: each interval gate's power at the design's
//! number of tasks with the task-level standard deviation estimated from a pilot run's ledger,
//! and the number of tasks needed for 80 % power at the protocol's declared effect.
//!
//! The pilot's variance: per suite, the final non-infra statistical attempt of each slot; per
//! task, the mean over repetitions of the rule's metric for the suite's baseline and candidate
//! (the protocol's missing-data value where the attempt has none); the sample sd (n − 1) of the
//! task-level differences (for `contrast_lower`, of candidate − factor · baseline). A ledger
//! whose run is of the evaluated protocol's own frozen identity is refused: a variance taken
//! from the run being judged would let its data choose its own design.

use super::error::CommandError;
use crate::cli::PlanArgs;
use crate::status::{CmdResult, Status};
use eval_core::gates::Statistic;
use eval_evidence::stats::power::{null_lower_bounds, power, power_at};
use eval_protocols::Project;
use serde_json::Value;
use std::collections::BTreeMap;

/// Replicates per simulated design.
const REPS: u64 = 1_000;
/// The largest suite the tasks-needed search tries.
const MAX_TASKS: usize = 400;

/// `eval plan --power`: reads the pilot, computes each interval rule's power, prints the plan.
pub fn run(args: &PlanArgs) -> CmdResult {
    let project = Project::open(".");
    let matrix = project.load_matrix(&args.matrix)?;
    let loaded = project.load(&matrix.protocol)?;
    let Some(path) = &args.pilot else {
        return Err(pilot_err(std::path::Path::new(""), "--power needs --pilot LEDGER").into());
    };
    let reader = eval_evidence::ledger::LedgerReader::open(path)
        .map_err(|e| pilot_err(path, &e.to_string()))?;
    let entries = reader
        .entries()
        .map_err(|e| pilot_err(path, &e.to_string()))?;
    let payload =
        |e: &eval_evidence::ledger::Entry| serde_json::from_slice::<Value>(&e.payload).ok();
    let pilot_identity = entries
        .iter()
        .find(|e| e.kind == "run_started")
        .and_then(payload)
        .and_then(|v| v["identity"].as_str().map(str::to_owned))
        .ok_or_else(|| pilot_err(path, "not a run ledger (no run_started entry)"))?;
    let reg = eval_protocols::registry::Registry::open(&args.state)
        .map_err(|e| pilot_err(path, &format!("the identity registry: {e}")))?;
    if let Some(own) = reg.frozen_identity(&loaded.protocol.name)
        && own.to_string() == pilot_identity
    {
        return Err(own_run(path, &loaded.protocol.name, &pilot_identity).into());
    }
    let (slots, finals) = pilot_outcomes(&entries);
    let plan = &loaded.protocol.statistics;
    let mut out = Vec::new();
    for gate in &loaded.protocol.gates {
        let Some(suite_id) = gate.suite.as_deref() else {
            continue;
        };
        let Some(suite) = matrix.suites.iter().find(|s| s.id == suite_id) else {
            continue;
        };
        for rule in gate.rules.iter().filter(|r| {
            matches!(
                r.statistic,
                Statistic::BootstrapLower | Statistic::ContrastLower
            )
        }) {
            let metric = rule.metric.clone().unwrap_or_default();
            let factor = rule.factor.unwrap_or(1.0);
            let missing = loaded.protocol.missing_data.values.get(&metric).copied();
            let diffs = task_diffs(
                (&slots, &finals),
                suite_id,
                (&suite.baseline, &suite.candidate),
                &metric,
                missing,
                factor,
            );
            if diffs.len() < 2 {
                // A pilot of other suites says nothing about this one: said, not guessed.
                out.push(serde_json::json!({
                    "gate": gate.id, "rule": rule.id, "metric": metric, "pilot_tasks": diffs.len(),
                    "error": format!(
                        "the pilot has {} task(s) of suite {suite_id} with both {} and {} graded on {metric:?}; at least 2 are needed for a variance",
                        diffs.len(), suite.baseline, suite.candidate
                    ),
                }));
                continue;
            }
            let sd = pilot_sd(&diffs, path, (&gate.id, &rule.id))?;
            let effect = loaded.protocol.power.get(&gate.id).map(|p| p.effect);
            let row = power_row(
                (&gate.id, rule),
                plan,
                (suite.tasks.len(), effect),
                (&metric, diffs.len(), sd),
            )?;
            out.push(row);
        }
    }
    if !out.iter().any(|r| r.get("error").is_none()) {
        return Err(no_pilot_data(path, &loaded.protocol.name, &out).into());
    }
    if args.json {
        let text = serde_json::to_string_pretty(&serde_json::json!({
            "schema": "eval.plan.power/1", "pilot": path, "pilot_identity": pilot_identity, "rules": out,
        }))
        .map_err(CommandError::encode("encode the power plan"))?;
        println!("{text}");
        return Ok(Status::Ok);
    }
    print_rows(&out);
    Ok(Status::Ok)
}

/// One interval rule's power row: its method (as simulated), the power at the design's `n`
/// tasks and the pilot's `sd`, the minimum detectable effect and the tasks needed for 80 %.
fn power_row(
    (gate_id, rule): (&str, &eval_core::gates::Rule),
    plan: &eval_protocols::protocol::StatisticalPlan,
    (n, effect): (usize, Option<f64>),
    (metric, pilot_tasks, sd): (&str, usize, f64),
) -> Result<Value, eval_evidence::stats::StatsError> {
    let method = rule.method.clone().unwrap_or_else(|| plan.method.clone());
    let simulated = if method == "v04-percentile" {
        "percentile".to_owned()
    } else {
        method.clone()
    };
    let threshold = rule.threshold.unwrap_or(0.0);
    let bounds =
        |n: usize| null_lower_bounds(n, &simulated, plan.confidence, REPS, plan.seed, 1_000);
    let at_n = power(&bounds(n)?, n, effect, sd, threshold);
    // Tasks needed: power grows with n; double until it reaches 80 %, then bisect.
    let needed = match effect {
        None => None,
        Some(e) => tasks_for_80(&|n: usize| Ok(power_at(&bounds(n)?, e, sd, threshold) >= 0.8))?,
    };
    Ok(serde_json::json!({
        "gate": gate_id, "rule": rule.id, "metric": metric, "method": method,
        "simulated_as": simulated, "n_tasks": n, "threshold": threshold,
        "pilot_tasks": pilot_tasks, "pilot_sd": sd, "effect": effect,
        "power": at_n.power, "power_se": at_n.power_se, "mde80": at_n.mde80,
        "tasks_for_80": needed, "reps": REPS,
    }))
}

/// The sample sd (n − 1) of the pilot's task-level differences; one that does not vary is
/// refused, naming the gate and rule.
fn pilot_sd(
    diffs: &[f64],
    path: &std::path::Path,
    (gate, rule): (&str, &str),
) -> Result<f64, CommandError> {
    let k = diffs.len() as f64;
    let m = diffs.iter().sum::<f64>() / k;
    let sd = (diffs.iter().map(|d| (d - m).powi(2)).sum::<f64>() / (k - 1.0)).sqrt();
    if sd.is_nan() || sd <= 0.0 {
        return Err(pilot_err(
            path,
            &format!(
                "gate {gate} rule {rule}: the pilot's task-level differences do not vary (sd 0)"
            ),
        ));
    }
    Ok(sd)
}

/// The refusal when no interval gate has pilot data: every rule's reason, joined.
fn no_pilot_data(path: &std::path::Path, protocol: &str, out: &[Value]) -> CommandError {
    pilot_err(
        path,
        &format!(
            "no interval gate of {protocol} has pilot data: {}",
            out.iter()
                .filter_map(|r| r["error"].as_str())
                .collect::<Vec<_>>()
                .join("; ")
        ),
    )
}

/// Slot → (suite, task, arm) of the pilot's statistical attempts, and each slot's last non-infra
/// outcome's metrics.
#[allow(clippy::type_complexity)]
fn pilot_outcomes(
    entries: &[eval_evidence::ledger::Entry],
) -> (
    BTreeMap<String, (String, String, String)>,
    BTreeMap<String, BTreeMap<String, f64>>,
) {
    let payload =
        |e: &eval_evidence::ledger::Entry| serde_json::from_slice::<Value>(&e.payload).ok();
    // slot → (suite, task, arm), and each slot's last non-infra statistical outcome's metrics.
    let mut slots: BTreeMap<String, (String, String, String)> = BTreeMap::new();
    let mut finals: BTreeMap<String, BTreeMap<String, f64>> = BTreeMap::new();
    for e in entries {
        let Some(v) = payload(e) else { continue };
        match e.kind.as_str() {
            "attempt_started" if v["phase"] == "statistical" => {
                let s = |k: &str| v[k].as_str().unwrap_or_default().to_owned();
                slots.insert(s("slot"), (s("suite"), s("task"), s("arm")));
            }
            "attempt_outcome" if v["outcome"] != "infra_fault" => {
                let slot = v["slot"].as_str().unwrap_or_default().to_owned();
                let m = v["metrics"]
                    .as_object()
                    .map(|m| {
                        m.iter()
                            .filter_map(|(k, x)| x.as_f64().map(|f| (k.clone(), f)))
                            .collect()
                    })
                    .unwrap_or_default();
                finals.insert(slot, m);
            }
            _ => {}
        }
    }
    (slots, finals)
}

/// Per task of suite `suite_id`, the candidate's mean over repetitions of `metric` minus
/// `factor` times the baseline's (the missing-data value where an attempt has none); tasks
/// without both arms are left out.
#[allow(clippy::type_complexity)]
fn task_diffs(
    (slots, finals): (
        &BTreeMap<String, (String, String, String)>,
        &BTreeMap<String, BTreeMap<String, f64>>,
    ),
    suite_id: &str,
    (baseline, candidate): (&str, &str),
    metric: &str,
    missing: Option<f64>,
    factor: f64,
) -> Vec<f64> {
    // task → arm → values over repetitions
    let mut cells: BTreeMap<&str, BTreeMap<&str, Vec<f64>>> = BTreeMap::new();
    for (slot, (s, task, arm)) in slots {
        if s != suite_id || (arm != baseline && arm != candidate) {
            continue;
        }
        let Some(m) = finals.get(slot) else { continue };
        if let Some(v) = m.get(metric).copied().or(missing) {
            cells
                .entry(task)
                .or_default()
                .entry(arm)
                .or_default()
                .push(v);
        }
    }
    let mean = |v: &Vec<f64>| v.iter().sum::<f64>() / v.len() as f64;
    cells
        .values()
        .filter_map(|a| Some(mean(a.get(candidate)?) - factor * mean(a.get(baseline)?)))
        .collect()
}

/// The tasks needed for 80 % power, `ok(n)` saying whether `n` tasks reach it: power grows with
/// n, so double until it does, then bisect; `None` when not reached with up to [`MAX_TASKS`].
fn tasks_for_80(
    ok: &dyn Fn(usize) -> Result<bool, eval_evidence::stats::StatsError>,
) -> Result<Option<usize>, eval_evidence::stats::StatsError> {
    let mut hi = 2usize;
    while hi <= MAX_TASKS && !ok(hi)? {
        hi *= 2;
    }
    if hi > MAX_TASKS {
        Ok(None)
    } else {
        let mut lo = hi / 2;
        while hi - lo > 1 {
            let mid = (lo + hi) / 2;
            if ok(mid)? { hi = mid } else { lo = mid }
        }
        Ok(Some(hi))
    }
}

/// The power plan as text: a line per rule, its error or its figures.
fn print_rows(out: &[Value]) {
    for r in out {
        if let Some(e) = r["error"].as_str() {
            println!(
                "power: gate {} rule {}: {e}",
                r["gate"].as_str().unwrap_or_default(),
                r["rule"].as_str().unwrap_or_default()
            );
            continue;
        }
        println!(
            "power: gate {} rule {} ({} tasks, {}): pilot sd {:.4} from {} tasks; minimum detectable effect at 80% power: {:.4}{}{}",
            r["gate"].as_str().unwrap_or_default(),
            r["rule"].as_str().unwrap_or_default(),
            r["n_tasks"],
            r["method"].as_str().unwrap_or_default(),
            r["pilot_sd"].as_f64().unwrap_or(f64::NAN),
            r["pilot_tasks"],
            r["mde80"].as_f64().unwrap_or(f64::NAN),
            match (r["effect"].as_f64(), r["power"].as_f64()) {
                (Some(e), Some(p)) =>
                    format!("; power at the declared effect {e}: {:.1}%", 100.0 * p),
                _ => String::new(),
            },
            match (r["effect"].as_f64(), r["tasks_for_80"].as_u64()) {
                (Some(_), Some(t)) => format!("; tasks needed for 80%: {t}"),
                (Some(_), None) => format!("; not reached with up to {MAX_TASKS} tasks"),
                _ => String::new(),
            }
        );
    }
}

/// The refusal of a pilot that is a run of the evaluated protocol itself.
fn own_run(path: &std::path::Path, protocol: &str, pilot_identity: &str) -> CommandError {
    pilot_err(
        path,
        &format!(
            "this is a run of {protocol} itself ({pilot_identity}); the variance must come from a pilot, never from the evaluated run"
        ),
    )
}

fn pilot_err(path: &std::path::Path, why: &str) -> CommandError {
    CommandError::Pilot {
        path: path.to_path_buf(),
        why: why.to_owned(),
    }
}
