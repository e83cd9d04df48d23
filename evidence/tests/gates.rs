#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout,
    clippy::print_stderr
)]
//! Gate evaluation: every operator, the statistics, NaN/∞ handling, insufficient tasks, and each
//! reason `releaseAllowed` can be false.

mod common;

use common::*;
use eval_evidence::gates::evaluate::evaluate_gate;
use eval_evidence::gates::{ArmRole, Gate, Op, Rule, Statistic, Verdict};
use eval_evidence::report::*;

const UPLIFT: [f64; 6] = [10.0, 5.0, 0.0, 20.0, 15.0, 10.0];

fn one(run: &RunData, r: Rule) -> eval_evidence::gates::RuleResult {
    let g = Gate {
        id: "g".into(),
        suite: Some("s".into()),
        description: None,
        rules: vec![r],
    };
    evaluate_gate(run, &g).rules.remove(0)
}

#[test]
fn each_operator() {
    let run = run_data(UPLIFT); // mean pair difference = 10
    let cases = [
        (Op::Ge, 10.0, true),
        (Op::Ge, 10.5, false),
        (Op::Gt, 9.5, true),
        (Op::Gt, 10.0, false),
        (Op::Le, 10.0, true),
        (Op::Le, 9.0, false),
        (Op::Lt, 10.5, true),
        (Op::Lt, 10.0, false),
        (Op::Eq, 10.0, true),
        (Op::Eq, 10.1, false),
    ];
    for (op, t, pass) in cases {
        let r = one(
            &run,
            rule("r", Statistic::PairDiffMean, Some("score"), op, Some(t)),
        );
        assert_eq!(r.value, Some(10.0));
        assert_eq!(r.verdict == Verdict::Pass, pass, "{op:?} {t}: {r:?}");
        if !pass {
            assert!(r.reason.unwrap().contains("is false"));
        }
    }
    let g = integrity_gate();
    let res = evaluate_gate(&run, &g);
    assert!(res.passed, "{res:?}");
}

#[test]
fn pair_and_arm_statistics() {
    let run = run_data(UPLIFT);
    let v = |s: Statistic, m: Option<&str>| {
        one(&run, rule("r", s, m, Op::Ge, Some(-1e9)))
            .value
            .unwrap()
    };
    assert_eq!(v(Statistic::PairCount, None), 12.0);
    assert_eq!(v(Statistic::TaskCount, None), 6.0);
    assert_eq!(v(Statistic::PairDiffMin, Some("score")), 0.0);
    assert_eq!(v(Statistic::PairDiffMax, Some("score")), 20.0);
    assert_eq!(v(Statistic::PairDiffMedian, Some("score")), 10.0);
    // Turns are equal in every pair: no pair adds model turns.
    assert_eq!(v(Statistic::PairDiffMax, Some("model_turns")), 0.0);
    assert_eq!(v(Statistic::PairOverheadP95, Some("tokens")), 0.0);
    let ratio = v(Statistic::ArmMeanRatio, Some("score"));
    assert!((ratio - 73.0 / 63.0).abs() < 1e-12, "{ratio}");
    let mut r = rule("r", Statistic::ArmMax, Some("score"), Op::Le, Some(100.0));
    r.arm = Some(ArmRole::Candidate);
    assert_eq!(one(&run, r).value, Some(86.0));
    // Bootstrap lower bound and contrast at 6 tasks: computable (2^-6 < 0.025).
    let lo = one(
        &run,
        rule(
            "r",
            Statistic::BootstrapLower,
            Some("score"),
            Op::Gt,
            Some(0.0),
        ),
    );
    assert_eq!(lo.verdict, Verdict::Pass, "{lo:?}");
    let mut c = rule(
        "c",
        Statistic::ContrastLower,
        Some("score"),
        Op::Ge,
        Some(0.0),
    );
    c.factor = Some(1.5);
    let c = one(&run, c);
    assert_eq!(
        c.verdict,
        Verdict::Fail,
        "candidate is not 1.5x the baseline: {c:?}"
    );
    let mut v04 = rule(
        "v",
        Statistic::BootstrapLower,
        Some("score"),
        Op::Gt,
        Some(0.0),
    );
    v04.method = Some("v04-percentile".into());
    let v04 = one(&run, v04);
    assert_eq!(v04.method.as_deref(), Some("v04-percentile"));
    assert_eq!(v04.verdict, Verdict::Pass);
}

#[test]
fn reduction_rate_and_infinite_overhead_fail_with_reason() {
    let mut run = run_data(UPLIFT);
    for a in run.attempts.iter_mut() {
        a.metrics
            .insert("misses".into(), if a.arm == "base" { 0.0 } else { 1.0 });
    }
    let r = one(
        &run,
        rule(
            "r",
            Statistic::ReductionRate,
            Some("misses"),
            Op::Ge,
            Some(0.5),
        ),
    );
    assert_eq!(r.verdict, Verdict::NotComputable);
    assert_eq!(r.value_text, "-inf");
    assert!(r.reason.unwrap().contains("NaN or infinite"));
    let r = one(
        &run,
        rule(
            "r",
            Statistic::PairOverheadMax,
            Some("misses"),
            Op::Le,
            Some(0.05),
        ),
    );
    assert_eq!(r.verdict, Verdict::NotComputable);
    assert_eq!(r.value_text, "+inf");
    // Interpolating between two infinities is NaN (as in v0.4): still a failure, with the reason.
    let r = one(
        &run,
        rule(
            "r",
            Statistic::PairOverheadMedian,
            Some("misses"),
            Op::Le,
            Some(0.05),
        ),
    );
    assert_eq!(r.verdict, Verdict::NotComputable);
    assert_eq!(r.value_text, "NaN");
    assert_eq!(r.value, None);
    // Both zero: reduction rate 1.
    for a in run.attempts.iter_mut() {
        a.metrics.insert("misses".into(), 0.0);
    }
    let r = one(
        &run,
        rule(
            "r",
            Statistic::ReductionRate,
            Some("misses"),
            Op::Ge,
            Some(0.5),
        ),
    );
    assert_eq!(r.value, Some(1.0));
}

#[test]
fn missing_metric_uses_the_missing_data_rule_or_fails() {
    let mut run = run_data(UPLIFT);
    assert_eq!(run.attempts[3].arm, "cand");
    run.attempts[3].metrics.clear();
    run.attempts[3].outcome = Some(Outcome::AgentError);
    let r = one(
        &run,
        rule(
            "r",
            Statistic::PairDiffMean,
            Some("score"),
            Op::Ge,
            Some(0.0),
        ),
    );
    assert_eq!(r.verdict, Verdict::NotComputable);
    assert!(r.reason.unwrap().contains("missing-data"));
    run.plan.missing_metric_values.insert("score".into(), 0.0);
    let r = one(
        &run,
        rule(
            "r",
            Statistic::PairDiffMean,
            Some("score"),
            Op::Ge,
            Some(-1000.0),
        ),
    );
    assert_eq!(r.verdict, Verdict::Pass);
}

#[test]
fn insufficient_tasks_at_three() {
    let mut run = run_data(UPLIFT);
    run.suites[0].tasks.truncate(3);
    run.slots
        .retain(|s| !["t4", "t5", "t6"].contains(&s.task.as_str()));
    run.attempts
        .retain(|s| !["t4", "t5", "t6"].contains(&s.task.as_str()));
    let r = one(
        &run,
        rule(
            "r",
            Statistic::BootstrapLower,
            Some("score"),
            Op::Gt,
            Some(-100.0),
        ),
    );
    assert_eq!(r.verdict, Verdict::InsufficientTasks, "{r:?}");
    assert!(r.reason.unwrap().contains("2^-3"));
    let r = one(
        &run,
        rule("r", Statistic::SignFlipP, Some("score"), Op::Le, Some(0.05)),
    );
    assert_eq!(r.verdict, Verdict::InsufficientTasks);
    let r = one(
        &run,
        rule("r", Statistic::SignFlipP, Some("score"), Op::Le, Some(0.2)),
    );
    assert_eq!(
        r.verdict,
        Verdict::Fail,
        "p = 0.25 with one zero difference: {r:?}"
    );
    let report = build_report(&run).unwrap();
    assert!(report.suites[0].robustness_check);
}

fn reasons_of(run: &RunData) -> (bool, Vec<String>, u8) {
    let r = build_report(run).unwrap();
    (r.release_allowed, r.reasons.clone(), r.exit_status())
}

#[test]
fn release_allowed_when_everything_holds() {
    let mut run = run_data(UPLIFT);
    run.gates.push(integrity_gate());
    let (ok, reasons, code) = reasons_of(&run);
    assert!(ok, "{reasons:?}");
    assert_eq!(code, 0);
}

#[test]
fn release_reason_gate_failed() {
    let run = run_data([0.0; 6]);
    let (ok, reasons, code) = reasons_of(&run);
    assert!(!ok);
    assert_eq!(code, 1);
    assert!(
        reasons.iter().any(|r| r.contains("gate s rule diff")),
        "{reasons:?}"
    );
}

#[test]
fn release_reason_incomplete() {
    let mut run = run_data(UPLIFT);
    run.attempts.retain(|a| a.slot != "stat-s-t3-other-r2");
    let (ok, reasons, code) = reasons_of(&run);
    assert!(!ok);
    assert_eq!(code, 1);
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("run incomplete: 35 of 36")),
        "{reasons:?}"
    );
    // An infra slot that only faulted is incomplete too.
    let mut run = run_data(UPLIFT);
    run.attempts[0].outcome = Some(Outcome::InfraFault);
    let (_, reasons, _) = reasons_of(&run);
    assert!(
        reasons.iter().any(|r| r.contains("0 of 1 infrastructure")),
        "{reasons:?}"
    );
}

#[test]
fn release_reason_ledger_not_verified() {
    let mut run = run_data(UPLIFT);
    run.ledger_verified = false;
    run.ledger_problems = vec!["entry 7: hash mismatch".into()];
    let (ok, reasons, code) = reasons_of(&run);
    assert!(!ok);
    assert_eq!(code, 3);
    assert!(reasons.iter().any(|r| r.contains("entry 7: hash mismatch")));
}

#[test]
fn release_reason_freeze_drift() {
    let mut run = run_data(UPLIFT);
    run.freeze_drift = vec!["protocols/p/protocol.toml".into()];
    let (ok, reasons, code) = reasons_of(&run);
    assert!(!ok);
    assert_eq!(code, 3);
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("drifted: protocols/p/protocol.toml"))
    );
}

#[test]
fn release_reason_retired() {
    let mut run = run_data(UPLIFT);
    run.identity_retired = true;
    let (ok, reasons, code) = reasons_of(&run);
    assert!(!ok);
    assert_eq!(code, 3);
    assert!(reasons.iter().any(|r| r.contains("is retired")));
}

#[test]
fn release_reason_fixture_upstream() {
    let mut run = run_data(UPLIFT);
    run.fixture_upstream = true;
    let (ok, reasons, code) = reasons_of(&run);
    assert!(!ok);
    assert_eq!(code, 1);
    assert!(reasons.iter().any(|r| r.contains("fixture")));
}

#[test]
fn integrity_rules_catch_each_problem() {
    let base = run_data(UPLIFT);
    let check = |run: &RunData, stat: Statistic, needle: &str| {
        let g = Gate {
            id: "i".into(),
            suite: None,
            description: None,
            rules: vec![rule("r", stat, None, Op::IsTrue, None)],
        };
        let r = evaluate_gate(run, &g).rules.remove(0);
        assert_eq!(r.verdict, Verdict::Fail, "{stat:?}");
        assert!(
            r.reason.as_ref().unwrap().contains(needle),
            "{stat:?}: {:?}",
            r.reason
        );
    };
    // Unauthorized rerun: fault code not on the list.
    let mut run = base.clone();
    let slot = run.slots[3].clone();
    run.attempts[3].outcome = Some(Outcome::InfraFault);
    run.attempts[3].infra_fault = Some("disk_on_fire".into());
    run.attempts
        .push(attempt(&slot, 2, Some(Outcome::Completed), 1.0));
    check(&run, Statistic::RerunsAuthorized, "not rerunnable");
    // Rerun of a completed statistical attempt.
    let mut run = base.clone();
    run.attempts
        .push(attempt(&slot, 2, Some(Outcome::Completed), 1.0));
    check(&run, Statistic::RerunsAuthorized, "is final");
    // Two endpoints.
    let mut run = base.clone();
    run.attempts[2].upstream = "https://elsewhere.test".into();
    check(&run, Statistic::SingleEndpoint, "2 upstream endpoints");
    // Accounting: harness turns differ from the proxy's.
    let mut run = base.clone();
    run.attempts[2].harness_turns = Some(9);
    check(
        &run,
        Statistic::AccountingComplete,
        "harness counted 9 model turns",
    );
    let mut run = base.clone();
    run.attempts[2].oracle_calls = 1;
    check(&run, Statistic::AccountingComplete, "oracle calls");
    let mut run = base.clone();
    run.attempts.remove(4);
    check(
        &run,
        Statistic::StatisticalSlotsResolved,
        "no final non-infra outcome",
    );
    let mut run = base;
    run.attempts[0].outcome = Some(Outcome::AgentError);
    check(&run, Statistic::InfraSlotsCompleted, "has not completed");
}

#[test]
fn report_payload_and_renderings() {
    let run = run_data(UPLIFT);
    let report = build_report(&run).unwrap();
    let p = report_entry_payload(&report).unwrap();
    assert!(p["report_digest"].as_str().unwrap().starts_with("sha256:"));
    assert_eq!(p["ledger_head"]["seq"], 42);
    let json = render(&report, Format::Json).unwrap();
    let back: Report = serde_json::from_str(&json).unwrap();
    assert_eq!(back.release_allowed, report.release_allowed);
    assert_eq!(back.schema, REPORT_SCHEMA);
    for f in [Format::Text, Format::Md, Format::Html] {
        let s = render(&report, f).unwrap();
        assert!(s.contains("RELEASE ALLOWED"), "{f:?}");
    }
    let html = render(&report, Format::Html).unwrap();
    assert!(!html.contains("<script"));
    assert!(
        !html.contains("http://")
            || html.matches("http://").count()
                == html.matches("http://www.w3.org/2000/svg").count()
    );
    let s = &report.suites[0];
    assert_eq!(s.comparisons.len(), 2);
    assert_eq!(s.comparisons[0].arm, "cand");
    assert_eq!(s.comparisons[0].summary.as_ref().unwrap().mean_diff, 10.0);
    assert_eq!(report.accounting.len(), 3);
}

/// The gate path reproduces V04.md's icae vector bit for bit: pairs in statistical order, tasks
/// in first-appearance order, seed string `{identity}:{suite}`.
#[test]
fn v04_bootstrap_gate_reproduces_the_vector() {
    let d = [
        20.0, 10.0, -5.0, 0.0, 30.0, 25.0, 15.0, 5.0, -10.0, 40.0, 0.0, 10.0,
    ];
    let mut run = run_data([0.0; 6]);
    run.plan.resamples = 20_000;
    run.plan.method = "v04-percentile".into();
    run.plan.seed_string = Some("{identity}:{suite}".into());
    run.suites[0].id = "icae".into();
    for s in run.slots.iter_mut() {
        s.suite = "icae".into();
    }
    for a in run.attempts.iter_mut() {
        a.suite = "icae".into();
        if a.arm == "cand" {
            let ti = TASKS.iter().position(|t| *t == a.task).unwrap();
            let base = 50.0 + 5.0 * ti as f64 + if a.rep == 2 { 1.0 } else { 0.0 };
            a.metrics
                .insert("score".into(), base + d[ti * 2 + a.rep as usize - 1]);
        }
    }
    let g = Gate {
        id: "icae".into(),
        suite: Some("icae".into()),
        description: None,
        rules: vec![
            rule(
                "lower",
                Statistic::BootstrapLower,
                Some("score"),
                Op::Gt,
                Some(0.0),
            ),
            rule(
                "upper",
                Statistic::BootstrapUpper,
                Some("score"),
                Op::Gt,
                Some(0.0),
            ),
        ],
    };
    let res = evaluate_gate(&run, &g);
    assert_eq!(
        res.rules[0].value.unwrap().to_bits(),
        4.166666666666667f64.to_bits(),
        "{res:?}"
    );
    assert_eq!(
        res.rules[1].value.unwrap().to_bits(),
        19.166666666666668f64.to_bits()
    );
    assert_eq!(res.rules[0].method.as_deref(), Some("v04-percentile"));
    assert!(res.passed);
}
