#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout,
    clippy::print_stderr
)]
//! Crash safety: SIGKILL the controller in the middle of a run, run the same command again, and
//! check the final ledger.

mod support;

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::*;

fn count_outcomes(ledger: &std::path::Path) -> usize {
    if !ledger.exists() {
        return 0;
    }
    let Ok(conn) =
        rusqlite::Connection::open_with_flags(ledger, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
    else {
        return 0;
    };
    conn.query_row(
        "SELECT count(*) FROM entries WHERE kind = 'attempt_outcome'",
        [],
        |r| r.get::<_, i64>(0),
    )
    .map(|n| n as usize)
    .unwrap_or(0)
}

#[test]
fn sigkill_mid_run_then_resume_loses_nothing_and_records_nothing_twice() {
    if !docker_available() {
        eprintln!("skipping: no Docker engine");
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
    let t0 = Instant::now();
    while count_outcomes(&ledger) < 14 {
        assert!(
            t0.elapsed() < Duration::from_secs(120),
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
