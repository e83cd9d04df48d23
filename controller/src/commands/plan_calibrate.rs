//! `eval plan --matrix NAME --calibrate --pilot LEDGER [--replicates N] [--json]`: each suite
//! gate's false-fail rate under no effect, by resampling the pilot's task-level noise
//! (`eval_evidence::report::false_fail`): tasks drawn with replacement, the baseline's and the
//! candidate's results swapped within each pair at random, the protocol's gates evaluated on
//! every replicate by their own procedure. An A/A pilot (the baseline against an identical copy
//! of itself) is the natural input. The pilot is never the evaluated run (its identity: exit 2).

use eval_evidence::report::false_fail::false_fail_rates;
use eval_protocols::Project;

use crate::cli::PlanArgs;
use crate::commands::error::CommandError;
use crate::status::{CmdResult, Status};

pub fn run(args: &PlanArgs) -> CmdResult {
    let project = Project::open(".");
    let matrix = project.load_matrix(&args.matrix)?;
    let loaded = project.load(&matrix.protocol)?;
    let Some(path) = &args.pilot else {
        return Err(pilot_err(std::path::Path::new(""), "--calibrate needs --pilot LEDGER").into());
    };
    let data = eval_report::data::pilot_run_data(std::path::Path::new("."), path, &loaded)
        .map_err(|e| pilot_err(path, &e.to_string()))?;
    let reg = eval_protocols::registry::Registry::open(&args.state)
        .map_err(|e| pilot_err(path, &format!("the identity registry: {e}")))?;
    if reg
        .frozen_identity(&loaded.protocol.name)
        .is_some_and(|own| own.to_string() == data.identity)
    {
        return Err(pilot_err(
            path,
            &format!(
                "this is a run of {} itself ({}); the noise must come from a pilot, never from the evaluated run",
                loaded.protocol.name, data.identity
            ),
        )
        .into());
    }
    if args.replicates == 0 {
        return Err(pilot_err(path, "--replicates must be at least 1").into());
    }
    let rates = false_fail_rates(&data, args.replicates, data.plan.seed);
    if rates.is_empty() {
        return Err(pilot_err(
            path,
            &format!(
                "protocol {} has no suite gate to calibrate",
                loaded.protocol.name
            ),
        )
        .into());
    }
    if args.json {
        let v = serde_json::json!({
            "schema": "eval.plan.calibrate/1",
            "pilot": path,
            "pilot_identity": data.identity,
            "replicates": args.replicates,
            "seed": data.plan.seed,
            "rules": rates,
        });
        let text = serde_json::to_string_pretty(&v)
            .map_err(CommandError::encode("encode the calibration"))?;
        println!("{text}");
    } else {
        println!(
            "pilot {} ({}), {} no-effect replicates, seed {}:",
            path.display(),
            data.identity,
            args.replicates,
            data.plan.seed
        );
        for r in &rates {
            println!("  {}", r.line());
        }
    }
    Ok(Status::Ok)
}

fn pilot_err(path: &std::path::Path, why: &str) -> CommandError {
    CommandError::Pilot {
        path: path.to_path_buf(),
        why: why.to_owned(),
    }
}
