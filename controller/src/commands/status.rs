//! `eval status`: a run's progress, read from its ledger (also while the run is going).

use super::error::CommandError;
use crate::cli::StatusArgs;
use crate::status::{CmdResult, Failure, Status};
use eval_evidence::ledger::{self, LedgerReader};
use eval_runlog::replay::{RunState, StatusSummary};

/// Reads, verifies and replays a matrix's ledger.
pub fn load_summary(state: &std::path::Path, matrix: &str) -> Result<StatusSummary, Failure> {
    let path = eval_runlog::layout::ledger_path(state, matrix);
    if !path.exists() {
        return Err(CommandError::NoRun {
            matrix: matrix.to_owned(),
            state: state.to_path_buf(),
            path,
        }
        .into());
    }
    let report = ledger::verify(&path, None)?;
    if !report.ok {
        let why = report
            .error
            .map(|e| e.to_string())
            .unwrap_or_else(|| "unknown".into());
        return Err(CommandError::LedgerDoesNotVerify { path, why }.into());
    }
    let entries = LedgerReader::open(&path)?.entries()?;
    let st = RunState::replay(&entries).map_err(|source| CommandError::Replay {
        path: path.clone(),
        source,
    })?;
    Ok(st.summary())
}

pub fn run(args: StatusArgs) -> CmdResult {
    let sum = load_summary(&args.state.state, &args.matrix)?;
    if !args.json && eval_runlog::layout::is_smoke_run(&args.state.state, &args.matrix) {
        println!("SMOKE run: never evidence, counted toward no real run");
    }
    if !args.json && eval_runlog::layout::is_aa_run(&args.state.state, &args.matrix) {
        println!("A/A calibration run: never evidence for a release, counted toward no real run");
    }
    let ledger = eval_runlog::layout::ledger_path(&args.state.state, &args.matrix);
    let stopped = eval_runlog::looks::stopped_at_look(&ledger);
    if args.json {
        let mut v = serde_json::to_value(&sum).map_err(CommandError::encode("print status"))?;
        if let (Some(t), Some(obj)) = (&stopped, v.as_object_mut()) {
            obj.insert(
                "stopped_at_look".into(),
                serde_json::to_value(t).map_err(CommandError::encode("print status"))?,
            );
        }
        let text =
            serde_json::to_string_pretty(&v).map_err(CommandError::encode("print status"))?;
        println!("{text}");
        return Ok(Status::Ok);
    }
    print!("{}", render_text(&sum));
    if let Some(t) = &stopped {
        println!(
            "STOPPED at an interim look: {} (eval run refuses to continue it)",
            eval_evidence::report::looks::look_line(t)
        );
    }
    Ok(Status::Ok)
}

pub fn render_text(sum: &StatusSummary) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "matrix {} ({}){}",
        sum.matrix,
        sum.identity,
        if sum.fixture_evidence {
            " — FIXTURE upstream: not evidence"
        } else if sum.model_free_evidence {
            " — MODEL-FREE upstream: evidence only for a model_free protocol"
        } else {
            ""
        }
    );
    let _ = writeln!(
        out,
        "infrastructure: {}/{} completed{}",
        sum.infra_completed,
        sum.infra_total,
        if sum.infra_failed > 0 {
            format!(", {} failed", sum.infra_failed)
        } else {
            String::new()
        }
    );
    let _ = writeln!(
        out,
        "statistical: {}/{} done ({} resolved){}",
        sum.done,
        sum.total,
        sum.resolved,
        if sum.complete { " — complete" } else { "" }
    );
    for (group, g) in &sum.groups {
        let _ = writeln!(
            out,
            "  {group:<40} {:>3}/{:<3} infra faults {:<2} tokens {}",
            g.done, g.total, g.infra_faults, g.tokens
        );
    }
    let outcomes: Vec<String> = sum
        .by_outcome
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    let _ = writeln!(
        out,
        "attempts: {} ({}); infra faults {}; reruns {}",
        sum.attempts,
        outcomes.join(", "),
        sum.infra_faults,
        sum.reruns,
    );
    let _ = writeln!(
        out,
        "tokens: statistical in {} out {}; infrastructure in {} out {}",
        sum.tokens.input, sum.tokens.output, sum.infra_tokens.input, sum.infra_tokens.output
    );
    if !sum.running.is_empty() {
        let _ = writeln!(out, "running now: {}", sum.running.join(", "));
    }
    out
}
