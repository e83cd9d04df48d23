//! Control arms on v0.4's real `simple` suite (issue: is the grader worth trusting?).
//! `eval import v04-simple --solutions` writes each task's reference solution as its frozen
//! `solution/` and the suite's control arms; without an engine: what is written and the
//! refusals. With the engine and the v0.4 grader image (`EVAL_TEST_V04_GRADER_IMAGE`): `eval run`
//! grades every control arm with v0.4's own grader in the grader container before any
//! statistical slot — oracle 100, nop below, and the one-line exploits at 100 — and `eval report`
//! refuses the release naming each task and exploit.

use crate::support::{
    demo_project, docker_available, entries, eval, payloads, replace_in, repo_root,
    static_binaries, text,
};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub const NAME: &str = "simple-real";
const PACKAGES: [&str; 2] = [
    "dsh-plan-lattice-0.3.0.tgz",
    "dsh-plan-lattice-0.4.0-rc.3.tgz",
];
const TASKS: [&str; 6] = [
    "simple-js-clamp",
    "simple-ts-slugify",
    "simple-python-whitespace",
    "simple-go-dedupe",
    "simple-js-parse-port",
    "simple-python-chunks",
];

fn solutions() -> PathBuf {
    repo_root().join("controller/src/commands/import/simple-solutions")
}

pub fn import(project: &Path, dsh: &str, grader: &str, extra: &[&str]) -> std::process::Output {
    let from = crate::support::v04_upstream();
    let mut args = vec![
        "import",
        "v04-simple",
        "--from",
        from.to_str().unwrap(),
        "--protocol",
        NAME,
        "--dsh-image",
        dsh,
        "--grader-image",
        grader,
    ];
    args.extend_from_slice(extra);
    eval(project, &args)
}

fn fake(c: char) -> String {
    format!("sha256:{}", c.to_string().repeat(64))
}

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

/// The grader image's id; `None` (skip) only when `EVAL_SKIP_DOCKER=1` asks for it.
fn grader_image() -> Option<String> {
    if !docker_available() {
        return None;
    }
    match std::env::var("EVAL_TEST_V04_GRADER_IMAGE") {
        Ok(id) if eval_runtimes::definition::is_digest(id.trim()) => Some(id.trim().to_owned()),
        _ if std::env::var("EVAL_SKIP_DOCKER").is_ok_and(|v| v == "1") => {
            eprintln!("skipping: EVAL_TEST_V04_GRADER_IMAGE is not set and EVAL_SKIP_DOCKER=1");
            None
        }
        other => panic!(
            "EVAL_TEST_V04_GRADER_IMAGE={other:?}: run `export $(scripts/ensure-harness-images.sh)` \
             first, or set EVAL_SKIP_DOCKER=1"
        ),
    }
}

/// The whole finding, reproducible by any reviewer: the imported suite with its control arms
/// run through `eval run` (the fixture agent in place of the Harness for the statistical slots;
/// the control slots run no agent at all), graded by v0.4's real grader.
#[test]
fn v04_grader_passes_the_one_line_exploits_and_the_report_refuses_naming_them() {
    let Some(grader) = grader_image() else {
        return;
    };
    static_binaries();
    let (_t, proj) = demo_project();
    let sol = solutions();
    // The Harness image is not used: its arms are swapped for the fixture runtime below.
    let o = import(
        &proj,
        &fake('d'),
        &grader,
        &["--solutions", sol.to_str().unwrap()],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let protocol = proj.join(format!("protocols/{NAME}/protocol.toml"));
    swap_in_fixture_arms(&proj);
    replace_in(&protocol, "threshold = 12\n", "threshold = 6\n");

    let o = eval(&proj, &["freeze", "--protocol", NAME]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = eval(&proj, &["run", "--matrix", NAME, "--upstream", "fixture"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let es = entries(&proj.join(format!("runs/{NAME}/ledger.sqlite")));
    let started = payloads(&es, "attempt_started");
    // Every control attempt started before any other.
    let first_other = started
        .iter()
        .position(|p| p["phase"] != "control")
        .unwrap();
    assert!(
        started[first_other..]
            .iter()
            .all(|p| p["phase"] != "control")
    );
    assert_eq!(first_other, TASKS.len() * 8, "6 tasks x 8 control arms");
    let mut score: BTreeMap<(String, String), f64> = BTreeMap::new();
    let mut hardened: BTreeMap<(String, String), f64> = BTreeMap::new();
    for p in payloads(&es, "attempt_outcome") {
        let slot = p["slot"].as_str().unwrap();
        if !slot.starts_with("control-") {
            continue;
        }
        assert_eq!(p["model_turns"], 0, "{p}");
        assert!(p["model_calls"].as_array().unwrap().is_empty(), "{p}");
        let s = started.iter().find(|s| s["slot"] == p["slot"]).unwrap();
        let key = (
            s["task"].as_str().unwrap().to_owned(),
            s["arm"].as_str().unwrap().to_owned(),
        );
        score.insert(key.clone(), p["metrics"]["score"].as_f64().unwrap_or(-1.0));
        hardened.insert(key, p["metrics"]["hardened_score"].as_f64().unwrap_or(-1.0));
    }
    let at = |t: &str, a: &str| score[&(t.to_owned(), a.to_owned())];
    for t in TASKS {
        assert_eq!(at(t, "oracle"), 100.0, "{t}: {score:?}");
        assert!(at(t, "nop") < 100.0, "{t}: {score:?}");
    }
    // The one-line exploits of the finding: full marks from v0.4's grader.
    for t in TASKS.iter().filter(|t| !t.contains("-go-")) {
        assert_eq!(at(t, "exploit:print-result"), 100.0, "{t}: {score:?}");
    }
    assert_eq!(
        at("simple-go-dedupe", "exploit:go-testmain-exit"),
        100.0,
        "{score:?}"
    );
    // The hardened grading of the same assertions, beside it: the oracle still 100, and no
    // exploit above its nop (every executed assertion fails; only the static file checks the
    // unchanged workspace passes too remain).
    let h = |t: &str, a: &str| hardened[&(t.to_owned(), a.to_owned())];
    for t in TASKS {
        assert_eq!(h(t, "oracle"), 100.0, "{t}: {hardened:?}");
        for arm in [
            "exploit:print-result",
            "exploit:go-testmain-exit",
            "exploit:exit-at-import",
            "exploit:write-grader-output",
            "exploit:read-hidden",
            "exploit:delete-tests",
        ] {
            assert!(h(t, arm) <= h(t, "nop"), "{t} {arm}: {hardened:?}");
        }
    }

    let out = proj.join("report.json");
    let o = eval(
        &proj,
        &[
            "report",
            "--matrix",
            NAME,
            "--format",
            "json",
            "--out",
            out.to_str().unwrap(),
        ],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let report: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let reasons = report["reasons"].to_string();
    for t in TASKS.iter().filter(|t| !t.contains("-go-")) {
        assert!(
            reasons.contains(&format!("exploit:print-result scored 100 on simple/{t}")),
            "{t}: {reasons}"
        );
    }
    assert!(
        reasons.contains("exploit:go-testmain-exit scored 100 on simple/simple-go-dedupe"),
        "{reasons}"
    );
    let cells = report["grader_validity"].as_array().unwrap();
    // The gating grading (v0.4's `score`) and the hardened one beside it.
    assert_eq!(cells.len(), 2 * TASKS.len() * 8);
    assert!(
        cells
            .iter()
            .filter(|c| c["grading"] == "hardened_score")
            .all(|c| c["ok"] == true),
        "{cells:?}"
    );
    eprintln!("grader validity (v0.4's grader):");
    for c in cells {
        eprintln!(
            "  {:<15} {:<26} {:<28} {:>6} {}",
            c["grading"].as_str().unwrap(),
            c["task"].as_str().unwrap(),
            c["arm"].as_str().unwrap(),
            c["score"],
            if c["ok"] == true { "ok" } else { "INVALID" }
        );
    }
}

/// `--grading hardened`: the gates read eval's hardened grading, under which v0.4's own
/// assertions hold against every exploit, so `grader_valid` passes (the release is still refused:
/// fixture evidence), while v0.4's `score` is shown beside it, still failing.
#[test]
fn with_the_hardened_grading_gating_grader_valid_holds() {
    let Some(grader) = grader_image() else {
        return;
    };
    static_binaries();
    let (_t, proj) = demo_project();
    let sol = solutions();
    let tasks = "simple-js-clamp,simple-python-chunks,simple-go-dedupe";
    let o = import(
        &proj,
        &fake('d'),
        &grader,
        &[
            "--solutions",
            sol.to_str().unwrap(),
            "--grading",
            "hardened",
            "--tasks",
            tasks,
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let protocol = proj.join(format!("protocols/{NAME}/protocol.toml"));
    let p = std::fs::read_to_string(&protocol).unwrap();
    assert!(
        p.contains("metric = \"hardened_score\"\nalso_report = [\"score\"]"),
        "{p}"
    );
    swap_in_fixture_arms(&proj);
    replace_in(&protocol, "threshold = 6\n", "threshold = 3\n");
    let report = freeze_run_report(&proj);
    let rule = report["gates"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap().iter())
        .find(|r| r["id"] == "grader_valid")
        .unwrap()
        .clone();
    assert_eq!(rule["verdict"], "pass", "{rule}");
    let cells = report["grader_validity"].as_array().unwrap();
    assert!(
        cells
            .iter()
            .any(|c| c["grading"] == "score" && c["ok"] == false),
        "{cells:?}"
    );
    let md = proj.join("report.md");
    let o = eval(
        &proj,
        &[
            "report",
            "--matrix",
            NAME,
            "--format",
            "md",
            "--out",
            md.to_str().unwrap(),
        ],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let md = std::fs::read_to_string(md).unwrap();
    assert!(
        md.contains("## Grader validity")
            && md
                .contains("| simple | simple-go-dedupe | exploit:go-testmain-exit | score | 100 |"),
        "{md}"
    );
}

/// Freezes the imported protocol, runs it on the fixture upstream and returns its JSON report,
/// which refuses the release (exit 1: fixture evidence, whatever the grader).
pub fn freeze_run_report(proj: &Path) -> Value {
    let o = eval(proj, &["freeze", "--protocol", NAME]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = eval(proj, &["run", "--matrix", NAME, "--upstream", "fixture"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = proj.join("report.json");
    let o = eval(
        proj,
        &[
            "report",
            "--matrix",
            NAME,
            "--format",
            "json",
            "--out",
            out.to_str().unwrap(),
        ],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap()
}

/// The imported protocol with the fixture runtime in place of the Harness for its three arms
/// (the statistical slots run the fixture agent; control slots run no agent at all), v0.4's
/// agent contract, one repetition.
pub fn swap_in_fixture_arms(proj: &Path) {
    let protocol = proj.join(format!("protocols/{NAME}/protocol.toml"));
    let original = std::fs::read_to_string(&protocol).unwrap();
    let mut swapped = original.replace(
        "runtime = \"runtimes/dsh-poly/runtime.toml\"",
        "runtime = \"runtimes/fixture/runtime.toml\"",
    );
    for arm in ["native", "v0.3-always", "v0.4-auto"] {
        swapped = swapped.replace(
            &format!("protocols/{NAME}/arms/{arm}/cordis.patch.yml"),
            &format!("protocols/demo/arms/{arm}/profile.toml"),
        );
    }
    for (arm, pkg) in [("v0.3-always", PACKAGES[0]), ("v0.4-auto", PACKAGES[1])] {
        swapped = swapped.replace(
            &format!("protocols/{NAME}/arms/{arm}/{pkg}"),
            &format!("protocols/demo/arms/{arm}/package"),
        );
    }
    std::fs::write(&protocol, swapped).unwrap();
    replace_in(&protocol, "equals = 256000", "equals = 32768");
    replace_in(
        &proj.join(format!("matrix/{NAME}.toml")),
        "repetitions = 2",
        "repetitions = 1",
    );
}
