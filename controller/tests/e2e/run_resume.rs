//! Crash safety: SIGKILL the controller in the middle of a run, run the same command again, and
//! check the final ledger.

use crate::support::*;
use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn sigkill_mid_run_then_resume_loses_nothing_and_records_nothing_twice() {
    // Alone: the whole 96-slot demo at concurrency 4, twice.
    if !docker_available_alone() {
        return;
    }
    static_binaries();
    let (_tmp, dir) = demo_project();
    let o = eval(&dir, &["freeze", "--protocol", "demo"]);
    assert!(o.status.success(), "{}", text(&o));
    let identity = identity_of(&dir);
    let label = format!("eval.identity={identity}");
    let _sweep = Sweep(label.clone());
    let ledger = dir.join("runs/demo/ledger.sqlite");
    let args = [
        "run",
        "--matrix",
        "demo",
        "--upstream",
        "fixture",
        "--concurrency",
        "4",
    ];

    let mut child = Command::new(eval_bin())
        .args(args)
        .current_dir(&dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Kill while statistical attempts are running (after the six infrastructure slots).
    // A hang guard only (a run that stopped making progress), not a speed bound.
    let t0 = Instant::now();
    while count_outcomes(&ledger) < 14 {
        assert!(
            t0.elapsed() < Duration::from_secs(900),
            "the run made no progress"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "the run ended before the kill"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let st = Command::new("kill")
        .args(["-9", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let _ = child.wait();
    let at_kill = entries(&ledger);
    let open_at_kill: Vec<String> = {
        let done: Vec<String> = payloads(&at_kill, "attempt_outcome")
            .iter()
            .map(|o| o["attempt"].as_str().unwrap().to_owned())
            .collect();
        payloads(&at_kill, "attempt_started")
            .iter()
            .map(|s| s["attempt"].as_str().unwrap().to_owned())
            .filter(|a| !done.contains(a))
            .collect()
    };
    assert!(!open_at_kill.is_empty(), "nothing was running at the kill");

    // The same command again: it closes what was open, sweeps, and finishes.
    let o = eval(&dir, &args);
    assert!(o.status.success(), "{}", text(&o));
    let o = eval(&dir, &["ledger", "verify", ledger.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(containers_with(&label).is_empty(), "containers left behind");

    let es = entries(&ledger);
    let started = payloads(&es, "attempt_started");
    let outcomes = payloads(&es, "attempt_outcome");
    // Exactly one outcome per attempt, none lost.
    let mut per_attempt: BTreeMap<String, u32> = BTreeMap::new();
    for o in &outcomes {
        *per_attempt
            .entry(o["attempt"].as_str().unwrap().to_owned())
            .or_default() += 1;
    }
    assert_eq!(per_attempt.len(), started.len());
    assert!(per_attempt.values().all(|n| *n == 1));
    // Every slot has exactly one final non-infra outcome.
    let mut finals: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for o in &outcomes {
        finals
            .entry(o["slot"].as_str().unwrap().to_owned())
            .or_default()
            .push(o["outcome"].as_str().unwrap().to_owned());
    }
    assert_eq!(finals.len(), 96);
    for (slot, list) in &finals {
        let non_infra = list.iter().filter(|o| *o != "infra_fault").count();
        assert_eq!(non_infra, 1, "{slot}: {list:?}");
        assert_ne!(list.last().unwrap(), "infra_fault", "{slot}: {list:?}");
    }
    // The attempts open at the kill were closed by rule: rerun only without a model call.
    let calls = payloads(&es, "model_call");
    for id in &open_at_kill {
        let o = outcomes
            .iter()
            .find(|o| o["attempt"] == id.as_str())
            .unwrap();
        assert_eq!(o["closed_by_controller"], true, "{o}");
        // A `model_call_started` without its `model_call` (killed mid-call) may have spent too.
        let had_call = calls.iter().any(|c| c["attempt"] == id.as_str())
            || payloads(&es, "model_call_started")
                .iter()
                .any(|c| c["attempt"] == id.as_str());
        let slot = o["slot"].as_str().unwrap();
        let later = started
            .iter()
            .filter(|s| {
                s["slot"] == slot && s["number"].as_u64().unwrap() > o["number"].as_u64().unwrap()
            })
            .count();
        if had_call {
            assert_eq!(o["outcome"], "interrupted", "{o}");
            assert_eq!(later, 0, "{id} made a model call and must not be rerun");
        } else {
            assert_eq!(o["infra_fault"], "interrupted_before_model_call", "{o}");
            assert_eq!(later, 1, "{id} must be rerun once");
            let rerun = payloads(&es, "rerun")
                .into_iter()
                .find(|r| r["reruns"] == id.as_str())
                .unwrap();
            assert_eq!(rerun["rerun_of"], o["number"]);
        }
    }
    let sessions = payloads(&es, "run_started");
    assert_eq!(sessions.len(), 2);
    assert_eq!(sessions[1]["session"], 2);
    let o = eval(&dir, &["status", "--matrix", "demo", "--json"]);
    let status: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(status["complete"], true);
    assert_eq!(status["done"], 90);
}

/// The run arguments of the crash-point tests.
const RUN: [&str; 7] = [
    "run",
    "--matrix",
    "demo",
    "--upstream",
    "fixture",
    "--concurrency",
    "4",
];

/// Runs `eval run` with a crash point (a debug-build hook that SIGKILLs the controller right
/// before or after the named append; see "Resume and crash points" in docs/runs.md) and
/// insists that the process really died there.
fn run_until_crash(dir: &std::path::Path, point: &str) -> Vec<eval_evidence::ledger::Entry> {
    let o = eval_env(dir, &RUN, &[("EVAL_TEST_CRASH_AT", point)]);
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        o.status.signal(),
        Some(9),
        "{point}: the run was not killed at its crash point: {:?}\n{}",
        o.status,
        text(&o)
    );
    entries(&dir.join("runs/demo/ledger.sqlite"))
}

/// Attempts started and without an outcome.
fn open_attempts(es: &[eval_evidence::ledger::Entry]) -> Vec<String> {
    let done: Vec<String> = payloads(es, "attempt_outcome")
        .iter()
        .map(|o| o["attempt"].as_str().unwrap().to_owned())
        .collect();
    payloads(es, "attempt_started")
        .iter()
        .map(|s| s["attempt"].as_str().unwrap().to_owned())
        .filter(|a| !done.contains(a))
        .collect()
}

/// Resumes without a crash point and checks what must hold after any crash: the ledger
/// verifies, the run completes, nothing is recorded twice, every rerun is announced exactly
/// once, and every attempt that was open at the crash is closed by the model-call rule.
fn resume_and_check(
    dir: &std::path::Path,
    open_at_crash: &[String],
) -> Vec<eval_evidence::ledger::Entry> {
    let ledger = dir.join("runs/demo/ledger.sqlite");
    let o = eval(dir, &RUN);
    assert!(o.status.success(), "{}", text(&o));
    let o = eval(dir, &["ledger", "verify", ledger.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let es = entries(&ledger);
    let key = |v: &serde_json::Value| {
        format!(
            "{} {} {}",
            v["attempt"].as_str().unwrap(),
            v["role"],
            v["seq"]
        )
    };
    for kind in ["model_call", "model_call_started"] {
        let all: Vec<String> = payloads(&es, kind).iter().map(key).collect();
        let unique: std::collections::BTreeSet<&String> = all.iter().collect();
        assert_eq!(all.len(), unique.len(), "a {kind} was recorded twice");
    }
    let started = payloads(&es, "attempt_started");
    let outcomes = payloads(&es, "attempt_outcome");
    let mut per_attempt: BTreeMap<String, u32> = BTreeMap::new();
    for o in &outcomes {
        *per_attempt
            .entry(o["attempt"].as_str().unwrap().to_owned())
            .or_default() += 1;
    }
    assert_eq!(per_attempt.len(), started.len());
    assert!(per_attempt.values().all(|n| *n == 1), "{per_attempt:?}");
    // One `rerun` per attempt after the first of its slot, and none for anything else.
    let reruns = payloads(&es, "rerun");
    let later: Vec<String> = started
        .iter()
        .filter(|s| s["number"].as_u64().unwrap() > 1)
        .map(|s| s["attempt"].as_str().unwrap().to_owned())
        .collect();
    let mut announced: Vec<String> = reruns
        .iter()
        .map(|r| r["attempt"].as_str().unwrap().to_owned())
        .collect();
    announced.sort();
    let mut expected = later.clone();
    expected.sort();
    assert_eq!(
        announced, expected,
        "rerun entries vs attempts after the first"
    );
    let calls_of = |id: &str| {
        payloads(&es, "model_call")
            .iter()
            .chain(payloads(&es, "model_call_started").iter())
            .any(|c| c["attempt"] == id)
    };
    for id in open_at_crash {
        let o = outcomes
            .iter()
            .find(|o| o["attempt"] == id.as_str())
            .unwrap();
        assert_eq!(o["closed_by_controller"], true, "{o}");
        let slot = o["slot"].as_str().unwrap();
        let n = o["number"].as_u64().unwrap();
        let reran = started
            .iter()
            .any(|s| s["slot"] == slot && s["number"].as_u64().unwrap() > n);
        if calls_of(id) {
            // Spent: final, never a rerunnable fault (statistical slots only; infrastructure
            // slots are rerun after any failure by design).
            assert_eq!(o["outcome"], "interrupted", "{o}");
            if slot.starts_with("stat-") || !slot.starts_with("infra-") {
                assert!(!reran, "{id} made a model call and must not be rerun");
            }
        } else {
            assert_eq!(o["infra_fault"], "interrupted_before_model_call", "{o}");
            assert!(reran, "{id} spent nothing and must be rerun");
        }
    }
    let o = eval(dir, &["status", "--matrix", "demo", "--json"]);
    let status: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(status["complete"], true, "{status}");
    assert_eq!(status["reruns"], later.len() as u64);
    es
}

fn crash_project() -> Option<(tempfile::TempDir, std::path::PathBuf, Sweep)> {
    if !docker_available() {
        return None;
    }
    static_binaries();
    let (tmp, dir) = small_demo_project();
    let o = eval(&dir, &["freeze", "--protocol", "demo"]);
    assert!(o.status.success(), "{}", text(&o));
    let sweep = Sweep(format!("eval.identity={}", identity_of(&dir)));
    Some((tmp, dir, sweep))
}

#[test]
fn a_crash_between_rerun_and_attempt_started_announces_each_rerun_once() {
    let Some((_tmp, dir, _sweep)) = crash_project() else {
        return;
    };
    // Session 1 dies right after a statistical attempt started (before its container, so before
    // any model call): resume must rerun that slot.
    let es = run_until_crash(&dir, "after:attempt_started@stat-");
    assert!(!open_attempts(&es).is_empty());
    // Session 2 closes what was open (those without a model call need a rerun) and dies right
    // after announcing the first rerun: with `rerun` and `attempt_started` as one batch, the
    // rerun's attempt is in the ledger right behind it.
    let es = run_until_crash(&dir, "after:rerun");
    let rerun_at = es.iter().position(|e| e.kind == "rerun").unwrap();
    let rerun = es[rerun_at].payload_json().unwrap();
    let (slot, number) = rerun["attempt"].as_str().unwrap().rsplit_once('#').unwrap();
    let slot = slot.to_owned();
    assert_eq!(number, "2");
    let next = es.get(rerun_at + 1).expect("the rerun is the last entry");
    assert_eq!(
        (
            next.kind.as_str(),
            next.payload_json().unwrap()["attempt"].clone()
        ),
        ("attempt_started", rerun["attempt"].clone()),
        "the rerun was not written together with its attempt"
    );
    let open2 = open_attempts(&es);
    assert!(open2.contains(&format!("{slot}#2")), "{open2:?}");
    // Session 3 finishes: one `rerun` per rerun attempt, none twice; the slot that crashed
    // twice before any model call has #2 and the #3 that replaces it.
    let es = resume_and_check(&dir, &open2);
    let numbers: Vec<u64> = payloads(&es, "attempt_started")
        .iter()
        .filter(|s| s["slot"] == slot)
        .map(|s| s["number"].as_u64().unwrap())
        .collect();
    assert_eq!(numbers, vec![1, 2, 3]);
}

/// A crash at each recording point of an attempt that has called the model: resume verifies,
/// closes the attempt as `interrupted` (spent, never rerun) and records nothing twice.
fn crash_after_a_model_call_at(point: &str) {
    let Some((_tmp, dir, _sweep)) = crash_project() else {
        return;
    };
    let es = run_until_crash(&dir, point);
    let open = open_attempts(&es);
    assert!(!open.is_empty(), "{point}: nothing was open at the crash");
    let (kind, part) = point.split_once(':').unwrap().1.split_once('@').unwrap();
    // The crash hit an attempt that had called the model (the one the point names).
    let hit: Vec<&String> = open
        .iter()
        .filter(|a| {
            a.contains(part)
                && payloads(&es, "model_call_started")
                    .iter()
                    .any(|c| c["attempt"] == a.as_str())
        })
        .collect();
    assert!(
        !hit.is_empty(),
        "{point} ({kind}): no open attempt with a call: {open:?}"
    );
    let es = resume_and_check(&dir, &open);
    for id in hit {
        let o = payloads(&es, "attempt_outcome")
            .into_iter()
            .find(|o| o["attempt"] == id.as_str())
            .unwrap();
        assert_eq!(o["outcome"], "interrupted", "{point}: {o}");
    }
}

#[test]
fn a_crash_after_model_call_started_ends_the_attempt_interrupted() {
    crash_after_a_model_call_at("after:model_call_started@stat-");
}

#[test]
fn a_crash_after_model_call_ends_the_attempt_interrupted() {
    crash_after_a_model_call_at("after:model_call@stat-");
}

#[test]
fn a_crash_after_the_container_exited_before_the_outcome_ends_the_attempt_interrupted() {
    crash_after_a_model_call_at("before:attempt_outcome@stat-");
}
