//! `eval import v04` (issue 34): v0.4's real `simple` inputs (`../shared/v04-upstream`),
//! synthetic EvoCode tasks under v0.4's three ids (Harbor layout, `import_evocode::write_task`) and
//! a synthetic ICAE root for v0.4's six tasks (ICAE's layout, `import_icae`'s fixtures) become one
//! protocol and one matrix: `eval plan` lists exactly `protocols/v0.4`'s 6 + 90 slots in v0.4's
//! order; the protocol carries every v0.4 gate rule (EvoCode's `task_count` and bootstrap rules
//! included), H1–H3, the seven arms, the oracle role and the Harness's contract; images come from
//! build records or `--image`, and a missing one exits 2 naming its build script.

use crate::import_icae::copy_tree;
pub(crate) use crate::support::import_v04_whole::*;
use crate::support::{eval, repo_root, text};
use std::path::Path;

fn fake_images() -> Vec<String> {
    vec![
        "--image".into(),
        format!("dsh-poly={}", fake('d')),
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
        msg.contains("image \"dsh-poly\"") && msg.contains("runtimes/images/dsh-poly/build.sh"),
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
    record("dsh-poly", "new", &fake('d'));
    record("dsh-poly", "old", &fake('1'));
    age("dsh-poly", "new", 2_000_000_000);
    age("dsh-poly", "old", 1_000_000_000);
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
    let rt = std::fs::read_to_string(i.project.join("runtimes/dsh-poly/runtime.toml")).unwrap();
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
    let shipped = repo_root().join("controller/import/src/simple-solutions");
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

/// Every arm of the composed protocol runs on the agent runtime with every toolchain
/// (`runtimes/dsh/poly.toml`, written as `runtimes/dsh-poly/runtime.toml` on the `dsh-poly`
/// image), whatever its suite's languages, and ICAE is graded on that same image.
#[test]
fn every_v04_arm_runs_on_the_toolchain_runtime_and_icae_is_graded_on_its_image() {
    let i = inputs();
    let images = fake_images();
    let extra: Vec<&str> = images.iter().map(String::as_str).collect();
    let o = import_v04(&i, &i.root.join("no-records"), &extra);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let p: toml::Table =
        std::fs::read_to_string(i.project.join("protocols/v0.4-real/protocol.toml"))
            .unwrap()
            .parse()
            .unwrap();
    let arms = p["arms"].as_array().unwrap();
    assert_eq!(arms.len(), 7);
    for arm in arms {
        assert_eq!(
            arm["runtime"].as_str(),
            Some("runtimes/dsh-poly/runtime.toml"),
            "{arm:?}"
        );
    }
    let rt = std::fs::read_to_string(i.project.join("runtimes/dsh-poly/runtime.toml")).unwrap();
    assert!(rt.contains("name = \"dsh-poly\""), "{rt}");
    assert!(rt.contains(&format!("id = \"{}\"", fake('d'))), "{rt}");
    assert!(!i.project.join("runtimes/dsh/runtime.toml").exists());
    let grader =
        std::fs::read_to_string(i.project.join("runtimes/v04-icae-grader/runtime.toml")).unwrap();
    assert!(
        grader.contains(&format!("id = \"{}\"", fake('d'))),
        "{grader}"
    );
}

/// `--simple-tasks`, `--icae-tasks`, `--evocode-tasks` import a reduced v0.4: v0.4's schedule
/// on one task per suite (3 suites × 3 arms × 2 repetitions + the 6 infrastructure slots), its
/// gates sized to it, and the import says it is not v0.4; an unknown id exits 2 naming it.
#[test]
fn task_subsets_import_a_reduced_v04_sized_to_them() {
    let i = inputs();
    let images = fake_images();
    let mut extra: Vec<&str> = images.iter().map(String::as_str).collect();
    extra.extend([
        "--simple-tasks",
        "simple-js-clamp",
        "--icae-tasks",
        "icae-python-01",
        "--evocode-tasks",
        EVOCODE[1],
    ]);
    let o = import_v04(&i, &i.root.join("r"), &extra);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("reduced v0.4"), "{}", text(&o));
    let plan = plan_json(&i.project, NAME);
    let slots = plan.as_array().unwrap();
    assert_eq!(slots.len(), 24, "{plan}");
    let tasks: std::collections::BTreeSet<&str> =
        slots.iter().filter_map(|s| s["task"].as_str()).collect();
    assert_eq!(
        tasks,
        ["icae-python-01", "simple-js-clamp", EVOCODE[1]]
            .into_iter()
            .collect(),
        "{plan}"
    );
    let p: toml::Table =
        std::fs::read_to_string(i.project.join("protocols/v0.4-real/protocol.toml"))
            .unwrap()
            .parse()
            .unwrap();
    let evocode = p["gates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["id"].as_str() == Some("evocode"))
        .unwrap();
    let task_count = evocode["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["statistic"].as_str() == Some("task_count"))
        .unwrap();
    assert_eq!(task_count["threshold"].as_integer(), Some(1));

    let j = inputs();
    let mut extra: Vec<&str> = images.iter().map(String::as_str).collect();
    extra.extend(["--icae-tasks", "icae-nope-01"]);
    let o = import_v04(&j, &j.root.join("r"), &extra);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("icae-nope-01"), "{}", text(&o));
    assert!(!j.project.join("protocols").exists());
}
