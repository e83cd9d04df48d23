//! `eval import v04-icae`: a synthetic ICAE-EVAL root written here (ICAE's layout, never its
//! data: a small PRD, an `oracle_data` with three hidden constraints, tiered cases) imported into
//! a temporary project: the task's prompt, PRD, hidden cases, grader and the stateful oracle's
//! frozen files, v0.4's three ICAE arms, a protocol that plans and freezes; eval's grader scores
//! a synthetic solution exactly as hand-computed from evaluate.py's rules; refusals (unpinned,
//! a missing file, a traversing alias or key, an oversized file) exit 2 naming the file and write
//! nothing.

pub(crate) use crate::support::import_icae::*;
use crate::support::{eval, text};
use serde_json::{Value, json};
use std::path::Path;

/// The library exploits' payloads, the bytes `eval` lays (`run/controls/payloads.rs`).
#[allow(dead_code)]
#[path = "../../engine/src/controls/payloads.rs"]
mod payloads;

fn import_fake(project: &Path, from: &Path, extra: &[&str]) -> std::process::Output {
    let id = format!("sha256:{}", "d".repeat(64));
    let gid = format!("sha256:{}", "e".repeat(64));
    import(project, from, &id, &gid, extra)
}

#[test]
fn an_icae_root_becomes_a_protocol_with_a_stateful_oracle_that_plans() {
    let tmp = tempfile::tempdir().unwrap();
    let from = tmp.path().join("icae");
    write_root(&from);
    let proj = project(tmp.path());
    let o = import_fake(&proj, &from, &ONE);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let t = proj.join(format!("protocols/icae/tasks/icae/{TASK}"));
    let read = |rel: &str| std::fs::read_to_string(t.join(rel)).unwrap();
    // The PRD: ICAE's start.md, a blank line, the Clarification block with eval's channel.
    let start = String::from_utf8(fixture("start.md")).unwrap();
    let prd = read("workspace/start.md");
    assert!(
        prd.starts_with(&format!(
            "{}\n\n---\n\n## Clarification\n",
            start.trim_end()
        )),
        "{prd}"
    );
    assert!(
        prd.contains("**Oracle** — ask your question with your tool for asking the user"),
        "{prd}"
    );
    assert!(
        prd.ends_with("At most 5 questions.\n\nAsk before you code.\n"),
        "{prd}"
    );
    assert!(!prd.contains("query_port") && !prd.contains("{{"), "{prd}");
    let prompt = read("prompt.md");
    assert!(
        prompt.contains("Target programming language: Python"),
        "{prompt}"
    );
    assert!(
        prompt.contains("rcb_tests/stdout/<cases-dir>/{stem}@{idx:03}.txt"),
        "{prompt}"
    );
    assert!(!prompt.contains("docker exec"), "{prompt}");
    // The oracle's frozen files: init.md as is; the brief as ICAE's build_system_prompt injects
    // it (json.dumps indent 2, the file's key order), no trailing newline.
    assert_eq!(
        std::fs::read(t.join("hidden/oracle/init.md")).unwrap(),
        fixture("oracle/init.md")
    );
    let brief = read("hidden/oracle/oracle_data.json");
    let want = "{\n  \"hidden_constraints\": [\n    {\n      \"constraint_id\": \"C001\",\n      \"trigger_keywords\": [\n        \"empty input\",\n        \"empty string\"\n      ],\n      \"oracle_response\": \"An empty input returns an empty list, never an error.\"\n    },";
    assert!(brief.starts_with(want), "{brief}");
    // And all of it, as Python itself writes it.
    let python = std::env::var("EVAL_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let py = std::process::Command::new(&python)
        .args([
            "-c",
            "import json,sys; sys.stdout.write(json.dumps(json.load(open(sys.argv[1]))['oracle_data'], ensure_ascii=False, indent=2))",
        ])
        .arg(from.join(format!("user_agent/prd_json/{ALIAS}.json")))
        .output()
        .expect("python3 runs");
    assert_eq!(brief, String::from_utf8(py.stdout).unwrap());
    assert!(brief.ends_with("\n  \"fallback_response\": \"That is not specified; choose a reasonable behaviour and document it.\"\n}"), "{brief}");
    // The cases, byte for byte, with expected outputs (grader-side only); README.txt left out.
    for (tier, file, _) in cases() {
        assert_eq!(
            std::fs::read(t.join(format!("hidden/cases/{tier}/{file}"))).unwrap(),
            std::fs::read(from.join(format!("rcb_tests_repos/{KEY}/rcb_tests/{tier}/{file}")))
                .unwrap()
        );
    }
    assert!(!t.join("hidden/cases/test_cases/README.txt").exists());
    assert!(t.join("hidden/public/grade.py").is_file());
    // The grader's run stage gets the same cases without a single expected output.
    for (tier, file, _) in cases() {
        let public: Value = serde_json::from_slice(
            &std::fs::read(t.join(format!("hidden/public/cases/{tier}/{file}"))).unwrap(),
        )
        .unwrap();
        let authoritative: Value = serde_json::from_slice(
            &std::fs::read(t.join(format!("hidden/cases/{tier}/{file}"))).unwrap(),
        )
        .unwrap();
        let n = authoritative["cases"].as_array().unwrap().len();
        assert_eq!(public["cases"].as_array().unwrap().len(), n, "{public}");
        assert!(!public.to_string().contains("expected_output"), "{public}");
    }
    assert!(!t.join("workspace/rcb_tests").exists());
    let toml = read("task.toml");
    for want in [
        "answered_by = \"stateful\"",
        "brief_heading = \"# Injected oracle_data (your single source of truth)\"",
        "record_field = \"_internal_log.triggers_hit\"",
        "fallback_answer = \"That is not specified; choose a reasonable behaviour and document it.\"",
        "scaffolding = [\"ARCH001\", \"HARNESS*\", \"TC_*\"]",
        "max_questions = 5",
        "ICAE alias realcode@007",
    ] {
        assert!(toml.contains(want), "{want}: {toml}");
    }
    // v0.4's ICAE arms: armPluginConfig of the frozen manifest's arms.
    let arms = proj.join("protocols/icae/arms");
    let patch = |a: &str| std::fs::read_to_string(arms.join(a).join("cordis.patch.yml")).unwrap();
    assert!(patch("v0.4-critical").ends_with("- id: plan-lattice\n  config:\n    activationMode: auto\n    clarificationPolicy: critical\n"));
    assert!(
        patch("v0.4-never").ends_with("    activationMode: auto\n    clarificationPolicy: never\n")
    );
    assert!(!patch("native").contains("plan-lattice"));
    assert!(!arms.join(format!("native/{PACKAGE}")).exists());
    assert!(arms.join(format!("v0.4-never/{PACKAGE}")).is_file());
    assert!(
        proj.join("runtimes/dsh-poly/eval-support/index.js")
            .is_file()
    );
    let protocol = std::fs::read_to_string(proj.join("protocols/icae/protocol.toml")).unwrap();
    assert!(
        protocol.contains("Deviation from ICAE: graded without network"),
        "{protocol}"
    );
    assert!(
        protocol.contains("metric = \"oracle_constraints_missed\""),
        "{protocol}"
    );
    // The protocol loads and plans: one task x 3 arms x 2 repetitions, plus 2 infrastructure slots.
    let o = eval(&proj, &["plan", "--matrix", "icae", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let plan: Vec<Value> = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(plan.len(), 3 * 2 + 2, "{plan:?}");
    // Nothing is overwritten.
    let again = import_fake(&proj, &from, &ONE);
    assert_eq!(again.status.code(), Some(2), "{}", text(&again));
    assert!(text(&again).contains("exists"), "{}", text(&again));
}

#[test]
fn the_icae_import_refuses_unpinned_missing_traversing_and_oversized_inputs() {
    let tmp = tempfile::tempdir().unwrap();
    let from = tmp.path().join("icae");
    write_root(&from);
    let proj = project(tmp.path());
    let refused = |extra: &[&str], want: &str| {
        let o = import_fake(&proj, &from, extra);
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        assert!(text(&o).contains(want), "{want}: {}", text(&o));
        assert_eq!(
            std::fs::read_dir(&proj).unwrap().count(),
            0,
            "nothing written"
        );
    };
    refused(&["--tasks", TASK], "--allow-unpinned");
    // All six by default: the five absent ones are missing, named by the file.
    refused(
        &["--allow-unpinned"],
        "repo_alias.json: no record has key \"google-gemini__deprecated-generative-ai-js\"",
    );
    refused(
        &["--allow-unpinned", "--tasks", "icae-rust-01"],
        "unknown task \"icae-rust-01\"",
    );
    let prd = from.join(format!("fuzzy_prds/{ALIAS}/start.md"));
    std::fs::rename(&prd, from.join("start.md.away")).unwrap();
    refused(&ONE, &format!("fuzzy_prds/{ALIAS}/start.md"));
    std::fs::rename(from.join("start.md.away"), &prd).unwrap();
    // A traversing key or alias in repo_alias.json.
    let aliases = std::fs::read(from.join("repo_alias.json")).unwrap();
    std::fs::write(
        from.join("repo_alias.json"),
        json!({ALIAS: {"key": "../../etc"}, "x": {"key": KEY}}).to_string(),
    )
    .unwrap();
    refused(
        &ONE,
        "repo_alias.json: \"realcode@007\".key = \"../../etc\": not a plain name",
    );
    std::fs::write(
        from.join("repo_alias.json"),
        json!({"../up": {"key": KEY}}).to_string(),
    )
    .unwrap();
    refused(&ONE, "repo_alias.json: alias \"../up\": not a plain name");
    std::fs::write(from.join("repo_alias.json"), &aliases).unwrap();
    // A directory on the way that is a link.
    let tests = from.join(format!("rcb_tests_repos/{KEY}"));
    std::fs::rename(&tests, from.join("elsewhere")).unwrap();
    std::os::unix::fs::symlink(from.join("elsewhere"), &tests).unwrap();
    refused(
        &ONE,
        &format!("rcb_tests_repos/{KEY}: not a regular file (a symbolic link"),
    );
    std::fs::remove_file(&tests).unwrap();
    std::fs::rename(from.join("elsewhere"), &tests).unwrap();
    // An oversized case file (sparse: no disk used).
    let big = tests.join("rcb_tests/test_cases/big.json");
    std::fs::File::create(&big)
        .unwrap()
        .set_len((4 << 20) + 1)
        .unwrap();
    refused(
        &ONE,
        "rcb_tests/test_cases/big.json: larger than 4194304 bytes",
    );
    std::fs::remove_file(&big).unwrap();
    // A brief without constraint ids; a case without an expected output.
    let pj = from.join(format!("user_agent/prd_json/{ALIAS}.json"));
    let saved = std::fs::read(&pj).unwrap();
    std::fs::write(
        &pj,
        json!({"oracle_data": {"hidden_constraints": [{"id": "C1"}]}}).to_string(),
    )
    .unwrap();
    refused(
        &ONE,
        "oracle_data.hidden_constraints[0].constraint_id: missing or not a string",
    );
    std::fs::write(&pj, &saved).unwrap();
    std::fs::write(
        tests.join("rcb_tests/enhanced_test_cases/more.json"),
        r#"{"cases":[{"input":"a"}]}"#,
    )
    .unwrap();
    refused(&ONE, "more.json: cases[0].expected_output: missing");
}

/// The synthetic solution an agent leaves: `shout.py` (misses C001: an empty input prints `!`;
/// doubles no `!`) and an rcb_tests/test.sh that runs it per case, writing stdout files 1-based
/// (evaluate.py aligns by the smallest index written).
pub fn write_solution(ws: &Path) {
    let w = |rel: &str, body: &str| {
        let p = ws.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, body).unwrap();
    };
    w("shout.py", SHOUT_PY);
    w("rcb_tests/test.sh", TEST_SH);
    // The agent's own copy of a tier is replaced by the authoritative one.
    w("rcb_tests/test_cases/hidden.json", "{\"cases\": []}");
}

/// Runs the imported grade.py's two stages on the host as eval's containers would: the run stage
/// over `ws` and `hidden/public` into a fresh capture, then the score stage over `hidden` and that
/// capture into `out/score.json`.
fn grade_in_stages(python: &str, hidden: &Path, ws: &Path, tmp: &Path, name: &str) -> Value {
    let capture = tmp.join(format!("{name}.capture"));
    let out = tmp.join(name);
    std::fs::create_dir(&capture).unwrap();
    std::fs::create_dir(&out).unwrap();
    let grade = hidden.join("public/grade.py");
    let o = std::process::Command::new(python)
        .arg(&grade)
        .arg("run")
        .args([ws, &hidden.join("public"), &capture])
        .env("EVAL_ICAE_GRADER_SCRATCH", tmp.join("scratch"))
        .output()
        .expect("python3 runs");
    assert!(o.status.success(), "{}", text(&o));
    let o = std::process::Command::new(python)
        .arg(&grade)
        .arg("score")
        .args([hidden, &capture, &out.join("score.json")])
        .output()
        .expect("python3 runs");
    assert!(o.status.success(), "{}", text(&o));
    serde_json::from_slice(&std::fs::read(out.join("score.json")).unwrap()).unwrap()
}

#[test]
fn evals_icae_grader_scores_a_solution_as_evaluate_py_does() {
    let python = std::env::var("EVAL_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let tmp = tempfile::tempdir().unwrap();
    let from = tmp.path().join("icae");
    write_root(&from);
    let proj = project(tmp.path());
    let o = import_fake(&proj, &from, &ONE);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let hidden = proj.join(format!("protocols/icae/tasks/icae/{TASK}/hidden"));
    let ws = tmp.path().join("ws");
    write_solution(&ws);
    let score = grade_in_stages(&python, &hidden, &ws, tmp.path(), "out");
    let m = &score["metrics"];
    assert_eq!(m["hidden_score"], json!(HAND_SCORE), "{score:#}");
    for (k, v) in [
        ("public_passed", 1.0),
        ("public_total", 1.0),
        ("hidden_passed", 2.0),
        ("hidden_total", 3.0),
        ("enhanced_passed", 1.0),
        ("enhanced_total", 2.0),
    ] {
        assert_eq!(m[k], json!(v), "{k}: {score:#}");
    }
    assert_eq!(
        score["objective"]["hidden"]["mismatches"][0]["case"], "hidden[1]",
        "{score:#}"
    );
    // No test.sh: ICAE's "no rcb_tests/test.sh in generated code", score 0.
    std::fs::remove_file(ws.join("rcb_tests/test.sh")).unwrap();
    let score = grade_in_stages(&python, &hidden, &ws, tmp.path(), "out2");
    assert_eq!(score["metrics"]["hidden_score"], json!(0.0));
    assert_eq!(
        score["objective"]["error"],
        "no rcb_tests/test.sh in generated code"
    );
}

/// The attack of issue 33 item 1 against the grader of `1a73df8`
/// (`tests/fixtures/old-graders/icae-grade.py`, one process beside the hidden cases): the
/// library's `exploit:read-answers` test.sh, with no implementation at all, finds the hidden
/// directory in its parent's command line and copies every expected output into its outputs —
/// full marks. (Eval's two-stage grader is checked against it in containers:
/// `grader_controls_icae.rs`.)
#[test]
fn the_one_stage_icae_grader_gives_read_answers_full_marks_without_an_implementation() {
    let python = std::env::var("EVAL_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let tmp = tempfile::tempdir().unwrap();
    let from = tmp.path().join("icae");
    write_root(&from);
    let proj = project(tmp.path());
    let o = import_fake(&proj, &from, &ONE);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // The old layout: the cases beside grade.py under hidden/.
    let hidden = proj.join(format!("protocols/icae/tasks/icae/{TASK}/hidden"));
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(ws.join("rcb_tests")).unwrap();
    std::fs::write(ws.join("rcb_tests/test.sh"), payloads::READ_ANSWERS_TEST_SH).unwrap();
    let out = tmp.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let o = std::process::Command::new(&python)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/old-graders/icae-grade.py"))
        .args([&ws, &hidden, &out.join("score.json")])
        .env("EVAL_ICAE_GRADER_SCRATCH", tmp.path().join("scratch"))
        .output()
        .expect("python3 runs");
    assert!(o.status.success(), "{}", text(&o));
    let score: Value =
        serde_json::from_slice(&std::fs::read(out.join("score.json")).unwrap()).unwrap();
    assert_eq!(score["metrics"]["hidden_score"], json!(100.0), "{score:#}");
}

fn tree(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(dir).unwrap().to_string_lossy().into_owned();
                out.push((rel, std::fs::read(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}

/// The Zenodo archives beside the repository's own two files: checked against v0.4's pins
/// (synthetic ones are refused naming both digests), read with --allow-unpinned into exactly
/// the task a directory import writes; one archive alone, and a link member, are refused.
#[test]
fn the_zenodo_archives_are_pinned_and_read_like_the_extracted_root() {
    let tmp = tempfile::tempdir().unwrap();
    let from = tmp.path().join("icae");
    write_root(&from);
    let zen = tmp.path().join("zenodo");
    std::fs::create_dir_all(zen.join("user_agent")).unwrap();
    for f in ["user_agent/init.md", "user_agent/fuzzy_suffix.md"] {
        std::fs::copy(from.join(f), zen.join(f)).unwrap();
    }
    tgz(
        &from,
        &zen.join("rcb_tests_repos.tar.gz"),
        &["rcb_tests_repos"],
    );
    let proj = project(tmp.path());
    // Only one archive: refused, naming the other.
    let o = import_fake(&proj, &zen, &ONE);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("icae_prd_bundle.tar.gz: missing, while rcb_tests_repos.tar.gz is there"),
        "{}",
        text(&o)
    );
    tgz(
        &from,
        &zen.join("icae_prd_bundle.tar.gz"),
        &["repo_alias.json", "fuzzy_prds", "user_agent/prd_json"],
    );
    // Not v0.4's bytes: refused naming both digests.
    let o = import_fake(&proj, &zen, &["--tasks", TASK]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("rcb_tests_repos.tar.gz: sha256 ")
            && text(&o)
                .contains("has f746c560e724d0dad12d512ead771d91de91d4b3e6051335728c305e2adff204"),
        "{}",
        text(&o)
    );
    assert_eq!(
        std::fs::read_dir(&proj).unwrap().count(),
        0,
        "nothing written"
    );
    // Read: the task is byte for byte what the extracted root gives, with no host tool on the
    // PATH (the archives are decompressed in-process; the host's `gzip` was needed before).
    let no_tools = tmp.path().join("no-tools");
    std::fs::create_dir_all(&no_tools).unwrap();
    let (id, gid) = (
        format!("sha256:{}", "d".repeat(64)),
        format!("sha256:{}", "e".repeat(64)),
    );
    let o = import_env(
        &proj,
        &zen,
        &id,
        &gid,
        &ONE,
        &[("PATH", no_tools.to_str().unwrap())],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let by_dir = project(&tmp.path().join("second"));
    let o = import_fake(&by_dir, &from, &ONE);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let task = format!("protocols/icae/tasks/icae/{TASK}");
    assert_eq!(tree(&proj.join(&task)), tree(&by_dir.join(&task)));
    let protocol = std::fs::read_to_string(proj.join("protocols/icae/protocol.toml")).unwrap();
    assert!(
        protocol.contains("#   icae_prd_bundle.tar.gz: sha256 "),
        "{protocol}"
    );
    // A link member in the cases archive: refused naming it.
    let cases = from.join(format!("rcb_tests_repos/{KEY}/rcb_tests/test_cases"));
    std::os::unix::fs::symlink("/etc/passwd", cases.join("link.json")).unwrap();
    tgz(
        &from,
        &zen.join("rcb_tests_repos.tar.gz.new"),
        &["rcb_tests_repos"],
    );
    std::fs::rename(
        zen.join("rcb_tests_repos.tar.gz.new"),
        zen.join("rcb_tests_repos.tar.gz"),
    )
    .unwrap();
    let again = project(&tmp.path().join("third"));
    let o = import_fake(&again, &zen, &ONE);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains(&format!("rcb_tests_repos.tar.gz: member \"rcb_tests_repos/{KEY}/rcb_tests/test_cases/link.json\": not a regular file or directory")),
        "{}",
        text(&o)
    );
}
