//! `eval import v04-simple` (issue 15): v0.4's real `simple` suite, read from
//! `../shared/v04-upstream` (never copied into this repository), imported into temporary projects.
//! Without an engine: what is written, byte for byte against the inputs; that the protocol loads;
//! refusals (existing files, tampered packages, hostile task paths, unknown tasks) exit 2 and
//! write nothing. With the engine and the two base images (`scripts/ensure-harness-images.sh`
//! exports `EVAL_TEST_DSH_POLY_IMAGE` and `EVAL_TEST_V04_GRADER_IMAGE`): `eval freeze` of the imported
//! protocol, and v0.4's grader under eval's grader container policy scoring correct solutions
//! 100 and the untouched workspaces lower, in JavaScript, Python and Go.

use crate::support::{
    demo_project, docker_available, entries, eval, payloads, replace_in, repo_root,
    static_binaries, text,
};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

const DSH_ENV: &str = "EVAL_TEST_DSH_POLY_IMAGE";
const GRADER_ENV: &str = "EVAL_TEST_V04_GRADER_IMAGE";
const NAME: &str = "simple-real";
const PACKAGES: [&str; 2] = [
    "dsh-plan-lattice-0.3.0.tgz",
    "dsh-plan-lattice-0.4.0-rc.3.tgz",
];

fn upstream() -> PathBuf {
    crate::support::v04_upstream()
}

/// An image id that is well-formed but names nothing (enough for everything but freeze and run).
fn fake_id(c: char) -> String {
    format!("sha256:{}", c.to_string().repeat(64))
}

fn import(project: &Path, from: &Path, extra: &[&str]) -> std::process::Output {
    let (dsh, grader) = (fake_id('d'), fake_id('e'));
    import_with(project, from, &dsh, &grader, extra)
}

fn import_with(
    project: &Path,
    from: &Path,
    dsh: &str,
    grader: &str,
    extra: &[&str],
) -> std::process::Output {
    let from = from.to_str().unwrap();
    let mut args = vec![
        "import",
        "v04-simple",
        "--from",
        from,
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

/// Every file beneath `dir` (relative path → bytes).
fn tree(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                out.insert(
                    p.strip_prefix(root).unwrap().to_path_buf(),
                    std::fs::read(&p).unwrap(),
                );
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

fn tasks_json(from: &Path) -> Vec<Value> {
    let v: Value =
        serde_json::from_slice(&std::fs::read(from.join("simple-tasks.json")).unwrap()).unwrap();
    v["tasks"].as_array().unwrap().clone()
}

/// A copy of v0.4's directory to tamper with.
fn upstream_copy() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("v04");
    std::fs::create_dir(&dir).unwrap();
    for (rel, bytes) in tree(&upstream()) {
        let to = dir.join(rel);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::write(to, bytes).unwrap();
    }
    (tmp, dir)
}

fn project() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("proj");
    std::fs::create_dir(&dir).unwrap();
    (tmp, dir)
}

#[test]
fn the_import_writes_the_suite_from_the_inputs_and_the_protocol_loads() {
    let (_t, proj) = project();
    let from = upstream();
    let o = import(&proj, &from, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let p = proj.join("protocols").join(NAME);

    // The packages are the inputs' bytes, one per plugin arm; the baseline has none.
    let v03 = p.join("arms/v0.3-always").join(PACKAGES[0]);
    let v04 = p.join("arms/v0.4-auto").join(PACKAGES[1]);
    assert_eq!(
        std::fs::read(&v03).unwrap(),
        std::fs::read(from.join(PACKAGES[0])).unwrap()
    );
    assert_eq!(
        std::fs::read(&v04).unwrap(),
        std::fs::read(from.join(PACKAGES[1])).unwrap()
    );
    let native: Vec<_> = tree(&p.join("arms/native")).into_keys().collect();
    assert_eq!(native, vec![PathBuf::from("cordis.patch.yml")]);

    // Each arm's profile patch: the shared rows of runtimes/dsh, then its plugin rows as
    // profile.mjs writes them.
    let shared =
        std::fs::read_to_string(repo_root().join("runtimes/dsh/profile.patch.yml")).unwrap();
    for (arm, rows) in [
        ("native", ""),
        (
            "v0.3-always",
            "- id: plan-lattice\n  config:\n    intakeMode: off\n",
        ),
        (
            "v0.4-auto",
            "- id: plan-lattice\n  config:\n    activationMode: auto\n",
        ),
    ] {
        let patch =
            std::fs::read_to_string(p.join("arms").join(arm).join("cordis.patch.yml")).unwrap();
        let rest = patch
            .strip_prefix(shared.as_str())
            .unwrap_or_else(|| panic!("{arm}: {patch}"));
        assert_eq!(rest.trim_start_matches('\n'), rows, "{arm}");
    }

    // The dsh runtime carries the base id given; the grader runtime its own.
    let dsh = std::fs::read_to_string(proj.join("runtimes/dsh-poly/runtime.toml")).unwrap();
    assert!(
        dsh.contains(&fake_id('d')) && !dsh.contains("@DSH_POLY_IMAGE_ID@"),
        "{dsh}"
    );
    let grader =
        eval_runtimes::RuntimeDef::load(&proj.join("runtimes/v04-grader/runtime.toml")).unwrap();
    assert_eq!(grader.def.image.id.as_deref(), Some(fake_id('e').as_str()));
    assert!(grader.def.grader.is_some());

    // Every task: its prompt, its initial files (and nothing else) as the workspace, the task
    // and v0.4's grader unchanged in hidden/.
    let grader_src = std::fs::read(from.join("simple-grader.mjs")).unwrap();
    let tasks = tasks_json(&from);
    assert_eq!(tasks.len(), 6);
    for t in &tasks {
        let id = t["id"].as_str().unwrap();
        let dir = p.join("tasks/simple").join(id);
        let prompt = std::fs::read_to_string(dir.join("prompt.md")).unwrap();
        assert_eq!(prompt.trim_end(), t["prompt"].as_str().unwrap(), "{id}");
        let want: BTreeMap<PathBuf, Vec<u8>> = t["initialFiles"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (PathBuf::from(k), v.as_str().unwrap().as_bytes().to_vec()))
            .collect();
        assert_eq!(tree(&dir.join("workspace")), want, "{id}");
        let hidden = tree(&dir.join("hidden"));
        assert_eq!(
            hidden[Path::new("driver/lib/simple-grader.mjs")],
            grader_src,
            "{id}"
        );
        let task: Value = serde_json::from_slice(&hidden[Path::new("task.json")]).unwrap();
        assert_eq!(&task, t, "{id}");
        assert!(hidden.contains_key(Path::new("lib/canonical.mjs")));
        assert!(hidden.contains_key(Path::new("grade.mjs")));
    }

    // The protocol and matrix load and check as eval reads them (no engine needed).
    let loaded = eval_protocols::Project::open(&proj).load(NAME).unwrap();
    let arms: Vec<&str> = loaded.protocol.arms.iter().map(|a| a.id.as_str()).collect();
    assert_eq!(arms, ["native", "v0.3-always", "v0.4-auto"]);
    let v04_arm = loaded
        .protocol
        .arms
        .iter()
        .find(|a| a.id == "v0.4-auto")
        .unwrap();
    assert_eq!(v04_arm.settings["activationMode"].as_str(), Some("auto"));
    let v03_arm = loaded
        .protocol
        .arms
        .iter()
        .find(|a| a.id == "v0.3-always")
        .unwrap();
    assert_eq!(v03_arm.settings["intakeMode"].as_str(), Some("off"));
    let agent = &loaded.protocol.models["agent"];
    assert_eq!(agent.params["max_tokens"].equals, Some(256000.0));
    let o = eval(&proj, &["plan", "--matrix", NAME, "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let slots: Vec<Value> = serde_json::from_slice(&o.stdout).unwrap();
    let stat = slots.iter().filter(|s| s["phase"] == "statistical").count();
    assert_eq!(stat, tasks.len() * 3 * 2);
}

/// Every arm the import writes carries eval's support plugin (the Harness's user questions reach
/// `/_eval/clarify` through it): the repository's `runtimes/dsh/eval-support/` byte for byte
/// beside the runtime, in each arm's layer (`[[arm.file]]`), attested with one digest in every
/// arm, the baseline included.
#[test]
fn every_imported_arm_carries_the_same_attested_support_plugin() {
    let (_t, proj) = project();
    let o = import(&proj, &upstream(), &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let ours = tree(&repo_root().join("runtimes/dsh/eval-support"));
    assert_eq!(
        ours.keys().cloned().collect::<Vec<_>>(),
        ["cordis.patch.yml", "index.js", "package.json", "runner.js"].map(PathBuf::from)
    );
    assert_eq!(tree(&proj.join("runtimes/dsh-poly/eval-support")), ours);
    let def =
        eval_runtimes::RuntimeDef::load(&proj.join("runtimes/dsh-poly/runtime.toml")).unwrap();
    assert_eq!(def.def.arm.files.len(), 1);
    assert_eq!(def.def.arm.files[0].dest, "/opt/eval/support");
    assert!(
        def.def
            .attested_paths()
            .contains(&"/opt/eval/support".to_owned())
    );
    let loaded = eval_protocols::Project::open(&proj).load(NAME).unwrap();
    let mut digests = std::collections::BTreeSet::new();
    for arm in &loaded.protocol.arms {
        let spec = eval_runtimes::ImageSpec {
            def: def.clone(),
            arm: eval_runtimes::ArmFiles {
                profile: Some(proj.join(&arm.profile)),
                candidate: arm.package.as_ref().map(|p| proj.join(p)),
            },
            labels: BTreeMap::new(),
        };
        let expected = eval_runtimes::image::arm_attestation(&spec).unwrap();
        let d = expected["/opt/eval/support"]
            .clone()
            .unwrap_or_else(|| panic!("{}: no support plugin in its layer", arm.id));
        digests.insert(d);
    }
    assert_eq!(loaded.protocol.arms.len(), 3);
    assert_eq!(digests.len(), 1, "{digests:?}");
}

#[test]
fn a_second_import_exits_2_names_the_file_and_changes_nothing() {
    let (_t, proj) = project();
    let o = import(&proj, &upstream(), &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let before = tree(&proj);
    let o = import(&proj, &upstream(), &["--tasks", "simple-js-clamp"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("exists"), "{}", text(&o));
    // The first target in path order names the file.
    assert!(
        text(&o).contains(&format!("matrix/{NAME}.toml")),
        "{}",
        text(&o)
    );
    assert_eq!(tree(&proj), before);
}

#[test]
fn a_tampered_or_unlisted_package_exits_2_naming_it_and_writes_nothing() {
    let (_u, from) = upstream_copy();
    let mut bytes = std::fs::read(from.join(PACKAGES[1])).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(from.join(PACKAGES[1]), bytes).unwrap();
    let (_t, proj) = project();
    let o = import(&proj, &from, &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains(PACKAGES[1]), "{}", text(&o));
    assert!(tree(&proj).is_empty());

    let (_u, from) = upstream_copy();
    let sums = std::fs::read_to_string(from.join("SHA256SUMS")).unwrap();
    let kept: String = sums
        .lines()
        .filter(|l| !l.contains(PACKAGES[0]))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(from.join("SHA256SUMS"), kept).unwrap();
    let o = import(&proj, &from, &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains(PACKAGES[0]) && text(&o).contains("not listed"),
        "{}",
        text(&o)
    );
    assert!(tree(&proj).is_empty());
}

/// The importer trusts no byte of its input directory: v0.4's four digests are compiled in, so
/// a substituted package (with a `SHA256SUMS` rewritten to match), task list or grader is refused
/// unless `--allow-unpinned`; an input that is a FIFO (which would hang a plain read) or a link
/// (here to `/dev/zero`, which would exhaust memory) is refused without being read.
#[test]
fn the_importer_refuses_substituted_bytes_fifos_and_links() {
    use sha2::Digest as _;
    // A substituted package, its SHA256SUMS line rewritten to agree.
    let (_u, from) = upstream_copy();
    let mut bytes = std::fs::read(from.join(PACKAGES[1])).unwrap();
    bytes.extend_from_slice(b"\0");
    let digest = hex::encode(sha2::Sha256::digest(&bytes));
    std::fs::write(from.join(PACKAGES[1]), &bytes).unwrap();
    let sums: String = std::fs::read_to_string(from.join("SHA256SUMS"))
        .unwrap()
        .lines()
        .map(|l| {
            if l.ends_with(PACKAGES[1]) {
                format!("{digest}  {}\n", PACKAGES[1])
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    std::fs::write(from.join("SHA256SUMS"), sums).unwrap();
    let (_t, proj) = project();
    let o = import(&proj, &from, &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains(PACKAGES[1]), "{}", text(&o));
    assert!(text(&o).contains("--allow-unpinned"), "{}", text(&o));
    assert!(tree(&proj).is_empty());
    let o = import(&proj, &from, &["--allow-unpinned"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));

    // A grader that is not v0.4's.
    let (_u, from) = upstream_copy();
    let mut g = std::fs::read(from.join("simple-grader.mjs")).unwrap();
    g.extend_from_slice(b"\n// changed\n");
    std::fs::write(from.join("simple-grader.mjs"), g).unwrap();
    let (_t, proj) = project();
    let o = import(&proj, &from, &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("simple-grader.mjs"), "{}", text(&o));
    assert!(tree(&proj).is_empty());

    // A FIFO and a link to /dev/zero in place of the task list.
    for kind in ["fifo", "link"] {
        let (_u, from) = upstream_copy();
        let target = from.join("simple-tasks.json");
        std::fs::remove_file(&target).unwrap();
        if kind == "fifo" {
            rustix::fs::mkfifoat(
                rustix::fs::CWD,
                &target,
                rustix::fs::Mode::RUSR | rustix::fs::Mode::WUSR,
            )
            .unwrap();
        } else {
            std::os::unix::fs::symlink("/dev/zero", &target).unwrap();
        }
        let (_t, proj) = project();
        let o = import(&proj, &from, &["--allow-unpinned"]);
        assert_eq!(o.status.code(), Some(2), "{kind}: {}", text(&o));
        assert!(
            text(&o).contains("not a regular file"),
            "{kind}: {}",
            text(&o)
        );
        assert!(
            text(&o).contains("simple-tasks.json"),
            "{kind}: {}",
            text(&o)
        );
        assert!(tree(&proj).is_empty());
    }
}

#[test]
fn a_task_file_path_outside_the_workspace_exits_2_naming_it_and_writes_nothing() {
    for bad in ["../x", "/etc/x", "src/../../x", ".git/config", "a//b"] {
        let (_u, from) = upstream_copy();
        let mut v: Value =
            serde_json::from_slice(&std::fs::read(from.join("simple-tasks.json")).unwrap())
                .unwrap();
        v["tasks"][2]["initialFiles"][bad] = Value::from("pwned\n");
        std::fs::write(
            from.join("simple-tasks.json"),
            serde_json::to_vec(&v).unwrap(),
        )
        .unwrap();
        let (t, proj) = project();
        // The list is no longer v0.4's bytes: only --allow-unpinned gets it to the path check.
        let o = import(&proj, &from, &["--allow-unpinned"]);
        assert_eq!(o.status.code(), Some(2), "{bad}: {}", text(&o));
        assert!(
            text(&o).contains(&format!("{bad:?}")),
            "{bad}: {}",
            text(&o)
        );
        assert!(
            text(&o).contains("simple-python-whitespace"),
            "{}",
            text(&o)
        );
        assert!(tree(&proj).is_empty(), "{bad}");
        assert_eq!(
            std::fs::read_dir(t.path()).unwrap().count(),
            1,
            "only proj/"
        );
    }
}

#[test]
fn unknown_task_ids_and_bad_names_exit_2_and_a_subset_sizes_the_gate() {
    let (_t, proj) = project();
    let o = import(
        &proj,
        &upstream(),
        &["--tasks", "simple-js-clamp,simple-nope"],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("simple-nope"), "{}", text(&o));
    assert!(tree(&proj).is_empty());
    let o = import_with(&proj, &upstream(), "sha256:12", &fake_id('e'), &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("--dsh-image"), "{}", text(&o));
    assert!(tree(&proj).is_empty());

    let o = import(
        &proj,
        &upstream(),
        &["--tasks", "simple-python-whitespace,simple-js-clamp"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let loaded = eval_protocols::Project::open(&proj).load(NAME).unwrap();
    let gate = loaded
        .protocol
        .gates
        .iter()
        .find(|g| g.id == "simple")
        .unwrap();
    let pairs = gate.rules.iter().find(|r| r.id == "pairs").unwrap();
    assert_eq!(pairs.threshold, Some(4.0), "2 tasks x 2 repetitions");
    let mut tasks: Vec<String> =
        std::fs::read_dir(proj.join(format!("protocols/{NAME}/tasks/simple")))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
    tasks.sort();
    assert_eq!(tasks, ["simple-js-clamp", "simple-python-whitespace"]);
}

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

/// Grades `workspace` with the imported task's grader through eval's grader container policy
/// (`policy::container_spec` with the imported grader runtime: read-only root, noexec /tmp, the
/// exec scratch tmpfs, no network, workspace and hidden read-only) and returns `score.json`.
async fn grade(
    rt: &eval_runtimes::DockerRuntime,
    def: &eval_runtimes::RuntimeDef,
    image: &eval_runtimes::ImageId,
    task_dir: &Path,
    workspace: &Path,
    scratch: &Path,
    label: &str,
) -> (Value, String) {
    use eval_runtimes::Runtime as _;
    let out = scratch.join(format!("out-{label}"));
    std::fs::create_dir(&out).unwrap();
    let config = rt.inspect_image(image).await.unwrap();
    let ids = eval_runtimes::policy::effective_user(def, &config).unwrap();
    eval_runtimes::host::prepare_workspace(&out, ids).unwrap();
    let facts = eval_runtimes::AttemptFacts {
        protocol: NAME.into(),
        identity: "test".into(),
        arm: "grader".into(),
        attempt: format!("import-v04-{label}"),
        extra_labels: BTreeMap::from([("eval.test".to_owned(), "import_v04".to_owned())]),
    };
    let spec = eval_runtimes::container_spec(
        def,
        image,
        &config,
        &facts,
        &eval_runtimes::RoleMounts::Grader {
            oracle: None,
            workspace: workspace.to_path_buf(),
            hidden: task_dir.join("hidden"),
            out: out.clone(),
        },
    )
    .unwrap();
    let end = eval_runtimes::run_to_end(rt, &spec, &[], Duration::from_secs(600), 64 * 1024)
        .await
        .unwrap();
    let logs = String::from_utf8_lossy(&end.logs).into_owned();
    assert_eq!(
        end.outcome,
        eval_runtimes::WaitOutcome::Exited { code: 0 },
        "{label}: {logs}"
    );
    let score = serde_json::from_slice(&std::fs::read(out.join("score.json")).unwrap())
        .unwrap_or_else(|e| panic!("{label}: {e}: {logs}"));
    (score, logs)
}

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

#[test]
fn a_second_protocol_shares_identical_runtimes_and_refuses_different_ones() {
    let (_t, proj) = project();
    let o = import(&proj, &upstream(), &["--tasks", "simple-js-clamp"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let runtimes = tree(&proj.join("runtimes"));
    let from = upstream();
    let other = |dsh: &str| {
        eval(
            &proj,
            &[
                "import",
                "v04-simple",
                "--from",
                from.to_str().unwrap(),
                "--protocol",
                "other",
                "--dsh-image",
                dsh,
                "--grader-image",
                &fake_id('e'),
                "--tasks",
                "simple-js-clamp",
            ],
        )
    };
    // Another base for the Harness would change a runtime the first protocol uses: refused.
    let o = other(&fake_id('f'));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("runtimes/dsh-poly/runtime.toml"),
        "{}",
        text(&o)
    );
    assert!(!proj.join("protocols/other").exists());
    // The same bases: the second protocol is written beside the first, the runtimes untouched.
    let o = other(&fake_id('d'));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(proj.join("protocols/other/protocol.toml").is_file());
    assert_eq!(tree(&proj.join("runtimes")), runtimes);
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

/// `--router-identity` keeps v0.4's router precondition, pinned to that identity (a name alone
/// would unlock nothing); a malformed identity exits 2 naming the flag and writes nothing.
#[test]
fn the_router_precondition_is_pinned_to_the_identity_given() {
    let (_t, proj) = project();
    let o = import(&proj, &upstream(), &["--router-identity", "router"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("--router-identity"), "{}", text(&o));
    assert!(tree(&proj).is_empty());
    let id = format!("sha256:{}", "ab".repeat(32));
    let o = import(&proj, &upstream(), &["--router-identity", &id]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let loaded = eval_protocols::Project::open(&proj).load(NAME).unwrap();
    let pre = &loaded.protocol.preconditions;
    assert_eq!(pre.len(), 1);
    assert_eq!(pre[0].protocol, "router");
    assert_eq!(pre[0].identity.as_deref(), Some(id.as_str()));
    // Without the flag there is no precondition at all.
    let (_t2, proj2) = project();
    let o = import(&proj2, &upstream(), &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let loaded = eval_protocols::Project::open(&proj2).load(NAME).unwrap();
    assert!(loaded.protocol.preconditions.is_empty());
}

/// `--public-key` writes the protocol's `[signing]` (the key's canonical text) and `--upstream`
/// with `--tls-spki-sha256` its `[upstream]`, both accepted by the protocol loader; a private key
/// given as `--public-key`, or a pin on plain HTTP, exits 2 naming the flag and writes nothing
/// (the private key's text is never echoed). Without them the protocol says what a release
/// lacks.
#[test]
fn import_preregisters_the_signing_key_and_the_upstream_it_is_given() {
    let (t, proj) = project();
    let o = eval(
        &proj,
        &["keygen", "--out", t.path().join("k").to_str().unwrap()],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let public = String::from_utf8(o.stdout).unwrap().trim().to_owned();
    let private = std::fs::read_to_string(t.path().join("k")).unwrap();
    let pin = format!("sha256:{}", "0f".repeat(32));

    let o = import(&proj, &upstream(), &["--public-key", private.trim()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("--public-key") && text(&o).contains("private key"));
    assert!(!text(&o).contains(private.trim()));
    let o = import(
        &proj,
        &upstream(),
        &[
            "--upstream",
            "http://api.example",
            "--tls-spki-sha256",
            &pin,
        ],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("tls_spki_sha256"), "{}", text(&o));
    assert!(!proj.join(format!("protocols/{NAME}")).exists());

    let o = import(
        &proj,
        &upstream(),
        &[
            "--public-key",
            &public,
            "--upstream",
            "https://api.deepseek.com",
            "--tls-spki-sha256",
            &pin,
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let p: toml::Table = toml::from_str(
        &std::fs::read_to_string(proj.join(format!("protocols/{NAME}/protocol.toml"))).unwrap(),
    )
    .unwrap();
    assert_eq!(p["signing"]["public_key"].as_str(), Some(public.as_str()));
    assert_eq!(
        p["upstream"]["url"].as_str(),
        Some("https://api.deepseek.com")
    );
    assert_eq!(
        p["upstream"]["tls_spki_sha256"][0].as_str(),
        Some(pin.as_str())
    );
    // The loader accepts what was written.
    let o = eval(&proj, &["plan", "--matrix", NAME]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}
