//! The whole v0.4 through `eval`, end to end (issue 34): `eval import v04` → `eval freeze` →
//! `eval run` on the real DeepSeek Harness image against the scripted DeepSeek-faithful upstream
//! of `support/dsh.rs` → `eval report`. Inputs: v0.4's real `simple` files
//! (`../shared/v04-upstream`, never copied into the repository), a synthetic ICAE-EVAL root in
//! ICAE's published layout (`import_v04_whole::icae_dir`: the `shout` task under v0.4's six
//! repository keys) and the synthetic 3-round Go task in EvoCode-Bench's Harbor multi-step
//! layout (`import_evocode::write_task`) under v0.4's EvoCode ids.
//!
//! The CI test is the reduced v0.4: one task per suite (`--simple-tasks`, `--icae-tasks`,
//! `--evocode-tasks`), v0.4's schedule otherwise (three arms per suite, two repetitions, the six
//! infrastructure slots, every suite's control arms): 24 Harness attempts. The full one
//! (`the_whole_v04_...`, ignored: hours) is what `scripts/v04-real.sh --scripted` runs.
//!
//! The images are what the importer takes: the three `EVAL_TEST_*` images as `--image`
//! (`scripts/ensure-harness-images.sh`), any other image the importer needs from its build
//! records (`runtimes/images/*/build.sh`, `EVAL_IMAGES_WORK`). Without the engine or the images
//! the test fails, never skips.
//!
//! Asserted: every Harness attempt completed with accounting `matched`; every ICAE attempt asked
//! the stateful oracle and got an answer; every EvoCode attempt's three rounds graded
//! (`scored`); every control slot graded (no infrastructure fault) and `grader_valid` evaluated;
//! every rule of every gate evaluated (no `not_computable`); the API key in no output and no
//! file of the project. Prints the figures the closing note quotes: wall time per attempt by
//! suite (median), tokens, the report's verdict.

use crate::import_evocode::{DOCKERFILE, write_task};
use crate::import_icae::copy_tree;
use crate::import_v04_whole::{EVOCODE, icae_dir};
use crate::support::dsh::{DeepSeekUpstream, guarded};
use crate::support::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::Command;

const NAME: &str = "v0.4-e2e";
const KEY_ENV: &str = "EVAL_V04_E2E_TEST_KEY";
/// A hang detector only (24 Harness attempts, EvoCode's of three rounds each, Go builds in the
/// grader: tens of minutes on a loaded machine; the full run takes hours).
const HANG_GUARD_SECS: u64 = 12 * 3600;
/// The reduced v0.4's tasks: the first of each suite in v0.4's order (its infrastructure slots
/// run on the first task of each suite, as v0.4's do on these).
const SIMPLE_TASK: &str = "simple-js-clamp";
const ICAE_TASK: &str = "icae-js-ts-01";
const SUITES: [&str; 3] = ["simple", "icae", "evocode"];
/// The images `eval import v04` takes by build name, from the variables
/// `scripts/ensure-harness-images.sh` exports.
const IMAGES: [(&str, &str); 3] = [
    ("dsh-poly", "EVAL_TEST_DSH_POLY_IMAGE"),
    ("v04-grader", "EVAL_TEST_V04_GRADER_IMAGE"),
    ("evocode-go", "EVAL_TEST_EVOCODE_GO_IMAGE"),
];

fn random_hex(n: usize) -> String {
    let mut buf = vec![0u8; n];
    std::fs::File::open("/dev/urandom")
        .unwrap()
        .read_exact(&mut buf)
        .unwrap();
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

/// EvoCode-Bench task directories under `ids`, each the synthetic 3-round Go task with its
/// tests building `greet` into /tests and Go's directory on PATH (the grader images'
/// /usr/local/bin is root's: docs/importers.md "Importing v0.4's EvoCode suite", known gap; as
/// `dsh_rounds.rs` and `grader_controls_evocode.rs` do).
fn evocode_dir(root: &Path, ids: &[&str]) -> PathBuf {
    let task = write_task(
        &root.join("evocode-src"),
        &format!(
            "{DOCKERFILE}ENV PATH=/tests:/usr/lib/go-1.23/bin:/usr/lib/go-1.22/bin:/usr/bin:/bin\n"
        ),
    );
    for k in 1..=3 {
        edit(&task.join(format!("steps/round-{k}/tests/test.sh")), |s| {
            assert!(s.contains("-o /usr/local/bin/greet"), "{s}");
            s.replace("-o /usr/local/bin/greet", "-o /tests/greet")
        });
    }
    let dir = root.join("evocode");
    for id in ids {
        copy_tree(&task, &dir.join(id));
    }
    dir
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => f64::midpoint(v[n / 2 - 1], v[n / 2]),
    }
}

fn secs(rfc3339: &str) -> f64 {
    humantime::parse_rfc3339_weak(rfc3339)
        .unwrap_or_else(|e| panic!("{rfc3339:?}: {e}"))
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// `eval import v04` (reduced: one task per suite) → freeze → run → report, with the
/// assertions of the module's header; prints the figures.
fn whole_v04(reduced: bool) {
    assert!(
        docker_available(),
        "this test needs the Docker engine (scripts/ensure-docker.sh)"
    );
    let mut image_flags = Vec::new();
    for (name, var) in IMAGES {
        let id = std::env::var(var).unwrap_or_else(|_| {
            panic!("{var} is not set: run `export $(scripts/ensure-harness-images.sh)` first")
        });
        let id = id.trim();
        assert!(
            eval_runtimes::definition::is_digest(id),
            "{var}={id:?} is not an image id"
        );
        image_flags.push("--image".to_owned());
        image_flags.push(format!("{name}={id}"));
    }
    static_binaries();
    let tmp = tempfile::Builder::new().prefix("v04e2e").tempdir().unwrap();
    let root = tmp.path();
    let evocode_ids: &[&str] = if reduced { &EVOCODE[..1] } else { &EVOCODE };
    let evocode = evocode_dir(root, evocode_ids);
    let icae = icae_dir(root);
    let simple = v04_upstream();
    let dir = root.join("proj");
    std::fs::create_dir(&dir).unwrap();

    let mut args: Vec<String> = [
        "import",
        "v04",
        "--simple",
        simple.to_str().unwrap(),
        "--icae",
        icae.to_str().unwrap(),
        "--evocode",
        evocode.to_str().unwrap(),
        "--protocol",
        NAME,
        "--allow-unpinned",
    ]
    .map(str::to_owned)
    .to_vec();
    args.extend(image_flags);
    if reduced {
        for (flag, id) in [
            ("--simple-tasks", SIMPLE_TASK),
            ("--icae-tasks", ICAE_TASK),
            ("--evocode-tasks", EVOCODE[0]),
        ] {
            args.extend([flag.to_owned(), id.to_owned()]);
        }
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = eval(&dir, &args);
    assert_eq!(o.status.code(), Some(0), "eval import v04: {}", text(&o));
    let mut outputs = vec![text(&o)];
    // This instance's identity apart from any other run's (the container sweep's label).
    edit(&dir.join(format!("protocols/{NAME}/protocol.toml")), |s| {
        format!("{s}\n# v04 e2e test {}\n", random_hex(8))
    });
    let o = eval(&dir, &["plan", "--matrix", NAME, "--json"]);
    assert_eq!(o.status.code(), Some(0), "eval plan: {}", text(&o));
    let plan: Value = serde_json::from_slice(&o.stdout).unwrap();
    let (n_stat, n_infra) = if reduced { (18, 6) } else { (90, 6) };
    assert_eq!(
        plan.as_array().unwrap().len(),
        n_stat + n_infra,
        "v0.4's schedule{}: {plan}",
        if reduced {
            " on one task per suite"
        } else {
            ""
        }
    );

    let o = eval(&dir, &["freeze", "--protocol", NAME]);
    assert_eq!(o.status.code(), Some(0), "eval freeze: {}", text(&o));
    outputs.push(text(&o));
    let freeze: Value = serde_json::from_slice(
        &std::fs::read(dir.join(format!("runs/freezes/{NAME}.json"))).unwrap(),
    )
    .unwrap();
    let _sweep = Sweep(format!(
        "eval.identity={}",
        freeze["identity"].as_str().unwrap()
    ));

    let key = format!("sk-v04e2e-{}", random_hex(24));
    let upstream = DeepSeekUpstream::start(&key, &format!("v04-e2e-{}", random_hex(8)));
    let started = std::time::Instant::now();
    let mut run = Command::new(eval_bin());
    run.args([
        "run",
        "--matrix",
        NAME,
        "--upstream",
        &upstream.url(),
        "--api-key-env",
        KEY_ENV,
        // The whole v0.4's run ceiling (thousands of USD) is more than the scripted account's
        // balance.
        "--no-balance-check",
    ])
    .env(KEY_ENV, &key)
    .env_remove("EVAL_SIGNING_KEY_FILE")
    .current_dir(&dir);
    let out = guarded(run, HANG_GUARD_SECS);
    let run_secs = started.elapsed().as_secs_f64();
    let run_text = text(&out);
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "eval run exited {:?}:\n{run_text}",
        out.status.code()
    );
    outputs.push(run_text.clone());
    assert!(
        upstream.unexpected().is_empty(),
        "{:?}",
        upstream.unexpected()
    );
    assert_eq!(upstream.unauthorized(), 0, "a request came without the key");

    let es = entries(&dir.join(format!("runs/{NAME}/ledger.sqlite")));
    assert!(payloads(&es, "rerun").is_empty(), "{run_text}");
    let started_at: BTreeMap<String, Value> = payloads(&es, "attempt_started")
        .into_iter()
        .map(|s| (s["attempt"].as_str().unwrap().to_owned(), s))
        .collect();
    let suite_of = |o: &Value| -> String {
        let id = o["attempt"].as_str().unwrap();
        started_at
            .get(id)
            .and_then(|s| s["suite"].as_str())
            .unwrap_or_else(|| panic!("no attempt_started for {id}"))
            .to_owned()
    };
    let (controls, outcomes): (Vec<Value>, Vec<Value>) =
        payloads(&es, "attempt_outcome").into_iter().partition(|o| {
            o["attempt"]
                .as_str()
                .is_some_and(|a| a.starts_with("control-"))
        });
    let report_path = dir.join("report.json");
    let o = eval(
        &dir,
        &[
            "report",
            "--matrix",
            NAME,
            "--format",
            "json",
            "--out",
            report_path.to_str().unwrap(),
        ],
    );
    assert!(
        matches!(o.status.code(), Some(0 | 1)),
        "eval report: {}",
        text(&o)
    );
    outputs.push(text(&o));
    let report: Value = serde_json::from_slice(&std::fs::read(&report_path).unwrap()).unwrap();
    // The figures (before the assertions, so a failing run still reports them).
    let mut fig_suites: BTreeMap<String, Vec<&Value>> = BTreeMap::new();
    for o in &outcomes {
        fig_suites.entry(suite_of(o)).or_default().push(o);
    }
    let mut verdicts: BTreeMap<String, usize> = BTreeMap::new();
    for r in report["gates"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().into_iter().flatten())
    {
        *verdicts
            .entry(r["verdict"].as_str().unwrap_or("?").to_owned())
            .or_default() += 1;
    }
    eprintln!(
        "v04 figures: {} attempts ({} controls), eval run wall time {run_secs:.0} s",
        outcomes.len(),
        controls.len()
    );
    let (mut input, mut output, mut cached) = (0u64, 0u64, 0u64);
    for suite in SUITES {
        let Some(os) = fig_suites.get(suite) else {
            eprintln!("v04 figures: {suite}: no attempt");
            continue;
        };
        let walls: Vec<f64> = os
            .iter()
            .map(|o| {
                let s = &started_at[o["attempt"].as_str().unwrap()];
                secs(o["finished_at"].as_str().unwrap()) - secs(s["started_at"].as_str().unwrap())
            })
            .collect();
        let t = |k: &str| {
            os.iter()
                .map(|o| o["tokens"][k].as_u64().unwrap())
                .sum::<u64>()
        };
        let (i, out, c) = (t("input"), t("output"), t("cached"));
        input += i;
        output += out;
        cached += c;
        eprintln!(
            "v04 figures: {suite}: {} attempts, all matched, wall time per attempt median {:.1} s \
             (min {:.1}, max {:.1}); tokens prompt {i} (cache hits {c}), completion {out}",
            os.len(),
            median(walls.clone()),
            walls.iter().copied().fold(f64::INFINITY, f64::min),
            walls.iter().copied().fold(0.0, f64::max),
        );
    }
    eprintln!(
        "v04 figures: total tokens prompt {input} (cache hits {cached}), completion {output}; \
         every attempt matched: {}; rule verdicts {verdicts:?}",
        outcomes.iter().all(|o| o["accounting"] == "matched")
    );
    eprintln!(
        "v04 figures: report verdict: {} (release_allowed {}); reasons: {}",
        report["verdict"].as_str().unwrap_or_default(),
        report["release_allowed"],
        report["reasons"]
    );
    assert_eq!(outcomes.len(), n_stat + n_infra, "{outcomes:?}\n{run_text}");

    // Every Harness attempt: completed, metered to the token.
    let mut by_suite: BTreeMap<String, Vec<&Value>> = BTreeMap::new();
    for o in &outcomes {
        let (arm, slot) = (o["arm"].as_str().unwrap(), o["slot"].as_str().unwrap());
        assert_eq!(o["outcome"], "completed", "{arm} {slot}: {o}\n{run_text}");
        assert_eq!(o["accounting"], "matched", "{arm} {slot}: {o}");
        by_suite.entry(suite_of(o)).or_default().push(o);
    }
    assert_eq!(
        by_suite.keys().map(String::as_str).collect::<Vec<_>>(),
        {
            let mut s = SUITES.to_vec();
            s.sort_unstable();
            s
        },
        "attempts of every suite"
    );

    // Every ICAE attempt asked the stateful oracle and got its answer.
    let clarifications = payloads(&es, "clarification");
    for o in &by_suite["icae"] {
        let id = o["attempt"].as_str().unwrap();
        let arm = o["arm"].as_str().unwrap();
        assert!(
            o["clarification_questions"].as_u64() >= Some(1),
            "{arm}: no question asked: {o}"
        );
        assert!(o["oracle_calls"].as_u64() >= Some(1), "{arm}: {o}");
        let asked: Vec<&Value> = clarifications
            .iter()
            .filter(|c| c["attempt"] == id)
            .collect();
        assert!(!asked.is_empty(), "{arm} {id}: no clarification recorded");
        for c in asked {
            assert!(
                c["answer"].as_str().is_some_and(|a| !a.trim().is_empty()),
                "{arm} {id}: a question went unanswered: {c}"
            );
            assert_eq!(c["source"], "oracle_stateful", "{arm} {id}: {c}");
            assert!(
                c["recorded"].as_array().is_some_and(|r| !r.is_empty()),
                "{arm} {id}: the oracle's answer named no constraint: {c}"
            );
        }
    }

    // Every EvoCode attempt's three rounds were graded by their own tests.
    let rounds = payloads(&es, "round_finished");
    for o in &by_suite["evocode"] {
        let id = o["attempt"].as_str().unwrap();
        let mine: Vec<&Value> = rounds.iter().filter(|r| r["attempt"] == id).collect();
        assert_eq!(mine.len(), 3, "{id}: {mine:?}");
        for r in mine {
            assert_eq!(r["graded"], "scored", "{id}: {r}");
            assert!(
                r["metrics"].as_object().is_some_and(|m| !m.is_empty()),
                "{id}: {r}"
            );
        }
    }

    // Every suite's control slots graded (they run no agent).
    let mut controls_by_suite: BTreeMap<String, usize> = BTreeMap::new();
    for c in &controls {
        assert_ne!(c["outcome"], "infra_fault", "a control slot: {c}");
        *controls_by_suite.entry(suite_of(c)).or_default() += 1;
    }
    for suite in SUITES {
        assert!(
            controls_by_suite.get(suite).copied().unwrap_or(0) > 0,
            "no control slot of {suite}: {controls_by_suite:?}"
        );
    }

    assert_eq!(report["integrity_failure"], false, "{report}");
    let gates = report["gates"].as_array().unwrap();
    assert_eq!(
        gates
            .iter()
            .map(|g| g["id"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["integrity", "simple", "icae", "evocode"]
    );
    for g in gates {
        for r in g["rules"].as_array().unwrap() {
            assert_ne!(
                r["verdict"], "not_computable",
                "gate {} rule {} was not evaluated: {r}",
                g["id"], r["id"]
            );
        }
    }
    let grader_valid = gates[0]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["statistic"] == "grader_valid")
        .unwrap_or_else(|| panic!("no grader_valid rule: {}", gates[0]));
    assert!(
        matches!(grader_valid["verdict"].as_str(), Some("pass" | "fail")),
        "{grader_valid}"
    );
    let cells = report["grader_validity"].as_array().unwrap();
    for suite in SUITES {
        assert!(
            cells.iter().any(|c| c["suite"] == suite),
            "no grader-validity cell of {suite}"
        );
    }
    let done = &report["completeness"];
    assert_eq!(
        (
            done["statistical_resolved"].as_u64(),
            done["infrastructure_completed"] == done["infrastructure_total"],
            done["missing"].as_array().map(Vec::len)
        ),
        // (The report counts the control slots among the infrastructure slots.)
        (Some(n_stat as u64), true, Some(0)),
        "{done}"
    );

    // The key: in no output and no file of the project.
    for out in &outputs {
        assert!(!out.contains(&key), "the key in an output: {out}");
    }
    let mut files = Vec::new();
    all_bytes(&dir, &mut files);
    for (p, b) in &files {
        assert!(!contains(b, key.as_bytes()), "the key in {}", p.display());
    }
}

#[test]
fn the_reduced_v04_imported_frozen_run_and_reported_on_the_real_harness() {
    whole_v04(true);
}

/// The full v0.4 (6 + 90 slots plus the controls): hours on this machine, so not in CI;
/// `scripts/v04-real.sh --scripted` runs it and prints its figures.
#[test]
#[ignore = "hours: run by scripts/v04-real.sh --scripted"]
fn the_whole_v04_imported_frozen_run_and_reported_on_the_real_harness() {
    whole_v04(false);
}
