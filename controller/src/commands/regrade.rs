//! `eval regrade --matrix M --grader RUNTIME [--tasks …]`: a finished run's archived workspaces
//! graded again by another grader (see `eval_engine::regrade`), and a summary of both scores.

use crate::cli::RegradeArgs;
use crate::status::{CmdResult, Status};
use eval_engine::regrade::{RegradeSpec, regrade};
use eval_protocols::Project;

pub fn run(args: RegradeArgs) -> CmdResult {
    let project = Project::open(".");
    let spec = RegradeSpec {
        matrix: args.matrix.clone(),
        grader: args.grader.clone(),
        tasks: args.tasks.clone(),
        signing_key: args.signing_key_file.clone(),
        driver: crate::driver::driver_digest(),
    };
    let done = regrade(&project, &args.state.state, &spec)?;
    println!(
        "regrade {} of matrix {} (based on ledger head {}:{}){}",
        done.identity,
        args.matrix,
        done.based_on.seq,
        done.based_on.hash,
        if done.already {
            ": already finished, nothing graded now"
        } else {
            ""
        }
    );
    for a in &done.attempts {
        let show = |m: &std::collections::BTreeMap<String, f64>| {
            m.iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        println!(
            "  {} [{}/{} {}]: {} · preregistered grader: {} · regrade: {}{}",
            a.attempt,
            a.suite,
            a.task,
            a.arm,
            a.graded,
            show(&a.original),
            show(&a.regraded),
            a.detail
                .as_deref()
                .map(|d| format!(" ({})", eval_report::show::clean(d)))
                .unwrap_or_default()
        );
    }
    for c in eval_evidence::report::sensitivity::compare(&done.attempts) {
        println!(
            "  {}/{} {}: preregistered grader {:.4}, regrade {:.4} ({} attempts)",
            c.suite, c.arm, c.metric, c.original_mean, c.regraded_mean, c.attempts
        );
    }
    println!("ledger: {}", done.ledger.display());
    println!("regrade directory: {}", done.dir.display());
    println!(
        "a sensitivity analysis: eval report --matrix {} shows it beside the preregistered result, never changing the verdict",
        args.matrix
    );
    Ok(Status::Ok)
}
