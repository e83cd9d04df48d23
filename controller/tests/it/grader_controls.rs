//! Control arms on v0.4's real `simple` suite (issue: is the grader worth trusting?).
//! `eval import v04-simple --solutions` writes each task's reference solution as its frozen
//! `solution/` and the suite's control arms; without an engine: what is written and the
//! refusals. With the engine and the v0.4 grader image (`EVAL_TEST_V04_GRADER_IMAGE`): `eval run`
//! grades every control arm with v0.4's own grader in the grader container before any
//! statistical slot — oracle 100, nop below, and the one-line exploits at 100 — and `eval report`
//! refuses the release naming each task and exploit.

pub(crate) use crate::support::grader_controls::*;
use crate::support::{demo_project, eval, text};
use std::path::{Path, PathBuf};

#[test]
fn solutions_become_frozen_solution_dirs_and_the_suite_gets_control_arms() {
    let (_t, proj) = demo_project();
    let sol = solutions();
    let o = import(
        &proj,
        &fake('d'),
        &fake('e'),
        &["--solutions", sol.to_str().unwrap()],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    for task in TASKS {
        let dir = proj.join(format!("protocols/{NAME}/tasks/simple/{task}/solution"));
        let mut n = 0;
        for e in walk(&sol.join(task)) {
            let rel = e.strip_prefix(sol.join(task)).unwrap();
            assert_eq!(
                std::fs::read(dir.join(rel)).unwrap(),
                std::fs::read(&e).unwrap(),
                "{task}/{}",
                rel.display()
            );
            n += 1;
        }
        assert!(n > 0, "{task}");
    }
    let p = std::fs::read_to_string(proj.join(format!("protocols/{NAME}/protocol.toml"))).unwrap();
    let parsed: toml::Table = toml::from_str(&p).unwrap();
    let c = &parsed["suites"]["simple"]["controls"];
    assert_eq!(c["metric"].as_str(), Some("score"));
    let arms: Vec<&str> = c["arms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    for a in [
        "oracle",
        "nop",
        "exploit:print-result",
        "exploit:go-testmain-exit",
    ] {
        assert!(arms.contains(&a), "{arms:?}");
    }
    assert!(p.contains("statistic = \"grader_valid\""), "{p}");
    // The protocol loads (with its control arms checked): `eval plan` reads it through the
    // project.
    let o = eval(&proj, &["verify", "--protocol", NAME]);
    assert!(
        !text(&o).contains("controls"),
        "the controls validate: {}",
        text(&o)
    );
}

#[test]
fn a_missing_or_linked_solution_exits_2_naming_it_and_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let sol = tmp.path().join("sol");
    for task in TASKS {
        std::fs::create_dir_all(sol.join(task)).unwrap();
        std::fs::write(sol.join(task).join("x.js"), "x").unwrap();
    }
    std::fs::remove_dir_all(sol.join("simple-go-dedupe")).unwrap();
    let (_t, proj) = demo_project();
    let before = walk(&proj);
    let o = import(
        &proj,
        &fake('d'),
        &fake('e'),
        &["--solutions", sol.to_str().unwrap()],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("simple-go-dedupe"), "{}", text(&o));
    assert_eq!(walk(&proj), before);
    std::fs::create_dir_all(sol.join("simple-go-dedupe")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", sol.join("simple-go-dedupe/dedupe.go")).unwrap();
    let o = import(
        &proj,
        &fake('d'),
        &fake('e'),
        &["--solutions", sol.to_str().unwrap()],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("dedupe.go") && text(&o).contains("link"),
        "{}",
        text(&o)
    );
    assert_eq!(walk(&proj), before);
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() && !p.is_symlink() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}
