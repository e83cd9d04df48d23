//! `eval import v04-simple` (issue 15): v0.4's real `simple` suite, read from
//! `../shared/v04-upstream` (never copied into this repository), imported into temporary projects.
//! Without an engine: what is written, byte for byte against the inputs; that the protocol loads;
//! refusals (existing files, tampered packages, hostile task paths, unknown tasks) exit 2 and
//! write nothing. With the engine and the two base images (`scripts/ensure-harness-images.sh`
//! exports `EVAL_TEST_DSH_POLY_IMAGE` and `EVAL_TEST_V04_GRADER_IMAGE`): `eval freeze` of the imported
//! protocol, and v0.4's grader under eval's grader container policy scoring correct solutions
//! 100 and the untouched workspaces lower, in JavaScript, Python and Go.

pub(crate) use crate::support::import_v04::*;
use crate::support::{eval, repo_root, text};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

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
