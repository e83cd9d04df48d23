//! `eval run --upstream model-free`: the built-in upstream answers every request with a plain
//! stop, and its evidence is marked model-free in the ledger, in status and in every report
//! format; for a protocol that does not declare `model_free = true` (the demo) it passes no gate.

use crate::support::*;

#[test]
fn a_model_free_run_is_marked_everywhere_and_releases_no_other_protocol() {
    if !docker_available() {
        return;
    }
    static_binaries();
    let (_tmp, dir) = small_demo_project();
    let (_identity, _sweep) = freeze_demo(&dir);
    let run = eval(
        &dir,
        &["run", "--matrix", "demo", "--upstream", "model-free"],
    );
    // The fixture agent wants an edit and ends in `agent_error` on a plain stop, so the demo's
    // infrastructure slots stop the run (exit 2): what this test reads is how the evidence the
    // session did record is marked, not how the fixture agent copes.
    let run_text = text(&run);
    assert!(
        run.status.success() || run.status.code() == Some(2),
        "{run_text}"
    );

    let ledger = dir.join("runs/demo/ledger.sqlite");
    let es = entries(&ledger);
    let started = payloads(&es, "run_started");
    assert_eq!(started.len(), 1);
    assert_eq!(started[0]["upstream"]["kind"], "model-free");
    assert_eq!(started[0]["model_free_evidence"], true);
    assert_eq!(started[0]["fixture_evidence"], false);
    // The upstream's own count of its plain stops equals the agent calls the proxy forwarded.
    let answered = payloads(&es, "model_call")
        .iter()
        .filter(|c| c["role"] == "agent" && c["status"] == 200)
        .count() as u64;
    assert!(answered > 0, "the agents reached the upstream");
    let tally = payloads(&es, "model_free_upstream");
    assert_eq!(tally.len(), 1);
    assert_eq!(tally[0]["calls"], answered);
    assert!(payloads(&es, "fixture_upstream").is_empty());

    let status = eval(&dir, &["status", "--matrix", "demo"]);
    assert!(
        text(&status).contains("MODEL-FREE upstream"),
        "{}",
        text(&status)
    );
    let status = eval(&dir, &["status", "--matrix", "demo", "--json"]);
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(status["model_free_evidence"], true);

    let report = eval(&dir, &["report", "--matrix", "demo", "--allow-unsigned"]);
    let report_text = text(&report);
    assert_eq!(report.status.code(), Some(1), "{report_text}");
    assert!(report_text.contains("MODEL-FREE EVIDENCE"), "{report_text}");
    assert!(
        report_text.contains("does not declare model_free = true"),
        "{report_text}"
    );
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("runs/demo/report.json")).unwrap()).unwrap();
    assert_eq!(json["checks"]["model_free_upstream"], true);
    assert_eq!(json["release_allowed"], false);
    for format in ["md", "html"] {
        let out = dir.join(format!("report.{format}"));
        let o = eval(
            &dir,
            &[
                "report",
                "--matrix",
                "demo",
                "--format",
                format,
                "--out",
                out.to_str().unwrap(),
            ],
        );
        assert_eq!(o.status.code(), Some(1), "{}", text(&o));
        let s = std::fs::read_to_string(&out).unwrap();
        assert!(s.contains("MODEL-FREE EVIDENCE"), "{format}: {s}");
    }
}
