//! Smoke runs: `eval run --smoke` runs a part of the schedule into its own run directory,
//! recorded as a smoke run; its report is never evidence and the real run starts from nothing.

use crate::support::*;

#[test]
fn a_smoke_run_is_its_own_and_never_evidence() {
    if !docker_available() {
        return;
    }
    static_binaries();
    let (_tmp, dir) = small_demo_project();
    let (_identity, _sweep) = freeze_demo(&dir);

    // Names the matrix does not have are a usage error naming them; nothing is created.
    let o = fixture_run(
        &dir,
        &["--smoke", "--tasks", "demo-nope", "--arms", "nobody"],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("demo-nope") && text(&o).contains("nobody"),
        "{}",
        text(&o)
    );
    assert!(!dir.join("runs/demo.smoke/ledger.sqlite").exists());

    let o = fixture_run(
        &dir,
        &[
            "--smoke",
            "--tasks",
            "demo-simple-1",
            "--arms",
            "native",
            "--limit",
            "1",
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("smoke run"), "{}", text(&o));
    let smoke = dir.join("runs/demo.smoke/ledger.sqlite");
    let all = entries(&smoke);
    assert_eq!(all[0].kind, "smoke_run", "the ledger says what it is first");
    let started = &payloads(&all, "run_started")[0];
    let stat: Vec<&serde_json::Value> = started["slots"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["phase"] == "statistical")
        .collect();
    assert_eq!(stat.len(), 1, "{started}");
    assert_eq!(stat[0]["task"], "demo-simple-1");
    assert_eq!(stat[0]["arm"], "native");
    let outcomes = payloads(&all, "attempt_outcome");
    assert!(outcomes.iter().any(|o| o["slot"] == stat[0]["id"]));
    // The real run's directory was never touched.
    assert!(!dir.join("runs/demo/ledger.sqlite").exists());

    // Its report is never evidence: exit 1 saying so, nothing written or recorded.
    for args in [
        vec!["report", "--matrix", "demo.smoke"],
        vec!["report", "--matrix", "demo.smoke", "--format", "json"],
    ] {
        let o = eval(&dir, &args);
        assert_eq!(o.status.code(), Some(1), "{}", text(&o));
        assert!(text(&o).contains("smoke run"), "{}", text(&o));
    }
    assert!(!dir.join("runs/demo.smoke/report.json").exists());
    assert!(payloads(&entries(&smoke), "report").is_empty());
    let o = eval(&dir, &["status", "--matrix", "demo.smoke"]);
    assert!(text(&o).contains("SMOKE"), "{}", text(&o));

    // The real run counts nothing of it: the full schedule, each slot from attempt #1, its
    // budget seeded from its own (empty) ledger, and its report is the fixture's, not a smoke's.
    let o = fixture_run(&dir, &[]);
    assert!(o.status.success(), "{}", text(&o));
    let real = entries(&dir.join("runs/demo/ledger.sqlite"));
    assert!(real.iter().all(|e| e.kind != "smoke_run"));
    let real_started = &payloads(&real, "run_started")[0];
    assert!(
        real_started["slots"].as_array().unwrap().len()
            > started["slots"].as_array().unwrap().len()
    );
    for a in payloads(&real, "attempt_started") {
        assert_eq!(a["number"], 1, "{a}");
    }
    let o = eval(&dir, &["report", "--matrix", "demo"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(!text(&o).contains("smoke run"), "{}", text(&o));
    assert!(dir.join("runs/demo/report.json").exists());
}

/// A real run and a smoke run of one identity never run side by side (each session sweeps the
/// identity's containers as stale): each is refused, exit 2 naming the other's ledger, while the
/// other's ledger writer is held — here by the test itself, so no race decides it — and nothing
/// is recorded.
#[test]
fn a_real_run_and_a_smoke_run_of_one_identity_refuse_to_run_side_by_side() {
    use eval_evidence::ledger::LedgerWriter;
    let (_tmp, dir) = small_demo_project();
    let o = eval(&dir, &["freeze", "--protocol", "demo"]);
    assert!(o.status.success(), "{}", text(&o));

    // A smoke run is going: the real run is refused.
    let smoke = dir.join("runs/demo.smoke/ledger.sqlite");
    std::fs::create_dir_all(smoke.parent().unwrap()).unwrap();
    let held = LedgerWriter::open(&smoke).unwrap();
    let o = fixture_run(&dir, &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("smoke run is going") && text(&o).contains("demo.smoke"),
        "{}",
        text(&o)
    );
    assert!(!dir.join("runs/demo/ledger.sqlite").exists());
    held.close();

    // The real run is going: the smoke run is refused.
    let real = dir.join("runs/demo/ledger.sqlite");
    std::fs::create_dir_all(real.parent().unwrap()).unwrap();
    let held = LedgerWriter::open(&real).unwrap();
    let o = fixture_run(&dir, &["--smoke", "--limit", "1"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("a run is going") && text(&o).contains("runs/demo/ledger.sqlite"),
        "{}",
        text(&o)
    );
    assert!(entries(&smoke).is_empty(), "the smoke run recorded nothing");
    held.close();
}
