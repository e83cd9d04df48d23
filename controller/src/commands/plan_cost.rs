//! `eval plan --matrix NAME --cost [--pilot LEDGER] [--json]`: what the run may cost at worst
//! under the protocol's budgets and, from a pilot's ledger, what it is expected to cost
//! (`eval_report::cost`), before `eval preflight` and before any paid call.

use crate::cli::PlanArgs;
use crate::commands::error::CommandError;
use crate::commands::plan_calibrate::pilot_err;
use crate::status::{CmdResult, Status};
use eval_protocols::Project;
use eval_report::cost::{Bound, SlotCounts, expected, pilot_use, worst_case};

pub fn run(args: &PlanArgs) -> CmdResult {
    let project = Project::open(".");
    let matrix = project.load_matrix(&args.matrix)?;
    let loaded = project.load(&matrix.protocol)?;
    // The schedule as the engine runs it: control slots first, then the matrix's.
    let slots = eval_engine::session::slot_records(&loaded);
    let mut counts = SlotCounts::default();
    for s in &slots {
        counts.add(s.phase);
    }
    let worst = worst_case(&loaded.protocol, counts);
    let exp = match &args.pilot {
        None => None,
        Some(path) => {
            if !path.is_file() {
                return Err(pilot_err(path, "no such file").into());
            }
            let data = eval_report::data::pilot_run_data(std::path::Path::new("."), path, &loaded)
                .map_err(|e| pilot_err(path, &e.to_string()))?;
            let used = pilot_use(&data);
            if used.overall.attempts == 0 {
                return Err(
                    pilot_err(path, "the pilot has no ended attempt that called a model").into(),
                );
            }
            let e = expected(
                slots
                    .iter()
                    .map(|s| (s.phase, s.suite.as_str(), s.arm.as_str())),
                &used,
            );
            Some((path.clone(), data.identity.clone(), used, e))
        }
    };
    if args.json {
        let v = serde_json::json!({
            "schema": "eval.plan.cost/1",
            "matrix": matrix.name,
            "protocol": loaded.protocol.name,
            "slots": {"control": counts.control, "infrastructure": counts.infrastructure,
                      "statistical": counts.statistical},
            "worst_case": worst,
            "expected": exp.as_ref().map(|(path, identity, used, e)| serde_json::json!({
                "pilot": path,
                "pilot_identity": identity,
                "pilot_attempts": used.overall.attempts,
                "attempts": e.attempts,
                "calls": e.calls,
                "tokens": e.tokens,
                "spend_usd": e.spend_usd,
                "from_overall_mean": e.from_overall,
            })),
        });
        let text =
            serde_json::to_string_pretty(&v).map_err(CommandError::encode("encode the cost"))?;
        println!("{text}");
        return Ok(Status::Ok);
    }
    println!(
        "matrix {} (protocol {}): {} control + {} infrastructure + {} statistical slots",
        matrix.name,
        loaded.protocol.name,
        counts.control,
        counts.infrastructure,
        counts.statistical
    );
    let by = |b: Bound, what: &str| match b {
        Bound::Attempts => "the attempts' budgets".to_owned(),
        Bound::RunBudget => format!("[budgets.run] {what}"),
    };
    println!(
        "worst case: {} attempts (every rerun [reruns] allows; control slots call no model), {} model calls, {} tokens (bound by {}), ${:.2} (bound by {}{})",
        worst.attempts,
        worst.calls,
        worst.tokens,
        by(worst.tokens_bound, "max_tokens"),
        worst.spend_usd,
        by(worst.spend_bound, "max_spend_usd"),
        match &worst.dearest_model {
            Some(m) => format!(
                "; every token at {}'s dearest rate, ${}/Mtok",
                m, worst.dearest_usd_per_mtok
            ),
            None => String::new(),
        }
    );
    match &exp {
        None => println!(
            "expected: give --pilot LEDGER (a smoke or A/A run of this matrix) to estimate it from measured use"
        ),
        Some((path, identity, used, e)) => {
            println!(
                "expected (pilot {} ({identity}), {} attempts measured; reruns not expected): {} attempts, {:.0} agent model calls, {:.0} tokens, ${:.2}",
                path.display(),
                used.overall.attempts,
                e.attempts,
                e.calls,
                e.tokens,
                e.spend_usd
            );
            for (suite, arm) in &e.from_overall {
                println!(
                    "  {suite}/{arm}: not in the pilot; estimated at the pilot's mean over all its attempts"
                );
            }
        }
    }
    Ok(Status::Ok)
}
