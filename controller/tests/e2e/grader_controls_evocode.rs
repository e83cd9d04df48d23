//! Oracle and nop control arms of a multi-round task (EvoCode's `solution/solve.sh` per step):
//! `eval import v04-evocode` gives the suite `[suites.evocode.controls]` and `grader_valid` when
//! every step has a reference solution; `eval run` grades each control once per round with the
//! round's own tests in the grader container (`run/attempt/control_arm.rs`,
//! `fn grade_control_rounds`), the oracle's round k after the reference `solve.sh` of rounds
//! 1..k ran in the grader's copy of the workspace (`run/controls.rs`, `fn oracle_round_hidden`;
//! `import/evocode-grade.sh`). Two copies of `import_evocode.rs`'s synthetic 3-round Go task:
//! `theme_synthetic_greet` with honest tests, and `theme_synthetic_lenient` whose tests pass every
//! case whatever the program does (a broken grader). Asserted: the oracle passes every round of
//! both (mean reward 1), the honest task's nop passes none, the lenient task's nop passes every
//! round, and `eval report` refuses the release naming the lenient task's nop, and only it.
//! Grader image: `EVAL_TEST_V04_GRADER_IMAGE` (Go 1.23), as `dsh_rounds.rs`.

use crate::import_evocode::{DOCKERFILE, write_task};
use crate::support::{
    demo_project, docker_available, entries, eval, payloads, replace_in, static_binaries, text,
};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

const NAME: &str = "evocode";
const HONEST: &str = "theme_synthetic_greet";
const LENIENT: &str = "theme_synthetic_lenient";

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

fn edit(p: &Path, f: impl FnOnce(String) -> String) {
    let s = std::fs::read_to_string(p).unwrap();
    std::fs::write(p, f(s)).unwrap();
}

/// `write_task`'s task, its tests building into /tests (the grader images' /usr/local/bin is
/// root's: docs/importers.md "Importing v0.4's EvoCode suite", known gap), under `from/<id>`;
/// `lenient` makes every case pass whatever the program prints.
fn task(tmp: &Path, from: &Path, id: &str, lenient: bool) {
    let scratch = tmp.join(format!("scratch-{id}"));
    let t = write_task(
        &scratch,
        &format!(
            "{DOCKERFILE}ENV PATH=/tests:/usr/lib/go-1.23/bin:/usr/lib/go-1.22/bin:/usr/bin:/bin\n"
        ),
    );
    for k in 1..=3 {
        edit(&t.join(format!("steps/round-{k}/tests/test.sh")), |s| {
            let s = s.replace("-o /usr/local/bin/greet", "-o /tests/greet");
            if lenient {
                let honest = "then st=success; pass=$((pass+1)); else st=fail; fi";
                assert!(s.contains(honest), "{s}");
                s.replace(honest, "then :; fi; st=success; pass=$((pass+1))")
            } else {
                s
            }
        });
    }
    std::fs::rename(&t, from.join(id)).unwrap();
}

type Metrics = BTreeMap<(String, String), Value>;

/// Imports `tasks` (id, lenient) with the real grader image, swaps the arms for the fixture
/// runtime (the control slots run no agent at all), with `old_grader` puts back the one-stage
/// grader of `1a73df8` (`tests/fixtures/old-graders/evocode-grade.sh`, `/out` writable beside the
/// round's tests), freezes and runs; returns the project and each control's (task, arm) metrics.
fn run_controls(
    grader: &str,
    tasks: &[(&str, bool)],
    old_grader: bool,
) -> (tempfile::TempDir, std::path::PathBuf, Metrics) {
    static_binaries();
    let (tmp, proj) = demo_project();
    let from = tmp.path().join("tasks");
    std::fs::create_dir(&from).unwrap();
    for (id, lenient) in tasks {
        task(tmp.path(), &from, id, *lenient);
    }
    let pkg = crate::support::v04_upstream().join("dsh-plan-lattice-0.4.0-rc.3.tgz");
    // The Harness image is not used: the arms are swapped for the fixture runtime below (the
    // control slots run no agent at all).
    let fake = format!("sha256:{}", "d".repeat(64));
    let o = eval(
        &proj,
        &[
            "import",
            "v04-evocode",
            "--from",
            from.to_str().unwrap(),
            "--package",
            pkg.to_str().unwrap(),
            "--dsh-image",
            &fake,
            "--grader-image",
            grader,
            "--allow-unpinned",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let protocol = proj.join(format!("protocols/{NAME}/protocol.toml"));
    let mut p = std::fs::read_to_string(&protocol).unwrap();
    assert!(p.contains("[suites.evocode.controls]"), "{p}");
    p = p.replace(
        "runtime = \"runtimes/dsh-poly/runtime.toml\"",
        "runtime = \"runtimes/fixture/runtime.toml\"",
    );
    for arm in ["native", "v0.4-contract", "v0.4-lattice"] {
        p = p
            .replace(
                &format!("protocols/{NAME}/arms/{arm}/cordis.patch.yml"),
                &format!("protocols/demo/arms/{arm}/profile.toml"),
            )
            .replace(
                &format!("protocols/{NAME}/arms/{arm}/dsh-plan-lattice-0.4.0-rc.3.tgz"),
                &format!("protocols/demo/arms/{arm}/package"),
            );
    }
    p = p.replace("equals = 256000", "equals = 32768");
    std::fs::write(&protocol, p).unwrap();
    replace_in(
        &proj.join(format!("matrix/{NAME}.toml")),
        "repetitions = 2",
        "repetitions = 1",
    );
    // The fixture agent continues across rounds (as `rounds.rs` gives it).
    replace_in(
        &proj.join("runtimes/fixture/runtime.toml"),
        "[grader]\n",
        "continue_command = [\n  \"/usr/local/bin/eval-fixture-agent\",\n  \"--prompt\", \"{prompt}\",\n  \"--workspace\", \"{workspace}\",\n  \"--base-url\", \"{base_url}\",\n  \"--profile\", \"{profile}\",\n]\n\n[grader]\n",
    );

    if old_grader {
        let old = std::fs::read(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/old-graders/evocode-grade.sh"),
        )
        .unwrap();
        for (id, _) in tasks {
            for k in 1..=3 {
                let g = proj.join(format!(
                    "protocols/{NAME}/tasks/evocode/{id}/hidden/rounds/{k}/grade.sh"
                ));
                std::fs::write(g, &old).unwrap();
            }
        }
        let rt = proj.join("runtimes/v04-evocode-grader/runtime.toml");
        let text = std::fs::read_to_string(&rt).unwrap();
        let at = text.find("[grader]\n").unwrap();
        let end = at + text[at..].find("\n[limits]").unwrap();
        let text = format!(
            "{}[grader]\ncommand = [\"/bin/bash\", \"/hidden/grade.sh\", \"{{workspace}}\", \"{{hidden}}\", \"{{out}}\"]\n{}",
            &text[..at],
            &text[end..]
        )
        .replace("\"/tests\", ", "\"/tests\", \"/logs\", ");
        std::fs::write(&rt, text).unwrap();
    }
    let o = eval(&proj, &["freeze", "--protocol", NAME]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = eval(&proj, &["run", "--matrix", NAME, "--upstream", "fixture"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let es = entries(&proj.join(format!("runs/{NAME}/ledger.sqlite")));
    let started = payloads(&es, "attempt_started");
    let mut metrics: BTreeMap<(String, String), Value> = BTreeMap::new();
    for o in payloads(&es, "attempt_outcome") {
        let slot = o["slot"].as_str().unwrap();
        if !slot.starts_with("control-") {
            continue;
        }
        assert_eq!(o["model_turns"], 0, "{o}");
        assert_eq!(o["outcome"], "completed", "{o}");
        let s = started.iter().find(|s| s["slot"] == o["slot"]).unwrap();
        metrics.insert(
            (
                s["task"].as_str().unwrap().to_owned(),
                s["arm"].as_str().unwrap().to_owned(),
            ),
            o["metrics"].clone(),
        );
    }
    (tmp, proj, metrics)
}

/// `eval report`'s JSON, which must refuse the release (exit 1).
fn refused_report(proj: &Path) -> Value {
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

#[test]
fn evocode_solutions_are_oracle_controls_graded_every_round_and_a_lenient_grader_is_refused() {
    let Some(grader) = grader_image() else {
        return;
    };
    let (_tmp, proj, metrics) = run_controls(&grader, &[(HONEST, false), (LENIENT, true)], false);
    assert_eq!(metrics.len(), 6, "{metrics:?}");
    let m = |t: &str, a: &str, name: &str| {
        metrics[&(t.to_owned(), a.to_owned())][name]
            .as_f64()
            .unwrap_or(-1.0)
    };
    for t in [HONEST, LENIENT] {
        // Every round graded, each by its own tests, the oracle's after solve.sh of rounds 1..k.
        for k in 1..=3 {
            assert_eq!(
                m(t, "oracle", &format!("round{k}_reward")),
                1.0,
                "{t} round {k}: {metrics:?}"
            );
        }
        assert_eq!(
            m(t, "oracle", "rounds_mean_reward"),
            1.0,
            "{t}: {metrics:?}"
        );
        assert_eq!(
            m(t, "oracle", "rounds_regressions"),
            0.0,
            "{t}: {metrics:?}"
        );
    }
    // The starting workspace builds and prints nothing: the honest tests fail every case; the
    // lenient ones pass it.
    for k in 1..=3 {
        assert_eq!(
            m(HONEST, "nop", &format!("round{k}_reward")),
            0.0,
            "{metrics:?}"
        );
        assert_eq!(
            m(LENIENT, "nop", &format!("round{k}_reward")),
            1.0,
            "{metrics:?}"
        );
    }
    assert_eq!(m(HONEST, "nop", "rounds_mean_reward"), 0.0, "{metrics:?}");
    // The program that writes its own reward and case lines (exploit:forge-reward) scores what
    // its implementation earns, round by round: nothing.
    for k in 1..=3 {
        assert_eq!(
            m(HONEST, "exploit:forge-reward", &format!("round{k}_reward")),
            0.0,
            "{metrics:?}"
        );
    }
    assert_eq!(
        m(HONEST, "exploit:forge-reward", "rounds_mean_reward"),
        0.0,
        "{metrics:?}"
    );
    assert_eq!(m(LENIENT, "nop", "rounds_mean_reward"), 1.0, "{metrics:?}");

    let report = refused_report(&proj);
    let reasons = report["reasons"].to_string();
    assert!(
        reasons.contains(&format!(
            "the nop (unchanged workspace) of evocode/{LENIENT} scored 1"
        )),
        "{reasons}"
    );
    let cells: Vec<&Value> = report["grader_validity"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["grading"] == "gating")
        .collect();
    assert_eq!(cells.len(), 6, "{cells:?}");
    for c in &cells {
        let bad = c["task"] == LENIENT && c["arm"] == "nop";
        assert_eq!(c["ok"], !bad, "{c}");
    }
    eprintln!("grader validity (EvoCode controls, rounds_mean_reward):");
    for c in &cells {
        eprintln!(
            "  {:<26} {:<8} {:>4} {}",
            c["task"].as_str().unwrap(),
            c["arm"].as_str().unwrap(),
            c["score"],
            if c["ok"] == true { "ok" } else { "INVALID" }
        );
    }
}

/// The attack of issue 33 item 2 against the grader of `1a73df8`: the round's tests build and run
/// the agent's program with `/out` writable by the same user; its init() writes `/out/reward.txt`
/// and makes it read-only, the wrapper's copy of the verifier's reward fails silently, and the
/// forged reward is read. `grader_valid` names the exploit that scores above its nop.
#[test]
fn the_one_stage_evocode_grader_is_forged_by_forge_reward_and_grader_valid_refuses_it() {
    let Some(grader) = grader_image() else {
        return;
    };
    let (_tmp, proj, metrics) = run_controls(&grader, &[(HONEST, false)], true);
    let m = |a: &str, name: &str| {
        metrics[&(HONEST.to_owned(), a.to_owned())][name]
            .as_f64()
            .unwrap_or(-1.0)
    };
    assert_eq!(m("nop", "rounds_mean_reward"), 0.0, "{metrics:?}");
    assert_eq!(
        m("exploit:forge-reward", "rounds_mean_reward"),
        1.0,
        "{metrics:?}"
    );
    let report = refused_report(&proj);
    let reasons = report["reasons"].to_string();
    assert!(
        reasons.contains(&format!(
            "exploit:forge-reward scored 1 on evocode/{HONEST}, above its nop"
        )),
        "{reasons}"
    );
}
