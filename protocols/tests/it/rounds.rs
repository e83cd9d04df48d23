//! Multi-round tasks (`[[rounds]]`, docs/rounds.md): the layout they must have, that every
//! round's bytes are in the frozen identity, and that single-round tasks freeze as before.

use eval_protocols::{FreezeOutcome, Project, ProtocolError, freeze, verify};
use std::fs;
use std::path::Path;

use crate::support::*;

const TASK: &str = "protocols/demo/tasks/evocode/demo-evocode-1";

fn do_freeze(f: &Fixture) -> Result<FreezeOutcome, ProtocolError> {
    freeze(&Project::open(&f.root), "demo", &f.state, DRIVER, &images)
}

/// Turns the demo's first EvoCode task into a 3-round task: the single prompt and checks move to
/// `rounds/<k>/prompt.md` and `hidden/rounds/<k>/checks.toml`.
fn make_three_rounds(root: &Path) {
    let t = root.join(TASK);
    let prompt = fs::read_to_string(t.join("prompt.md")).unwrap();
    let checks = fs::read_to_string(t.join("hidden/checks.toml")).unwrap();
    fs::remove_file(t.join("prompt.md")).unwrap();
    for k in 1..=3 {
        fs::create_dir_all(t.join(format!("rounds/{k}"))).unwrap();
        fs::write(
            t.join(format!("rounds/{k}/prompt.md")),
            format!("Round {k}.\n{prompt}"),
        )
        .unwrap();
        fs::create_dir_all(t.join(format!("hidden/rounds/{k}"))).unwrap();
        fs::write(t.join(format!("hidden/rounds/{k}/checks.toml")), &checks).unwrap();
    }
    let spec = fs::read_to_string(t.join("task.toml")).unwrap();
    let (head, grader) = spec.split_once("[grader]").unwrap();
    fs::write(
        t.join("task.toml"),
        format!(
            "{head}after_failed_round = \"stop\"\n\n[grader]{grader}\n[[rounds]]\ntimeout_seconds = 600\nmax_tokens = 1000\n\n[[rounds]]\n\n[[rounds]]\ntimeout_seconds = 60\n"
        ),
    )
    .unwrap();
}

/// The identity of the unchanged `eval init` template under the tests' fixed driver digest, as
/// it was before tasks could have rounds. Rounds are optional fields serialised only when
/// present, and a bundle is frozen by its bytes, so it must not move. (If the template itself
/// is edited on purpose, this pin moves with it.)
const TEMPLATE_IDENTITY: &str =
    "sha256:8913420fb613ba8de6a45a687641a8821c36b84f9e3e1e1d6e956cc44ded8c70";

#[test]
fn a_single_round_project_freezes_to_the_identity_it_had_before_rounds() {
    let f = fixture();
    let l = Project::open(&f.root).load("demo").unwrap();
    assert!(l.tasks.iter().all(|t| !t.spec.is_multi_round()));
    assert!(l.tasks.iter().all(|t| t.spec.round_count() == 1));
    let id = identity(&do_freeze(&f).unwrap());
    assert_eq!(id.to_string(), TEMPLATE_IDENTITY);
    // A single-round task.toml serialises without any round field.
    let text = toml::to_string(&l.tasks[0].spec).unwrap();
    assert!(!text.contains("rounds"), "{text}");
}

#[test]
fn a_three_round_task_loads_and_every_rounds_bytes_are_frozen() {
    let f = fixture();
    make_three_rounds(&f.root);
    let l = Project::open(&f.root).load("demo").unwrap();
    let t = l.tasks.iter().find(|t| t.id == "demo-evocode-1").unwrap();
    assert_eq!(t.spec.round_count(), 3);
    assert_eq!(t.spec.round_timeout(1), 600);
    assert_eq!(t.spec.round_timeout(2), t.spec.timeout_seconds);
    assert_eq!(t.spec.round_timeout(3), 60);
    assert_eq!(t.spec.rounds[0].max_tokens, Some(1000));
    assert_eq!(
        t.spec.after_failed_round,
        Some(eval_protocols::task::AfterFailedRound::Stop)
    );
    do_freeze(&f).unwrap();
    let doc: serde_json::Value =
        serde_json::from_slice(&fs::read(f.state.join("freezes/demo.json")).unwrap()).unwrap();
    let manifest: Vec<&str> = doc["manifest"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect();
    let manifest = manifest.join("\n");
    for k in 1..=3 {
        for part in [
            format!("{TASK}/rounds/{k}/prompt.md"),
            format!("{TASK}/hidden/rounds/{k}/checks.toml"),
        ] {
            assert!(manifest.contains(&part), "{part} is not frozen");
        }
    }
    // A byte of a later round's prompt, or of its hidden tests, is drift.
    for rel in ["rounds/3/prompt.md", "hidden/rounds/2/checks.toml"] {
        let p = f.root.join(TASK).join(rel);
        let before = fs::read(&p).unwrap();
        fs::write(&p, [&before[..], b" "].concat()).unwrap();
        let v = verify(&Project::open(&f.root), "demo", &f.state, DRIVER, &images).unwrap();
        assert!(
            v.drift.iter().any(|d| format!("{d:?}").contains(rel)),
            "{rel}: {:?}",
            v.drift
        );
        fs::write(&p, before).unwrap();
    }
    let v = verify(&Project::open(&f.root), "demo", &f.state, DRIVER, &images).unwrap();
    assert!(v.clean(), "{:?}", v.drift);
}

#[test]
fn a_bad_round_layout_is_refused_naming_the_file_and_field() {
    type Edit = fn(&Path);
    let cases: Vec<(&str, Edit, &[&str])> = vec![
        (
            "a prompt.md beside the rounds",
            |r| fs::write(r.join(TASK).join("prompt.md"), "x").unwrap(),
            &["task.toml", "rounds", "prompt.md"],
        ),
        (
            "a round without its prompt",
            |r| fs::remove_file(r.join(TASK).join("rounds/2/prompt.md")).unwrap(),
            &["demo-evocode-1", "rounds/2/prompt.md"],
        ),
        (
            "a round without its hidden tests",
            |r| fs::remove_dir_all(r.join(TASK).join("hidden/rounds/3")).unwrap(),
            &["demo-evocode-1", "hidden/rounds/3"],
        ),
        (
            "an undeclared round directory",
            |r| fs::create_dir_all(r.join(TASK).join("hidden/rounds/4")).unwrap(),
            &["task.toml", "rounds", "hidden/rounds/4", "1..=3"],
        ),
        (
            "a round timeout over the task's",
            |r| {
                let p = r.join(TASK).join("task.toml");
                let s = fs::read_to_string(&p).unwrap();
                fs::write(
                    &p,
                    s.replacen("timeout_seconds = 600", "timeout_seconds = 999999", 1),
                )
                .unwrap();
            },
            &["task.toml", "rounds[0].timeout_seconds", "999999"],
        ),
        (
            "a round token budget over the attempt's",
            |r| {
                let p = r.join(TASK).join("task.toml");
                let s = fs::read_to_string(&p).unwrap();
                fs::write(
                    &p,
                    s.replacen("max_tokens = 1000", "max_tokens = 999999999999", 1),
                )
                .unwrap();
            },
            &[
                "task.toml",
                "rounds[0].max_tokens",
                "budgets.attempt.max_tokens",
            ],
        ),
        (
            "an unknown round field",
            |r| {
                let p = r.join(TASK).join("task.toml");
                let s = fs::read_to_string(&p).unwrap();
                fs::write(&p, s.replacen("max_tokens = 1000", "max_tokenz = 1000", 1)).unwrap();
            },
            &["task.toml", "max_tokenz"],
        ),
        (
            "an unknown failure policy",
            |r| {
                let p = r.join(TASK).join("task.toml");
                let s = fs::read_to_string(&p).unwrap();
                fs::write(&p, s.replacen("\"stop\"", "\"retry\"", 1)).unwrap();
            },
            &["task.toml", "retry"],
        ),
    ];
    for (what, edit, needles) in cases {
        let f = fixture();
        make_three_rounds(&f.root);
        edit(&f.root);
        let e = do_freeze(&f).unwrap_err();
        let msg = e.to_string();
        assert!(!e.is_integrity(), "{what}: {msg}");
        for n in needles {
            assert!(msg.contains(n), "{what}: {msg:?} lacks {n:?}");
        }
        assert!(!f.state.join("freezes/demo.json").exists(), "{what}");
    }
    // `after_failed_round` means nothing without rounds.
    let f = fixture();
    let p = f.root.join(TASK).join("task.toml");
    let s = fs::read_to_string(&p).unwrap();
    let (head, grader) = s.split_once("[grader]").unwrap();
    fs::write(
        &p,
        format!("{head}after_failed_round = \"continue\"\n[grader]{grader}"),
    )
    .unwrap();
    let msg = do_freeze(&f).unwrap_err().to_string();
    assert!(msg.contains("after_failed_round"), "{msg}");
}
