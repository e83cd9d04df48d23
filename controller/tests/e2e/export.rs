//! `eval export`: what it writes is read by the other tools' own code — every ATIF trajectory
//! passes Harbor's `TrajectoryValidator` (the `harbor` wheel, put on `.venv`'s path by
//! scripts/ensure-python.sh) — and says what the ledger says: the calls as steps in ledger order,
//! the meter's tokens, the ledger head and the attempt's entries by hash.

use crate::support::export_tools::*;
use crate::support::*;
use eval_evidence::artifacts::ArtifactStore;
use eval_evidence::ledger::{LedgerWriter, NewEntry};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// A small demo project frozen and run on the fixture upstream (the Docker engine is needed).
fn fixture_demo_run() -> (tempfile::TempDir, std::path::PathBuf, Sweep) {
    assert!(docker_available(), "this test needs the Docker engine");
    static_binaries();
    let (tmp, dir) = small_demo_project();
    let (_identity, sweep) = freeze_demo(&dir);
    let run = fixture_run(&dir, &["--concurrency", "2"]);
    assert!(run.status.success(), "{}", text(&run));
    (tmp, dir, sweep)
}

#[test]
fn every_attempt_of_a_fixture_run_exports_as_a_trajectory_harbor_accepts() {
    let (_tmp, dir, _sweep) = fixture_demo_run();
    let all = entries(&dir.join("runs/demo/ledger.sqlite"));
    let started = payloads(&all, "attempt_started");
    export_atif_checked(&dir, "demo", &dir.join("atif"));

    // A selection as `eval show` takes it: a slot alone is its latest attempt; an unknown one
    // is a usage error naming it.
    let slot = started[0]["slot"].as_str().unwrap();
    let o = eval(
        &dir,
        &["export", "atif", slot, "--matrix", "demo", "--out", "one"],
    );
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(std::fs::read_dir(dir.join("one")).unwrap().count(), 1);
    let o = eval(
        &dir,
        &[
            "export", "atif", "nope#1", "--matrix", "demo", "--out", "one",
        ],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("\"nope#1\""), "{}", text(&o));
}

/// A hand-written ledger in the wire log's own formats: a two-round attempt whose agent calls a
/// tool, asks the simulated user (whose model call is an `oracle` call) and reasons.
#[test]
fn a_multi_round_attempt_with_tools_and_questions_exports_as_harbor_reads_it() {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("runs");
    std::fs::create_dir_all(state.join("demo")).unwrap();
    let store = ArtifactStore::open(&state.join("demo/artifacts")).unwrap();
    let put = |v: &Value| {
        store
            .put_bytes(v.to_string().as_bytes())
            .unwrap()
            .to_string()
    };
    let node = |base: Option<&str>, keep: usize, append: Vec<Value>, total: usize| {
        let mut n = json!({"format": "eval.wire.request/1", "keep": keep, "append": append,
            "messages": total, "bytes": 0});
        if let Some(b) = base {
            n["base"] = json!(b);
        }
        put(&n)
    };
    let reply = |text: &str, reasoning: &str, tools: Value| {
        put(
            &json!({"format": "eval.wire.reply/1", "kind": "sse", "model": "m-1",
            "text": text, "reasoning": reasoning, "tool_calls": tools,
            "finish_reason": "stop"}),
        )
    };
    let sys = json!({"role": "system", "content": "be brief"});
    let user = json!({"role": "user", "content": "fix the bug"});
    let asked = json!({"role": "assistant", "content": "looking",
        "tool_calls": [{"id": "t1", "type": "function",
            "function": {"name": "bash", "arguments": "{\"cmd\":\"ls\"}"}}]});
    let result = json!({"role": "tool", "tool_call_id": "t1", "content": "main.py"});
    let round2 = json!({"role": "user", "content": "round two: add a test"});
    let r1 = node(None, 0, vec![sys.clone(), user.clone()], 2);
    let r2 = node(Some(&r1), 2, vec![asked, result], 4);
    let r3 = node(None, 0, vec![sys, round2], 2);
    let a1 = reply(
        "looking",
        "the listing first",
        json!([{"index": 0, "id": "t1", "name": "bash", "arguments": "{\"cmd\":\"ls\"}"}]),
    );
    let a2 = reply("fixed", "", json!([]));
    let a3 = reply("added", "", json!([]));

    let ledger = state.join("demo/ledger.sqlite");
    let w = LedgerWriter::open(&ledger).unwrap();
    let append = |kind: &str, v: Value| {
        w.append_blocking(NewEntry::new(kind, &v).unwrap()).unwrap();
    };
    let call = |seq: u64, role: &str, input: u64, cached: u64, arts: Value| {
        json!({"schema": 1, "attempt": "m#1", "role": role, "seq": seq, "model": "m-1",
            "status": 200, "result": "ok",
            "tokens": {"input": input, "output": 5, "cached": cached, "reasoning": 2},
            "metered": true, "latency_ms": 3, "record": {"spend_usd": 0.25}, "artifacts": arts})
    };
    let round_started = |k: u32| {
        json!({"schema": 1, "attempt": "m#1", "round": k, "rounds": 2, "timeout_seconds": 60,
            "max_tokens": null, "prompt_digest": format!("sha256:{k}"),
            "started_at": "2026-01-01T00:00:00Z"})
    };
    let round_finished = |k: u32| {
        json!({"schema": 1, "attempt": "m#1", "round": k, "status": "passed",
            "graded": "scored", "metrics": {"score": 1.0}, "model_turns": 1, "tokens": 10,
            "artifacts": {}, "finished_at": "2026-01-01T00:00:01Z"})
    };
    append(
        "attempt_started",
        json!({"schema": 1, "attempt": "m#1", "slot": "m", "number": 1,
            "phase": "statistical", "suite": "s", "task": "t", "arm": "x", "rep": 2,
            "rerun_of": null, "session": 1, "started_at": "2026-01-01T00:00:00Z"}),
    );
    append("round_started", round_started(1));
    append(
        "model_call",
        call(1, "agent", 100, 40, json!({"request": r1, "reply": a1})),
    );
    append("model_call", call(2, "oracle", 7, 0, json!({})));
    append(
        "clarification",
        json!({"schema": 1, "attempt": "m#1", "index": 1, "question": "which file?",
            "answer": "main.py", "source": "oracle_model"}),
    );
    append(
        "model_call",
        call(3, "agent", 200, 100, json!({"request": r2, "reply": a2})),
    );
    append("round_finished", round_finished(1));
    append("round_started", round_started(2));
    append(
        "model_call",
        call(4, "agent", 50, 0, json!({"request": r3, "reply": a3})),
    );
    append("round_finished", round_finished(2));
    w.close();

    let out = tmp.path().join("out");
    let o = eval(
        tmp.path(),
        &[
            "export",
            "atif",
            "m",
            "--matrix",
            "demo",
            "--state",
            state.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    let verdicts = harbor_validate(&out);
    assert_eq!(verdicts.len(), 1);
    assert!(verdicts["m.1.json"].is_empty(), "{verdicts:?}");

    let t = read_json(&out.join("m.1.json"));
    let steps = t["steps"].as_array().unwrap();
    let shape: Vec<(&str, &str)> = steps
        .iter()
        .map(|s| {
            (
                s["source"].as_str().unwrap(),
                s["message"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        shape,
        [
            ("system", "round 1 of 2 began"),
            ("system", "be brief"),
            ("user", "fix the bug"),
            ("agent", "looking"),
            ("user", "main.py"),
            ("agent", "fixed"),
            ("system", "round 2 of 2 began"),
            ("system", "be brief"),
            ("user", "round two: add a test"),
            ("agent", "added"),
        ]
    );
    // The tool's result is the observation of the step that called it (its echo is not a step).
    let looking = &steps[3];
    assert_eq!(looking["tool_calls"][0]["tool_call_id"], "t1");
    assert_eq!(looking["tool_calls"][0]["arguments"], json!({"cmd": "ls"}));
    assert_eq!(
        looking["observation"]["results"][0],
        json!({"source_call_id": "t1", "content": "main.py", "extra": {"entry": 6}})
    );
    assert_eq!(looking["reasoning_content"], "the listing first");
    assert_eq!(looking["metrics"]["prompt_tokens"], 100);
    assert_eq!(looking["metrics"]["cached_tokens"], 40);
    assert_eq!(looking["metrics"]["cost_usd"], 0.25);
    assert_eq!(looking["extra"]["round"], 1);
    // The simulated user's answer, with its own model call beside it (not an agent step).
    let answer = &steps[4];
    assert_eq!(answer["extra"]["clarification"]["question"], "which file?");
    assert_eq!(answer["extra"]["simulated_user_calls"][0]["role"], "oracle");
    assert_eq!(steps[6]["extra"]["metrics"]["score"], 1.0);
    let fm = &t["final_metrics"];
    assert_eq!(fm["total_prompt_tokens"], 350);
    assert_eq!(fm["total_cached_tokens"], 140);
    assert_eq!(fm["total_completion_tokens"], 15);
    assert_eq!(t["extra"]["repetition"], 2);
    assert_eq!(t["extra"]["rounds"].as_array().unwrap().len(), 2);
    assert_eq!(t["extra"]["evidence"]["ledger_head"]["seq"], 10);
}

/// `inspect log dump` (inspect-ai's own reader) reads every exported log of a fixture run, and
/// what it reads equals the report: the samples are the report's (task, repetition) values of
/// each suite and arm, their scores the report's values, the usage the report's accounting.
#[test]
fn inspect_reads_every_exported_log_and_its_samples_scores_and_tokens_are_the_reports() {
    let (_tmp, dir, _sweep) = fixture_demo_run();
    let o = eval(
        &dir,
        &["export", "inspect", "--matrix", "demo", "--out", "inspect"],
    );
    assert!(o.status.success(), "{}", text(&o));
    // The report after the export: it is computed at the head the export read (and then
    // appends its own entry).
    let o = eval(&dir, &["report", "--matrix", "demo", "--format", "json"]);
    assert!(
        o.status.code() == Some(0) || o.status.code() == Some(1),
        "{}",
        text(&o)
    );
    let report: Value = serde_json::from_slice(&o.stdout).unwrap();

    let inspect = inspect_cli();
    let mut logs = 0;
    for suite in report["suites"].as_array().unwrap() {
        let sid = suite["id"].as_str().unwrap();
        let mut arms: BTreeMap<String, Vec<(String, u64, f64)>> = BTreeMap::new();
        for t in suite["tasks"].as_array().unwrap() {
            for (arm, values) in t["arms"].as_object().unwrap() {
                for v in values.as_array().unwrap() {
                    arms.entry(arm.clone()).or_default().push((
                        t["task"].as_str().unwrap().to_owned(),
                        v["rep"].as_u64().unwrap(),
                        v["value"].as_f64().unwrap(),
                    ));
                }
            }
        }
        for (arm, mut want) in arms {
            // `<time>_<suite>_<arm>.json`: the name Inspect's directory listing looks for.
            let suffix = format!("_{sid}_{arm}.json");
            let file = std::fs::read_dir(dir.join("inspect"))
                .unwrap()
                .map(|e| e.unwrap().path())
                .find(|p| p.to_str().unwrap().ends_with(&suffix))
                .unwrap_or_else(|| panic!("no log *{suffix}"));
            let name = file.file_name().unwrap().to_str().unwrap();
            assert_eq!(name.as_bytes()[10], b'T', "{name}");
            let o = std::process::Command::new(&inspect)
                .args(["log", "dump"])
                .arg(&file)
                .output()
                .expect("run `inspect` (scripts/ensure-python.sh installs inspect-ai)");
            assert!(o.status.success(), "{}: {}", file.display(), text(&o));
            let log: Value = serde_json::from_slice(&o.stdout).unwrap();
            logs += 1;
            assert_eq!(log["status"], "success");
            assert_eq!(log["eval"]["metadata"]["identity"], report["identity"]);
            assert_eq!(
                log["eval"]["metadata"]["ledger_head"],
                report["ledger_head"]
            );
            let mut got: Vec<(String, u64, f64)> = log["samples"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| {
                    (
                        s["id"].as_str().unwrap().to_owned(),
                        s["epoch"].as_u64().unwrap(),
                        s["scores"]["eval_grader"]["value"].as_f64().unwrap(),
                    )
                })
                .collect();
            want.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
            got.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
            assert_eq!(got, want, "{sid} {arm}");
            assert_eq!(log["results"]["total_samples"], want.len());
            let acc = report["accounting"]
                .as_array()
                .unwrap()
                .iter()
                .find(|a| a["suite"] == sid && a["arm"] == arm.as_str())
                .unwrap();
            let usage = log["stats"]["model_usage"].as_object().unwrap();
            assert_eq!(usage.len(), 1, "{usage:?}");
            let u = usage.values().next().unwrap();
            assert_eq!(u["input_tokens"], acc["input_tokens"], "{sid} {arm}");
            assert_eq!(u["output_tokens"], acc["output_tokens"], "{sid} {arm}");
            assert_eq!(u["input_tokens_cache_read"], acc["cached_tokens"]);
            // Each sample's conversation is there: the agent's replies as assistant messages.
            for s in log["samples"].as_array().unwrap() {
                let turns = s["messages"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|m| m["role"] == "assistant")
                    .count();
                assert_eq!(
                    turns as u64,
                    s["metadata"]["model_turns"].as_u64().unwrap(),
                    "{sid} {arm} {}",
                    s["id"]
                );
            }
        }
    }
    assert_eq!(
        logs,
        std::fs::read_dir(dir.join("inspect")).unwrap().count(),
        "one log per suite and arm, none else"
    );
}

/// Inspect's own log viewer shows an exported sample's conversation: `inspect view bundle` of a
/// fixture run's export, served on loopback and opened in headless Chromium at the viewer's route
/// to one sample's messages (`#/logs/<file>/samples/sample/<id>/<epoch>/messages`). The page
/// shows every assistant message of that sample (each one's `@@edit …` lines, as the ledger's
/// replies wrote them), as many assistant messages as the sample holds, and the sample's score.
#[test]
fn inspects_viewer_shows_an_exported_samples_conversation() {
    let (tmp, dir, _sweep) = fixture_demo_run();
    let logs = dir.join("inspect");
    let o = eval(
        &dir,
        &[
            "export",
            "inspect",
            "--matrix",
            "demo",
            "--out",
            logs.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    let bundle = tmp.path().join("bundle");
    let o = std::process::Command::new(inspect_cli())
        .args(["view", "bundle", "--log-dir"])
        .arg(&logs)
        .arg("--output-dir")
        .arg(&bundle)
        .output()
        .expect("run `inspect` (scripts/ensure-python.sh installs inspect-ai)");
    assert!(o.status.success(), "inspect view bundle: {}", text(&o));
    assert!(bundle.join("index.html").is_file());

    // A sample with more than one reply: the first of the `simple` suite's baseline log.
    let file = std::fs::read_dir(&logs)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .find(|f| f.ends_with("_simple_native.json"))
        .expect("the simple suite's native log");
    let log = read_json(&logs.join(&file));
    let sample = &log["samples"][0];
    let replies: Vec<String> = sample["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "assistant")
        .map(|m| m["content"][0]["text"].as_str().unwrap().to_owned())
        .collect();
    assert!(replies.len() >= 2, "{sample}");
    // The lines the viewer's markdown leaves as they are (`# …` lines become headings).
    let edits: Vec<&str> = replies
        .iter()
        .flat_map(|r| r.lines())
        .filter(|l| l.starts_with("@@edit "))
        .collect();
    let (id, epoch) = (sample["id"].as_str().unwrap(), &sample["epoch"]);
    let route = format!("#/logs/{file}/samples/sample/{id}/{epoch}/messages");
    let png = tmp.path().join("sample.png");
    let page = view_in_chromium(&bundle, &route, edits.last().unwrap(), &png);

    assert!(
        page.contains(&format!("Sample {id} (Epoch {epoch})")),
        "{page}"
    );
    for e in &edits {
        assert!(page.contains(e), "{e:?} not on the page:\n{page}");
    }
    assert_eq!(
        page.lines().filter(|l| *l == "ASSISTANT").count(),
        replies.len(),
        "{page}"
    );
    let score = sample["scores"]["eval_grader"]["value"].as_f64().unwrap();
    assert!(
        page.contains(&format!("SCORE\n{score}\n")),
        "score {score}:\n{page}"
    );
    let shot = std::fs::read(&png).unwrap();
    assert!(shot.starts_with(b"\x89PNG\r\n\x1a\n"), "a PNG screenshot");
    if let Some(keep) = std::env::var_os("EVAL_TEST_VIEWER_SCREENSHOT") {
        std::fs::copy(&png, keep).unwrap();
    }
}
