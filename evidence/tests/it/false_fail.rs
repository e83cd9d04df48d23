//! False-fail rates under no effect: an A/A run whose wall time is noisy only through the
//! upstream fails a p95 duration-overhead gate most of the time, and never the same gate on the
//! upstream-free duration.

use crate::support::*;
use eval_core::phase::Phase;
use eval_evidence::gates::{Op, Statistic};
use eval_evidence::report::false_fail::*;
use eval_evidence::report::*;

/// The baseline against an identical copy of itself (same scores), 4 s of harness time each,
/// plus an upstream wait that varies from attempt to attempt (5 to 9 s) as a shared API does.
fn a_a_run() -> RunData {
    let mut run = run_data([0.0; 6]);
    let waits = [
        5.0, 9.0, 6.5, 8.0, 5.5, 7.0, 9.0, 6.0, 8.5, 5.0, 7.5, 6.0, 5.5,
    ];
    for (i, a) in run
        .attempts
        .iter_mut()
        .filter(|a| a.phase == Phase::Statistical)
        .enumerate()
    {
        let w = waits[(i * 7) % waits.len()];
        a.upstream_wait_seconds = Some(w);
        a.duration_seconds = 4.0 + w;
    }
    run.gates[0].rules = vec![
        rule(
            "score",
            Statistic::PairDiffMean,
            Some("score"),
            Op::Ge,
            Some(-2.0),
        ),
        rule(
            "duration_p95",
            Statistic::PairOverheadP95,
            Some("duration_seconds"),
            Op::Le,
            Some(0.10),
        ),
        rule(
            "harness_p95",
            Statistic::PairOverheadP95,
            Some("harness_seconds"),
            Op::Le,
            Some(0.10),
        ),
    ];
    run
}

#[test]
fn a_noisy_wall_time_gate_fails_identical_arms_and_the_harness_time_gate_does_not() {
    let rates = false_fail_rates(&a_a_run(), 200, 5);
    let rate = |r: &str| rates.iter().find(|x| x.rule == r).unwrap();
    assert_eq!(rate("score").fails, 0, "{:?}", rate("score"));
    assert!(
        rate("duration_p95").rate > 0.9,
        "{:?}",
        rate("duration_p95")
    );
    assert_eq!(rate("harness_p95").fails, 0, "{:?}", rate("harness_p95"));
    assert!(
        rate("duration_p95")
            .line()
            .starts_with("false-fail: gate s rule duration_p95")
    );
}

#[test]
fn replicates_are_a_pure_function_of_the_seed_and_keep_the_pairs_whole() {
    let run = a_a_run();
    let a = null_replicate(&run, 9, 3);
    assert_eq!(a, null_replicate(&run, 9, 3));
    assert_ne!(a, null_replicate(&run, 9, 4));
    let stat = |r: &RunData| {
        r.slots
            .iter()
            .filter(|s| s.phase == Phase::Statistical)
            .count()
    };
    // Six tasks drawn, two arms (the other arm dropped), two repetitions.
    assert_eq!(stat(&a), 24);
    assert_eq!(a.suites[0].tasks.len(), 6);
    assert!(a.suites[0].other_arms.is_empty());
    let report = build_report(&a).unwrap();
    assert!(report.completeness.missing.is_empty());
}

#[test]
fn the_report_flags_a_rule_whose_false_fail_rate_exceeds_the_preregistered_bound() {
    let mut run = a_a_run();
    let quiet = build_report(&run).unwrap();
    assert!(quiet.false_fail.is_empty());
    assert!(
        !quiet
            .anomalies
            .iter()
            .any(|a| a.contains("under no effect"))
    );
    run.plan.false_fail_bound = Some(0.2);
    let report = build_report(&run).unwrap();
    let flagged: Vec<&String> = report
        .anomalies
        .iter()
        .filter(|a| a.contains("under no effect"))
        .collect();
    assert_eq!(flagged.len(), 1, "{flagged:?}");
    assert!(
        flagged[0].starts_with("gate s rule duration_p95"),
        "{}",
        flagged[0]
    );
    assert!(flagged[0].ends_with("above the preregistered bound 0.2"));
    assert_eq!(report.false_fail.len(), 3);
    // An anomaly, never a reason: the verdict stands on the gates.
    assert_eq!(quiet.reasons, report.reasons);
}
