//! `eval import harbor --check` (no Docker): Harbor's own template task (from Harbor's wheel)
//! and a two-step task in Harbor's multi-step layout read as Harbor's `TaskConfig` reads them —
//! each field eval reads is compared with what Harbor's parser gives for the same task.toml —
//! and a task.toml Harbor refuses is refused too, exit 2 naming the file and the field.
//! The import itself (the engine builds each environment image) is in `tests/e2e/import_harbor.rs`.

use crate::support::import_harbor::{
    adapter_task_template, filled_template, harbor_config, two_step_task,
};
use crate::support::{eval, text};
use serde_json::{Value, json};
use std::path::Path;
use std::process::Output;

/// `eval import harbor --from DIR --check`, run in `dir`.
fn check_run(dir: &Path, from: &Path) -> Output {
    eval(
        dir,
        &[
            "import",
            "harbor",
            "--from",
            from.to_str().unwrap(),
            "--check",
        ],
    )
}

/// `eval import harbor --from DIR --check`'s JSON, one entry per task.
fn check(dir: &Path, from: &Path) -> Vec<Value> {
    let o = check_run(dir, from);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// Harbor's seconds as eval keeps them: whole seconds, rounded up.
fn secs(v: &Value) -> Value {
    json!(v.as_f64().unwrap().ceil() as u64)
}

/// Every field eval read equals Harbor's reading of the same task.toml.
fn same_as_harbor(task: &Value, toml: &Path) {
    let h = harbor_config(toml).unwrap();
    assert_eq!(
        task["schema_version"], h["schema_version"],
        "{task:#} {h:#}"
    );
    assert_eq!(task["build_timeout_sec"], secs(&h["build_timeout_sec"]));
    assert_eq!(task["cpus"].as_f64(), h["cpus"].as_f64(), "{task:#} {h:#}");
    assert_eq!(task["memory_mb"], h["memory_mb"]);
    assert_eq!(task["storage_mb"], h["storage_mb"]);
    let steps = task["steps"].as_array().unwrap();
    let hs = h["steps"].as_array().unwrap();
    assert_eq!(steps.len(), hs.len(), "{task:#} {h:#}");
    for (s, hs) in steps.iter().zip(hs) {
        assert_eq!(
            s["agent_timeout_sec"],
            secs(&hs["agent_timeout_sec"]),
            "{s:#} {hs:#}"
        );
        assert_eq!(
            s["verifier_timeout_sec"],
            secs(&hs["verifier_timeout_sec"]),
            "{s:#} {hs:#}"
        );
        assert_eq!(s["env"], hs["env"]);
    }
}

#[test]
fn harbors_template_task_and_a_two_step_task_read_as_harbors_model_reads_them() {
    let tmp = tempfile::tempdir().unwrap();
    let from = tmp.path().join("tasks");
    filled_template(&from.join("hello"), "debian:bookworm");
    two_step_task(&from.join("two"), "debian:bookworm");
    let tasks = check(tmp.path(), &from);
    assert_eq!(tasks.len(), 2, "{tasks:#?}");
    let (hello, two) = (&tasks[0], &tasks[1]);
    assert_eq!(hello["id"], "hello");
    same_as_harbor(hello, &from.join("hello/task.toml"));
    // The template's own values: schema 1.4, 900 s agent and verifier, 600 s build.
    assert_eq!(hello["schema_version"], "1.4");
    assert_eq!(hello["steps"][0]["agent_timeout_sec"], 900);
    assert_eq!(hello["steps"][0]["verifier_timeout_sec"], 900);
    assert_eq!(
        hello["steps"][0]["prompt"],
        "Write `hello` to greeting.txt.\n"
    );
    assert_eq!(hello["steps"][0]["tests"], json!(["Dockerfile", "test.sh"]));
    assert_eq!(hello["steps"][0]["solution"], json!(["solve.sh"]));
    assert_eq!(hello["bases"], json!(["debian:bookworm"]));
    assert_eq!(hello["workdir"], "/app");
    assert_eq!(hello["workspace"], json!([]));

    same_as_harbor(two, &from.join("two/task.toml"));
    let h = harbor_config(&from.join("two/task.toml")).unwrap();
    assert_eq!(h["step_names"], json!(["make", "extend"]));
    assert_eq!(two["name"], "two-steps");
    // Step timeouts as Harbor's trial takes them: the step's agent timeout else the task's
    // (300.5 → 301), the step's verifier timeout else the step default 600 (never the task's).
    let st = &two["steps"];
    assert_eq!(
        (
            st[0]["agent_timeout_sec"].clone(),
            st[1]["agent_timeout_sec"].clone()
        ),
        (json!(301), json!(200))
    );
    assert_eq!(
        (
            st[0]["verifier_timeout_sec"].clone(),
            st[1]["verifier_timeout_sec"].clone()
        ),
        (json!(60), json!(600))
    );
    assert_eq!(
        two["memory_mb"], 1024,
        "the legacy memory = \"1G\", as Harbor migrates it"
    );
    // The canary line and the blank line after it are not shown to the agent.
    assert_eq!(st[0]["prompt"], "Create out/a.txt holding `a`.\n");
    assert_eq!(two["workdir"], "/work");
    assert_eq!(two["workspace"], json!(["notes.txt"]));
}

/// Harbor's adapter task template: as shipped, its `[task] name` is a placeholder Harbor's
/// model refuses, and so does eval (naming the field); rendered as an adapter renders it, it
/// reads as Harbor reads it, `[task] name` naming the task.
#[test]
fn harbors_adapter_task_template_is_refused_raw_and_read_rendered() {
    let tmp = tempfile::tempdir().unwrap();
    let from = tmp.path().join("tasks");
    let t = from.join("t1");
    adapter_task_template(&t);
    let toml = t.join("task.toml");
    assert!(harbor_config(&toml).is_err());
    let o = check_run(tmp.path(), &from);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("task.name = \"TODO_ORG/"), "{}", text(&o));
    let s = std::fs::read_to_string(&toml).unwrap();
    std::fs::write(
        &toml,
        s.replace("TODO_ORG/{{ADAPTER_ID}}__{task_id}", "acme/bench__t1"),
    )
    .unwrap();
    std::fs::write(t.join("instruction.md"), "Fix the bug.\n").unwrap();
    let tasks = check(tmp.path(), &from);
    same_as_harbor(&tasks[0], &toml);
    assert_eq!(tasks[0]["name"], harbor_config(&toml).unwrap()["task_name"]);
    assert_eq!(tasks[0]["name"], "acme/bench__t1");
    assert_eq!(tasks[0]["steps"][0]["agent_timeout_sec"], 120);
    assert_eq!(tasks[0]["bases"], json!(["python:3.13-slim"]));
    assert_eq!(tasks[0]["workdir"], "/workspace");
}

/// Each bad task.toml: Harbor's parser refuses it, and eval exits 2 naming the file and field.
#[test]
fn a_task_toml_harbor_refuses_is_refused_naming_the_file_and_the_field() {
    let cases = [
        ("[agent]\ntimeout_sec = \"soon\"\n", "timeout_sec"),
        (
            "multi_step_reward_strategy = \"best\"\n",
            "multi_step_reward_strategy",
        ),
        ("[environment]\nmemory = \"2GB\"\n", "environment.memory"),
        ("[environment]\nmemory_mb = \"lots\"\n", "memory_mb"),
        ("[[steps]]\nname = \"a/b\"\n", "steps[0].name"),
        (
            "[[steps]]\nname = \"x\"\n[[steps]]\nname = \"X\"\n",
            "steps[1].name",
        ),
    ];
    for (toml, field) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let from = tmp.path().join("tasks");
        filled_template(&from.join("hello"), "debian:bookworm");
        let path = from.join("hello/task.toml");
        std::fs::write(&path, format!("schema_version = \"1.4\"\n{toml}")).unwrap();
        assert!(harbor_config(&path).is_err(), "Harbor accepts {toml:?}");
        let o = check_run(tmp.path(), &from);
        assert_eq!(o.status.code(), Some(2), "{toml}: {}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains(&path.display().to_string()) && err.contains(field),
            "{toml}: {err}"
        );
    }
}

/// Harbor's template as `harbor tasks init` leaves it has an empty instruction.md: the agent
/// would have no task, so the import refuses it naming the file; what eval cannot reproduce
/// (a separate verifier environment, a host-resolved variable, a step gate) is refused by field.
#[test]
fn an_empty_instruction_and_what_eval_cannot_reproduce_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let from = tmp.path().join("tasks");
    filled_template(&from.join("hello"), "debian:bookworm");
    let run = |from: &Path| check_run(tmp.path(), from);
    std::fs::write(from.join("hello/instruction.md"), "").unwrap();
    let o = run(&from);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("instruction.md: empty"), "{}", text(&o));
    std::fs::write(from.join("hello/instruction.md"), "Do it.\n").unwrap();
    let toml = from.join("hello/task.toml");
    let original = std::fs::read_to_string(&toml).unwrap();
    for (more, field) in [
        (
            "[verifier]\nenvironment_mode = \"separate\"\n",
            "verifier.environment",
        ),
        (
            "[environment]\nenv = { TOKEN = \"${TOKEN}\" }\n",
            "environment.env",
        ),
        (
            "[[steps]]\nname = \"s\"\nmin_reward = 1.0\n",
            "steps[0].min_reward",
        ),
    ] {
        std::fs::write(&toml, format!("schema_version = \"1.4\"\n{more}")).unwrap();
        let o = run(&from);
        assert_eq!(o.status.code(), Some(2), "{more}: {}", text(&o));
        assert!(text(&o).contains(field), "{more}: {}", text(&o));
    }
    // A missing Dockerfile and no docker_image: named.
    std::fs::write(&toml, original).unwrap();
    std::fs::remove_file(from.join("hello/environment/Dockerfile")).unwrap();
    let o = run(&from);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("environment/Dockerfile: missing"),
        "{}",
        text(&o)
    );
}
