//! Gate evaluation: every operator, the statistics, NaN/∞ handling, insufficient tasks, and each
//! reason `releaseAllowed` can be false.

use crate::support::*;
use eval_core::fault::FaultCode;
use eval_core::outcome::Outcome;
use eval_core::tokens::TokenCounts;
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

/// Evidence from the model-free upstream releases only a protocol that declares itself
/// model-free; for any other it is a reason, and every format marks it; the fixture rule holds
/// beside it unchanged (a model-free protocol run on the fixture still never releases).
#[test]
fn model_free_evidence_releases_only_a_model_free_protocol() {
    let mut run = run_data(UPLIFT);
    run.gates.push(integrity_gate());
    run.model_free_upstream = true;
    let (ok, reasons, code) = reasons_of(&run);
    assert!(!ok);
    assert_eq!(code, 1);
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("model-free") && r.contains("model_free = true")),
        "{reasons:?}"
    );
    let report = build_report(&run).unwrap();
    assert!(report.checks.model_free_upstream);
    let json: serde_json::Value =
        serde_json::from_str(&render(&report, Format::Json).unwrap()).unwrap();
    assert_eq!(json["checks"]["model_free_upstream"], true);
    for f in [Format::Text, Format::Md, Format::Html] {
        let s = render(&report, f).unwrap();
        assert!(s.contains("MODEL-FREE EVIDENCE"), "{f:?}: {s}");
    }

    run.model_free_protocol = true;
    let (ok, reasons, _) = reasons_of(&run);
    assert!(ok, "a model-free protocol releases on it: {reasons:?}");
    let report = build_report(&run).unwrap();
    assert!(report.checks.model_free_upstream, "still marked");
    assert!(
        render(&report, Format::Text)
            .unwrap()
            .contains("MODEL-FREE EVIDENCE")
    );

    run.fixture_upstream = true;
    let (ok, reasons, _) = reasons_of(&run);
    assert!(!ok);
    assert!(reasons.iter().any(|r| r.contains("fixture")), "{reasons:?}");

    // Without model-free evidence nothing is said about it.
    let mut plain = run_data(UPLIFT);
    plain.gates.push(integrity_gate());
    plain.model_free_protocol = true;
    let report = build_report(&plain).unwrap();
    assert!(report.release_allowed, "{:?}", report.reasons);
    assert!(
        !render(&report, Format::Text)
            .unwrap()
            .contains("MODEL-FREE")
    );
}

/// A disagreement between the wire and the harness's transcript is an anomaly of the report,
/// shown in every format; it does not by itself refuse a release (the wire decides the metric).
#[test]
fn a_wire_transcript_disagreement_is_an_anomaly() {
    let mut run = run_data(UPLIFT);
    run.gates.push(integrity_gate());
    let before = build_report(&run).unwrap().anomalies.len();
    run.wire_anomalies =
        vec!["attempt s-t#1: the transcript's first request/header disagrees".into()];
    let report = build_report(&run).unwrap();
    assert_eq!(report.anomalies.len(), before + 1);
    assert!(
        report
            .anomalies
            .iter()
            .any(|a| a.starts_with("wire: attempt s-t#1"))
    );
    for f in [Format::Text, Format::Md, Format::Html, Format::Json] {
        let s = render(&report, f).unwrap();
        assert!(s.contains("attempt s-t#1"), "{f:?}");
    }
}

/// A fault before any container existed (`before_container`) is retried without a rerun: the
/// retry is authorized whatever the protocol lists and counts against no rerun limit — but only
/// up to `MAX_PREPARATION_FAILURES`, and never for a code a retry would only repeat.
#[test]
fn preparation_retries_are_authorized_without_using_reruns() {
    let base = run_data(UPLIFT);
    let slot = base.slots[3].clone();
    let rerun_rule = || Gate {
        id: "i".into(),
        suite: None,
        description: None,
        rules: vec![rule(
            "r",
            Statistic::RerunsAuthorized,
            None,
            Op::IsTrue,
            None,
        )],
    };
    let unprepared = |run: &mut RunData, i: usize, code| {
        run.attempts[i].outcome = Some(Outcome::InfraFault);
        run.attempts[i].infra_fault = Some(code);
        run.attempts[i].model_turns = 0;
        run.attempts[i].before_container = true;
    };
    let mut run = base.clone();
    run.max_reruns_per_slot = Some(0);
    unprepared(&mut run, 3, FaultCode::ImageMissing);
    run.attempts
        .push(attempt(&slot, 2, Some(Outcome::Completed), 1.0));
    let r = evaluate_gate(&run, &rerun_rule()).rules.remove(0);
    assert_eq!(r.verdict, Verdict::Pass, "{:?}", r.reason);
    // The same rerun without the mark is a rerun of an unlisted code.
    run.attempts[3].before_container = false;
    let r = evaluate_gate(&run, &rerun_rule()).rules.remove(0);
    assert_eq!(r.verdict, Verdict::Fail);
    // An attestation mismatch is not retried, mark or not.
    unprepared(&mut run, 3, FaultCode::AttestationMismatch);
    let r = evaluate_gate(&run, &rerun_rule()).rules.remove(0);
    assert_eq!(r.verdict, Verdict::Fail);
    // One preparation retry too many.
    let mut run = base;
    run.attempts[3].rerun_of = None;
    let n = eval_core::fault::MAX_PREPARATION_FAILURES + 1;
    unprepared(&mut run, 3, FaultCode::ImageMissing);
    for k in 2..=n {
        let mut a = attempt(&slot, k, Some(Outcome::InfraFault), 0.0);
        a.infra_fault = Some(FaultCode::ImageMissing);
        a.model_turns = 0;
        a.before_container = true;
        run.attempts.push(a);
    }
    run.attempts
        .push(attempt(&slot, n + 1, Some(Outcome::Completed), 1.0));
    let r = evaluate_gate(&run, &rerun_rule()).rules.remove(0);
    assert_eq!(r.verdict, Verdict::Fail);
    assert!(r.reason.unwrap().contains("preparation failures"));
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
    run.attempts[3].infra_fault = Some(FaultCode::PolicyViolation);
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

fn accounting_rule(run: &RunData) -> eval_evidence::gates::RuleResult {
    let g = Gate {
        id: "i".into(),
        suite: None,
        description: None,
        rules: vec![rule(
            "r",
            Statistic::AccountingComplete,
            None,
            Op::IsTrue,
            None,
        )],
    };
    evaluate_gate(run, &g).rules.remove(0)
}

/// A runtime that declares no metrics file is accounting that was not cross-checked:
/// `accounting_complete` fails and names the attempt. One attempt's own file missing or
/// unreadable (its agent deleted it, its time limit cut the harness off) is that attempt's gap:
/// counted and shown in the report, never a veto of the run — whichever arm it is in.
#[test]
fn accounting_complete_fails_when_the_harness_metrics_were_not_cross_checked() {
    let base = run_data(UPLIFT);
    assert_eq!(accounting_rule(&base).verdict, Verdict::Pass);
    let mut run = base.clone();
    run.attempts[5].accounting = Some("not_declared".into());
    let r = accounting_rule(&run);
    assert_eq!(r.verdict, Verdict::Fail);
    let reason = r.reason.unwrap();
    assert!(reason.contains("not cross-checked"), "{reason}");
    assert!(reason.contains(&run.attempts[5].slot), "{reason}");
    for i in [5, 6] {
        for (result, outcome) in [
            ("metrics_missing", Outcome::AccountingMismatch),
            ("metrics_unreadable", Outcome::AccountingMismatch),
            ("metrics_missing", Outcome::Timeout),
            // A time limit (or a truncating agent) leaves the account short of the meter.
            ("mismatch", Outcome::Timeout),
            ("mismatch", Outcome::AccountingMismatch),
        ] {
            let mut run = base.clone();
            run.attempts[i].accounting = Some(result.into());
            run.attempts[i].outcome = Some(outcome);
            run.attempts[i].harness_turns = (result == "mismatch").then_some(1);
            let r = accounting_rule(&run);
            assert_eq!(
                r.verdict,
                Verdict::Pass,
                "{result} {outcome:?}: {:?}",
                r.reason
            );
            let report = build_report(&run).unwrap();
            let arm = report
                .accounting
                .iter()
                .find(|x| x.arm == run.attempts[i].arm && x.suite == run.attempts[i].suite)
                .unwrap();
            assert_eq!(arm.accounting_unchecked, 1, "{result} {outcome:?}");
            assert!(
                arm.anomalies
                    .iter()
                    .any(|x| x.contains("not cross-checked")),
                "{:?}",
                arm.anomalies
            );
        }
    }
    // A file that accounts for more than the meter saw (calls past the proxy?) fails the gate.
    let mut run = base.clone();
    run.attempts[5].accounting = Some("mismatch".into());
    run.attempts[5].outcome = Some(Outcome::AccountingMismatch);
    run.attempts[5].harness_turns = Some(run.attempts[5].model_turns + 1);
    assert_eq!(accounting_rule(&run).verdict, Verdict::Fail);
    // Ledgers from before `accounting` existed: a declared file with `harness: null` is missing,
    // a runtime that declares none is not cross-checked, and a declared file read is fine.
    let mut old = base.clone();
    for a in &mut old.attempts {
        a.accounting = None;
    }
    assert_eq!(accounting_rule(&old).verdict, Verdict::Pass);
    let mut run = old.clone();
    run.attempts[5].harness_turns = None;
    run.attempts[5].harness_tokens = None;
    let r = accounting_rule(&run);
    assert_eq!(r.verdict, Verdict::Fail);
    assert!(r.reason.unwrap().contains("missing or unreadable"));
    let mut run = old.clone();
    for a in &mut run.attempts {
        a.metrics_declared = Some(false);
        a.harness_turns = None;
        a.harness_tokens = None;
    }
    let r = accounting_rule(&run);
    assert_eq!(r.verdict, Verdict::Fail);
    assert!(r.reason.unwrap().contains("not cross-checked"));
    // An infra fault never reached the cross-check: nothing to hold against it.
    let mut run = base.clone();
    run.attempts[5].outcome = Some(Outcome::InfraFault);
    run.attempts[5].infra_fault = Some(FaultCode::ContainerRuntimeFailure);
    run.attempts[5].accounting = None;
    run.attempts[5].harness_turns = None;
    assert!(
        !accounting_rule(&run)
            .reason
            .unwrap_or_default()
            .contains(&run.attempts[5].slot)
    );
}

/// Every candidate attempt a zero-turn contract violation: the report flags it per arm and in
/// its verdict line in every format, and never reads "every check passed" — even with no gate
/// that looks at outcomes.
#[test]
fn a_run_of_zero_turn_contract_violations_is_flagged_next_to_the_verdict() {
    let mut run = run_data(UPLIFT);
    // Keep only a gate that cannot see outcomes, so the verdict alone would read "allowed".
    run.gates.retain(|g| g.suite.is_none());
    let clean = build_report(&run).unwrap();
    assert!(clean.anomalies.is_empty(), "{:?}", clean.anomalies);
    for a in run.attempts.iter_mut().filter(|a| a.arm == "cand") {
        a.outcome = Some(Outcome::ContractViolation);
        a.model_turns = 0;
        a.tokens = TokenCounts::default();
        a.harness_turns = Some(0);
        a.harness_tokens = Some(0);
        a.spend_usd = 0.0;
    }
    let report = build_report(&run).unwrap();
    let cand = report.accounting.iter().find(|a| a.arm == "cand").unwrap();
    assert_eq!(cand.outcomes.get("contract_violation"), Some(&12));
    assert_eq!(cand.outcomes.get("completed"), None);
    assert_eq!(cand.zero_turn_attempts, 12);
    assert!(
        cand.anomalies
            .iter()
            .any(|x| x.contains("12 of 12 attempts made no model call"))
    );
    assert!(
        cand.anomalies
            .iter()
            .any(|x| x.contains("contract violation"))
    );
    let base = report.accounting.iter().find(|a| a.arm == "base").unwrap();
    assert!(base.anomalies.is_empty(), "{:?}", base.anomalies);
    // 12 statistical attempts and the infrastructure slot's, 0.01 USD each.
    assert_eq!(base.outcomes.get("completed"), Some(&13));
    assert!((base.spend_usd - 0.13).abs() < 1e-9, "{}", base.spend_usd);
    assert!(
        report.verdict.contains("anomalies flagged"),
        "{}",
        report.verdict
    );
    for f in [Format::Text, Format::Md, Format::Html, Format::Json] {
        let body = render(&report, f).unwrap();
        assert!(body.contains("anomalies flagged"), "{f:?}");
        assert!(body.contains("made no model call"), "{f:?}");
        assert!(body.contains("contract_violation"), "{f:?}");
        assert!(!body.contains("every check passed"), "{f:?}");
    }
}

/// Without a preregistered key the verdict line says the evidence is unsigned, in every format.
#[test]
fn unsigned_evidence_is_said_in_the_verdict_line() {
    let signed = build_report(&run_data(UPLIFT)).unwrap();
    assert!(
        signed.verdict.contains("evidence signed"),
        "{}",
        signed.verdict
    );
    assert!(signed.evidence.as_ref().unwrap().signed);
    assert!(signed.anomalies.is_empty(), "{:?}", signed.anomalies);
    // Signed, but an unfinished run's tail is not covered yet: flagged, not hidden.
    let mut partly = run_data(UPLIFT);
    partly.signed_evidence.as_mut().unwrap().unsigned_from = Some(40);
    let r = build_report(&partly).unwrap();
    assert!(
        r.anomalies.iter().any(|a| a.contains("from seq 40 on")),
        "{:?}",
        r.anomalies
    );
    assert!(r.verdict.contains("evidence signed") && r.verdict.contains("1 anomaly flagged"));
    // …and unsigned evidence never allows a release.
    assert!(!r.release_allowed);
    assert!(
        r.reasons.iter().any(|x| x.contains("partly unsigned")),
        "{:?}",
        r.reasons
    );
    assert!(signed.release_allowed, "{:?}", signed.reasons);
    let mut run = run_data(UPLIFT);
    run.signed_evidence = None;
    let report = build_report(&run).unwrap();
    assert!(!report.evidence.as_ref().unwrap().signed);
    assert!(
        report
            .anomalies
            .iter()
            .any(|a| a.contains("evidence unsigned"))
    );
    for f in [Format::Text, Format::Md, Format::Html, Format::Json] {
        let body = render(&report, f).unwrap();
        let first = body
            .lines()
            .find(|l| l.contains("RELEASE"))
            .unwrap_or_else(|| panic!("{f:?}: no verdict line"));
        assert!(first.contains("evidence UNSIGNED"), "{f:?}: {first}");
    }
}

/// Unsigned evidence (no preregistered or named key verified it) never allows a release unless
/// the caller accepts it with `--allow-unsigned`, which the verdict line then says.
#[test]
fn unsigned_evidence_allows_a_release_only_when_accepted_and_the_verdict_says_so() {
    let mut run = run_data(UPLIFT);
    run.gates.push(integrity_gate());
    run.signed_evidence = None;
    let (ok, reasons, code) = reasons_of(&run);
    assert!(!ok);
    assert_eq!(code, 1);
    assert!(
        reasons.iter().any(|r| r.contains("unsigned")),
        "{reasons:?}"
    );
    run.allow_unsigned = true;
    let r = build_report(&run).unwrap();
    assert!(r.release_allowed, "{:?}", r.reasons);
    assert_eq!(r.exit_status(), 0);
    assert!(r.verdict.starts_with("RELEASE ALLOWED"), "{}", r.verdict);
    assert!(
        r.verdict
            .contains("UNSIGNED (accepted by --allow-unsigned)"),
        "{}",
        r.verdict
    );
}

/// A release needs the upstream the protocol preregisters, in every session: none preregistered
/// (data from before, or a protocol without `[upstream]`), or one session against another
/// server — a scripted one on loopback — is refused naming both, whatever the signature says.
#[test]
fn only_the_preregistered_upstream_in_every_session_allows_a_release() {
    let mut run = run_data(UPLIFT);
    run.gates.push(integrity_gate());
    assert!(build_report(&run).unwrap().release_allowed);
    let shown = serde_json::to_value(build_report(&run).unwrap()).unwrap();
    assert_eq!(shown["evidence"]["upstream"], "https://api.example");

    let mut none = run.clone();
    none.upstream = UpstreamEvidence::default();
    let (ok, reasons, code) = reasons_of(&none);
    assert!(!ok);
    assert_eq!(code, 1);
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("preregisters no upstream")),
        "{reasons:?}"
    );

    let mut other = run.clone();
    other
        .upstream
        .sessions
        .push("http://127.0.0.1:40123".into());
    let (ok, reasons, _) = reasons_of(&other);
    assert!(!ok);
    assert!(
        reasons.iter().any(
            |r| r.contains("session 2 ran against http://127.0.0.1:40123")
                && r.contains("https://api.example")
        ),
        "{reasons:?}"
    );

    // Run data without the field (older tools) reads, and is not a release.
    let mut v = serde_json::to_value(&run).unwrap();
    v.as_object_mut().unwrap().remove("upstream");
    let old: RunData = serde_json::from_value(v).unwrap();
    assert!(!build_report(&old).unwrap().release_allowed);
}

/// Report JSON of schema `/1` and run data without the new fields still read.
#[test]
fn older_report_json_and_run_data_still_read() {
    let report = build_report(&run_data(UPLIFT)).unwrap();
    assert_eq!(report.schema, REPORT_SCHEMA);
    let mut v = serde_json::to_value(&report).unwrap();
    let obj = v.as_object_mut().unwrap();
    for k in ["verdict", "anomalies", "evidence"] {
        assert!(obj.remove(k).is_some(), "{k}");
    }
    obj.insert("schema".into(), "eval.report/1".into());
    for a in obj["accounting"].as_array_mut().unwrap() {
        let a = a.as_object_mut().unwrap();
        for k in [
            "outcomes",
            "spend_usd",
            "zero_turn_attempts",
            "accounting_unchecked",
            "anomalies",
        ] {
            assert!(a.remove(k).is_some(), "{k}");
        }
    }
    let old = Report::from_json(&serde_json::to_vec(&v).unwrap()).unwrap();
    assert_eq!(old.release_allowed, report.release_allowed);
    assert!(old.anomalies.is_empty() && old.evidence.is_none());
    // The verdict line of an old report is derived, and says it was not shown to be signed.
    assert!(
        old.verdict_line().contains("UNSIGNED"),
        "{}",
        old.verdict_line()
    );
    obj_schema(&mut v, "eval.report/99");
    let err = Report::from_json(&serde_json::to_vec(&v).unwrap()).unwrap_err();
    assert!(err.to_string().contains("eval.report/99"), "{err}");

    let mut data = serde_json::to_value(run_data(UPLIFT)).unwrap();
    let d = data.as_object_mut().unwrap();
    d.remove("signed_evidence");
    d.remove("artifacts_verified");
    for a in d["attempts"].as_array_mut().unwrap() {
        let a = a.as_object_mut().unwrap();
        a.remove("accounting");
        a.remove("metrics_declared");
        a.remove("spend_usd");
    }
    let old: RunData = serde_json::from_value(data).unwrap();
    assert!(old.signed_evidence.is_none());
    let r = build_report(&old).unwrap();
    assert!(r.verdict.contains("UNSIGNED"), "{}", r.verdict);
}

fn obj_schema(v: &mut serde_json::Value, schema: &str) {
    v["schema"] = schema.into();
}

/// Every built-in metric evaluates from the attempt's accounting when no grader emitted it: the
/// one list in eval-core is what evidence reads (validation's side:
/// `freeze::a_gate_on_each_built_in_metric_is_accepted`).
#[test]
fn a_gate_on_each_built_in_metric_is_evaluated_from_the_accounting() {
    let mut run = run_data(UPLIFT);
    for a in &mut run.attempts {
        a.metrics.retain(|k, _| k == "score");
        if a.arm == "cand" {
            a.oracle_calls = 3;
        }
    }
    let cand = run.attempts.iter().find(|a| a.arm == "cand").unwrap();
    let expected = |m: &str| match m {
        "model_turns" => cand.model_turns as f64,
        "tokens" => cand.tokens.total() as f64,
        "input_tokens" => cand.tokens.input as f64,
        "output_tokens" => cand.tokens.output as f64,
        "duration_seconds" => cand.duration_seconds,
        "harness_seconds" => cand.duration_seconds - cand.upstream_wait_seconds.unwrap_or(0.0),
        "oracle_calls" | "clarification_questions" => 3.0,
        other => panic!("built-in metric {other:?} has no expected value in this test"),
    };
    for m in eval_core::budget::BUILTIN_METRICS {
        let mut r = rule("r", Statistic::ArmMean, Some(m), Op::Ge, Some(0.0));
        r.arm = Some(ArmRole::Candidate);
        let res = one(&run, r);
        assert_eq!(res.verdict, Verdict::Pass, "{m}: {:?}", res.reason);
        assert_eq!(res.value, Some(expected(m)), "{m}");
    }
}

#[test]
fn the_report_names_the_evidence_that_unlocked_the_run() {
    let mut run = run_data(UPLIFT);
    let report = build_report(&run).unwrap();
    assert!(report.unlocked_by.is_empty());
    // Without preconditions the JSON has no `unlocked_by` member (older reports keep their form).
    assert!(
        !render(&report, Format::Json)
            .unwrap()
            .contains("unlocked_by")
    );
    let pre = PreconditionEvidence {
        protocol: "router".into(),
        identity: "sha256:1111111111111111111111111111111111111111111111111111111111111111".into(),
        report_seq: 7,
        report_entry_hash:
            "sha256:2222222222222222222222222222222222222222222222222222222222222222".into(),
        report_digest: None,
    };
    run.preconditions = vec![pre.clone()];
    let report = build_report(&run).unwrap();
    assert_eq!(report.unlocked_by, vec![pre.clone()]);
    for f in [Format::Text, Format::Md, Format::Html, Format::Json] {
        let s = render(&report, f).unwrap();
        assert!(s.contains(&pre.identity), "{f:?}: {s}");
        assert!(s.contains(&pre.report_entry_hash), "{f:?}: {s}");
    }
    // It is part of what the report's digest covers.
    let a = report_entry_payload(&build_report(&run_data(UPLIFT)).unwrap()).unwrap();
    let b = report_entry_payload(&report).unwrap();
    assert_ne!(a["report_digest"], b["report_digest"]);
}

/// The exact binomial interval agrees with scipy's `beta.ppf` (values computed with
/// scipy 1.x: `beta.ppf(0.025, k, n-k+1)`, `beta.ppf(0.975, k+1, n-k)`).
#[test]
fn clopper_pearson_matches_scipy() {
    use eval_evidence::gates::clopper_pearson;
    let cases = [
        (13, 40, 0.18572896676334982, 0.49129487547844847),
        (51, 80, 0.5223872787351915, 0.742105104628382),
        (0, 40, 0.0, 0.08809730287880237),
        (24, 24, 0.8575264022774743, 1.0),
        (1, 3, 0.008403758659612636, 0.9057006759497539),
    ];
    for (k, n, lo, hi) in cases {
        let b = clopper_pearson(k, n, 0.95).unwrap();
        assert!((b.lower - lo).abs() < 1e-9, "{k}/{n}: {b:?}");
        assert!((b.upper - hi).abs() < 1e-9, "{k}/{n}: {b:?}");
    }
    assert!(clopper_pearson(1, 0, 0.95).is_none());
    assert!(clopper_pearson(2, 1, 0.95).is_none());
}

/// `arm_rate` / `arm_count` read one arm's 0/1 metric over the suite's attempts, compare the
/// point value with the threshold, and carry the exact interval beside it; a metric that is not
/// 0/1 is not computable.
#[test]
fn rate_and_count_gates_carry_the_exact_interval() {
    let mut run = run_data(UPLIFT);
    let mut k = 0;
    for a in run.attempts.iter_mut() {
        let routed =
            if a.arm == "cand" && a.suite == "s" && a.phase == eval_core::phase::Phase::Statistical
            {
                k += 1;
                if k <= 5 { 1.0 } else { 0.0 }
            } else {
                0.0
            };
        a.metrics.insert("routed".into(), routed);
    }
    let r = |s: Statistic, op: Op, t: f64| {
        let mut r = rule("r", s, Some("routed"), op, Some(t));
        r.arm = Some(ArmRole::Candidate);
        one(&run, r)
    };
    let rate = r(Statistic::ArmRate, Op::Le, 0.05);
    assert_eq!(rate.value, Some(5.0 / 12.0));
    assert_eq!(rate.verdict, Verdict::Fail);
    let b = rate.binomial.unwrap();
    assert_eq!((b.successes, b.trials), (5, 12));
    assert!((b.lower - 0.15165222980843013).abs() < 1e-9, "{b:?}");
    assert!((b.upper - 0.7233303143178942).abs() < 1e-9, "{b:?}");
    let count = r(Statistic::ArmCount, Op::Eq, 5.0);
    assert_eq!(count.value, Some(5.0));
    assert_eq!(count.verdict, Verdict::Pass);
    assert!(count.binomial.is_some());
    // The report shows the interval beside the value.
    run.gates = vec![Gate {
        id: "router".into(),
        suite: Some("s".into()),
        description: None,
        rules: vec![{
            let mut x = rule(
                "false_activation",
                Statistic::ArmRate,
                Some("routed"),
                Op::Le,
                Some(0.05),
            );
            x.arm = Some(ArmRole::Candidate);
            x
        }],
    }];
    let report = build_report(&run).unwrap();
    let text = render(&report, Format::Text).unwrap();
    assert!(
        text.contains("5/12; exact 95% interval of the rate [0.1517, 0.7233]"),
        "{text}"
    );
    // Not a 0/1 metric: not computable, with the reason.
    let mut x = rule("r", Statistic::ArmRate, Some("score"), Op::Le, Some(0.05));
    x.arm = Some(ArmRole::Candidate);
    let res = one(&run, x);
    assert_eq!(res.verdict, Verdict::NotComputable);
    assert!(res.reason.unwrap().contains("0/1"));
}
