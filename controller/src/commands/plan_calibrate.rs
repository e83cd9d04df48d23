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
    // An A/A run of the protocol itself is the one run of its identity that is a pilot: it says
    // so in its verified ledger (an `aa_run` entry naming this identity), not by its path.
    let aa = aa_marker(path, &data.identity);
    if let Some(copies) = &aa {
        println!("pilot is an A/A calibration run ({copies})");
    }
    if aa.is_none()
        && reg
            .frozen_identity(&loaded.protocol.name)
            .is_some_and(|own| own.to_string() == data.identity)
    {
        return Err(pilot_err(
            path,
            &format!(
                "this is a run of {} itself ({}); the noise must come from a pilot (an A/A run: eval run --aa), never from the evaluated run",
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
            "pilot_aa": aa,
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

/// The pilot's A/A marker, if its verified ledger holds an `aa_run` entry of its own identity:
/// which arm each candidate copied, as one line.
fn aa_marker(path: &std::path::Path, identity: &str) -> Option<String> {
    let all = eval_evidence::ledger::LedgerReader::open(path)
        .and_then(|r| r.entries())
        .ok()?;
    let verified = eval_evidence::ledger::verify_entries(&all, None);
    if !verified.ok {
        return None;
    }
    let aa = eval_runlog::layout::aa_run_entry(&all)?;
    (aa.identity == identity && !aa.evidence).then(|| {
        aa.copies
            .iter()
            .map(|c| format!("suite {}: {} copies {}", c.suite, c.arm, c.copies))
            .collect::<Vec<_>>()
            .join("; ")
    })
}
