//! Multi-round attempts end to end (docs/rounds.md), with the fixture agent in Docker: one
//! container and one session over three rounds, each round graded by its own hidden tests only,
//! every round in the ledger (start, end, the harness's exit, the grade, the snapshot); a round
//! that does not build; an attempt that stops so its last round is unreached; and an arm whose
//! agent reads ahead, edits a later round's tests and writes a score file, gaining nothing.

use crate::support::*;
use std::path::Path;

/// A fixture prompt whose one requirement writes `content` to `path`; `wrong` = `content`, so
/// every arm's skill writes the same bytes and the rounds' grades are known in advance.
fn prompt(task: &str, round: usize, path: &str, content: &str) -> String {
    format!(
        "# {task}, round {round}\n\n```fixture\ntask = \"{task}\"\n\n[[requirement]]\nid = \"round{round}\"\npath = \"{path}\"\ncontent = \"\"\"\n{content}\n\"\"\"\nwrong = \"\"\"\n{content}\n\"\"\"\n```\n"
    )
}

fn check(id: &str, path: &str, rule: &str) -> String {
    format!("[[check]]\nid = \"{id}\"\npath = \"{path}\"\n{rule}\npoints = 10\n\n")
}

/// Writes a 3-round task over `demo-evocode-N`'s bundle: round 1 writes `greet = hello`, round
/// 2 adds `extra.py` (and checks `hello` still holds), round 3 changes round 1's behaviour to
/// `bonjour` (and checks `hello` is gone). `broken` gives that round unreadable checks (a
/// workspace that does not build); `policy` is `after_failed_round`.
fn three_round_task(proj: &Path, n: usize, broken: Option<usize>, policy: &str) {
    let id = format!("demo-evocode-{n}");
    let t = proj.join("protocols/demo/tasks/evocode").join(&id);
    std::fs::remove_dir_all(&t).unwrap();
    for d in [
        "workspace/src",
        "hidden/rounds/1",
        "hidden/rounds/2",
        "hidden/rounds/3",
    ] {
        std::fs::create_dir_all(t.join(d)).unwrap();
    }
    std::fs::write(t.join("workspace/src/app.py"), "# nothing yet\n").unwrap();
    let prompts = [
        ("src/app.py", "greet = hello"),
        ("src/extra.py", "extra = 1"),
        ("src/app.py", "greet = bonjour"),
    ];
    for (i, (path, content)) in prompts.iter().enumerate() {
        let k = i + 1;
        std::fs::create_dir_all(t.join(format!("rounds/{k}"))).unwrap();
        std::fs::write(
            t.join(format!("rounds/{k}/prompt.md")),
            prompt(&id, k, path, content),
        )
        .unwrap();
    }
    let hello = check("hello", "src/app.py", "contains = \"greet = hello\"");
    let extra = check("extra", "src/extra.py", "contains = \"extra = 1\"");
    let bonjour = check("bonjour", "src/app.py", "contains = \"greet = bonjour\"");
    let alias = "[alias]\ncumulative_score = \"score\"\n";
    let checks = [
        format!("{hello}{alias}"),
        format!("{hello}{extra}{alias}"),
        format!(
            "{bonjour}{extra}{}{alias}",
            check("no-hello", "src/app.py", "not_contains = \"greet = hello\"")
        ),
    ];
    for (i, c) in checks.iter().enumerate() {
        let k = i + 1;
        let text = if broken == Some(k) {
            "this is not toml [[[".to_owned()
        } else {
            c.clone()
        };
        std::fs::write(t.join(format!("hidden/rounds/{k}/checks.toml")), text).unwrap();
    }
    std::fs::write(
        t.join("task.toml"),
        format!(
            "id = \"{id}\"\nsuite = \"evocode\"\ntimeout_seconds = 600\nmetrics = [\"score\", \"checks_passed\", \"checks_total\", \"critical_missed\", \"regressions\", \"cumulative_score\"]\nafter_failed_round = \"{policy}\"\n\n[grader]\nruntime = \"runtimes/fixture/runtime.toml\"\ncommand = [\"/usr/local/bin/eval-fixture-grader\", \"--workspace\", \"{{workspace}}\", \"--hidden\", \"{{hidden}}\", \"--out\", \"{{out}}\"]\n\n[[rounds]]\ntimeout_seconds = 300\n\n[[rounds]]\n\n[[rounds]]\n"
        ),
    )
    .unwrap();
}

/// The project: the small demo (one task in `simple` and `icae`), its three EvoCode tasks
/// replaced by 3-round ones, the fixture runtime continuing its session with the same command,
/// and arm `v0.4-contract` hostile.
fn project() -> (tempfile::TempDir, std::path::PathBuf) {
    let (tmp, proj) = demo_project();
    let m = proj.join("matrix/demo.toml");
    for (keep, prefix) in [
        ("demo-simple-1", "demo-simple-"),
        ("demo-icae-1", "demo-icae-"),
    ] {
        let keep_line = format!("  \"{keep}\",");
        let task_line = format!("  \"{prefix}");
        edit(&m, |s| {
            s.lines()
                .filter(|l| *l == keep_line || !l.starts_with(&task_line))
                .map(|l| format!("{l}\n"))
                .collect()
        });
    }
    replace_in(&m, "repetitions = 2", "repetitions = 1");
    three_round_task(&proj, 1, None, "continue");
    three_round_task(&proj, 2, Some(2), "continue");
    three_round_task(&proj, 3, Some(2), "stop");
    replace_in(
        &proj.join("runtimes/fixture/runtime.toml"),
        "[grader]\n",
        "continue_command = [\n  \"/usr/local/bin/eval-fixture-agent\",\n  \"--prompt\", \"{prompt}\",\n  \"--workspace\", \"{workspace}\",\n  \"--base-url\", \"{base_url}\",\n  \"--profile\", \"{profile}\",\n]\n\n[grader]\n",
    );
    edit(
        &proj.join("protocols/demo/arms/v0.4-contract/profile.toml"),
        |s| {
            format!(
                "{s}\n[adversarial]\nread_paths = [\"/task/rounds/2/prompt.md\", \"/task/rounds/3/prompt.md\", \"/hidden/rounds/2/checks.toml\", \"/hidden/checks.toml\"]\nwrite_paths = [\"/hidden/rounds/3/checks.toml\", \"/task/prompt.md\", \"/out/score.json\", \"/workspace/score.json\", \"/workspace/out/score.json\"]\n"
            )
        },
    );
    (tmp, proj)
}

fn artifact(proj: &Path, digest: &str) -> Vec<u8> {
    let hex = digest.trim_start_matches("sha256:");
    std::fs::read(
        proj.join("runs/demo/artifacts/sha256")
            .join(&hex[..2])
            .join(hex),
    )
    .unwrap()
}

#[test]
fn three_rounds_run_in_one_container_each_graded_by_its_own_tests_only() {
    if !docker_available() {
        return;
    }
    static_binaries();
    let (_tmp, proj) = project();
    let (_identity, _sweep) = freeze_demo(&proj);
    let o = fixture_run(&proj, &["--concurrency", "2"]);
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
    let ledger = proj.join("runs/demo/ledger.sqlite");
    let v = eval(
        &proj,
        &["ledger", "verify", ledger.to_str().unwrap(), "--artifacts"],
    );
    assert_eq!(v.status.code(), Some(0), "{}", text(&v));
    let all = entries(&ledger);
    let outcomes = payloads(&all, "attempt_outcome");
    let started = payloads(&all, "round_started");
    let finished = payloads(&all, "round_finished");
    let evocode: Vec<&serde_json::Value> = outcomes
        .iter()
        .filter(|o| o["slot"].as_str().unwrap().contains("evocode"))
        .collect();
    // Three statistical attempts per task plus the two infrastructure slots of demo-evocode-1.
    assert_eq!(evocode.len(), 11, "{evocode:#?}");
    for out in &evocode {
        let attempt = out["attempt"].as_str().unwrap();
        let slot = out["slot"].as_str().unwrap();
        let arm = out["arm"].as_str().unwrap();
        assert_ne!(out["outcome"], "infra_fault", "{out}");
        let mine = |v: &Vec<serde_json::Value>| -> Vec<serde_json::Value> {
            v.iter()
                .filter(|p| p["attempt"] == attempt)
                .cloned()
                .collect()
        };
        let (st, fin) = (mine(&started), mine(&finished));
        assert_eq!(fin.len(), 3, "{attempt}: every round is recorded: {fin:#?}");
        for (i, f) in fin.iter().enumerate() {
            assert_eq!(f["round"], i as u64 + 1, "{f}");
        }
        let round = |k: usize| &fin[k - 1];
        // Round k's grade counts round k's checks only: 1, 2, then 3.
        let total = |k: usize| round(k)["metrics"]["checks_total"].as_f64();
        let task = if slot.contains("demo-evocode-1") {
            1
        } else if slot.contains("demo-evocode-2") {
            2
        } else {
            3
        };
        match task {
            1 => {
                assert_eq!(st.len(), 3, "{attempt}");
                for k in 1..=3 {
                    assert_eq!(
                        round(k)["status"],
                        "passed",
                        "{attempt} round {k}: {}",
                        round(k)
                    );
                    assert_eq!(total(k), Some(k as f64), "{attempt} round {k}");
                    assert_eq!(round(k)["metrics"]["score"], 100.0, "{attempt} round {k}");
                    assert_eq!(round(k)["harness"]["exit"], 0, "{attempt} round {k}");
                    assert!(
                        round(k)["model_turns"].as_u64().unwrap() >= 1,
                        "{}",
                        round(k)
                    );
                    let snap = round(k)["artifacts"]["snapshot"].as_str().unwrap();
                    assert!(!artifact(&proj, snap).is_empty());
                }
                // Round 1's snapshot holds round 1's work and not yet round 3's change.
                let snap1 = artifact(&proj, round(1)["artifacts"]["snapshot"].as_str().unwrap());
                assert!(contains(&snap1, b"greet = hello"));
                assert!(!contains(&snap1, b"greet = bonjour"));
                let snap3 = artifact(&proj, round(3)["artifacts"]["snapshot"].as_str().unwrap());
                assert!(contains(&snap3, b"greet = bonjour"));
                assert_eq!(out["outcome"], "completed", "{out}");
                assert_eq!(out["metrics"]["rounds_passed"], 3.0, "{out}");
                assert_eq!(
                    out["metrics"]["checks_total"], 3.0,
                    "the last round's: {out}"
                );
                assert_eq!(out["metrics"]["round1_checks_total"], 1.0, "{out}");
                assert_eq!(out["accounting"], "matched", "{out}");
            }
            2 => {
                assert_eq!(
                    st.len(),
                    3,
                    "{attempt}: a failed round does not stop `continue`"
                );
                assert_eq!(round(1)["status"], "passed", "{attempt}");
                assert_eq!(round(2)["status"], "failed", "{attempt}");
                assert_eq!(round(2)["graded"], "unscorable", "{attempt}");
                assert!(
                    round(2)["failures"]
                        .as_array()
                        .unwrap()
                        .contains(&"unscorable".into())
                );
                assert_eq!(round(3)["status"], "passed", "{attempt}");
                assert_eq!(total(3), Some(3.0));
                assert_eq!(out["metrics"]["rounds_passed"], 2.0, "{out}");
            }
            _ => {
                assert_eq!(st.len(), 2, "{attempt}: `stop` never begins round 3");
                assert_eq!(round(2)["status"], "failed", "{attempt}");
                assert_eq!(round(3)["status"], "unreached", "{attempt}");
                assert!(round(3).get("harness").is_none());
                assert_eq!(out["metrics"]["rounds_reached"], 2.0, "{out}");
                assert_eq!(out["metrics"]["checks_total"], 1.0, "round 1's: {out}");
            }
        }
        // `eval show --json`: the rounds exactly as the ledger recorded them, and each call's
        // round recomputed here from the raw ledger order (the last `round_started` before it).
        let shown = eval(&proj, &["show", attempt, "--matrix", "demo", "--json"]);
        assert_eq!(shown.status.code(), Some(0), "{}", text(&shown));
        let shown: serde_json::Value = serde_json::from_slice(&shown.stdout).unwrap();
        let rounds = shown["rounds"].as_array().unwrap();
        assert_eq!(rounds.len(), 3, "{attempt}: {shown:#}");
        for (i, r) in rounds.iter().enumerate() {
            let f = &fin[i];
            assert_eq!(r["round"], f["round"]);
            for key in ["status", "graded", "metrics", "model_turns", "tokens"] {
                assert_eq!(r[key], f[key], "{attempt} round {} {key}", i + 1);
            }
            assert_eq!(r["harness"], f.get("harness").cloned().unwrap_or_default());
            assert_eq!(
                r["failures"],
                f.get("failures").cloned().unwrap_or(serde_json::json!([]))
            );
            let names: Vec<&str> = r["artifacts"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a["name"].as_str().unwrap())
                .collect();
            for (name, digest) in f["artifacts"].as_object().unwrap() {
                let a = r["artifacts"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|a| a["name"] == name.as_str())
                    .unwrap_or_else(|| panic!("{attempt}: {name} in {names:?}"));
                assert_eq!(&a["digest"], digest);
                assert_eq!(
                    a["bytes"].as_u64(),
                    Some(artifact(&proj, digest.as_str().unwrap()).len() as u64)
                );
            }
            assert_eq!(r["started_entry"].is_null(), i >= st.len(), "{r}");
        }
        let starts: Vec<(u64, u64)> = all
            .iter()
            .filter(|e| e.kind == "round_started")
            .map(|e| (e.seq, e.payload_json().unwrap()))
            .filter(|(_, p)| p["attempt"] == attempt)
            .map(|(seq, p)| (seq, p["round"].as_u64().unwrap()))
            .collect();
        let calls = shown["calls"].as_array().unwrap();
        assert!(!calls.is_empty());
        for c in calls {
            let entry = c["entry"].as_u64().unwrap();
            let expected = starts
                .iter()
                .rev()
                .find(|(seq, _)| *seq < entry)
                .map(|x| x.1);
            assert_eq!(c["round"].as_u64(), expected, "{attempt}: {c}");
            let k = expected.unwrap() as usize;
            assert!(
                rounds[k - 1]["calls"]
                    .as_array()
                    .unwrap()
                    .contains(&c["call"]),
                "{attempt}: call {} is listed in round {k}",
                c["call"]
            );
        }
        let listed: usize = rounds
            .iter()
            .map(|r| r["calls"].as_array().unwrap().len())
            .sum();
        assert_eq!(
            listed,
            calls.len(),
            "{attempt}: every call in exactly one round"
        );
        let t = eval(&proj, &["show", attempt, "--matrix", "demo"]);
        let t = String::from_utf8_lossy(&t.stdout).into_owned();
        assert!(t.contains("\nrounds (3)\n"), "{t}");
        assert!(
            t.contains(&format!(
                "  round 1 {}",
                round(1)["status"].as_str().unwrap()
            )),
            "{t}"
        );
        // The hostile arm: nothing of a later round, nor any hidden file, was reachable, and
        // what it wrote changed no grade.
        if arm == "v0.4-contract" {
            let m: serde_json::Value = serde_json::from_slice(&artifact(
                &proj,
                out["artifacts"]["agent_metrics"].as_str().unwrap(),
            ))
            .unwrap();
            let probes = m["probes"].as_array().unwrap();
            assert!(probes.len() >= 9, "{probes:#?}");
            for p in probes {
                let name = p["probe"].as_str().unwrap();
                if name.contains("/workspace/") {
                    continue;
                }
                assert_eq!(p["ok"], false, "{attempt}: {p}");
            }
            if task == 1 {
                for k in 1..=3 {
                    assert_eq!(total(k), Some(k as f64), "{attempt} round {k}");
                    assert_eq!(round(k)["metrics"]["score"], 100.0);
                }
            }
        }
    }
    // The site's attempt page: a rounds table, one row per round with its status and its
    // harness's exit; a single-round attempt's page has none.
    let site = proj.join("site");
    let o = eval(
        &proj,
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
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
    let mut multi = 0;
    let mut single = 0;
    for page in std::fs::read_dir(site.join("attempts")).unwrap() {
        let html = std::fs::read_to_string(page.unwrap().path()).unwrap();
        let Some(out) = evocode.iter().find(|o| {
            html.contains(&format!(
                "data-attempt=\"{}\"",
                o["attempt"].as_str().unwrap()
            ))
        }) else {
            assert!(!html.contains("id=\"rounds\""), "{html}");
            single += 1;
            continue;
        };
        multi += 1;
        assert!(html.contains("<h2 id=\"rounds\">Rounds (3)</h2>"), "{html}");
        for f in finished.iter().filter(|f| f["attempt"] == out["attempt"]) {
            let k = f["round"].as_u64().unwrap();
            let status = f["status"].as_str().unwrap();
            let row = format!("<tr id=\"round-{k}\"><td>{k}</td><td class=\"");
            let at = html.find(&row).unwrap_or_else(|| panic!("{row} in {html}"));
            let tail = &html[at..];
            let tail = &tail[..tail.find("</tr>").unwrap()];
            assert!(tail.contains(&format!("\">{status}</td>")), "{tail}");
            if let Some(exit) = f["harness"]["exit"].as_i64() {
                assert!(tail.contains(&format!("exit {exit}")), "{tail}");
            }
            if let Some(snap) = f["artifacts"]["snapshot"].as_str() {
                assert!(tail.contains(snap), "{tail}");
            }
        }
    }
    assert_eq!(multi, evocode.len());
    assert!(single > 0);
}
