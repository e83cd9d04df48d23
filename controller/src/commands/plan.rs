//! `eval plan --matrix NAME [--json]`: the expanded schedule, without running anything
//! (`--power`, `--calibrate` and `--cost` are their own modules).

use crate::cli::PlanArgs;
use crate::status::{CmdResult, Status};
use eval_core::phase::Phase;
use eval_protocols::Project;

pub fn run(args: PlanArgs) -> CmdResult {
    if args.power {
        return super::plan_power::run(&args);
    }
    if args.calibrate {
        return super::plan_calibrate::run(&args);
    }
    if args.cost {
        return super::plan_cost::run(&args);
    }
    let project = Project::open(".");
    let matrix = project.load_matrix(&args.matrix)?;
    let schedule = matrix.schedule();
    if args.json {
        let text = serde_json::to_string_pretty(&schedule.slots)
            .map_err(super::error::CommandError::encode("encode the schedule"))?;
        print_all(&format!("{text}\n"));
        return Ok(Status::Ok);
    }
    let infra = schedule.infrastructure().count();
    let stat = schedule.statistical().count();
    let order = match &matrix.order {
        eval_matrix::Order::Chacha8 { seed } => format!("chacha8, seed {seed}"),
        eval_matrix::Order::Mulberry32FisherYates { seed_string } => {
            format!("mulberry32-fisher-yates, seed string {seed_string:?}")
        }
    };
    println!(
        "matrix {} (protocol {}): {infra} infrastructure + {stat} statistical slots; order: {order}; concurrency {}",
        matrix.name, matrix.protocol, matrix.concurrency
    );
    for line in super::preconditions::lines(&project, &matrix.protocol, &args.state) {
        println!("{line}");
    }
    let w_suite = schedule
        .slots
        .iter()
        .map(|s| s.suite.len())
        .max()
        .unwrap_or(5)
        .max(5);
    let w_task = schedule
        .slots
        .iter()
        .map(|s| s.task.len())
        .max()
        .unwrap_or(4)
        .max(4);
    let w_arm = schedule
        .slots
        .iter()
        .map(|s| s.arm.len())
        .max()
        .unwrap_or(3)
        .max(3);
    let mut out = String::new();
    let mut phase = None;
    for s in &schedule.slots {
        if phase != Some(s.phase) {
            phase = Some(s.phase);
            out.push_str(match s.phase {
                Phase::Control => {
                    "\ncontrol arms (graded first, no agent, excluded from statistics):\n"
                }
                Phase::Infrastructure => {
                    "\ninfrastructure (run first, excluded from statistics):\n"
                }
                Phase::Statistical => "\nstatistical:\n",
            });
            out.push_str(&format!(
                "{:>5}  {:<w_suite$}  {:<w_task$}  {:<w_arm$}  {:>3}  id\n",
                "order", "suite", "task", "arm", "rep"
            ));
        }
        out.push_str(&format!(
            "{:>5}  {:<w_suite$}  {:<w_task$}  {:<w_arm$}  {:>3}  {}\n",
            s.order, s.suite, s.task, s.arm, s.rep, s.id
        ));
    }
    print_all(&out);
    Ok(Status::Ok)
}

/// Writes everything, treating a closed pipe (`eval plan | head`) as the reader's choice.
fn print_all(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|_| out.flush());
}
