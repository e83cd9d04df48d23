//! `eval import v04-icae`: a synthetic ICAE-EVAL root written here (ICAE's layout, never its
//! data: a small PRD, an `oracle_data` with three hidden constraints, tiered cases) imported into
//! a temporary project: the task's prompt, PRD, hidden cases, grader and the stateful oracle's
//! frozen files, v0.4's three ICAE arms, a protocol that plans and freezes; eval's grader scores
//! a synthetic solution exactly as hand-computed from evaluate.py's rules; refusals (unpinned,
//! a missing file, a traversing alias or key, an oversized file) exit 2 naming the file and write
//! nothing.
//!
//! The tests of this behaviour that need a Docker engine; the rest are in `tests/it/import_icae.rs`.

pub(crate) use crate::support::import_icae::*;
use crate::support::{eval, text};
use serde_json::{Value, json};

/// `eval freeze` of what the import wrote, with the real dsh base and the v0.4 grader base.
#[test]
fn freeze_of_the_imported_icae_protocol_exits_0() {
    if !crate::support::docker_available() {
        return;
    }
    let var = |v: &str| {
        std::env::var(v).unwrap_or_else(|_| {
            panic!("{v} is not set: run `export $(scripts/ensure-harness-images.sh)` first")
        })
    };
    let (dsh, grader) = (
        var("EVAL_TEST_DSH_POLY_IMAGE"),
        var("EVAL_TEST_V04_GRADER_IMAGE"),
    );
    let tmp = tempfile::tempdir().unwrap();
    let from = tmp.path().join("icae");
    write_root(&from);
    let proj = project(tmp.path());
    let o = import(&proj, &from, dsh.trim(), grader.trim(), &ONE);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = eval(&proj, &["freeze", "--protocol", "icae"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = eval(&proj, &["verify", "--protocol", "icae"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

/// The imported task through the real `eval run`: its bundle (prompt, PRD, hidden cases,
/// grade.py, the oracle's frozen files, task.toml's [oracle] tables) in the hostile project's
/// icae slot, a busybox agent that asks two questions through `/_eval/clarify`, writes the
/// synthetic solution and looks for the hidden files, the scripted DeepSeek upstream as ICAE's
/// oracle model, and the imported grader runtime on the v0.4 grader base. The grade is the
/// hand-computed 60, the recorded triggers give the missed constraints, the oracle's system
/// message is ICAE's composition of init.md and the brief, the agent never sees the brief or the
/// answers, and the report releases.
#[test]
fn an_imported_icae_task_runs_with_the_fixture_agent_and_grades_as_hand_computed() {
    use crate::support::contains;
    use crate::support::dsh::{DeepSeekUpstream, Kind};
    use crate::support::hostile::*;
    if !crate::support::docker_available() {
        return;
    }
    crate::support::static_binaries();
    let grader_image = std::env::var("EVAL_TEST_V04_GRADER_IMAGE").unwrap_or_else(|_| {
        panic!("EVAL_TEST_V04_GRADER_IMAGE is not set: run `export $(scripts/ensure-harness-images.sh)` first")
    });
    let q1 = "What should shout print for an empty input?";
    let q2 = "Which separator splits the fields?";
    let script = format!(
        r#"ask() {{ wget -q -O - --header 'Content-Type: application/json' --post-data "$1" "$CTL/clarify"; echo; }}
{{
ask '{{"question":"{q1}"}}'
ask '{{"question":"{q2}"}}'
}} > "$W/answers.txt" 2>&1
mkdir -p "$W/rcb_tests"
$BB cat > "$W/shout.py" <<'EVAL_PY_EOF'
{SHOUT_PY}EVAL_PY_EOF
$BB cat > "$W/rcb_tests/test.sh" <<'EVAL_SH_EOF'
{TEST_SH}EVAL_SH_EOF
{{
  $BB ls -R /hidden /oracle
  $BB cat /hidden/cases/test_cases/hidden.json /hidden/oracle/oracle_data.json
  $BB grep -rl hidden_constraints /workspace /home /tmp /opt /etc
}} > "$W/probe.txt" 2>&1
metrics
exit 0
"#
    );
    let cfg = Cfg {
        model_oracle: true,
        ..Cfg::default()
    };
    let p = Project::new(&script, &cfg);
    // Import into a scratch project, then move the task's bundle into the hostile project's
    // icae slot and its grader runtime beside the others.
    let tmp = tempfile::tempdir().unwrap();
    let from = tmp.path().join("icae");
    write_root(&from);
    let proj = project(tmp.path());
    let o = import(
        &proj,
        &from,
        &format!("sha256:{}", "d".repeat(64)),
        grader_image.trim(),
        &ONE,
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let src = proj.join(format!("protocols/icae/tasks/icae/{TASK}"));
    let slot = p.dir.join("protocols/demo/tasks/icae/demo-icae-1");
    std::fs::remove_dir_all(&slot).unwrap();
    copy_tree(&src, &slot);
    copy_tree(
        &proj.join("runtimes/v04-icae-grader"),
        &p.dir.join("runtimes/v04-icae-grader"),
    );
    crate::support::edit(&slot.join("task.toml"), |t| {
        t.replace(&format!("id = \"{TASK}\""), "id = \"demo-icae-1\"")
            .replace("timeout_seconds = 3600", "timeout_seconds = 300")
    });
    crate::support::replace_in(
        &p.dir.join("protocols/demo/protocol.toml"),
        "metrics = [\"score\", \"model_turns\", \"tokens\", \"duration_seconds\"]",
        "metrics = [\"hidden_score\", \"oracle_constraints_missed\", \"oracle_constraints_missed_substantive\", \"model_turns\", \"tokens\", \"duration_seconds\"]",
    );
    crate::support::replace_in(
        &p.dir.join("protocols/demo/protocol.toml"),
        "[missing_data.values]\nscore = 0.0\n",
        "[missing_data.values]\nhidden_score = 0.0\noracle_constraints_missed = 3.0\noracle_constraints_missed_substantive = 3.0\n",
    );
    let ds = DeepSeekUpstream::start(&p.key, "# eval-icae-import-test");
    let r = p.run_against(&ds.url());
    let outcome = r.assert_one_final_outcome();
    assert_eq!(outcome["outcome"], "completed", "{outcome}\n{}", r.text);

    // The grade: the hand-computed hidden-feature score and tiers.
    let m = &outcome["metrics"];
    assert_eq!(m["hidden_score"], json!(HAND_SCORE), "{outcome}");
    assert_eq!(m["hidden_passed"], json!(2.0), "{outcome}");
    assert_eq!(m["enhanced_total"], json!(2.0), "{outcome}");
    // C001 and C002 were triggered, ARCH001 (scaffolding) never: 1 missed, 0 substantive.
    assert_eq!(m["oracle_constraints_missed"], json!(1.0), "{outcome}");
    assert_eq!(
        m["oracle_constraints_missed_substantive"],
        json!(0.0),
        "{outcome}"
    );
    let clar = r.hostile("clarification");
    let recorded: Vec<Value> = clar.iter().map(|c| c["recorded"].clone()).collect();
    assert_eq!(recorded, [json!(["C001"]), json!(["C002"])], "{clar:#?}");

    // The oracle was briefed as ICAE's user_agent.py briefs it.
    let oracle: Vec<Value> = ds
        .served()
        .into_iter()
        .filter(|s| s.kind == Kind::Oracle)
        .map(|s| s.request)
        .collect();
    assert_eq!(oracle.len(), 2, "{oracle:#?}");
    let init = String::from_utf8(fixture("oracle/init.md")).unwrap();
    let brief = std::fs::read_to_string(slot.join("hidden/oracle/oracle_data.json")).unwrap();
    assert_eq!(
        oracle[0]["messages"][0]["content"],
        json!(format!(
            "{init}\n\n# Injected oracle_data (your single source of truth)\n```json\n{brief}\n```\n"
        ))
    );

    // The agent got the answers, never the brief or the expected outputs.
    let ws = artifact(&p.dir, &outcome, "workspace").expect("the workspace archive");
    assert!(
        contains(&ws, b"An empty input returns an empty list"),
        "answers missing"
    );
    // (test.sh names 'expected_output' in single quotes; case files key it in double ones)
    for needle in [
        "hidden_constraints",
        "\"expected_output\"",
        "BRIEF-CANARY-ARCH001",
    ] {
        assert!(
            !contains(&ws, needle.as_bytes()),
            "the agent's workspace holds {needle:?}"
        );
    }
    // `eval show`: the attempt's question-and-answer log (digests, triggers) beside its grade.
    let shown = eval(
        &p.dir,
        &[
            "show",
            outcome["attempt"].as_str().unwrap(),
            "--matrix",
            "demo",
        ],
    );
    let shown = text(&shown);
    let sha = |s: &str| eval_evidence::ledger::Digest::of(s.as_bytes()).to_string();
    assert!(
        shown.contains(&format!("turn 1 oracle_stateful: question {}", sha(q1)))
            && shown.contains("recorded [\"C002\"]"),
        "{shown}"
    );
    println!("{shown}");
    let o = eval(&p.dir, &["report", "--matrix", "demo", "--allow-unsigned"]);
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
    assert!(ds.unexpected().is_empty(), "{:?}", ds.unexpected());
    p.assert_no_leak(&r, &[]);
}
