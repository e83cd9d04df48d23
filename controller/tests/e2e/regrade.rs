//! `eval regrade`: a finished run's archived workspaces graded again by another grader, into a
//! ledger of its own chained to the run's head; the report shows it beside the preregistered
//! result and never changes the verdict or the exit status.

use crate::support::*;
use std::path::{Path, PathBuf};

/// A grader runtime that scores every workspace the same (0.25), unlike the demo's fixture
/// grader: the fixture runtime's definition with only its `[grader] command` changed.
fn constant_grader(dir: &Path) -> &'static str {
    let def = std::fs::read_to_string(dir.join("runtimes/fixture/runtime.toml")).unwrap();
    let start = def.find("[grader]").unwrap();
    let end = start + def[start..].find("\n]\n").unwrap() + 3;
    let grader = "[grader]\ncommand = [\"/bin/sh\", \"-c\", \"echo '{\\\"metrics\\\":{\\\"score\\\":0.25,\\\"checks_passed\\\":1,\\\"checks_total\\\":4,\\\"critical_missed\\\":0,\\\"regressions\\\":0}}' > {out}\"]\n";
    let new = format!("{}{grader}{}", &def[..start], &def[end..]);
    std::fs::create_dir_all(dir.join("runtimes/constant-grader")).unwrap();
    std::fs::write(dir.join("runtimes/constant-grader/runtime.toml"), new).unwrap();
    "runtimes/constant-grader/runtime.toml"
}

fn regrade_ledgers(dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir.join("runs/demo.regrade")) else {
        return vec![];
    };
    let mut v: Vec<PathBuf> = rd
        .flatten()
        .map(|e| e.path().join("ledger.sqlite"))
        .filter(|p| p.is_file())
        .collect();
    v.sort();
    v
}

fn json_report(dir: &Path) -> (Option<i32>, serde_json::Value) {
    let o = eval(dir, &["report", "--matrix", "demo", "--format", "json"]);
    let v = serde_json::from_slice(&o.stdout).unwrap_or_else(|_| panic!("{}", text(&o)));
    (o.status.code(), v)
}

#[test]
fn a_regrade_is_shown_beside_the_verdict_it_never_changes_and_refuses_what_it_cannot_trust() {
    if !docker_available() {
        return;
    }
    static_binaries();
    let (_tmp, dir) = small_demo_project();
    let (_identity, _sweep) = freeze_demo(&dir);
    let grader = constant_grader(&dir);
    let regrade = |extra: &[&str]| {
        let mut args = vec!["regrade", "--matrix", "demo", "--grader", grader];
        args.extend_from_slice(extra);
        eval(&dir, &args)
    };

    // No run yet, then an unfinished one (killed after its first outcome): refused, exit 2.
    let o = regrade(&[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let o = eval_env(
        &dir,
        &["run", "--matrix", "demo", "--upstream", "fixture"],
        &[("EVAL_TEST_CRASH_AT", "after:attempt_outcome")],
    );
    assert!(!o.status.success(), "{}", text(&o));
    let o = regrade(&[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("not finished"), "{}", text(&o));
    assert!(regrade_ledgers(&dir).is_empty());

    // The finished run and its preregistered report (the fixture's: exit 1).
    let o = fixture_run(&dir, &[]);
    assert!(o.status.success(), "{}", text(&o));
    let (code_before, before) = json_report(&dir);
    assert_eq!(code_before, Some(1));
    assert!(before.get("sensitivity").is_none(), "no regrade yet");

    // A task the run does not have, a grader that is not a runtime definition: exit 2.
    let o = regrade(&["--tasks", "demo-nope"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("demo-nope"), "{}", text(&o));
    let o = eval(
        &dir,
        &[
            "regrade",
            "--matrix",
            "demo",
            "--grader",
            "runtimes/none/runtime.toml",
        ],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));

    // The regrade of one task.
    let run_ledger = dir.join("runs/demo/ledger.sqlite");
    let head = entries(&run_ledger).last().cloned().unwrap();
    let o = regrade(&["--tasks", "demo-simple-1"]);
    assert!(o.status.success(), "{}", text(&o));
    let ledgers = regrade_ledgers(&dir);
    assert_eq!(ledgers.len(), 1);
    let all = entries(&ledgers[0]);
    assert_eq!(
        all[0].kind, "regrade_started",
        "the ledger says what it is first"
    );
    let started = &payloads(&all, "regrade_started")[0];
    assert_eq!(started["based_on"]["seq"], head.seq, "{started}");
    assert_eq!(started["based_on"]["hash"], head.hash.to_string());
    assert_eq!(started["grader"]["runtime"], grader);
    assert_eq!(started["tasks"], serde_json::json!(["demo-simple-1"]));
    let outcomes = payloads(&all, "regrade_outcome");
    assert!(!outcomes.is_empty());
    for o in &outcomes {
        assert_eq!(o["task"], "demo-simple-1", "{o}");
        assert_eq!(o["graded"], "scored", "{o}");
        assert_eq!(o["metrics"]["score"], 0.25, "{o}");
    }
    assert!(
        outcomes
            .iter()
            .any(|o| o["original_metrics"]["score"] != serde_json::json!(0.25)),
        "the constant grader scores differently from the fixture grader: {outcomes:?}"
    );
    assert_eq!(all.last().unwrap().kind, "regrade_finished");
    // Its artifacts verify against its own store; the run's ledger gained nothing.
    let store = ledgers[0].parent().unwrap().join("artifacts");
    let o = eval(
        &dir,
        &[
            "ledger",
            "verify",
            ledgers[0].to_str().unwrap(),
            "--artifacts",
            store.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(entries(&run_ledger).last().unwrap().hash, head.hash);
    // Run again: already finished, nothing graded twice.
    let o = regrade(&["--tasks", "demo-simple-1"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("already finished"), "{}", text(&o));
    assert_eq!(entries(&ledgers[0]).len(), all.len());

    // The report shows both, labelled; the verdict, reasons, gates and exit status are the
    // preregistered report's.
    let (code_after, after) = json_report(&dir);
    assert_eq!(code_after, code_before);
    for field in ["release_allowed", "reasons", "gates", "checks", "suites"] {
        assert_eq!(after[field], before[field], "{field}");
    }
    assert_eq!(after["verdict"], before["verdict"]);
    let s = &after["sensitivity"];
    assert_eq!(s.as_array().unwrap().len(), 1, "{s}");
    assert_eq!(s[0]["identity"], started["identity"]);
    assert_eq!(s[0]["finished"], true);
    assert!(s[0]["problems"].as_array().unwrap().is_empty(), "{s}");
    let score_rows: Vec<&serde_json::Value> = s[0]["arms"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["metric"] == "score")
        .collect();
    assert!(!score_rows.is_empty(), "{s}");
    for c in &score_rows {
        assert_eq!(c["regraded_mean"], 0.25, "{c}");
    }
    assert!(score_rows.iter().any(|c| c["original_mean"] != 0.25), "{s}");
    for format in ["text", "md", "html"] {
        let o = eval(&dir, &["report", "--matrix", "demo", "--format", format]);
        assert_eq!(o.status.code(), code_before, "{format}");
        assert!(
            text(&o).contains("they never change the verdict"),
            "{format}: {}",
            text(&o)
        );
    }
    let site = dir.join("site");
    let o = eval(
        &dir,
        &[
            "report",
            "--matrix",
            "demo",
            "--format",
            "site",
            "--out",
            site.to_str().unwrap(),
        ],
    );
    assert_eq!(o.status.code(), code_before, "{}", text(&o));
    let index = std::fs::read_to_string(site.join("index.html")).unwrap();
    assert!(index.contains("id=\"sensitivity\""), "the site shows it");
    assert!(index.contains(started["identity"].as_str().unwrap()));

    // An archived workspace altered after the run: refused, exit 3, before anything is recorded.
    let run = entries(&run_ledger);
    let victim = payloads(&run, "attempt_outcome")
        .into_iter()
        .rev()
        .filter(|o| o["slot"].as_str().unwrap().contains("demo-icae-1"))
        .find_map(|o| o["artifacts"]["workspace"].as_str().map(str::to_owned))
        .expect("an archived workspace of demo-icae-1");
    let hex = victim.strip_prefix("sha256:").unwrap();
    let file = dir.join(format!("runs/demo/artifacts/sha256/{}/{hex}", &hex[..2]));
    let mut bytes = std::fs::read(&file).unwrap();
    bytes[600] ^= 1;
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::write(&file, &bytes).unwrap();
    let o = regrade(&["--tasks", "demo-icae-1"]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(
        text(&o).contains("does not verify") && text(&o).contains(&victim),
        "{}",
        text(&o)
    );
    assert_eq!(regrade_ledgers(&dir).len(), 1, "nothing was recorded");
}
