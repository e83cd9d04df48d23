//! `eval import harbor` with a Docker engine: Harbor's template task (from Harbor's wheel, filled
//! in as its author would) and a two-step task in Harbor's multi-step layout are imported (the
//! engine builds each task's environment image from its `environment/`, pinned by id in the
//! task's grader runtime), frozen, run on fixture arms and reported: the oracle (the task's
//! `solution/solve.sh`, per step) passes every round, the nop (the untouched workspace) fails,
//! and `grader_valid` holds. A Dockerfile whose FROM the engine does not hold exits 2 naming it.
//! The base image is `EVAL_TEST_V04_GRADER_IMAGE` (bash, coreutils), as the EvoCode tests use.

use crate::support::import_harbor::{filled_template, two_step_task};
use crate::support::{
    demo_project, docker_available, entries, eval, fixture_json_report, payloads, replace_in,
    static_binaries, text,
};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

const NAME: &str = "harbor";

/// The local base image; `None` (skip) only when `EVAL_SKIP_DOCKER=1` asks for it.
fn base_image() -> Option<String> {
    if !docker_available() {
        return None;
    }
    match std::env::var("EVAL_TEST_V04_GRADER_IMAGE") {
        Ok(id) if eval_runtimes::definition::is_digest(id.trim()) => Some(id.trim().to_owned()),
        other => panic!(
            "EVAL_TEST_V04_GRADER_IMAGE={other:?}: run `export $(scripts/ensure-harness-images.sh)` first"
        ),
    }
}

/// `eval import harbor --from FROM` on two of the demo's fixture arms, `extra` appended.
fn import(proj: &Path, from: &Path, extra: &[&str]) -> std::process::Output {
    let arm = |id: &str| {
        format!("{id}=runtimes/fixture/runtime.toml=protocols/demo/arms/{id}/profile.toml")
    };
    let (a, b) = (arm("native"), arm("v0.4-auto"));
    let mut args = vec!["import", "harbor", "--from", from.to_str().unwrap()];
    args.extend(["--arm", &a, "--arm", &b]);
    args.extend_from_slice(extra);
    eval(proj, &args)
}

/// Imports every task of `from` on two fixture arms, freezes, runs; returns the project and each
/// control's metrics by (task, arm).
fn import_and_run(
    proj: &Path,
    from: &Path,
    multi_round: bool,
) -> BTreeMap<(String, String), Value> {
    let o = import(proj, from, &["--repetitions", "1"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(out.contains("controls oracle, nop"), "{out}");
    // Each task's grader runtime pins the image the import built, by id.
    for line in out
        .lines()
        .filter(|l| l.contains("environment image sha256:"))
    {
        let (task, image) = line.trim().split_once(": environment image ").unwrap();
        let rt = std::fs::read_to_string(proj.join(format!("runtimes/harbor-{task}/runtime.toml")))
            .unwrap();
        assert!(rt.contains(&format!("[image]\nid = \"{image}\"")), "{rt}");
    }
    // The model contract is the DeepSeek Harness's; the fixture agent sends its own.
    replace_in(
        &proj.join(format!("protocols/{NAME}/protocol.toml")),
        "equals = 256000",
        "equals = 32768",
    );
    if multi_round {
        replace_in(
            &proj.join("runtimes/fixture/runtime.toml"),
            "[grader]\n",
            "continue_command = [\n  \"/usr/local/bin/eval-fixture-agent\",\n  \"--prompt\", \"{prompt}\",\n  \"--workspace\", \"{workspace}\",\n  \"--base-url\", \"{base_url}\",\n  \"--profile\", \"{profile}\",\n]\n\n[grader]\n",
        );
    }
    let o = eval(proj, &["freeze", "--protocol", NAME]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = eval(proj, &["run", "--matrix", NAME, "--upstream", "fixture"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let es = entries(&proj.join(format!("runs/{NAME}/ledger.sqlite")));
    let started = payloads(&es, "attempt_started");
    let mut metrics = BTreeMap::new();
    for o in payloads(&es, "attempt_outcome") {
        if !o["slot"].as_str().unwrap().starts_with("control-") {
            continue;
        }
        assert_eq!(o["outcome"], "completed", "{o}");
        let s = started.iter().find(|s| s["slot"] == o["slot"]).unwrap();
        let key = (
            s["task"].as_str().unwrap().to_owned(),
            s["arm"].as_str().unwrap().to_owned(),
        );
        metrics.insert(key, o["metrics"].clone());
    }
    metrics
}

/// `eval report`'s grader validity: every control as expected.
fn grader_valid(proj: &Path) -> Vec<Value> {
    // Fixture evidence never allows a release (exit 1); the grader checks are what is asserted.
    let r = fixture_json_report(proj, NAME);
    let reasons = r["reasons"].to_string();
    assert!(!reasons.contains("grader_valid"), "{reasons}");
    r["grader_validity"].as_array().unwrap().clone()
}

fn m(metrics: &BTreeMap<(String, String), Value>, task: &str, arm: &str, name: &str) -> f64 {
    metrics[&(task.to_owned(), arm.to_owned())][name]
        .as_f64()
        .unwrap_or(-1.0)
}

#[test]
fn harbors_template_task_imports_freezes_runs_and_its_oracle_passes_and_nop_fails() {
    let Some(base) = base_image() else { return };
    static_binaries();
    let (tmp, proj) = demo_project();
    let from = tmp.path().join("tasks");
    filled_template(&from.join("hello"), &base);
    let metrics = import_and_run(&proj, &from, false);
    assert_eq!(
        m(&metrics, "hello", "oracle", "rounds_mean_reward"),
        1.0,
        "{metrics:?}"
    );
    assert_eq!(
        m(&metrics, "hello", "nop", "rounds_mean_reward"),
        0.0,
        "{metrics:?}"
    );
    let checks = grader_valid(&proj);
    assert_eq!(checks.len(), 3, "{checks:?}");
    assert!(checks.iter().all(|c| c["ok"] == true), "{checks:?}");
}

#[test]
fn a_two_step_harbor_task_is_graded_per_step_by_its_own_tests() {
    let Some(base) = base_image() else { return };
    static_binaries();
    let (tmp, proj) = demo_project();
    let from = tmp.path().join("tasks");
    two_step_task(&from.join("two"), &base);
    let metrics = import_and_run(&proj, &from, true);
    // Round 1's verifier wrote reward.txt, round 2's reward.json; the oracle ran step 1's
    // solve.sh before round 1's tests and both before round 2's, in the WORKDIR /work that holds
    // the Dockerfile's notes.txt.
    for k in 1..=2 {
        assert_eq!(
            m(&metrics, "two", "oracle", &format!("round{k}_reward")),
            1.0,
            "{metrics:?}"
        );
        assert_eq!(
            m(&metrics, "two", "nop", &format!("round{k}_reward")),
            0.0,
            "{metrics:?}"
        );
    }
    assert_eq!(
        m(&metrics, "two", "oracle", "rounds_mean_reward"),
        1.0,
        "{metrics:?}"
    );
    assert!(grader_valid(&proj).iter().all(|c| c["ok"] == true));
    let ws = proj.join(format!(
        "protocols/{NAME}/tasks/harbor/two/workspace/notes.txt"
    ));
    assert_eq!(std::fs::read_to_string(ws).unwrap(), "keep me\n");
}

#[test]
fn a_from_the_engine_does_not_hold_exits_2_naming_the_image_and_writes_nothing() {
    if base_image().is_none() {
        return;
    }
    let (tmp, proj) = demo_project();
    let from = tmp.path().join("tasks");
    filled_template(&from.join("hello"), "eval-test/not-pulled-here:1");
    let o = import(&proj, &from, &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("environment/Dockerfile") && err.contains("FROM eval-test/not-pulled-here:1"),
        "{err}"
    );
    assert!(!proj.join(format!("protocols/{NAME}")).exists());
    assert!(!proj.join("runtimes/harbor-hello").exists());
}
