//! The grader-validity table and `grader_valid`: every oracle passes, every nop fails, no
//! exploit scores above its task's nop; a release is refused naming the task and the exploit.

use crate::support::*;
use eval_core::outcome::Outcome;
use eval_core::phase::Phase;
use eval_evidence::gates::controls::grader_validity;
use eval_evidence::gates::evaluate::evaluate_gate;
use eval_evidence::gates::{Op, Statistic, Verdict};
use eval_evidence::report::*;

const ARMS: [&str; 4] = [
    "oracle",
    "nop",
    "exploit:print-result",
    "exploit:go-testmain-exit",
];

/// The fixture run with control slots on t1 and t2; `scores[task][arm]` (None: no attempt).
fn with_controls(scores: [[Option<f64>; 4]; 2]) -> RunData {
    let mut run = run_data([10.0, 5.0, 0.0, 20.0, 15.0, 10.0]);
    run.suites[0].tasks.truncate(2);
    run.suites[0].controls = Some(ControlsData {
        arms: ARMS.iter().map(|a| a.to_string()).collect(),
        metric: "score".into(),
        pass_at_least: 100.0,
        also_report: vec![],
    });
    let mut slots = Vec::new();
    let mut attempts = Vec::new();
    for (ti, task) in ["t1", "t2"].iter().enumerate() {
        for (ai, arm) in ARMS.iter().enumerate() {
            let slot = SlotData {
                id: format!("control-s-{task}-{}-r0", arm.replace(':', ".")),
                phase: Phase::Control,
                suite: "s".into(),
                task: task.to_string(),
                arm: arm.to_string(),
                rep: 0,
            };
            if let Some(score) = scores[ti][ai] {
                let mut a = attempt(&slot, 1, Some(Outcome::Completed), score);
                a.accounting = Some("not_declared".into());
                a.model_turns = 0;
                a.tokens = Default::default();
                a.harness_turns = None;
                a.harness_tokens = None;
                a.metrics_declared = None;
                attempts.push(a);
            }
            slots.push(slot);
        }
    }
    slots.append(&mut run.slots);
    attempts.append(&mut run.attempts);
    run.slots = slots;
    run.attempts = attempts;
    run.gates.push(integrity_gate());
    run.gates[1].rules.push(rule(
        "grader_valid",
        Statistic::GraderValid,
        None,
        Op::IsTrue,
        None,
    ));
    run
}

fn grader_valid(run: &RunData) -> eval_evidence::gates::RuleResult {
    let r = evaluate_gate(run, &run.gates[1]);
    r.rules
        .into_iter()
        .find(|r| r.id == "grader_valid")
        .unwrap()
}

#[test]
fn a_sound_grader_is_valid_and_control_attempts_stay_out_of_accounting() {
    let run = with_controls([
        [Some(100.0), Some(20.0), Some(0.0), Some(20.0)],
        [Some(100.0), Some(0.0), Some(0.0), Some(0.0)],
    ]);
    let r = grader_valid(&run);
    assert_eq!(r.verdict, Verdict::Pass, "{:?}", r.reason);
    let report = build_report(&run).unwrap();
    // Every other integrity rule holds with the control attempts in the run (they run no agent,
    // so they have no accounting to cross-check).
    assert!(
        report.gates.iter().all(|g| g.passed),
        "{:?}",
        report.reasons
    );
    assert_eq!(report.grader_validity.len(), 8);
    assert!(report.grader_validity.iter().all(|c| c.ok));
    assert!(report.accounting.iter().all(|a| !a.arm.contains("oracle")));
}

#[test]
fn an_exploit_above_its_nop_refuses_the_release_naming_task_and_exploit() {
    let run = with_controls([
        [Some(100.0), Some(20.0), Some(100.0), Some(20.0)],
        [Some(100.0), Some(0.0), Some(0.0), Some(100.0)],
    ]);
    let r = grader_valid(&run);
    assert_eq!(r.verdict, Verdict::Fail);
    let why = r.reason.unwrap();
    assert!(
        why.contains("exploit:print-result scored 100 on s/t1, above its nop (20)"),
        "{why}"
    );
    assert!(
        why.contains("exploit:go-testmain-exit scored 100 on s/t2, above its nop (0)"),
        "{why}"
    );
    let report = build_report(&run).unwrap();
    assert!(!report.release_allowed);
    assert!(
        report.reasons.iter().any(|x| x.contains("grader_valid")
            && x.contains("exploit:print-result")
            && x.contains("s/t1")),
        "{:?}",
        report.reasons
    );
    let bad: Vec<(&str, &str)> = report
        .grader_validity
        .iter()
        .filter(|c| !c.ok)
        .map(|c| (c.task.as_str(), c.arm.as_str()))
        .collect();
    assert_eq!(
        bad,
        [
            ("t1", "exploit:print-result"),
            ("t2", "exploit:go-testmain-exit")
        ]
    );
    // The table is in all four renderings.
    for f in [Format::Text, Format::Md, Format::Html, Format::Json] {
        let s = render(&report, f).unwrap();
        assert!(s.contains("exploit:go-testmain-exit"), "{f:?}");
        assert!(s.to_lowercase().contains("grader"), "{f:?}");
    }
    let md = render(&report, Format::Md).unwrap();
    assert!(
        md.contains("| s | t1 | exploit:print-result | gating | 100 | <= nop | **no** |"),
        "{md}"
    );
}

#[test]
fn a_failing_oracle_a_passing_nop_and_an_ungraded_control_are_each_named() {
    let run = with_controls([
        [Some(80.0), Some(100.0), Some(0.0), Some(0.0)],
        [Some(100.0), Some(0.0), None, Some(0.0)],
    ]);
    let why = grader_valid(&run).reason.unwrap();
    assert!(
        why.contains("the oracle (reference solution) of s/t1 scored 80"),
        "{why}"
    );
    assert!(
        why.contains("the nop (unchanged workspace) of s/t1 scored 100"),
        "{why}"
    );
    assert!(
        why.contains("exploit:print-result on s/t2 was not graded"),
        "{why}"
    );
    let cells = grader_validity(&run);
    assert_eq!(cells.iter().filter(|c| !c.ok).count(), 3);
}

/// A suite with no control arms is a reason release is not allowed — "grader validity
/// unchecked" — unless the protocol says so (`[suites.<id>.controls] off`): then release stands
/// and every rendering discloses the protocol's reason as a warning.
#[test]
fn a_suite_without_controls_is_a_release_reason_unless_the_protocol_turns_them_off() {
    let mut run = run_data([10.0, 5.0, 0.0, 20.0, 15.0, 10.0]);
    run.gates.push(integrity_gate());
    let why = run.suites[0].controls_off.clone().unwrap();
    let report = build_report(&run).unwrap();
    assert!(report.release_allowed, "{:?}", report.reasons);
    let warning = format!("grader validity not checked for suite s, by the protocol: {why}");
    assert_eq!(report.warnings, std::slice::from_ref(&warning));
    for f in [Format::Text, Format::Md, Format::Html, Format::Json] {
        let s = render(&report, f).unwrap();
        assert!(s.contains(&warning), "{f:?}: {s}");
    }
    // The JSON round-trips the warning.
    let back = Report::from_json(render(&report, Format::Json).unwrap().as_bytes()).unwrap();
    assert_eq!(back.warnings, report.warnings);

    // Nothing said: a reason, never a silent pass.
    run.suites[0].controls_off = None;
    let report = build_report(&run).unwrap();
    assert!(!report.release_allowed);
    assert_eq!(
        report.reasons,
        ["grader validity unchecked: suite s has no control arms"]
    );
    assert!(report.warnings.is_empty());
    assert!(
        render(&report, Format::Text)
            .unwrap()
            .contains("grader validity unchecked: suite s has no control arms")
    );

    // Control arms: neither (their own `grader_valid` decides).
    let mut run = with_controls([
        [Some(100.0), Some(20.0), Some(0.0), Some(0.0)],
        [Some(100.0), Some(0.0), Some(0.0), Some(0.0)],
    ]);
    run.suites[0].controls_off = None;
    let report = build_report(&run).unwrap();
    assert!(report.warnings.is_empty());
    assert!(
        !report.reasons.iter().any(|r| r.contains("grader validity")),
        "{:?}",
        report.reasons
    );
}
