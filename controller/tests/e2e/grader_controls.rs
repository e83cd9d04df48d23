//! Control arms on v0.4's real `simple` suite (issue: is the grader worth trusting?).
//! `eval import v04-simple --solutions` writes each task's reference solution as its frozen
//! `solution/` and the suite's control arms; without an engine: what is written and the
//! refusals. With the engine and the v0.4 grader image (`EVAL_TEST_V04_GRADER_IMAGE`): `eval run`
//! grades every control arm with v0.4's own grader in the grader container before any
//! statistical slot — oracle 100, nop below, and the one-line exploits at 100 — and `eval report`
//! refuses the release naming each task and exploit.
//!
//! The tests of this behaviour that need a Docker engine; the rest are in `tests/it/grader_controls.rs`.

pub(crate) use crate::support::grader_controls::*;
use crate::support::{
    demo_project, docker_available, entries, eval, payloads, replace_in, static_binaries, text,
};
use serde_json::Value;
use std::collections::BTreeMap;

/// The grader image's id; `None` (skip) only when `EVAL_SKIP_DOCKER=1` asks for it.
fn grader_image() -> Option<String> {
    if !docker_available() {
        return None;
    }
    match std::env::var("EVAL_TEST_V04_GRADER_IMAGE") {
        Ok(id) if eval_runtimes::definition::is_digest(id.trim()) => Some(id.trim().to_owned()),
        _ if std::env::var("EVAL_SKIP_DOCKER").is_ok_and(|v| v == "1") => {
            eprintln!("skipping: EVAL_TEST_V04_GRADER_IMAGE is not set and EVAL_SKIP_DOCKER=1");
            None
        }
        other => panic!(
            "EVAL_TEST_V04_GRADER_IMAGE={other:?}: run `export $(scripts/ensure-harness-images.sh)` \
             first, or set EVAL_SKIP_DOCKER=1"
        ),
    }
}

/// The whole finding, reproducible by any reviewer: the imported suite with its control arms
/// run through `eval run` (the fixture agent in place of the Harness for the statistical slots;
/// the control slots run no agent at all), graded by v0.4's real grader.
#[test]
fn v04_grader_passes_the_one_line_exploits_and_the_report_refuses_naming_them() {
    let Some(grader) = grader_image() else {
        return;
    };
    static_binaries();
    let (_t, proj) = demo_project();
    let sol = solutions();
    // The Harness image is not used: its arms are swapped for the fixture runtime below.
    let o = import(
        &proj,
        &fake('d'),
        &grader,
        &["--solutions", sol.to_str().unwrap()],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let protocol = proj.join(format!("protocols/{NAME}/protocol.toml"));
    swap_in_fixture_arms(&proj);
    replace_in(&protocol, "threshold = 12\n", "threshold = 6\n");

    let o = eval(&proj, &["freeze", "--protocol", NAME]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = eval(&proj, &["run", "--matrix", NAME, "--upstream", "fixture"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let es = entries(&proj.join(format!("runs/{NAME}/ledger.sqlite")));
    let started = payloads(&es, "attempt_started");
    // Every control attempt started before any other.
    let first_other = started
        .iter()
        .position(|p| p["phase"] != "control")
        .unwrap();
    assert!(
        started[first_other..]
            .iter()
            .all(|p| p["phase"] != "control")
    );
    assert_eq!(first_other, TASKS.len() * 8, "6 tasks x 8 control arms");
    let mut score: BTreeMap<(String, String), f64> = BTreeMap::new();
    let mut hardened: BTreeMap<(String, String), f64> = BTreeMap::new();
    for p in payloads(&es, "attempt_outcome") {
        let slot = p["slot"].as_str().unwrap();
        if !slot.starts_with("control-") {
            continue;
        }
        assert_eq!(p["model_turns"], 0, "{p}");
        assert!(p["model_calls"].as_array().unwrap().is_empty(), "{p}");
        let s = started.iter().find(|s| s["slot"] == p["slot"]).unwrap();
        let key = (
            s["task"].as_str().unwrap().to_owned(),
            s["arm"].as_str().unwrap().to_owned(),
        );
        score.insert(key.clone(), p["metrics"]["score"].as_f64().unwrap_or(-1.0));
        hardened.insert(key, p["metrics"]["hardened_score"].as_f64().unwrap_or(-1.0));
    }
    let at = |t: &str, a: &str| score[&(t.to_owned(), a.to_owned())];
    for t in TASKS {
        assert_eq!(at(t, "oracle"), 100.0, "{t}: {score:?}");
        assert!(at(t, "nop") < 100.0, "{t}: {score:?}");
    }
    // The one-line exploits of the finding: full marks from v0.4's grader.
    for t in TASKS.iter().filter(|t| !t.contains("-go-")) {
        assert_eq!(at(t, "exploit:print-result"), 100.0, "{t}: {score:?}");
    }
    assert_eq!(
        at("simple-go-dedupe", "exploit:go-testmain-exit"),
        100.0,
        "{score:?}"
    );
    // The hardened grading of the same assertions, beside it: the oracle still 100, and no
    // exploit above its nop (every executed assertion fails; only the static file checks the
    // unchanged workspace passes too remain).
    let h = |t: &str, a: &str| hardened[&(t.to_owned(), a.to_owned())];
    for t in TASKS {
        assert_eq!(h(t, "oracle"), 100.0, "{t}: {hardened:?}");
        for arm in [
            "exploit:print-result",
            "exploit:go-testmain-exit",
            "exploit:exit-at-import",
            "exploit:write-grader-output",
            "exploit:read-hidden",
            "exploit:delete-tests",
        ] {
            assert!(h(t, arm) <= h(t, "nop"), "{t} {arm}: {hardened:?}");
        }
    }

    let out = proj.join("report.json");
    let o = eval(
        &proj,
        &[
            "report",
            "--matrix",
            NAME,
            "--format",
            "json",
            "--out",
            out.to_str().unwrap(),
        ],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let report: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let reasons = report["reasons"].to_string();
    for t in TASKS.iter().filter(|t| !t.contains("-go-")) {
        assert!(
            reasons.contains(&format!("exploit:print-result scored 100 on simple/{t}")),
            "{t}: {reasons}"
        );
    }
    assert!(
        reasons.contains("exploit:go-testmain-exit scored 100 on simple/simple-go-dedupe"),
        "{reasons}"
    );
    let cells = report["grader_validity"].as_array().unwrap();
    // The gating grading (v0.4's `score`) and the hardened one beside it.
    assert_eq!(cells.len(), 2 * TASKS.len() * 8);
    assert!(
        cells
            .iter()
            .filter(|c| c["grading"] == "hardened_score")
            .all(|c| c["ok"] == true),
        "{cells:?}"
    );
    eprintln!("grader validity (v0.4's grader):");
    for c in cells {
        eprintln!(
            "  {:<15} {:<26} {:<28} {:>6} {}",
            c["grading"].as_str().unwrap(),
            c["task"].as_str().unwrap(),
            c["arm"].as_str().unwrap(),
            c["score"],
            if c["ok"] == true { "ok" } else { "INVALID" }
        );
    }
}

/// `--grading hardened`: the gates read eval's hardened grading, under which v0.4's own
/// assertions hold against every exploit, so `grader_valid` passes (the release is still refused:
/// fixture evidence), while v0.4's `score` is shown beside it, still failing.
#[test]
fn with_the_hardened_grading_gating_grader_valid_holds() {
    let Some(grader) = grader_image() else {
        return;
    };
    static_binaries();
    let (_t, proj) = demo_project();
    let sol = solutions();
    let tasks = "simple-js-clamp,simple-python-chunks,simple-go-dedupe";
    let o = import(
        &proj,
        &fake('d'),
        &grader,
        &[
            "--solutions",
            sol.to_str().unwrap(),
            "--grading",
            "hardened",
            "--tasks",
            tasks,
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let protocol = proj.join(format!("protocols/{NAME}/protocol.toml"));
    let p = std::fs::read_to_string(&protocol).unwrap();
    assert!(
        p.contains("metric = \"hardened_score\"\nalso_report = [\"score\"]"),
        "{p}"
    );
    swap_in_fixture_arms(&proj);
    replace_in(&protocol, "threshold = 6\n", "threshold = 3\n");
    let report = freeze_run_report(&proj);
    let rule = report["gates"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap().iter())
        .find(|r| r["id"] == "grader_valid")
        .unwrap()
        .clone();
    assert_eq!(rule["verdict"], "pass", "{rule}");
    let cells = report["grader_validity"].as_array().unwrap();
    assert!(
        cells
            .iter()
            .any(|c| c["grading"] == "score" && c["ok"] == false),
        "{cells:?}"
    );
    let md = proj.join("report.md");
    let o = eval(
        &proj,
        &[
            "report",
            "--matrix",
            NAME,
            "--format",
            "md",
            "--out",
            md.to_str().unwrap(),
        ],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let md = std::fs::read_to_string(md).unwrap();
    assert!(
        md.contains("## Grader validity")
            && md
                .contains("| simple | simple-go-dedupe | exploit:go-testmain-exit | score | 100 |"),
        "{md}"
    );
}
