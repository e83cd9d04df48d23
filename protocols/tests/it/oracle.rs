//! A task's `[oracle]` modes: the stateful oracle's fields, its files under `hidden/`, its
//! constraints read from the brief, and the oracle metrics a suite and a gate may name.

use eval_protocols::task::{OracleAnswerer, ReplyFormat};
use eval_protocols::{Project, freeze};
use std::fs;
use std::path::{Path, PathBuf};

use crate::support::*;

const STATEFUL: &str = r##"[oracle]
answers = "hidden/oracle/oracle_data.json"
max_questions = 5
answered_by = "stateful"

[oracle.stateful]
system_prompt = "hidden/oracle/init.md"
brief_heading = "# Injected oracle_data (your single source of truth)"
brief_fence = "json"
reply = "json"
reply_field = "reply"
record_field = "_internal_log.triggers_hit"
fallback_answer = "No further information."

[oracle.constraints]
list = "hidden_constraints"
id_field = "constraint_id"
scaffolding = ["ARCH001", "TC_*"]
"##;

fn icae_tasks(root: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = fs::read_dir(root.join("protocols/demo/tasks/icae"))
        .unwrap()
        .map(|d| d.unwrap().path())
        .collect();
    dirs.sort();
    dirs
}

/// Every `icae` task of the demo gets the synthetic ICAE brief and a stateful oracle; the
/// suite lists the oracle metrics and a gate reads one.
fn stateful_demo(root: &Path) {
    let fx = repo().join("controller/tests/fixtures/icae-synthetic/oracle");
    for d in icae_tasks(root) {
        fs::create_dir_all(d.join("hidden/oracle")).unwrap();
        for f in ["init.md", "oracle_data.json"] {
            fs::copy(fx.join(f), d.join("hidden/oracle").join(f)).unwrap();
        }
        let t = d.join("task.toml");
        let s = fs::read_to_string(&t).unwrap();
        let head = &s[..s.find("[oracle]").unwrap()];
        fs::write(&t, format!("{head}{STATEFUL}")).unwrap();
    }
    let p = root.join("protocols/demo/protocol.toml");
    let s = fs::read_to_string(&p).unwrap();
    let s = s.replacen(
        "metrics = [\"hidden_score\", \"critical_missed\",",
        "metrics = [\"hidden_score\", \"critical_missed\", \"oracle_constraints_missed\", \"oracle_constraints_missed_substantive\",",
        1,
    );
    let s = s.replacen(
        "[[gates.rules]]\nid = \"critical_miss_reduction\"",
        "[[gates.rules]]\nid = \"oracle_miss_reduction\"\nstatistic = \"reduction_rate\"\nmetric = \"oracle_constraints_missed_substantive\"\nop = \">=\"\nthreshold = 0.5\n[[gates.rules]]\nid = \"critical_miss_reduction\"",
        1,
    );
    fs::write(&p, s).unwrap();
}

fn edit_task(root: &Path, from: &str, to: &str) -> PathBuf {
    let t = icae_tasks(root)[0].join("task.toml");
    let s = fs::read_to_string(&t).unwrap();
    assert!(s.contains(from), "{from:?}");
    fs::write(&t, s.replacen(from, to, 1)).unwrap();
    t
}

#[test]
fn a_stateful_oracle_task_loads_freezes_and_its_metrics_gate() {
    let f = fixture();
    stateful_demo(&f.root);
    let proj = Project::open(&f.root);
    let loaded = proj.load("demo").unwrap();
    let t = loaded.tasks.iter().find(|t| t.suite == "icae").unwrap();
    let o = t.spec.oracle.as_ref().unwrap();
    assert_eq!(o.answered_by, OracleAnswerer::Stateful);
    let st = o.stateful.as_ref().unwrap();
    assert_eq!(st.reply, ReplyFormat::Json);
    let brief = fs::read_to_string(f.root.join(&t.dir).join(&o.answers)).unwrap();
    let c = o.constraints.as_ref().unwrap();
    assert_eq!(c.ids(&brief).unwrap(), ["C001", "C002", "ARCH001"]);
    assert!(c.is_scaffolding("ARCH001") && c.is_scaffolding("TC_9") && !c.is_scaffolding("C001"));
    assert!(loaded.protocol.gates.iter().any(|g| {
        g.rules
            .iter()
            .any(|r| r.metric.as_deref() == Some("oracle_constraints_missed_substantive"))
    }));
    freeze(&proj, "demo", &f.state, DRIVER, &images).unwrap();
}

/// Each bad `[oracle]` names the task file, the field and the value.
#[test]
fn bad_stateful_oracle_fields_are_refused_naming_the_field() {
    let cases: &[(&str, &str, &[&str])] = &[
        (
            "system_prompt = \"hidden/oracle/init.md\"",
            "system_prompt = \"prompt.md\"",
            &["oracle.stateful.system_prompt", "hidden/"],
        ),
        (
            "reply_field = \"reply\"\n",
            "",
            &["oracle.stateful.reply_field", "json"],
        ),
        (
            "reply = \"json\"",
            "reply = \"text\"",
            &["oracle.stateful.reply_field", "only a reply = \"json\""],
        ),
        (
            "record_field = \"_internal_log.triggers_hit\"",
            "record_field = \"_internal_log..triggers_hit\"",
            &["oracle.stateful.record_field", "dotted path"],
        ),
        (
            "answered_by = \"stateful\"",
            "answered_by = \"model\"",
            &["oracle.stateful", "needs answered_by = \"stateful\""],
        ),
        (
            "max_questions = 5\n",
            "max_questions = 5\ncatch_all = \"x\"\n",
            &["oracle.catch_all", "scripted"],
        ),
        (
            "list = \"hidden_constraints\"",
            "list = \"oracle_data.hidden_constraints\"",
            &["oracle.constraints", "oracle_data.hidden_constraints"],
        ),
        (
            "id_field = \"constraint_id\"",
            "id_field = \"id\"",
            &["oracle.constraints", "no string \"id\""],
        ),
        (
            "fallback_answer = \"No further information.\"",
            "fallback_answer = \" \"",
            &["oracle.stateful.fallback_answer"],
        ),
        ("reply = \"json\"", "reply = \"yaml\"", &["yaml"]),
    ];
    for (from, to, want) in cases {
        let f = fixture();
        stateful_demo(&f.root);
        let t = edit_task(&f.root, from, to);
        let e = Project::open(&f.root).load("demo").unwrap_err().to_string();
        assert!(e.contains(t.to_str().unwrap()), "{to}: {e}");
        for w in *want {
            assert!(e.contains(w), "{to}: {e:?} lacks {w:?}");
        }
    }
}

#[test]
fn oracle_metrics_need_every_task_of_the_suite_to_declare_its_constraints() {
    let f = fixture();
    stateful_demo(&f.root);
    let t = icae_tasks(&f.root)[2].join("task.toml");
    let s = fs::read_to_string(&t).unwrap();
    fs::write(&t, &s[..s.find("[oracle.constraints]").unwrap()]).unwrap();
    let e = Project::open(&f.root).load("demo").unwrap_err().to_string();
    assert!(
        e.contains("suites.icae.metrics")
            && e.contains("oracle_constraints_missed")
            && e.contains("demo-icae-3"),
        "{e}"
    );
    // Constraints read what each question recorded: without a record field there is nothing.
    let f = fixture();
    stateful_demo(&f.root);
    edit_task(
        &f.root,
        "record_field = \"_internal_log.triggers_hit\"\n",
        "",
    );
    let e = Project::open(&f.root).load("demo").unwrap_err().to_string();
    assert!(
        e.contains("oracle.constraints") && e.contains("record_field"),
        "{e}"
    );
}

#[test]
fn a_missing_system_prompt_is_refused_at_freeze() {
    let f = fixture();
    stateful_demo(&f.root);
    fs::remove_file(icae_tasks(&f.root)[0].join("hidden/oracle/init.md")).unwrap();
    let e = freeze(&Project::open(&f.root), "demo", &f.state, DRIVER, &images)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("oracle.stateful.system_prompt") && e.contains("init.md"),
        "{e}"
    );
}
