//! `eval import v04` (issue 34): v0.4's real `simple` inputs (`../shared/v04-upstream`),
//! synthetic EvoCode tasks under v0.4's three ids (Harbor layout, `import_evocode::write_task`) and
//! a synthetic ICAE root for v0.4's six tasks (ICAE's layout, `import_icae`'s fixtures) become one
//! protocol and one matrix: `eval plan` lists exactly `protocols/v0.4`'s 6 + 90 slots in v0.4's
//! order; the protocol carries every v0.4 gate rule (EvoCode's `task_count` and bootstrap rules
//! included), H1–H3, the seven arms, the oracle role and the Harness's contract; images come from
//! build records or `--image`, and a missing one exits 2 naming its build script.

use crate::import_evocode::{DOCKERFILE, write_task};
use crate::import_icae::{SUFFIX, cases, copy_tree};
use crate::support::{eval, repo_root, text};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::Command;

const NAME: &str = "v0.4-real";
const EVOCODE: [&str; 3] = [
    "theme_d1_w1_code_build_greenfield_implementation",
    "theme_d1_w5_code_build_integration_e2e_wiring",
    "theme_d6_w1_database_storage_greenfield_implementation",
];
/// v0.4's ICAE tasks' repository keys (benchmark-lock.json), as ICAE's data names them.
const ICAE_KEYS: [&str; 6] = [
    "google-gemini__deprecated-generative-ai-js",
    "atom__etch",
    "ahawker__ulid",
    "john-kurkowski__tldextract",
    "containrrr__watchtower",
    "microsoft__typescript-go",
];

fn fake(c: char) -> String {
    format!("sha256:{}", c.to_string().repeat(64))
}

/// EvoCode-Bench task directories under v0.4's three ids (the synthetic 3-round Go task).
fn evocode_dir(root: &Path) -> PathBuf {
    let dir = root.join("evocode");
    let scratch = root.join("evocode-src");
    let task = write_task(&scratch, DOCKERFILE);
    for id in EVOCODE {
        copy_tree(&task, &dir.join(id));
    }
    dir
}

/// An ICAE-EVAL root with v0.4's six tasks, each the synthetic `shout` task.
fn icae_dir(root: &Path) -> PathBuf {
    let dir = root.join("icae");
    let fixture = |rel: &str| {
        std::fs::read(
            repo_root()
                .join("controller/tests/fixtures/icae-synthetic")
                .join(rel),
        )
        .unwrap()
    };
    let w = |rel: &str, body: &[u8]| {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, body).unwrap();
    };
    let mut aliases = serde_json::Map::new();
    let brief = String::from_utf8(fixture("oracle/oracle_data.json")).unwrap();
    for (n, key) in ICAE_KEYS.iter().enumerate() {
        let alias = format!("realcode@{:03}", n + 1);
        aliases.insert(alias.clone(), json!({ "key": key }));
        w(
            &format!("fuzzy_prds/{alias}/start.md"),
            &fixture("start.md"),
        );
        w(
            &format!("user_agent/prd_json/{alias}.json"),
            format!("{{\"task_id\": \"{alias}\", \"oracle_data\": {brief}}}").as_bytes(),
        );
        for (tier, file, body) in cases() {
            w(
                &format!("rcb_tests_repos/{key}/rcb_tests/{tier}/{file}"),
                body.to_string().as_bytes(),
            );
        }
    }
    w(
        "repo_alias.json",
        serde_json::Value::Object(aliases).to_string().as_bytes(),
    );
    w("user_agent/init.md", &fixture("oracle/init.md"));
    w("user_agent/fuzzy_suffix.md", SUFFIX.as_bytes());
    dir
}

struct Inputs {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    project: PathBuf,
    evocode: PathBuf,
    icae: PathBuf,
}

fn inputs() -> Inputs {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_path_buf();
    let project = root.join("proj");
    std::fs::create_dir(&project).unwrap();
    Inputs {
        evocode: evocode_dir(&root),
        icae: icae_dir(&root),
        project,
        root,
        _tmp: tmp,
    }
}

/// `eval import v04` with the inputs, `--allow-unpinned` (the synthetic data has no pin), the
/// image records of `records` (an empty directory unless a test writes some) and `extra`.
fn import_v04(i: &Inputs, records: &Path, extra: &[&str]) -> std::process::Output {
    let simple = crate::support::v04_upstream();
    let mut args = vec![
        "import".to_owned(),
        "v04".into(),
        "--simple".into(),
        simple.to_str().unwrap().into(),
        "--evocode".into(),
        i.evocode.to_str().unwrap().into(),
        "--icae".into(),
        i.icae.to_str().unwrap().into(),
        "--allow-unpinned".into(),
    ];
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    Command::new(crate::support::eval_bin())
        .args(&args)
        .current_dir(&i.project)
        .env("EVAL_IMAGES_WORK", records)
        .env_remove("EVAL_SIGNING_KEY_FILE")
        .output()
        .unwrap()
}

fn fake_images() -> Vec<String> {
    vec![
        "--image".into(),
        format!("dsh={}", fake('d')),
        "--image".into(),
        format!("v04-grader={}", fake('e')),
        "--image".into(),
        format!("evocode-go={}", fake('f')),
    ]
}

fn plan_json(project: &Path, matrix: &str) -> serde_json::Value {
    let o = eval(project, &["plan", "--matrix", matrix, "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn the_whole_v04_imports_as_one_protocol_whose_plan_is_v04s_slot_for_slot() {
    let i = inputs();
    let records = i.root.join("no-records");
    let images = fake_images();
    let extra: Vec<&str> = images.iter().map(String::as_str).collect();
    let o = import_v04(&i, &records, &extra);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        text(&o).contains("precondition: none pinned"),
        "{}",
        text(&o)
    );

    // v0.4's own stand-in matrix and protocol beside the import, planned in the same project.
    copy_tree(
        &repo_root().join("protocols/v0.4"),
        &i.project.join("protocols/v0.4"),
    );
    std::fs::copy(
        repo_root().join("matrix/v0.4.toml"),
        i.project.join("matrix/v0.4.toml"),
    )
    .unwrap();
    let o = eval(&i.project, &["plan", "--matrix", NAME]);
    assert!(
        text(&o).contains("preconditions: none pinned"),
        "eval plan says up front that no router evaluation is pinned: {}",
        text(&o)
    );
    let ours = plan_json(&i.project, NAME);
    let theirs = plan_json(&i.project, "v0.4");
    assert_eq!(ours.as_array().unwrap().len(), 96);
    assert_eq!(ours, theirs, "the imported plan is not v0.4's");

    let p: toml::Table =
        std::fs::read_to_string(i.project.join("protocols/v0.4-real/protocol.toml"))
            .unwrap()
            .parse()
            .unwrap();
    let hyps: Vec<&str> = p["hypotheses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["id"].as_str().unwrap())
        .collect();
    assert_eq!(hyps, ["H1-simple", "H2-icae", "H3-evocode"]);
    let arms: Vec<&str> = p["arms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        arms,
        [
            "native",
            "v0.3-always",
            "v0.4-auto",
            "v0.4-never",
            "v0.4-critical",
            "v0.4-contract",
            "v0.4-lattice"
        ]
    );
    // The contract the stock Harness satisfies, and the oracle role.
    let agent = &p["models"]["agent"];
    assert_eq!(
        agent["params"]["max_tokens"]["equals"].as_integer(),
        Some(256000)
    );
    assert!(agent["params"].get("temperature").is_none());
    assert_eq!(
        p["models"]["oracle"]["params"]["max_tokens"]["equals"].as_integer(),
        Some(4096)
    );
    let gates = p["gates"].as_array().unwrap();
    let ids: Vec<&str> = gates.iter().map(|g| g["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["integrity", "simple", "icae", "evocode"]);
    let rule = |gate: &str, stat: &str| {
        gates
            .iter()
            .find(|g| g["id"].as_str() == Some(gate))
            .unwrap()["rules"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["statistic"].as_str() == Some(stat))
            .cloned()
    };
    // EvoCode's two rules its own importer leaves out, as v0.4 states them.
    let tasks = rule("evocode", "task_count").expect("evocode task_count rule");
    assert_eq!(tasks["threshold"].as_integer(), Some(3));
    assert_eq!(tasks["op"].as_str(), Some("=="));
    let boot = rule("evocode", "bootstrap_lower").expect("evocode bootstrap rule");
    assert_eq!(
        boot["metric"].as_str(),
        Some("rounds_cumulative_case_score")
    );
    assert_eq!(boot["op"].as_str(), Some(">"));
    assert_eq!(boot["method"].as_str(), Some("v04-percentile"));
    // Every rule of every v0.4 gate is there (by gate and statistic).
    let v04: toml::Table =
        std::fs::read_to_string(repo_root().join("protocols/v0.4/protocol.toml"))
            .unwrap()
            .parse()
            .unwrap();
    for g in v04["gates"].as_array().unwrap() {
        for r in g["rules"].as_array().unwrap() {
            let (gate, stat) = (g["id"].as_str().unwrap(), r["statistic"].as_str().unwrap());
            assert!(
                rule(gate, stat).is_some(),
                "v0.4's {gate}/{stat} is missing"
            );
        }
    }
    // One budget over the three suites: the run ceilings add up.
    assert!(p["budgets"]["run"]["max_spend_usd"].as_float().unwrap() >= 4500.0);
    let text =
        std::fs::read_to_string(i.project.join("protocols/v0.4-real/protocol.toml")).unwrap();
    assert!(text.contains("Deviation from v0.4's text"), "{text}");
}

#[test]
fn images_come_from_build_records_and_a_missing_one_names_its_build_script() {
    let i = inputs();
    let records = i.root.join("records");
    let o = import_v04(&i, &records, &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let msg = text(&o);
    assert!(
        msg.contains("image \"dsh\"") && msg.contains("runtimes/images/dsh/build.sh"),
        "{msg}"
    );
    assert!(!i.project.join("protocols").exists(), "nothing is written");

    // Records as lib.sh's record_build writes them; the newest of a name wins.
    let record = |name: &str, digest: &str, id: &str| {
        let d = records.join("built").join(name);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join(digest), format!("{id}\n")).unwrap();
    };
    let age = |name: &str, digest: &str, secs: u64| {
        let f = std::fs::File::options()
            .write(true)
            .open(records.join("built").join(name).join(digest))
            .unwrap();
        f.set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs))
            .unwrap();
    };
    // Written last but older: the record's time decides, not the listing's order.
    record("dsh", "new", &fake('d'));
    record("dsh", "old", &fake('1'));
    age("dsh", "new", 2_000_000_000);
    age("dsh", "old", 1_000_000_000);
    record("v04-grader", "x", &fake('e'));
    let o = import_v04(&i, &records, &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("runtimes/images/evocode-go/build.sh"),
        "{}",
        text(&o)
    );
    // A record anyone may write is no record.
    record("evocode-go", "x", &fake('f'));
    use std::os::unix::fs::PermissionsExt as _;
    let loose = records.join("built/evocode-go/x");
    std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o666)).unwrap();
    let o = import_v04(&i, &records, &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o644)).unwrap();

    let o = import_v04(&i, &records, &["--image", "nope=sha256:00"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("--image \"nope=sha256:00\""),
        "{}",
        text(&o)
    );

    let o = import_v04(&i, &records, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let rt = std::fs::read_to_string(i.project.join("runtimes/dsh/runtime.toml")).unwrap();
    assert!(rt.contains(&fake('d')) && !rt.contains(&fake('1')), "{rt}");
}

#[test]
fn bad_v04_inputs_exit_2_naming_the_input_and_write_nothing() {
    let i = inputs();
    let images = fake_images();
    let mut extra: Vec<&str> = images.iter().map(String::as_str).collect();
    // An ICAE root without one of v0.4's tasks.
    std::fs::remove_dir_all(i.icae.join("rcb_tests_repos/atom__etch")).unwrap();
    let o = import_v04(&i, &i.root.join("r"), &extra);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("atom__etch"), "{}", text(&o));
    assert!(!i.project.join("protocols").exists());
    assert!(!i.project.join("matrix").exists());
    // An EvoCode directory without one of v0.4's tasks.
    let j = inputs();
    std::fs::remove_dir_all(j.evocode.join(EVOCODE[1])).unwrap();
    let o = import_v04(&j, &j.root.join("r"), &extra);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains(EVOCODE[1]), "{}", text(&o));
    // A bad protocol name.
    extra.extend(["--protocol", "../x"]);
    let k = inputs();
    let o = import_v04(&k, &k.root.join("r"), &extra);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("--protocol \"../x\""), "{}", text(&o));
}

/// With the engine and the three base images: `eval freeze` of the composed protocol exits 0.
#[test]
fn freeze_of_the_whole_v04_exits_0() {
    assert!(
        crate::support::docker_available(),
        "this test needs the Docker engine"
    );
    let mut images = Vec::new();
    for (name, var) in [
        ("dsh", "EVAL_TEST_DSH_IMAGE"),
        ("v04-grader", "EVAL_TEST_V04_GRADER_IMAGE"),
        ("evocode-go", "EVAL_TEST_EVOCODE_GO_IMAGE"),
    ] {
        let id = std::env::var(var).unwrap_or_else(|_| {
            panic!("{var} is not set: `set -a; . /tmp/warm/images.env` or scripts/ensure-harness-images.sh")
        });
        images.push("--image".to_owned());
        images.push(format!("{name}={}", id.trim()));
    }
    let i = inputs();
    let extra: Vec<&str> = images.iter().map(String::as_str).collect();
    let o = import_v04(&i, &i.root.join("r"), &extra);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = eval(&i.project, &["freeze", "--protocol", NAME]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        text(&o).contains("preconditions: none pinned"),
        "{}",
        text(&o)
    );
}

/// A pinned router identity without a passed report in the registry is said by `eval plan`
/// before anything is built, naming the identity.
#[test]
fn plan_says_up_front_that_the_pinned_router_has_not_passed() {
    let i = inputs();
    let images = fake_images();
    let router = format!("sha256:{}", "ab".repeat(32));
    let mut extra: Vec<&str> = images.iter().map(String::as_str).collect();
    extra.extend(["--router-identity", &router]);
    let o = import_v04(&i, &i.root.join("r"), &extra);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = eval(&i.project, &["plan", "--matrix", NAME]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = text(&o);
    assert!(
        out.contains("precondition router: NOT MET")
            && out.contains(&router)
            && out.contains("refuse to start"),
        "{out}"
    );
}

fn import_simple(project: &Path, grader: &str, extra: &[&str]) -> std::process::Output {
    crate::grader_controls::import(project, &fake('d'), grader, extra)
}

/// Without `--solutions`, `eval import v04-simple` writes eval's own reference solutions and the
/// suite's control arms with `grader_valid`; `--no-controls` writes neither and the protocol
/// says so; so does `eval import v04` for its `simple` suite.
#[test]
fn grader_validity_is_on_by_default_with_evals_own_solutions() {
    let i = inputs();
    let o = import_simple(&i.project, &fake('e'), &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let p = i
        .project
        .join("protocols")
        .join(crate::grader_controls::NAME);
    let protocol = std::fs::read_to_string(p.join("protocol.toml")).unwrap();
    assert!(protocol.contains("[suites.simple.controls]"), "{protocol}");
    assert!(
        protocol.contains("statistic = \"grader_valid\""),
        "{protocol}"
    );
    let shipped = repo_root().join("controller/src/commands/import/simple-solutions");
    for (task, file) in [
        ("simple-js-clamp", "src/clamp.js"),
        ("simple-python-whitespace", "text_utils.py"),
        ("simple-go-dedupe", "dedupe.go"),
    ] {
        assert_eq!(
            std::fs::read(
                p.join("tasks/simple")
                    .join(task)
                    .join("solution")
                    .join(file)
            )
            .unwrap(),
            std::fs::read(shipped.join(task).join(file)).unwrap(),
            "{task}"
        );
    }

    let j = inputs();
    let o = import_simple(&j.project, &fake('e'), &["--no-controls"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let p = j
        .project
        .join("protocols")
        .join(crate::grader_controls::NAME);
    let protocol = std::fs::read_to_string(p.join("protocol.toml")).unwrap();
    // No control arms, and the protocol says so (`off`), so it loads and every report
    // discloses it rather than naming "grader validity unchecked".
    let table: toml::Table = protocol.parse().unwrap();
    let controls = table["suites"]["simple"]["controls"].as_table().unwrap();
    assert_eq!(controls.keys().collect::<Vec<_>>(), ["off"], "{protocol}");
    assert!(
        controls["off"]
            .as_str()
            .unwrap()
            .starts_with("imported with --no-controls: "),
        "{protocol}"
    );
    assert!(!protocol.contains("grader_valid"), "{protocol}");
    assert!(!p.join("tasks/simple/simple-js-clamp/solution").exists());

    // The whole v0.4: the simple suite's controls beside EvoCode's.
    let k = inputs();
    let images = fake_images();
    let extra: Vec<&str> = images.iter().map(String::as_str).collect();
    let o = import_v04(&k, &k.root.join("r"), &extra);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let p: toml::Table =
        std::fs::read_to_string(k.project.join("protocols/v0.4-real/protocol.toml"))
            .unwrap()
            .parse()
            .unwrap();
    assert!(p["suites"]["simple"].get("controls").is_some());
    assert!(p["suites"]["evocode"].get("controls").is_some());
}

/// The finding of issue 34 through `eval run`: imported with no flag about grading, v0.4's
/// `simple-js-clamp` is checked by its control arms, the one-line cheat (`exploit:print-result`:
/// a module printing a passing result at import) scores 100 under v0.4's grader, and `eval report`
/// refuses the release naming it. (The fixture agent stands in for the Harness; the control slots
/// run no agent.)
#[test]
fn the_one_line_cheat_is_refused_by_default() {
    assert!(
        crate::support::docker_available(),
        "this test needs the Docker engine"
    );
    let grader = std::env::var("EVAL_TEST_V04_GRADER_IMAGE")
        .expect("EVAL_TEST_V04_GRADER_IMAGE: `set -a; . /tmp/warm/images.env`");
    crate::support::static_binaries();
    let (_t, proj) = crate::support::demo_project();
    let o = import_simple(&proj, grader.trim(), &["--tasks", "simple-js-clamp"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    crate::grader_controls::swap_in_fixture_arms(&proj);
    let report = crate::grader_controls::freeze_run_report(&proj);
    let reasons = report["reasons"].to_string();
    assert!(
        reasons.contains("exploit:print-result scored 100 on simple/simple-js-clamp"),
        "{reasons}"
    );
    let cells = report["grader_validity"].as_array().unwrap();
    assert!(
        cells
            .iter()
            .any(|c| c["arm"] == "oracle" && c["task"] == "simple-js-clamp" && c["ok"] == true),
        "{cells:?}"
    );
}
