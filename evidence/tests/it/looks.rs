//! Interim looks on a synthetic run: a large effect stops at the first look and the report says
//! so; a look is never taken twice, out of order, after a stop or before its slots are resolved.

use crate::support::*;
use eval_core::phase::Phase;
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

/// `run_data` grown to 24 tasks (four copies of its six), with a bootstrap-lower rule and the design.
fn full_run(uplift: [f64; 6]) -> RunData {
    let mut run = run_data(uplift);
    run.gates[0].rules.push(rule(
        "lower",
        Statistic::BootstrapLower,
        Some("score"),
        Op::Gt,
        Some(0.0),
    ));
    run.sequential = Some(plan());
    let (slots, attempts) = (run.slots.clone(), run.attempts.clone());
    for copy in 1..4 {
        let rename = |t: &str| format!("{t}-c{copy}");
        for s in slots.iter().filter(|s| s.phase == Phase::Statistical) {
            let mut s = s.clone();
            s.id =
                s.id.replace(&format!("-{}-", s.task), &format!("-{}-", rename(&s.task)));
            s.task = rename(&s.task);
            run.slots.push(s);
        }
        for a in attempts.iter().filter(|a| a.phase == Phase::Statistical) {
            let mut a = a.clone();
            a.slot = a
                .slot
                .replace(&format!("-{}-", a.task), &format!("-{}-", rename(&a.task)));
            a.task = rename(&a.task);
            run.attempts.push(a);
        }
        run.suites[0].tasks.extend(TASKS.iter().map(|t| rename(t)));
    }
    run
}

/// `full_run` with only the first 12 tasks resolved (half of the statistical slots).
fn half_run(uplift: [f64; 6]) -> RunData {
    let mut run = full_run(uplift);
    let late: Vec<String> = run.suites[0].tasks[12..].to_vec();
    run.attempts.retain(|a| !late.contains(&a.task));
    run
}

#[test]
fn a_large_effect_stops_at_the_first_look_and_the_report_says_which() {
    // Differences of about 20 on twelve tasks: z far above O'Brien–Fleming's first boundary.
    let mut run = half_run([20.0, 23.0, 19.0, 21.0, 22.0, 20.0]);
    let look = take_look(&run, &plan(), 1).unwrap();
    assert_eq!(look.decision, LookDecision::StopEfficacy);
    assert_eq!(
        (look.resolved_slots, look.total_slots, look.tasks),
        (72, 144, 12)
    );
    assert!((look.boundary - 2.797).abs() < 0.002, "{}", look.boundary);
    run.looks_taken.push(look);
    let report = build_report(&run).unwrap();
    let q = report.sequential.as_ref().unwrap();
    assert_eq!(q.stopped_at, Some(1));
    // The slots the design left unrun are not missing; the interval rule is held to look 1's
    // level (two-sided 2(1 − Φ(2.797)) ≈ 0.0052), and still passes with twelve tasks.
    assert!(
        !report.reasons.iter().any(|r| r.contains("run incomplete")),
        "{:?}",
        report.reasons
    );
    assert!(
        report
            .anomalies
            .iter()
            .any(|a| a.contains("stopped at interim look 1 for efficacy"))
    );
    let lower = report.gates[0]
        .rules
        .iter()
        .find(|r| r.id == "lower")
        .unwrap();
    assert_eq!(
        lower.verdict,
        eval_evidence::gates::Verdict::Pass,
        "{lower:?}"
    );
    assert!(report.release_allowed, "{:?}", report.reasons);
    assert!(
        q.summary.starts_with("stopped at look 1 of 2 for efficacy"),
        "{}",
        q.summary
    );
    for f in [Format::Text, Format::Md, Format::Html] {
        let out = render(&report, f).unwrap();
        assert!(out.contains("stopped at look 1 of 2 for efficacy"), "{f:?}");
        assert!(out.contains("look 1: 72/144 slots, 12 tasks"), "{f:?}");
    }
    // A look is never taken twice, and nothing is taken after the stop.
    let again = take_look(&run, &plan(), 1).unwrap_err();
    assert!(again.contains("already taken"), "{again}");
    let next = take_look(&run_data_with(&run), &plan(), 2).unwrap_err();
    assert!(next.contains("stopped at look 1"), "{next}");
}

/// The same run with every slot resolved (the looks taken kept).
fn run_data_with(half: &RunData) -> RunData {
    let mut full = full_run([20.0, 23.0, 19.0, 21.0, 22.0, 20.0]);
    full.looks_taken = half.looks_taken.clone();
    full
}

#[test]
fn no_effect_continues_below_the_boundary_and_the_final_look_accounts_for_both() {
    // Differences 1, −1, 0.5, 0, 0, 0 (mean 0.08, sd 0.66): z far from either boundary.
    let mut run = half_run([1.0, -1.0, 0.5, 0.0, 0.0, 0.0]);
    let first = take_look(&run, &plan(), 1).unwrap();
    assert_eq!(first.decision, LookDecision::Continue, "{first:?}");
    run.looks_taken.push(first);
    // A look that does not stop leaves the run incomplete, and says so.
    let interim = build_report(&run).unwrap();
    assert!(interim.reasons.iter().any(|r| r.contains("run incomplete")));
    // Look 2 needs every slot.
    let early = take_look(&run, &plan(), 2).unwrap_err();
    assert!(early.contains("needs 144 of 144"), "{early}");
    let mut full = full_run([1.0, -1.0, 0.5, 0.0, 0.0, 0.0]);
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
fn too_few_tasks_never_stop_for_efficacy() {
    // Three tasks: 2^-3 is above any level a look can be held to.
    let mut run = half_run([20.0, 23.0, 19.0, 21.0, 22.0, 20.0]);
    run.attempts
        .retain(|a| ["t1", "t2", "t3"].contains(&a.task.as_str()));
    run.suites[0].tasks.truncate(6);
    run.slots
        .retain(|s| s.phase != Phase::Statistical || !s.task.contains("-c"));
    let look = take_look(&run, &plan(), 1).unwrap();
    assert_eq!(look.decision, LookDecision::Continue, "{look:?}");
    assert!(look.note.unwrap().contains("3 tasks cannot reach"));
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
    assert!(
        why.contains("needs 108 of 144 statistical slots resolved; 72 are"),
        "{why}"
    );
}
