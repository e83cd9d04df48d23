//! `eval import v04-simple` (issue 15): v0.4's real `simple` suite, read from
//! `../shared/v04-upstream` (never copied into this repository), imported into temporary projects.
//! Without an engine: what is written, byte for byte against the inputs; that the protocol loads;
//! refusals (existing files, tampered packages, hostile task paths, unknown tasks) exit 2 and
//! write nothing. With the engine and the two base images (`scripts/ensure-harness-images.sh`
//! exports `EVAL_TEST_DSH_IMAGE` and `EVAL_TEST_V04_GRADER_IMAGE`): `eval freeze` of the imported
//! protocol, and v0.4's grader under eval's grader container policy scoring correct solutions
//! 100 and the untouched workspaces lower, in JavaScript, Python and Go.
//!
//! The tests of this behaviour that need a Docker engine; the rest are in `tests/it/import_v04.rs`.

pub(crate) use crate::support::import_v04::*;
use crate::support::{
    demo_project, docker_available, entries, eval, payloads, replace_in, static_binaries, text,
};

/// Both image ids from the environment; `None` (skip) only when `EVAL_SKIP_DOCKER=1` asks for it.
fn images() -> Option<(String, String)> {
    if !docker_available() {
        return None;
    }
    let skip = std::env::var("EVAL_SKIP_DOCKER").is_ok_and(|v| v == "1");
    let mut ids = Vec::new();
    for var in [DSH_ENV, GRADER_ENV] {
        match std::env::var(var) {
            Ok(id) if eval_runtimes::definition::is_digest(id.trim()) => {
                ids.push(id.trim().to_owned())
            }
            _ if skip => {
                eprintln!("skipping: {var} is not set and EVAL_SKIP_DOCKER=1");
                return None;
            }
            other => panic!(
                "{var}={other:?}: run `export $(scripts/ensure-harness-images.sh)` first (it builds \
                 or reuses the base images and prints their ids), or set EVAL_SKIP_DOCKER=1"
            ),
        }
    }
    Some((ids.remove(0), ids.remove(0)))
}

#[test]
fn freeze_of_the_imported_protocol_exits_0() {
    let Some((dsh, grader)) = images() else {
        return;
    };
    let (_t, proj) = project();
    let o = import_with(&proj, &upstream(), &dsh, &grader, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = eval(&proj, &["freeze", "--protocol", NAME]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = eval(&proj, &["verify", "--protocol", NAME]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

/// Correct solutions, written the way an agent would (over the initial files).
const SOLUTIONS: [(&str, &str, &str); 3] = [
    (
        "simple-js-clamp",
        "src/clamp.js",
        "export function clamp(value, min, max) {\n  if (min > max) throw new RangeError('min > max')\n  return Math.min(Math.max(value, min), max)\n}\n",
    ),
    (
        "simple-python-whitespace",
        "text_utils.py",
        "def normalize_whitespace(value: str) -> str:\n    return ' '.join(value.split())\n",
    ),
    (
        "simple-go-dedupe",
        "dedupe.go",
        "package dedupe\n\nfunc DedupeStable(values []string) []string {\n\tif values == nil {\n\t\treturn nil\n\t}\n\tseen := make(map[string]bool, len(values))\n\tout := make([]string, 0, len(values))\n\tfor _, v := range values {\n\t\tif !seen[v] {\n\t\t\tseen[v] = true\n\t\t\tout = append(out, v)\n\t\t}\n\t}\n\treturn out\n}\n",
    ),
];

async fn grades_correct_100_and_untouched_lower(task: &str) {
    let Some((dsh, grader)) = images() else {
        return;
    };
    let (t, proj) = project();
    let o = import_with(&proj, &upstream(), &dsh, &grader, &["--tasks", task]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let def = eval_runtimes::RuntimeDef::load(&proj.join("runtimes/v04-grader/runtime.toml"))
        .unwrap()
        .def;
    let image = eval_runtimes::ImageId(grader.clone());
    let rt = eval_runtimes::DockerRuntime::connect().await.unwrap();
    let task_dir = proj.join(format!("protocols/{NAME}/tasks/simple/{task}"));
    let (_, file, solution) = SOLUTIONS.iter().find(|s| s.0 == task).unwrap();

    let untouched = t.path().join("untouched");
    let solved = t.path().join("solved");
    for dir in [&untouched, &solved] {
        for (rel, bytes) in tree(&task_dir.join("workspace")) {
            let p = dir.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, bytes).unwrap();
        }
    }
    std::fs::write(solved.join(file), solution).unwrap();

    let (good, logs) = grade(&rt, &def, &image, &task_dir, &solved, t.path(), "solved").await;
    // A Go grading starts from the image's warm build cache (else it compiles the standard
    // library each time); the wrapper says when it cannot.
    assert!(!logs.contains("no warm Go cache"), "{logs}");
    let total = good["metrics"]["checks_total"].as_f64().unwrap();
    assert_eq!(total, 5.0, "{good}");
    assert_eq!(good["metrics"]["checks_passed"], total, "{good}");
    assert_eq!(good["metrics"]["score"].as_f64(), Some(100.0), "{good}");
    assert_eq!(good["task"], task);

    let (bad, _) = grade(
        &rt,
        &def,
        &image,
        &task_dir,
        &untouched,
        t.path(),
        "untouched",
    )
    .await;
    let passed = bad["metrics"]["checks_passed"].as_f64().unwrap();
    assert!(passed < total, "{bad}");
    assert_eq!(
        bad["metrics"]["score"].as_f64().unwrap(),
        100.0 * passed / total,
        "{bad}"
    );
    // The stub implements nothing: the first (behavioural) assertion fails.
    assert_eq!(bad["checks"][0]["passed"], false, "{bad}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_grader_scores_javascript_under_the_grader_policy() {
    grades_correct_100_and_untouched_lower("simple-js-clamp").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_grader_scores_python_under_the_grader_policy() {
    grades_correct_100_and_untouched_lower("simple-python-whitespace").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_grader_scores_go_under_the_grader_policy() {
    grades_correct_100_and_untouched_lower("simple-go-dedupe").await;
}

/// The imported grader through `eval run`'s own grading path (thin grader image, the grader
/// policy, `score.json` into the ledger), with the project's fixture agent standing in for the
/// Harness (its arms, profiles and contract swapped in; the DeepSeek Harness end to end is
/// `dsh_*` tests' job). The fixture agent does not solve v0.4's tasks: every attempt must be
/// graded, by v0.4's five assertions, below full marks.
#[test]
fn the_imported_grader_grades_through_eval_run() {
    let Some((dsh, grader)) = images() else {
        return;
    };
    static_binaries();
    let (_t, proj) = demo_project();
    let tasks = "simple-js-clamp,simple-python-whitespace,simple-go-dedupe";
    let o = import_with(&proj, &upstream(), &dsh, &grader, &["--tasks", tasks]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let protocol = proj.join(format!("protocols/{NAME}/protocol.toml"));
    let text_of = std::fs::read_to_string(&protocol).unwrap();
    let mut swapped = text_of.replace(
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
    assert_ne!(swapped, text_of);
    std::fs::write(&protocol, swapped).unwrap();
    // The fixture agent's contract is v0.4's, not the Harness's.
    replace_in(&protocol, "equals = 256000", "equals = 32768");
    replace_in(
        &proj.join(format!("matrix/{NAME}.toml")),
        "repetitions = 2",
        "repetitions = 1",
    );
    replace_in(&protocol, "threshold = 6\n", "threshold = 3\n");

    let o = eval(&proj, &["freeze", "--protocol", NAME]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = eval(&proj, &["run", "--matrix", NAME, "--upstream", "fixture"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // Grader validity is on by default: every task's control arms (eval's own reference solution
    // as the oracle, the nop, the exploit library) are graded by the same path, apart from the
    // agents' attempts; eval's solutions earn v0.4's full marks.
    let (controls, outcomes): (Vec<serde_json::Value>, Vec<serde_json::Value>) = payloads(
        &entries(&proj.join(format!("runs/{NAME}/ledger.sqlite"))),
        "attempt_outcome",
    )
    .into_iter()
    .partition(|o| {
        o["attempt"]
            .as_str()
            .is_some_and(|a| a.starts_with("control-"))
    });
    assert_eq!(controls.len(), 3 * 8, "3 tasks x (oracle, nop, 6 exploits)");
    for c in controls.iter().filter(|c| c["arm"] == "oracle") {
        assert_eq!(c["outcome"], "completed", "{c}");
        assert_eq!(c["metrics"]["score"].as_f64(), Some(100.0), "{c}");
    }
    assert_eq!(
        outcomes.len(),
        2 + 3 * 3,
        "2 infrastructure + 3 tasks x 3 arms"
    );
    let mut tasks_seen = std::collections::BTreeSet::new();
    for p in &outcomes {
        assert_eq!(p["outcome"], "completed", "{p}");
        let m = &p["metrics"];
        assert_eq!(m["checks_total"], 5.0, "{p}");
        let passed = m["checks_passed"].as_f64().unwrap();
        assert!(passed < 5.0, "{p}");
        assert_eq!(m["score"].as_f64(), Some(20.0 * passed), "{p}");
        let slot = p["slot"].as_str().unwrap();
        let task = tasks.split(',').find(|t| slot.contains(t)).unwrap();
        tasks_seen.insert(task);
    }
    assert_eq!(tasks_seen.len(), 3, "{tasks_seen:?}");
}
