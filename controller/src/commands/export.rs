//! `eval export`: a run's attempts in the formats other tools read — ATIF trajectories
//! (Harbor's) and Inspect logs — each a derived view of the run's ledger that names the head it
//! was read at (docs/export.md). Every attempt is read exactly as `eval show` reads it
//! (`show::build`: the ledger's entries, the wire log and the meter, each artifact re-hashed).

mod atif;
mod facts;
mod inspect;

use super::error::CommandError;
use super::proofs::write_atomically;
use crate::cli::{ExportAtifArgs, ExportCommand, ExportInspectArgs};
use crate::status::{CmdResult, Failure, Status};
use eval_report::show;
use std::path::Path;

pub fn run(cmd: ExportCommand) -> CmdResult {
    match cmd {
        ExportCommand::Atif(args) => atif_run(args),
        ExportCommand::Inspect(args) => inspect_run(args),
    }
}

fn atif_run(all: ExportAtifArgs) -> CmdResult {
    let args = &all.run;
    let run = facts::read(&args.state, &args.matrix)?;
    let chosen = run.select(&all.attempts)?;
    make_dir(&args.out)?;
    let mut names = std::collections::BTreeSet::new();
    for id in &chosen {
        let view = show::build(&args.state, &args.matrix, id)?;
        let Some(attempt) = run.attempts.get(id) else {
            continue;
        };
        let t = atif::trajectory(&view, &run, attempt);
        let name = format!("{}.json", facts::file_stem(id));
        if !names.insert(name.clone()) {
            return Err(Failure::usage(format!(
                "attempts {id:?} and another map to the same file name {name:?}"
            )));
        }
        let mut bytes =
            serde_json::to_vec_pretty(&t).map_err(CommandError::encode("encode a trajectory"))?;
        bytes.push(b'\n');
        write_atomically(&args.out.join(&name), &bytes)?;
    }
    println!(
        "wrote {} ATIF trajectories to {} (ledger {} at head {})",
        chosen.len(),
        args.out.display(),
        run.ledger.display(),
        run.head
            .as_ref()
            .map_or("(empty)".to_owned(), |h| format!("{}:{}", h.seq, h.hash))
    );
    Ok(Status::Ok)
}

fn inspect_run(args: ExportInspectArgs) -> CmdResult {
    let run = facts::read(&args.state, &args.matrix)?;
    // The report's own input (the project's frozen protocol, the verified ledger): samples,
    // scores and tokens are what `eval report` computes from.
    let data = eval_report::data::build(
        Path::new("."),
        &args.state,
        &args.matrix,
        &crate::driver::running(),
    )
    .map_err(|e| Failure::from(super::report::ReportCmdError::from(e)))?;
    make_dir(&args.out)?;
    let logs = inspect::logs(&args.state, &data, &run)?;
    for (stem, log) in &logs {
        let bytes = inspect::encode(log).map_err(CommandError::encode("encode a log"))?;
        write_atomically(&args.out.join(format!("{stem}.json")), &bytes)?;
    }
    println!(
        "wrote {} Inspect logs to {} (ledger {} at head {}:{})",
        logs.len(),
        args.out.display(),
        run.ledger.display(),
        data.ledger_head.seq,
        data.ledger_head.hash
    );
    Ok(Status::Ok)
}

/// Creates the output directory (and its parents); refuses a path that is not a directory.
fn make_dir(dir: &Path) -> Result<(), Failure> {
    std::fs::create_dir_all(dir).map_err(|e| CommandError::path(dir)(e).into())
}
