//! `eval plan --matrix NAME --calibrate --pilot LEDGER [--replicates N] [--json]`: each suite
//! gate's false-fail rate under no effect, by resampling the pilot's task-level noise
//! (`eval_evidence::report::false_fail`): tasks drawn with replacement, the baseline's and the
//! candidate's results swapped within each pair at random, the protocol's gates evaluated on
//! every replicate by their own procedure. An A/A pilot (the baseline against an identical copy
//! of itself) is the natural input. The pilot is never the evaluated run (its identity: exit 2).
//! `eval freeze --pilot` prints the same figures through [`pilot_false_fail`].

use eval_evidence::report::false_fail::{FalseFail, false_fail_rates};
use eval_protocols::Project;
use std::path::Path;

use crate::cli::PlanArgs;
use crate::commands::error::CommandError;
use crate::status::{CmdResult, Status};

/// A pilot's false-fail figures for one protocol.
pub(crate) struct PilotFalseFail {
    /// The pilot run's frozen identity.
    pub identity: String,
    /// The protocol the pilot ran.
    pub protocol: String,
    /// The seed of the replicates (the evaluated protocol's statistical seed).
    pub seed: u64,
    /// Every suite rule's rate.
    pub rates: Vec<FalseFail>,
    /// The pilot is an A/A run of the protocol itself: which arm each candidate copied.
    pub aa: Option<String>,
}

/// Every suite gate rule of `loaded` with its false-fail rate under no effect on the pilot
/// ledger's noise: the one computation behind `eval plan --calibrate` and `eval freeze --pilot`.
/// A missing or unreadable pilot, a pilot that is a run of `loaded`'s frozen identity (looked up
/// in the registry under `state`), no replicates or no suite gate is a `--pilot` error (exit 2).
pub(crate) fn pilot_false_fail(
    loaded: &eval_protocols::Loaded,
    path: &Path,
    state: &Path,
    replicates: u32,
) -> Result<PilotFalseFail, CommandError> {
    if std::fs::symlink_metadata(path).is_err() {
        return Err(pilot_err(path, "no such file"));
    }
    if replicates == 0 {
        return Err(pilot_err(path, "--replicates must be at least 1"));
    }
    let data = eval_report::data::pilot_run_data(Path::new("."), path, loaded)
        .map_err(|e| pilot_err(path, &e.to_string()))?;
    let reg = eval_protocols::registry::Registry::open(state)
        .map_err(|e| pilot_err(path, &format!("the identity registry: {e}")))?;
    // An A/A run of the protocol itself is the one run of its identity that is a pilot: it says
    // so in its verified ledger (an `aa_run` entry naming this identity), not by its path.
    let aa = aa_marker(path, &data.identity, state, &data.protocol);
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
        ));
    }
    let rates = false_fail_rates(&data, replicates, data.plan.seed);
    if rates.is_empty() {
        return Err(pilot_err(
            path,
            &format!(
                "protocol {} has no suite gate to calibrate",
                loaded.protocol.name
            ),
        ));
    }
    Ok(PilotFalseFail {
        identity: data.identity,
        protocol: data.protocol,
        seed: data.plan.seed,
        rates,
        aa,
    })
}

pub fn run(args: &PlanArgs) -> CmdResult {
    let project = Project::open(".");
    let matrix = project.load_matrix(&args.matrix)?;
    let loaded = project.load(&matrix.protocol)?;
    let Some(path) = &args.pilot else {
        return Err(pilot_err(Path::new(""), "--calibrate needs --pilot LEDGER").into());
    };
    let f = pilot_false_fail(&loaded, path, &args.state, args.replicates)?;
    if let Some(copies) = &f.aa {
        println!("pilot is an A/A calibration run ({copies})");
    }
    if args.json {
        let v = serde_json::json!({
            "schema": "eval.plan.calibrate/1",
            "pilot": path,
            "pilot_identity": f.identity,
            "pilot_aa": f.aa,
            "replicates": args.replicates,
            "seed": f.seed,
            "rules": f.rates,
        });
        let text = serde_json::to_string_pretty(&v)
            .map_err(CommandError::encode("encode the calibration"))?;
        println!("{text}");
    } else {
        println!(
            "pilot {} ({}), {} no-effect replicates, seed {}:",
            path.display(),
            f.identity,
            args.replicates,
            f.seed
        );
        for r in &f.rates {
            println!("  {}", r.line());
        }
    }
    Ok(Status::Ok)
}

pub(crate) fn pilot_err(path: &Path, why: &str) -> CommandError {
    CommandError::Pilot {
        path: path.to_path_buf(),
        why: why.to_owned(),
    }
}

/// The pilot's A/A marker: which arm each candidate copied, as one line, when the pilot's ledger
/// holds an `aa_run` entry of its own identity that the protocol's preregistered key signed.
///
/// The marker is what lets a run of the evaluated identity itself serve as a pilot, so it is a
/// precondition and trusted only as signed evidence: a hash chain alone can be recomputed by
/// anyone with write access to the file. The entry must be covered by a checkpoint that the
/// frozen public key verifies and that is of the A/A log (`eval-aa/<identity>`); a protocol
/// frozen without a signing key (signatures switched off) falls back to the chain, and the
/// output says so.
fn aa_marker(path: &Path, identity: &str, state: &Path, protocol: &str) -> Option<String> {
    let all = eval_evidence::ledger::LedgerReader::open(path)
        .and_then(|r| r.entries())
        .ok()?;
    if !eval_evidence::ledger::verify_entries(&all, None).ok {
        return None;
    }
    let (seq, aa) = all.iter().find_map(|e| {
        (e.kind == eval_runlog::layout::AA_RUN)
            .then(|| serde_json::from_slice::<eval_runlog::layout::AaRun>(&e.payload).ok())
            .flatten()
            .map(|aa| (e.seq, aa))
    })?;
    if aa.identity != identity || aa.evidence {
        return None;
    }
    let signed = match eval_protocols::frozen_public_key(state, protocol) {
        Ok(Some(key)) => {
            let key = eval_evidence::signing::PublicKey::try_from(&key).ok()?;
            let r = eval_evidence::signing::verify_entry_signatures(&all, &key, None);
            let want = eval_evidence::signing::aa_origin_for_identity(identity).ok()?;
            let covered = r
                .last_checkpoint
                .as_ref()
                .is_some_and(|cp| cp.origin == want && seq <= cp.tree_size);
            if r.error.is_some() || !covered {
                return None;
            }
            ""
        }
        Ok(None) => " (unsigned: the protocol was frozen without a signing key)",
        Err(_) => return None,
    };
    let copies = aa
        .copies
        .iter()
        .map(|c| format!("suite {}: {} copies {}", c.suite, c.arm, c.copies))
        .collect::<Vec<_>>()
        .join("; ");
    Some(format!("{copies}{signed}"))
}
