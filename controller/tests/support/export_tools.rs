//! `eval export` read by the other tools' own code: Harbor's `TrajectoryValidator` (the `harbor`
//! wheel on `.venv`'s path, scripts/ensure-python.sh), Inspect's CLI and its log viewer in
//! headless Chromium; and the check, shared by the fixture and the real-Harness tests, that
//! every exported trajectory says what the ledger says.

use super::chromium::{HEADLESS, chromium};
use super::{eval, text};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The interpreter with the yardsticks installed (scripts/ensure-python.sh); the test fails
/// rather than skip without it.
pub fn python() -> String {
    std::env::var("EVAL_TEST_PYTHON").expect(
        "EVAL_TEST_PYTHON is unset: set it to the interpreter scripts/ensure-python.sh prints",
    )
}

/// inspect-ai's own command line, installed beside the interpreter.
pub fn inspect_cli() -> PathBuf {
    Path::new(&python()).with_file_name("inspect")
}

/// Runs Harbor's own validator on every `*.json` in `dir`: file name → its errors (empty: valid).
pub fn harbor_validate(dir: &Path) -> BTreeMap<String, Vec<String>> {
    let script = r#"
import glob, json, os, sys
from harbor.utils.trajectory_validator import TrajectoryValidator
out = {}
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    v = TrajectoryValidator()
    v.validate(f)
    out[os.path.basename(f)] = v.get_errors()
print(json.dumps(out))
"#;
    let o = std::process::Command::new(python())
        .args(["-c", script])
        .arg(dir)
        .output()
        .expect("run the interpreter");
    assert!(
        o.status.success(),
        "Harbor's validator did not run (is its wheel on the path? scripts/ensure-python.sh): {}",
        text(&o)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

pub fn read_json(p: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
}

/// `eval export atif` of every attempt of `matrix` (state under `dir/runs`) into `out`; asserts
/// each file passes Harbor's validator and says what the ledger says: the attempt, the ledger
/// head and the outcome entry by hash, one agent step per agent call in the receipt's order with
/// that call's metered tokens, and the attempt's meter as the final metrics. Returns the
/// trajectories by attempt id.
pub fn export_atif_checked(dir: &Path, matrix: &str, out: &Path) -> BTreeMap<String, Value> {
    let o = eval(
        dir,
        &[
            "export",
            "atif",
            "--matrix",
            matrix,
            "--out",
            out.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "eval export atif: {}", text(&o));
    let verdicts = harbor_validate(out);
    for (f, errors) in &verdicts {
        assert!(errors.is_empty(), "{f}: {errors:?}");
    }
    let all = super::entries(&dir.join(format!("runs/{matrix}/ledger.sqlite")));
    assert_eq!(
        verdicts.len(),
        super::payloads(&all, "attempt_started").len(),
        "one file per attempt"
    );
    let head = all.last().unwrap();
    let calls = super::payloads(&all, "model_call");
    let mut by_id = BTreeMap::new();
    for e in all.iter().filter(|e| e.kind == "attempt_outcome") {
        let p: Value = serde_json::from_slice(&e.payload).unwrap();
        let id = p["attempt"].as_str().unwrap();
        let t = read_json(&out.join(format!("{}.json", id.replace('#', "."))));
        assert_eq!(t["trajectory_id"], id);
        let ev = &t["extra"]["evidence"];
        assert_eq!(ev["ledger_head"]["seq"], head.seq);
        assert_eq!(ev["ledger_head"]["hash"], head.hash.to_string().as_str());
        assert_eq!(ev["attempt_outcome"]["seq"], e.seq);
        assert_eq!(ev["attempt_outcome"]["hash"], e.hash.to_string().as_str());
        assert_eq!(t["extra"]["outcome"]["outcome"], p["outcome"]);
        let mine: Vec<&Value> = calls
            .iter()
            .filter(|c| c["attempt"] == id && c["role"] == "agent")
            .collect();
        let steps = agent_steps(&t);
        assert_eq!(
            steps.len(),
            mine.len(),
            "{id}: one agent step per agent call"
        );
        for (s, c) in steps.iter().zip(&mine) {
            assert_eq!(s["extra"]["call"], c["seq"], "{id}");
            assert_eq!(s["metrics"]["prompt_tokens"], c["tokens"]["input"], "{id}");
            assert_eq!(s["metrics"]["completion_tokens"], c["tokens"]["output"]);
            assert_eq!(s["metrics"]["cached_tokens"], c["tokens"]["cached"]);
        }
        let fm = &t["final_metrics"];
        assert_eq!(fm["total_prompt_tokens"], p["tokens"]["input"], "{id}");
        assert_eq!(fm["total_completion_tokens"], p["tokens"]["output"], "{id}");
        assert_eq!(fm["total_steps"], t["steps"].as_array().unwrap().len());
        by_id.insert(id.to_owned(), t);
    }
    by_id
}

/// A trajectory's own agent steps (not the earlier rounds' context it copies).
pub fn agent_steps(t: &Value) -> Vec<&Value> {
    t["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["source"] == "agent" && s.get("is_copied_context").is_none())
        .collect()
}

/// Opens `route` of the `inspect view bundle` in `bundle` in headless Chromium
/// (support/inspect_view.py), waits until the page shows `want`, saves a screenshot at `png` and
/// returns the page's text.
pub fn view_in_chromium(bundle: &Path, route: &str, want: &str, png: &Path) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/inspect_view.py");
    let o = std::process::Command::new(python())
        .arg(script)
        .arg(chromium())
        .arg(bundle)
        .args([route, want])
        .arg(png)
        // A hang detector only: the page shows its sample in a few seconds.
        .arg("300")
        .args(HEADLESS)
        .output()
        .expect("run the interpreter");
    assert!(o.status.success(), "the viewer in Chromium: {}", text(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    v["text"].as_str().unwrap().to_owned()
}

/// The ATIF export of a run of the real Harness ([`export_atif_checked`] into `dir/atif`), read
/// beside `eval show --json`: each trajectory's agent steps are `eval show`'s agent calls with
/// their tokens, its final metrics `eval show`'s meter; the model called the Harness's tools
/// (`write` among them) and every tool call's result is its step's observation; with `rounds`
/// above 1, a system step opens each round in order and the agent steps run through the rounds.
pub fn check_real_harness_atif(dir: &Path, matrix: &str, rounds: u64) {
    let trajectories = export_atif_checked(dir, matrix, &dir.join("atif"));
    assert!(!trajectories.is_empty(), "no attempt exported");
    for (id, t) in &trajectories {
        let o = eval(dir, &["show", id, "--matrix", matrix, "--json"]);
        assert!(o.status.success(), "eval show {id}: {}", text(&o));
        let show: Value = serde_json::from_slice(&o.stdout).unwrap();
        let fm = &t["final_metrics"];
        assert_eq!(fm["total_prompt_tokens"], show["tokens"]["input"], "{id}");
        assert_eq!(fm["total_completion_tokens"], show["tokens"]["output"]);
        assert_eq!(fm["total_cached_tokens"], show["tokens"]["cached"], "{id}");
        let shown: Vec<&Value> = show["calls"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["role"] == "agent")
            .collect();
        let steps = agent_steps(t);
        assert_eq!(steps.len(), shown.len(), "{id}: eval show's agent calls");
        for (s, c) in steps.iter().zip(&shown) {
            assert_eq!(s["extra"]["call"], c["call"], "{id}");
            assert_eq!(s["metrics"]["prompt_tokens"], c["tokens"]["input"], "{id}");
            assert_eq!(s["metrics"]["completion_tokens"], c["tokens"]["output"]);
        }
        let mut called = Vec::new();
        for s in &steps {
            for c in s["tool_calls"].as_array().into_iter().flatten() {
                called.push(c["function_name"].as_str().unwrap().to_owned());
                let answered = s["observation"]["results"]
                    .as_array()
                    .is_some_and(|rs| rs.iter().any(|r| r["source_call_id"] == c["tool_call_id"]));
                assert!(answered, "{id}: tool call without its result: {s}");
            }
        }
        assert!(called.iter().any(|n| n == "write"), "{id}: {called:?}");
        eprintln!(
            "atif {id}: Harbor-valid; {} steps, {} agent steps, tool calls {called:?}, \
             tokens in/out/cached {}/{}/{}",
            t["steps"].as_array().unwrap().len(),
            steps.len(),
            fm["total_prompt_tokens"],
            fm["total_completion_tokens"],
            fm["total_cached_tokens"]
        );
        if rounds > 1 {
            let opened: Vec<&str> = t["steps"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|s| s["source"] == "system" && s["extra"]["round"].is_u64())
                .map(|s| s["message"].as_str().unwrap())
                .collect();
            let want: Vec<String> = (1..=rounds)
                .map(|k| format!("round {k} of {rounds} began"))
                .collect();
            assert_eq!(opened, want, "{id}");
            let of_steps: Vec<u64> = steps
                .iter()
                .map(|s| s["extra"]["round"].as_u64().unwrap())
                .collect();
            assert!(of_steps.is_sorted(), "{id}: {of_steps:?}");
            assert_eq!(of_steps.first(), Some(&1), "{id}");
            assert_eq!(of_steps.last(), Some(&rounds), "{id}");
        }
    }
}
