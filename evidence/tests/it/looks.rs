//! Interim looks on a synthetic run: a large effect stops at the first look and the report says
//! so; a look is never taken twice, out of order, after a stop or before its slots are resolved.

use crate::support::*;
use eval_evidence::gates::{Op, Statistic};
use eval_evidence::report::looks::*;
use eval_evidence::report::*;
use eval_evidence::stats::sequential::{LookDecision, Spending};

fn plan() -> SequentialPlan {
    SequentialPlan {
        gate: "s".into(),
        looks: vec![0.5, 1.0],
        spending: Spending::OBrienFleming,
        futility_z: Some(0.0),
    }
}

/// `run_data` with a bootstrap-lower rule, the design, and only tasks t1..t3 resolved (half of
/// the statistical slots).
fn half_run(uplift: [f64; 6]) -> RunData {
    let mut run = run_data(uplift);
    run.gates[0].rules.push(rule(
        "lower",
        Statistic::BootstrapLower,
        Some("score"),
        Op::Gt,
        Some(0.0),
    ));
    run.sequential = Some(plan());
    run.attempts
        .retain(|a| !["t4", "t5", "t6"].contains(&a.task.as_str()));
    run
}

#[test]
fn a_large_effect_stops_at_the_first_look_and_the_report_says_which() {
    // Differences 20, 23, 19 on three tasks: z far above O'Brien–Fleming's first boundary.
    let mut run = half_run([20.0, 23.0, 19.0, 21.0, 22.0, 20.0]);
    let look = take_look(&run, &plan(), 1).unwrap();
    assert_eq!(look.decision, LookDecision::StopEfficacy);
    assert_eq!(
        (look.resolved_slots, look.total_slots, look.tasks),
        (18, 36, 3)
    );
    assert!((look.boundary - 2.797).abs() < 0.002, "{}", look.boundary);
    run.looks_taken.push(look);
    let report = build_report(&run).unwrap();
    let q = report.sequential.as_ref().unwrap();
    assert_eq!(q.stopped_at, Some(1));
    assert!(
        q.summary.starts_with("stopped at look 1 of 2 for efficacy"),
        "{}",
        q.summary
    );
    for f in [Format::Text, Format::Md, Format::Html] {
        let out = render(&report, f).unwrap();
        assert!(out.contains("stopped at look 1 of 2 for efficacy"), "{f:?}");
        assert!(out.contains("look 1: 18/36 slots, 3 tasks"), "{f:?}");
    }
    // A look is never taken twice, and nothing is taken after the stop.
    let again = take_look(&run, &plan(), 1).unwrap_err();
    assert!(again.contains("already taken"), "{again}");
    let next = take_look(&run_data_with(&run), &plan(), 2).unwrap_err();
    assert!(next.contains("stopped at look 1"), "{next}");
}

/// The same run with every slot resolved (the looks taken kept).
fn run_data_with(half: &RunData) -> RunData {
    let mut full = run_data([20.0, 23.0, 19.0, 21.0, 22.0, 20.0]);
    full.gates = half.gates.clone();
    full.sequential = half.sequential.clone();
    full.looks_taken = half.looks_taken.clone();
    full
}

#[test]
fn no_effect_continues_below_the_boundary_and_the_final_look_accounts_for_both() {
    // Differences ±1 around 0: neither efficacy nor (with z ≥ 0) futility.
    let mut run = half_run([1.0, -1.0, 0.5, 0.0, 0.0, 0.0]);
    let first = take_look(&run, &plan(), 1).unwrap();
    assert_eq!(first.decision, LookDecision::Continue, "{first:?}");
    run.looks_taken.push(first);
    // Look 2 needs every slot.
    let early = take_look(&run, &plan(), 2).unwrap_err();
    assert!(early.contains("needs 36 of 36"), "{early}");
    let mut full = run_data([1.0, -1.0, 0.5, 0.0, 0.0, 0.0]);
    full.gates = run.gates.clone();
    full.sequential = run.sequential.clone();
    full.looks_taken = run.looks_taken.clone();
    let last = take_look(&full, &plan(), 2).unwrap();
    assert_eq!(last.decision, LookDecision::FinalNotShown);
    full.looks_taken.push(last);
    let report = build_report(&full).unwrap();
    let q = report.sequential.unwrap();
    assert_eq!(q.stopped_at, None);
    assert_eq!(q.looks.len(), 2);
    assert_eq!(q.summary, "2 of 2 looks taken, none stopped the run");
}

#[test]
fn a_negative_effect_stops_for_futility_at_an_interim_look() {
    let run = half_run([-5.0, -6.0, -4.0, 0.0, 0.0, 0.0]);
    let look = take_look(&run, &plan(), 1).unwrap();
    assert_eq!(look.decision, LookDecision::StopFutility);
}

#[test]
fn looks_out_of_order_or_not_in_the_design_are_refused() {
    let run = half_run([20.0; 6]);
    let skipped = take_look(&run, &plan(), 2).unwrap_err();
    assert!(skipped.contains("the next look is 1, not 2"), "{skipped}");
    let absent = take_look(&run, &plan(), 3).unwrap_err();
    assert!(absent.contains("looks 1..=2"), "{absent}");
    let mut early = half_run([20.0; 6]);
    early.sequential = Some(SequentialPlan {
        looks: vec![0.75, 1.0],
        ..plan()
    });
    let why = take_look(&early, early.sequential.as_ref().unwrap(), 1).unwrap_err();
    assert!(why.contains("needs 27 of 36 statistical slots resolved; 18 are"), "{why}");
}
