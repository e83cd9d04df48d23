//! The upstream-free duration: `duration_seconds` stays the wall time, `harness_seconds` takes
//! out the time the calls waited on the upstream, so a duration gate can measure the arm alone.

use crate::support::*;
use eval_evidence::gates::{Op, Statistic, Verdict};
use eval_evidence::report::*;

/// Identical harness work (4 s) in both arms; the candidate's upstream was slower in every other
/// pair (6 s or 12 s of waiting), as a shared model API is.
fn noisy_upstream() -> RunData {
    let mut run = run_data([0.0; 6]);
    for (i, a) in run
        .attempts
        .iter_mut()
        .filter(|a| a.arm == "cand")
        .enumerate()
    {
        let wait = if i % 2 == 0 { 12.0 } else { 6.0 };
        a.upstream_wait_seconds = Some(wait);
        a.duration_seconds = 4.0 + wait;
    }
    for a in run.attempts.iter_mut().filter(|a| a.arm != "cand") {
        a.upstream_wait_seconds = Some(6.0);
        a.duration_seconds = 10.0;
    }
    run.gates[0].rules = ["duration_seconds", "harness_seconds"]
        .iter()
        .map(|m| {
            rule(
                &format!("{m}_p95"),
                Statistic::PairOverheadP95,
                Some(m),
                Op::Le,
                Some(0.10),
            )
        })
        .collect();
    run
}

#[test]
fn a_duration_gate_without_the_upstream_wait_passes_identical_harnesses() {
    let report = build_report(&noisy_upstream()).unwrap();
    let rules = &report.gates[0].rules;
    // The wall time reads the slower upstream as 60 % overhead; the harness time sees none.
    assert_eq!(rules[0].verdict, Verdict::Fail);
    assert!(
        (rules[0].value.unwrap() - 0.6).abs() < 1e-12,
        "{:?}",
        rules[0]
    );
    assert_eq!(rules[1].verdict, Verdict::Pass, "{:?}", rules[1]);
    assert_eq!(rules[1].value, Some(0.0));
}

#[test]
fn every_report_format_shows_both_durations() {
    let report = build_report(&noisy_upstream()).unwrap();
    let cand = report.accounting.iter().find(|a| a.arm == "cand").unwrap();
    // Six slots at 16 s and six at 10 s of wall time; 4 s each of harness time.
    assert_eq!(cand.duration_seconds, 156.0);
    assert_eq!(cand.harness_seconds, 48.0);
    let line = "156s (48s excluding the upstream)";
    for f in [Format::Text, Format::Md, Format::Html] {
        assert!(render(&report, f).unwrap().contains(line), "{f:?}");
    }
    let json: serde_json::Value =
        serde_json::from_str(&render(&report, Format::Json).unwrap()).unwrap();
    let arm = json["accounting"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["arm"] == "cand")
        .unwrap();
    assert_eq!(arm["harness_seconds"], 48.0);
    assert_eq!(arm["duration_seconds"], 156.0);
}

#[test]
fn harness_time_never_goes_below_zero_when_parallel_calls_outlast_the_run() {
    let mut run = run_data([0.0; 6]);
    let a = &mut run.attempts[1];
    a.duration_seconds = 5.0;
    a.upstream_wait_seconds = Some(9.0);
    assert_eq!(eval_evidence::gates::pairs::harness_seconds(a), 0.0);
    // Older data without the wait: the harness time is the wall time.
    a.upstream_wait_seconds = None;
    assert_eq!(eval_evidence::gates::pairs::harness_seconds(a), 5.0);
}
