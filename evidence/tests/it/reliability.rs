//! pass@k, pass^k and flipping tasks in the report match a direct count over every k-subset of
//! a hand-made run's repetitions.

use crate::support::*;
use eval_core::outcome::Outcome;
use eval_core::phase::Phase;
use eval_evidence::report::*;

/// Pass (100) / fail (0) per task (t1..t6) and repetition (r1..r3), for arm `cand`; `base` gets
/// the complement's reverse so the two arms differ.
const CAND: [[bool; 3]; 6] = [
    [true, true, true],
    [true, false, true],
    [false, false, false],
    [false, true, false],
    [true, true, false],
    [false, false, true],
];

fn hand_made() -> RunData {
    let mut run = run_data([0.0; 6]);
    let extra: Vec<SlotData> = run
        .slots
        .iter()
        .filter(|s| s.phase == Phase::Statistical && s.rep == 1)
        .map(|s| SlotData {
            id: s.id.replace("-r1", "-r3"),
            rep: 3,
            ..s.clone()
        })
        .collect();
    run.slots.extend(extra.iter().cloned());
    run.attempts.extend(
        extra
            .iter()
            .map(|s| attempt(s, 1, Some(Outcome::Completed), 0.0)),
    );
    run.suites[0].repetitions = 3;
    for a in run
        .attempts
        .iter_mut()
        .filter(|a| a.phase == Phase::Statistical)
    {
        let ti = TASKS.iter().position(|t| *t == a.task).unwrap();
        let r = (a.rep - 1) as usize;
        let pass = match a.arm.as_str() {
            "cand" => CAND[ti][r],
            "base" => !CAND[5 - ti][2 - r],
            _ => ti % 2 == 0,
        };
        a.metrics
            .insert("score".into(), if pass { 100.0 } else { 0.0 });
    }
    run
}

/// The share of k-subsets of the repetitions with any pass (pass@k) / all passes (pass^k),
/// averaged over tasks: the definition, counted.
fn direct(rows: &[Vec<bool>], k: usize, all: bool) -> f64 {
    let mut total = 0.0;
    for reps in rows {
        let n = reps.len();
        let (mut hit, mut subsets) = (0u32, 0u32);
        for mask in 0u32..(1 << n) {
            if mask.count_ones() as usize != k {
                continue;
            }
            subsets += 1;
            let chosen: Vec<bool> = (0..n)
                .filter(|i| mask & (1 << i) != 0)
                .map(|i| reps[i])
                .collect();
            let ok = if all {
                chosen.iter().all(|p| *p)
            } else {
                chosen.iter().any(|p| *p)
            };
            hit += u32::from(ok);
        }
        total += f64::from(hit) / f64::from(subsets);
    }
    total / rows.len() as f64
}

#[test]
fn pass_at_k_and_pass_hat_k_match_a_direct_count_over_every_subset_of_repetitions() {
    let run = hand_made();
    let report = build_report(&run).unwrap();
    let s = &report.suites[0];
    assert_eq!(s.pass_mark, Some(100.0));
    let arms: Vec<&str> = s.reliability.iter().map(|r| r.arm.as_str()).collect();
    assert_eq!(arms, ["base", "cand", "other"]);
    let cand_rows: Vec<Vec<bool>> = CAND.iter().map(|r| r.to_vec()).collect();
    let base_rows: Vec<Vec<bool>> = (0..6)
        .map(|ti| (0..3).map(|r| !CAND[5 - ti][2 - r]).collect())
        .collect();
    for (arm, rows) in [("cand", &cand_rows), ("base", &base_rows)] {
        let rel = s.reliability.iter().find(|r| r.arm == arm).unwrap();
        assert_eq!(rel.tasks, 6);
        assert_eq!(rel.repetitions, 3);
        assert_eq!(rel.pass_at_k.len(), 3);
        for k in 1..=3 {
            let at = direct(rows, k, false);
            let hat = direct(rows, k, true);
            assert!(
                (rel.pass_at_k[k - 1].value - at).abs() < 1e-12,
                "{arm} pass@{k}"
            );
            assert!(
                (rel.pass_hat_k[k - 1].value - hat).abs() < 1e-12,
                "{arm} pass^{k}"
            );
        }
        let flips = rows
            .iter()
            .filter(|r| r.iter().any(|p| *p) && !r.iter().all(|p| *p))
            .count();
        assert_eq!(rel.flipping_tasks, flips);
        assert_eq!(rel.flip_share, Some(flips as f64 / 6.0));
    }
    // cand: pass@1 = 9/18, pass^3 = 1/6, four of six tasks flip.
    let cand = &s.reliability[1];
    assert!((cand.pass_at_k[0].value - 9.0 / 18.0).abs() < 1e-12);
    assert!((cand.pass_hat_k[2].value - 1.0 / 6.0).abs() < 1e-12);
    assert_eq!(cand.flipping_tasks, 4);
}

#[test]
fn an_unresolved_repetition_is_left_out_and_k_stops_at_the_fewest_repetitions() {
    let mut run = hand_made();
    // t2/cand r3 has started but not ended: t2 has two repetitions, so k runs to 2.
    let a = run
        .attempts
        .iter_mut()
        .find(|a| a.slot == "stat-s-t2-cand-r3")
        .unwrap();
    a.outcome = None;
    let report = build_report(&run).unwrap();
    let cand = report.suites[0]
        .reliability
        .iter()
        .find(|r| r.arm == "cand")
        .unwrap();
    assert_eq!(cand.repetitions, 2);
    assert_eq!(cand.trials, 17);
    // t2 now [pass, fail]: pass@2 = 1 for it, pass^1 = 1/2.
    let mut rows: Vec<Vec<bool>> = CAND.iter().map(|r| r.to_vec()).collect();
    rows[1].pop();
    for k in 1..=2 {
        assert!((cand.pass_at_k[k - 1].value - direct(&rows, k, false)).abs() < 1e-12);
        assert!((cand.pass_hat_k[k - 1].value - direct(&rows, k, true)).abs() < 1e-12);
    }
}

#[test]
fn a_declared_pass_mark_decides_what_passes() {
    let mut run = hand_made();
    // Every score is 0 or 100: a mark of 0 passes everything.
    run.suites[0].pass_mark = Some(0.0);
    let report = build_report(&run).unwrap();
    assert_eq!(report.suites[0].pass_mark, Some(0.0));
    let cand = &report.suites[0].reliability[1];
    assert_eq!(cand.passes, 18);
    assert_eq!(cand.pass_hat_k[2].value, 1.0);
    assert_eq!(cand.flipping_tasks, 0);
}

#[test]
fn every_report_format_shows_reliability() {
    let report = build_report(&hand_made()).unwrap();
    let text = render(&report, Format::Text).unwrap();
    assert!(
        text.contains("reliability (a repetition passes when score >= 100"),
        "{text}"
    );
    assert!(
        text.contains("cand: 6 tasks, 9/18 repetitions passed; pass@1 0.5"),
        "{text}"
    );
    let md = render(&report, Format::Md).unwrap();
    assert!(md.contains("| cand | 6 | pass@1 0.5, pass@2 0.7222, pass@3 0.8333 | pass^1 0.5, pass^2 0.2778, pass^3 0.1667 | 4 of 6 repeated tasks (0.6667) |"), "{md}");
    let html = render(&report, Format::Html).unwrap();
    assert!(html.contains("<table class=\"reliability\">"));
    assert!(html.contains("pass^3 0.1667"));
    let json: serde_json::Value =
        serde_json::from_str(&render(&report, Format::Json).unwrap()).unwrap();
    assert_eq!(json["suites"][0]["reliability"][1]["pass_hat_k"][2]["k"], 3);
    assert_eq!(json["suites"][0]["reliability"][1]["flipping_tasks"], 4);
}
