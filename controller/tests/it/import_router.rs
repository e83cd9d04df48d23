//! `eval import v04-router`: Plan Lattice's router corpora (read from `../shared/v04-upstream/
//! router`, never copied into this repository) imported into temporary projects, without an
//! engine: the model-free protocol loads and plans every row once per arm, its tasks are split by
//! label with the wire expectations of the labels, the prompt reaches dsh through `EVAL_TASK`
//! (never as an argv a leading `-` could turn into an option), and refusals (a prompt file that is
//! not the manifest's, a link, an existing target) exit 2 and write nothing.

pub(crate) use crate::support::import_router::*;
use crate::support::{eval, text};
use std::path::{Path, PathBuf};

/// A writable copy of the router corpus directory.
fn corpus_copy(tmp: &Path) -> PathBuf {
    let dir = tmp.join("corpus");
    std::fs::create_dir(&dir).unwrap();
    for e in std::fs::read_dir(upstream().join("router")).unwrap() {
        let p = e.unwrap().path();
        std::fs::write(dir.join(p.file_name().unwrap()), std::fs::read(&p).unwrap()).unwrap();
    }
    dir
}

#[test]
fn the_router_import_writes_a_model_free_protocol_split_by_label() {
    let (_t, proj) = project();
    let o = import(&proj, &upstream().join("router"), &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let p = proj.join("protocols/router");
    let protocol = std::fs::read_to_string(p.join("protocol.toml")).unwrap();
    assert!(protocol.contains("model_free = true"), "{protocol}");
    for gate in [
        "simple_false_activation",
        "complex_recall",
        "outcome_critical_bypasses",
        "override_compliance",
    ] {
        assert!(protocol.contains(&format!("id = \"{gate}\"")), "{gate}");
    }
    // V1: 40 bypass, 80 complex (contract + lattice, all outcome-critical); 24 override rows.
    assert_eq!(tasks(&p.join("tasks/bypass")).len(), 40);
    assert_eq!(tasks(&p.join("tasks/complex")).len(), 80);
    let overrides = tasks(&p.join("tasks/override"));
    assert_eq!(overrides.len(), 24);
    let t = std::fs::read_to_string(p.join("tasks/override/blind-override-bypass-1/task.toml"))
        .unwrap();
    assert!(t.contains("expected_route = \"bypass\""), "{t}");
    let nq = overrides
        .iter()
        .find(|id| id.contains("no-questions"))
        .expect("a no-questions row");
    let t = std::fs::read_to_string(p.join(format!("tasks/override/{nq}/task.toml"))).unwrap();
    assert!(
        t.contains("expected_route = \"contract\"")
            && t.contains("expected_clarification = \"never\""),
        "{t}"
    );
    // The prompt is the corpus text, verbatim.
    let prompt = std::fs::read_to_string(p.join("tasks/bypass/real-blind-001/prompt.md")).unwrap();
    assert!(prompt.starts_with("Bug : selection on text"), "{prompt}");
    // The candidate is v0.4's v0.4-auto arm: the rc.3 package's bytes, activationMode auto only.
    assert_eq!(
        std::fs::read(p.join("arms/v0.4-auto").join(PACKAGE)).unwrap(),
        std::fs::read(upstream().join(PACKAGE)).unwrap()
    );
    let patch = std::fs::read_to_string(p.join("arms/v0.4-auto/cordis.patch.yml")).unwrap();
    assert!(
        patch.ends_with("- id: plan-lattice\n  config:\n    activationMode: auto\n"),
        "{patch}"
    );
    for arm in ["native", "v0.4-auto"] {
        let patch =
            std::fs::read_to_string(p.join(format!("arms/{arm}/cordis.patch.yml"))).unwrap();
        assert!(
            patch.contains(
                "- id: headless-runner\n  config:\n    task: !!js process.env.EVAL_TASK\n"
            ),
            "{arm}: {patch}"
        );
    }
    // The prompt travels in EVAL_TASK, never as dsh's argv.
    let rt = std::fs::read_to_string(proj.join("runtimes/dsh-router/runtime.toml")).unwrap();
    assert!(rt.contains(r#"EVAL_TASK="$(cat /task/prompt.md)""#), "{rt}");
    assert!(!rt.contains(r#"headless "$(cat /task/prompt.md)""#), "{rt}");
    // The protocol loads (model-free, wire metrics only) and plans every row once per arm.
    let o = eval(&proj, &["plan", "--matrix", "router", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let plan: Vec<serde_json::Value> = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(plan.len(), 2 * (40 + 80 + 24), "{}", plan.len());
    // Nothing is overwritten.
    let again = import(&proj, &upstream().join("router"), &[]);
    assert_eq!(again.status.code(), Some(2), "{}", text(&again));
    assert!(text(&again).contains("exists"), "{}", text(&again));
}

#[test]
fn the_router_import_refuses_inputs_that_are_not_the_manifests() {
    let tmp = tempfile::tempdir().unwrap();
    let from = corpus_copy(tmp.path());
    let prompts = from.join("blind-real.prompts.jsonl");
    let mut bytes = std::fs::read(&prompts).unwrap();
    bytes.extend_from_slice(b"{\"id\":\"extra\",\"text\":\"-h\"}\n");
    std::fs::write(&prompts, &bytes).unwrap();
    let (_t, proj) = project();
    let o = import(&proj, &from, &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let msg = text(&o);
    assert!(
        msg.contains("blind-real.prompts.jsonl") && msg.contains("blind-real.manifest.json"),
        "{msg}"
    );
    assert!(!proj.join("protocols").exists(), "nothing written");

    // A link in place of an input is refused, not followed.
    let from = tmp.path().join("linked");
    std::fs::create_dir(&from).unwrap();
    for e in std::fs::read_dir(upstream().join("router")).unwrap() {
        let p = e.unwrap().path();
        let to = from.join(p.file_name().unwrap());
        if p.ends_with("blind-real.labels.jsonl") {
            std::os::unix::fs::symlink(&p, &to).unwrap();
        } else {
            std::fs::write(&to, std::fs::read(&p).unwrap()).unwrap();
        }
    }
    let o = import(&proj, &from, &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("not a regular file"), "{}", text(&o));

    // A synthetic corpus with other bytes than Plan Lattice's is refused unless allowed.
    let from = corpus_copy(&tmp.path().join("x").tap_mkdir());
    let dev = from.join("development.jsonl");
    let text_dev = std::fs::read_to_string(&dev).unwrap();
    std::fs::write(&dev, text_dev.replacen("Plan Lattice", "Plan  Lattice", 1)).unwrap();
    let o = import(&proj, &from, &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("development.jsonl"), "{}", text(&o));
    assert!(!proj.join("protocols").exists(), "nothing written");
}
