//! One test per documented exit status of the real `eval` binary (ARCHITECTURE.md, "Errors and
//! exit statuses"): 0 success, 1 gate not passed, 2 usage or input error, 3 integrity failure,
//! and the statuses of a run whose environment fails (2) or whose evidence fails (3).
//!
//! The tests of this behaviour that need a Docker engine; the rest are in `tests/it/exit_status.rs`.

use crate::support::*;

/// A whole run of the small demo project: an unreachable engine is the environment (2, not
/// 3); a finished fixture run's report fails its gate (1: fixture evidence never allows a
/// release); the same report over a tampered run ledger is an integrity failure (3).
#[test]
fn run_and_report_statuses() {
    if !docker_available() {
        return;
    }
    static_binaries();
    let (_tmp, dir) = small_demo_project();
    let o = eval(&dir, &["freeze", "--protocol", "demo"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let _sweep = Sweep(format!("eval.identity={}", identity_of(&dir)));
    let run = ["run", "--matrix", "demo", "--upstream", "fixture"];

    let no_engine = dir.join("no-engine.sock");
    let docker_host = format!("unix://{}", no_engine.display());
    let o = eval_env(&dir, &run, &[("DOCKER_HOST", &docker_host)]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("no Docker engine answers"),
        "{}",
        text(&o)
    );

    let o = eval(&dir, &run);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));

    let report = ["report", "--matrix", "demo", "--format", "json"];
    let o = eval(&dir, &report);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["release_allowed"], false, "{v}");

    // The site says what report.json says, with the same exit status.
    let site = [
        "report", "--matrix", "demo", "--format", "site", "--out", "site",
    ];
    let o = eval(&dir, &site);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let index = std::fs::read_to_string(dir.join("site/index.html")).unwrap();
    assert!(index.contains("data-release-allowed=\"false\""), "{index}");
    let recorded: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("runs/demo/report.json")).unwrap()).unwrap();
    assert!(
        index.contains(recorded["verdict"].as_str().unwrap()),
        "{index}"
    );
    let pages = std::fs::read_dir(dir.join("site/attempts"))
        .unwrap()
        .count();
    let attempts = payloads(
        &entries(&dir.join("runs/demo/ledger.sqlite")),
        "attempt_started",
    )
    .len();
    assert_eq!(pages, attempts, "one page per attempt");

    let ledger = dir.join("runs/demo/ledger.sqlite");
    let c = rusqlite::Connection::open(&ledger).unwrap();
    let changed = c
        .execute_batch(
            "DROP TRIGGER entries_no_update;
             UPDATE entries SET payload = CAST(replace(CAST(payload AS TEXT), '\"outcome\":\"', '\"outcome\":\"x') AS BLOB)
             WHERE seq = (SELECT MIN(seq) FROM entries WHERE kind = 'attempt_outcome');",
        )
        .map(|()| c.changes());
    assert_eq!(changed.unwrap(), 1);
    drop(c);
    let o = eval(&dir, &report);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(text(&o).contains("hash mismatch"), "{}", text(&o));
}
