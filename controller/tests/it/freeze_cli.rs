//! `eval init`, `plan`, `freeze`, `verify` and `retire` through the built binary, in temporary
//! project directories.

pub(crate) use crate::support::freeze_cli::*;
use crate::support::{eval, text};
use std::fs;
use std::path::Path;

/// `eval init` into a fresh directory; returns (tempdir guard, project dir).
fn init() -> (tempfile::TempDir, std::path::PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let o = eval(tmp.path(), &["init", "proj"]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    let proj = tmp.path().join("proj");
    (tmp, proj)
}

#[test]
fn plan_v04_from_the_repository_root_lists_the_original_order() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let o = eval(root, &["plan", "--matrix", "v0.4", "--json"]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    let slots: Vec<serde_json::Value> = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(slots.len(), 96);
    let stat: Vec<&serde_json::Value> = slots
        .iter()
        .filter(|s| s["phase"] == "statistical")
        .collect();
    assert_eq!(stat.len(), 90);
    assert_eq!(
        stat[0]["id"],
        "stat-simple-simple-python-whitespace-v0.3-always-r1"
    );
    assert_eq!(stat[3]["id"], "stat-icae-icae-python-01-v0.4-never-r1");
    assert_eq!(stat[89]["id"], "stat-icae-icae-python-02-native-r1");
    assert_eq!(slots[0]["phase"], "infrastructure");
    assert_eq!(slots[0]["id"], "infra-simple-simple-js-clamp-native-r0");
    for key in ["order", "id", "phase", "suite", "task", "arm", "rep"] {
        assert!(slots[10].get(key).is_some(), "{key}");
    }
    assert_eq!(stat[0]["rep"], 1);
    assert_eq!(stat[0]["order"], 7);
    // The table form names the same first statistical slot.
    let o = eval(root, &["plan"]);
    assert!(text(&o).contains("stat-simple-simple-python-whitespace-v0.3-always-r1"));
}

#[test]
fn init_scaffolds_a_project_that_plans_freezes_and_verifies() {
    let (_tmp, proj) = init();
    for f in [
        "protocols/demo/protocol.toml",
        "matrix/demo.toml",
        "runtimes/fixture/runtime.toml",
        "protocols/demo/tasks/icae/demo-icae-1/hidden/oracle.toml",
        "protocols/demo/arms/v0.4-lattice/profile.toml",
        "README.md",
    ] {
        assert!(proj.join(f).is_file(), "{f}");
    }
    let o = eval(&proj, &["plan", "--matrix", "demo", "--json"]);
    let slots: Vec<serde_json::Value> = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(slots.len(), 96);
    assert_eq!(
        slots
            .iter()
            .filter(|s| s["phase"] == "infrastructure")
            .count(),
        6
    );

    let o = eval(&proj, &["freeze", "--protocol", "demo"]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    assert!(text(&o).contains("frozen protocol demo as sha256:"));
    assert!(proj.join("runs/freezes/demo.json").is_file());
    assert!(proj.join("runs/registry.jsonl").is_file());
    // Freezing writes only into the state directory.
    let o = eval(&proj, &["freeze", "--protocol", "demo"]);
    assert_eq!(code(&o), 0);
    assert!(text(&o).contains("already frozen"), "{}", text(&o));
    let o = eval(&proj, &["verify", "--protocol", "demo"]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    // The registry is an ordinary hash chain: `eval ledger verify` accepts it.
    let o = eval(&proj, &["ledger", "verify", "runs/registry.jsonl"]);
    assert_eq!(code(&o), 0, "{}", text(&o));

    // Init refuses a non-empty directory.
    let o = eval(proj.parent().unwrap(), &["init", "proj"]);
    assert_eq!(code(&o), 2, "{}", text(&o));
}

#[test]
fn drift_exits_3_naming_the_path_and_refreeze_is_refused() {
    let (_tmp, proj) = init();
    let o = eval(&proj, &["freeze", "--protocol", "demo", "--state", "st"]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    let rel = "protocols/demo/tasks/evocode/demo-evocode-2/hidden/checks.toml";
    let p = proj.join(rel);
    let mut bytes = fs::read(&p).unwrap();
    bytes[0] ^= 0x20;
    fs::write(&p, bytes).unwrap();
    let o = eval(&proj, &["verify", "--protocol", "demo", "--state", "st"]);
    assert_eq!(code(&o), 3, "{}", text(&o));
    assert!(text(&o).contains(rel), "{}", text(&o));
    let o = eval(
        &proj,
        &["verify", "--protocol", "demo", "--state", "st", "--json"],
    );
    assert_eq!(code(&o), 3);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["clean"], false);
    assert_eq!(v["drift"][0]["path"], rel);
    assert_eq!(v["drift"][0]["change"], "modified");
    let o = eval(&proj, &["freeze", "--protocol", "demo", "--state", "st"]);
    assert_eq!(code(&o), 3, "{}", text(&o));
    assert!(text(&o).contains(rel) && text(&o).contains("new protocol name"));
    // The registry still has exactly the one freeze.
    let reg = fs::read_to_string(proj.join("st/registry.jsonl")).unwrap();
    assert_eq!(reg.lines().count(), 1);
}

#[test]
fn retired_protocols_cannot_be_refrozen() {
    let (_tmp, proj) = init();
    let o = eval(&proj, &["retire", "--protocol", "demo", "--reason", "x"]);
    assert_eq!(code(&o), 2, "{}", text(&o));
    assert_eq!(code(&eval(&proj, &["freeze", "--protocol", "demo"])), 0);
    let o = eval(
        &proj,
        &["retire", "--protocol", "demo", "--reason", "gate failed"],
    );
    assert_eq!(code(&o), 0, "{}", text(&o));
    let o = eval(&proj, &["freeze", "--protocol", "demo"]);
    assert_eq!(code(&o), 3, "{}", text(&o));
    assert!(text(&o).contains("retired"));
    let o = eval(&proj, &["verify", "--protocol", "demo", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["retired"], true);
    let reg = fs::read_to_string(proj.join("runs/registry.jsonl")).unwrap();
    assert_eq!(reg.lines().count(), 2);
    assert!(reg.lines().nth(1).unwrap().contains("\"kind\":\"retire\""));
}

#[test]
fn bad_input_exits_2_and_writes_nothing() {
    let (_tmp, proj) = init();
    let p = proj.join("protocols/demo/protocol.toml");
    let orig = fs::read_to_string(&p).unwrap();
    fs::write(
        &p,
        orig.replacen("schema = 1", "schema = 1\ncolour = \"red\"", 1),
    )
    .unwrap();
    let o = eval(&proj, &["freeze", "--protocol", "demo"]);
    assert_eq!(code(&o), 2, "{}", text(&o));
    assert!(
        text(&o).contains("protocols/demo/protocol.toml") && text(&o).contains("colour"),
        "{}",
        text(&o)
    );
    assert!(!proj.join("runs").exists());
    fs::write(&p, &orig).unwrap();
    let o = eval(&proj, &["freeze", "--protocol", "nope"]);
    assert_eq!(code(&o), 2, "{}", text(&o));
    let o = eval(&proj, &["plan", "--matrix", "nope"]);
    assert_eq!(code(&o), 2, "{}", text(&o));
    assert!(text(&o).contains("matrix/nope.toml"));
    let o = eval(&proj, &["verify", "--protocol", "demo"]);
    assert_eq!(code(&o), 2, "{}", text(&o));
    assert!(text(&o).contains("not frozen"));
    assert!(!proj.join("runs").exists());
}

/// The embedded driver digest is exactly the documented rule applied to the workspace now
/// (build.rs: every `*.rs`, `Cargo.toml`, `Cargo.lock`, `build.rs`, plus the trees `eval init`
/// embeds; `target/`, `runs/` and dot-directories skipped; files only, sorted by path bytes).
#[test]
fn driver_digest_is_the_documented_source_tree_digest() {
    fn walk(root: &Path, rel: &str, out: &mut Vec<String>) {
        for e in fs::read_dir(root.join(rel)).unwrap() {
            let e = e.unwrap();
            let name = e.file_name().into_string().unwrap();
            let child = if rel.is_empty() {
                name.clone()
            } else {
                format!("{rel}/{name}")
            };
            let md = fs::symlink_metadata(e.path()).unwrap();
            if md.is_dir() {
                if name.starts_with('.') || (rel.is_empty() && (name == "target" || name == "runs"))
                {
                    continue;
                }
                walk(root, &child, out);
            } else if child.ends_with(".rs")
                || ["Cargo.toml", "Cargo.lock", "build.rs"].contains(&name.as_str())
                || child.starts_with("protocols/init-template/")
                || child.starts_with("runtimes/fixture/")
            {
                out.push(child);
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut files = Vec::new();
    walk(root, "", &mut files);
    files.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
    let mut manifest = String::from("eval-tree-manifest v1\n");
    let mut buf = vec![0u8; 1 << 16];
    for f in &files {
        let abs = root.join(f);
        let md = fs::symlink_metadata(&abs).unwrap();
        assert!(
            !md.file_type().is_symlink(),
            "{f}: the rule for links is not exercised here"
        );
        let (size, digest) = eval_protocols::tree::hash_file(&abs, &mut buf).unwrap();
        use std::os::unix::fs::PermissionsExt;
        let x = if md.permissions().mode() & 0o111 != 0 {
            'x'
        } else {
            '-'
        };
        manifest.push_str(&format!("f {x} {size} {digest} {f}\n"));
    }
    let expected = eval_evidence::ledger::Digest::of(manifest.as_bytes());
    assert!(files.iter().any(|f| f == "controller/build.rs"));
    assert!(files.iter().any(|f| f == "Cargo.lock"));
    let (_tmp, proj) = init();
    let o = eval(&proj, &["freeze", "--protocol", "demo"]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    assert!(
        text(&o).contains(&format!(
            "driver: {expected} ({} source files)",
            files.len()
        )),
        "rebuild if sources changed since the build; expected {expected} over {} files:\n{}",
        files.len(),
        text(&o)
    );
}

/// The "done when": freeze and verify of v0.4 from the repository root (state kept in a
/// temporary directory so the repository stays unfrozen).
#[test]
fn v04_freezes_and_verifies_from_the_repository_root() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let state = tempfile::tempdir().unwrap();
    let st = state.path().to_str().unwrap();
    let o = eval(root, &["freeze", "--state", st]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    assert!(text(&o).contains("frozen protocol v0.4 as sha256:"));
    // Both of v0.4's bootstrap gates are too small to be calibrated, and freeze says so.
    for gate in ["gate icae rule", "gate evocode rule"] {
        let line = text(&o)
            .lines()
            .find(|l| l.starts_with("calibration: ") && l.contains(gate))
            .unwrap_or_else(|| panic!("no calibration line for {gate}: {}", text(&o)))
            .to_owned();
        assert!(line.contains("WARNING: over twice its nominal"), "{line}");
    }
    let o = eval(root, &["verify", "--state", st, "--json"]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["clean"], true);
    let doc: serde_json::Value =
        serde_json::from_slice(&fs::read(state.path().join("freezes/v0.4.json")).unwrap()).unwrap();
    assert_eq!(doc["roles"]["tasks"].as_array().unwrap().len(), 15);
    assert_eq!(doc["images"].as_object().unwrap().len(), 7);
    let inputs: Vec<&str> = doc["inputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    for want in [
        "protocols/v0.4/protocol.toml",
        "matrix/v0.4.toml",
        "runtimes/fixture",
        "protocols/v0.4/tasks/icae/icae-go-02",
        "protocols/v0.4/arms/v0.4-lattice/profile.toml",
        "protocols/v0.4/arms/v0.4-lattice/package",
    ] {
        assert!(inputs.contains(&want), "{want} not frozen: {inputs:?}");
    }
    // Hidden files are frozen too.
    let manifest = doc["manifest"].as_array().unwrap();
    assert!(manifest.iter().any(|l| {
        l.as_str()
            .unwrap()
            .ends_with(" protocols/v0.4/tasks/icae/icae-go-02/hidden/oracle.toml")
    }));
}

/// Uncomments the scaffold's `[signing]` example with `public_key = key`.
fn name_signing_key(proj: &Path, key: &str) {
    let p = proj.join("protocols/demo/protocol.toml");
    let text = fs::read_to_string(&p).unwrap();
    let (before, after) = text.split_once("# [signing]\n").unwrap();
    let (example, rest) = after.split_once('\n').unwrap();
    assert!(example.starts_with("# public_key = "), "{example}");
    fs::write(
        &p,
        format!("{before}[signing]\npublic_key = \"{key}\"\n{rest}"),
    )
    .unwrap();
}

/// `eval keygen --out DIR/NAME` (outside the project); returns the printed public key.
fn keygen(dir: &Path, name: &str) -> String {
    let o = eval(dir, &["keygen", "--out", name]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    String::from_utf8(o.stdout).unwrap().trim().to_owned()
}

#[test]
fn freeze_records_the_protocols_signing_key() {
    let (tmp, proj) = init();
    let public = keygen(tmp.path(), "demo.key");
    assert!(public.starts_with("eval+"), "{public}");
    name_signing_key(&proj, &public);
    let o = eval(&proj, &["freeze", "--protocol", "demo"]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    let doc: serde_json::Value =
        serde_json::from_slice(&fs::read(proj.join("runs/freezes/demo.json")).unwrap()).unwrap();
    assert_eq!(doc["signing_public_key"], public.as_str());
    let id_text = doc["identity_text"].as_str().unwrap();
    assert!(
        id_text.contains(&format!("\nsigning {public}\n")),
        "{id_text}"
    );
    let o = eval(&proj, &["verify", "--protocol", "demo"]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    // The private key went nowhere near the state directory or the output.
    let secret = fs::read_to_string(tmp.path().join("demo.key")).unwrap();
    // The key file is `PRIVATE+KEY+<name>+<key id>+<base64>`, and base64 has `+` of its own:
    // split at the first four, or a random key sometimes leaves a one-letter "secret" that any
    // output contains (33 bytes of base64 are 44 characters).
    let secret_b64 = secret.trim_end().splitn(5, '+').nth(4).unwrap().to_owned();
    assert_eq!(secret_b64.len(), 44, "{secret_b64}");
    assert!(!text(&o).contains(&secret_b64));
    assert!(
        !fs::read_to_string(proj.join("runs/freezes/demo.json"))
            .unwrap()
            .contains(&secret_b64)
    );
}

#[test]
fn a_malformed_signing_key_exits_2_naming_the_field_and_writes_nothing() {
    let (_tmp, proj) = init();
    name_signing_key(&proj, "eval+0000000+notbase64!");
    let o = eval(&proj, &["freeze", "--protocol", "demo"]);
    assert_eq!(code(&o), 2, "{}", text(&o));
    assert!(
        text(&o).contains("protocols/demo/protocol.toml")
            && text(&o).contains("signing.public_key"),
        "{}",
        text(&o)
    );
    assert!(!proj.join("runs").exists());
}

#[test]
fn changing_the_signing_key_after_freezing_is_drift_and_refused() {
    let (tmp, proj) = init();
    let first = keygen(tmp.path(), "a.key");
    let second = keygen(tmp.path(), "b.key");
    assert_ne!(first, second);
    name_signing_key(&proj, &first);
    assert_eq!(code(&eval(&proj, &["freeze", "--protocol", "demo"])), 0);
    let p = proj.join("protocols/demo/protocol.toml");
    fs::write(&p, fs::read_to_string(&p).unwrap().replace(&first, &second)).unwrap();
    let o = eval(&proj, &["verify", "--protocol", "demo"]);
    assert_eq!(code(&o), 3, "{}", text(&o));
    assert!(
        text(&o).contains("protocols/demo/protocol.toml"),
        "{}",
        text(&o)
    );
    let o = eval(&proj, &["freeze", "--protocol", "demo"]);
    assert_eq!(code(&o), 3, "{}", text(&o));
    assert!(
        text(&o).contains(&format!("signing public key: frozen {first}, now {second}"))
            && text(&o).contains("new protocol name"),
        "{}",
        text(&o)
    );
    let reg = fs::read_to_string(proj.join("runs/registry.jsonl")).unwrap();
    assert_eq!(reg.lines().count(), 1);
    let doc: serde_json::Value =
        serde_json::from_slice(&fs::read(proj.join("runs/freezes/demo.json")).unwrap()).unwrap();
    assert_eq!(doc["signing_public_key"], first.as_str());
}

#[test]
fn freeze_refuses_a_runtime_metrics_path_outside_the_workspace() {
    let (_tmp, proj) = init();
    let def = proj.join("runtimes/fixture/runtime.toml");
    let good = fs::read_to_string(&def).unwrap();
    let bad = good.replace(
        "metrics_path = \".eval-agent/metrics.json\"",
        "metrics_path = \"../../etc/hostname\"",
    );
    assert_ne!(bad, good, "the scaffolded definition names a metrics_path");
    fs::write(&def, bad).unwrap();
    let o = eval(&proj, &["freeze", "--protocol", "demo"]);
    assert_eq!(code(&o), 2, "{}", text(&o));
    let out = text(&o);
    assert!(out.contains("runtimes/fixture/runtime.toml"), "{out}");
    assert!(out.contains("metrics_path"), "{out}");
    assert!(out.contains("contains `..`"), "{out}");
    // Nothing was frozen.
    assert!(!proj.join("runs/freezes/demo.json").exists());
}

#[test]
fn plan_refuses_an_oversized_matrix_with_exit_2_naming_the_field_and_limit() {
    let (_tmp, proj) = init();
    let file = proj.join("matrix/demo.toml");
    let good = fs::read_to_string(&file).unwrap();
    let bad = good.replacen("repetitions = 2", "repetitions = 3000000", 1);
    assert_ne!(bad, good);
    fs::write(&file, bad).unwrap();
    let o = eval(&proj, &["plan", "--matrix", "demo"]);
    assert_eq!(code(&o), 2, "{}", text(&o));
    let out = text(&o);
    assert!(out.contains("matrix/demo.toml"), "{out}");
    assert!(out.contains("suites[0].repetitions"), "{out}");
    assert!(out.contains("3000000 is above the limit of 10000"), "{out}");
}

/// `[power.<gate>]`: freeze prints, beside each interval rule's calibration, its power at the
/// declared effect (metric units, with its simulation error) and its minimum detectable effect
/// at 80 % power; without a declaration the MDE is in task-level sd units. A declaration for a
/// gate without an interval rule, or a non-positive sd, is exit 2 naming the field.
#[test]
fn freeze_prints_power_at_the_declared_effect_and_the_mde() {
    let (_tmp, proj) = init();
    let pfile = proj.join("protocols/demo/protocol.toml");
    let original = fs::read_to_string(&pfile).unwrap();
    fs::write(
        &pfile,
        format!("{original}\n[power.icae]\neffect = 15.0\nsd = 12.0\n"),
    )
    .unwrap();
    let o = eval(&proj, &["freeze", "--protocol", "demo"]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    let out = text(&o);
    let line = out
        .lines()
        .find(|l| l.starts_with("power: gate icae rule hidden_score_bootstrap_lower"))
        .unwrap_or_else(|| panic!("no power line for icae: {out}"));
    assert!(
        line.contains("power at the declared effect 15 (sd 12): "),
        "{line}"
    );
    assert!(
        line.contains("minimum detectable effect at 80% power: "),
        "{line}"
    );
    let evo = out
        .lines()
        .find(|l| l.starts_with("power: gate evocode rule"))
        .unwrap_or_else(|| panic!("no power line for evocode: {out}"));
    assert!(evo.ends_with(" sd") && !evo.contains("declared"), "{evo}");

    for (extra, field) in [
        (
            "[power.integrity]\neffect = 1.0\nsd = 1.0\n",
            "power.integrity",
        ),
        ("[power.icae]\neffect = 1.0\nsd = 0.0\n", "power.icae.sd"),
    ] {
        let (_tmp, proj) = init();
        let pfile = proj.join("protocols/demo/protocol.toml");
        let original = fs::read_to_string(&pfile).unwrap();
        fs::write(&pfile, format!("{original}\n{extra}")).unwrap();
        let o = eval(&proj, &["freeze", "--protocol", "demo"]);
        assert_eq!(code(&o), 2, "{}", text(&o));
        assert!(text(&o).contains(field), "{field}: {}", text(&o));
    }
}

/// A pilot ledger of suite `icae` (five tasks, native vs v0.4-critical, one repetition) whose
/// task-level differences of `hidden_score` are `diffs`; `identity` is its run's identity.
fn pilot_ledger(path: &Path, identity: &str, diffs: &[f64]) {
    use eval_evidence::ledger::{LedgerWriter, NewEntry};
    let w = LedgerWriter::open(path).unwrap();
    let put = |kind: &str, v: serde_json::Value| {
        w.append_blocking(NewEntry::new(kind, &v).unwrap()).unwrap();
    };
    put("run_started", serde_json::json!({"identity": identity}));
    for (i, d) in diffs.iter().enumerate() {
        for (arm, score) in [("native", 50.0), ("v0.4-critical", 50.0 + d)] {
            let slot = format!("stat-icae-t{i}-{arm}-r1");
            put(
                "attempt_started",
                serde_json::json!({"slot": slot, "phase": "statistical", "suite": "icae", "task": format!("t{i}"), "arm": arm}),
            );
            put(
                "attempt_outcome",
                serde_json::json!({"slot": slot, "outcome": "completed", "metrics": {"hidden_score": score}}),
            );
        }
    }
    w.close();
}

/// `eval plan --power --pilot`: the sd comes from the pilot's task-level differences (here
/// exactly 10: diffs 0, 10, 20, 30, 40 → sd 15.81), the MDE scales with it, and the tasks needed
/// for 80 % at the declared effect follow; the evaluated run's own ledger is refused (exit 2).
#[test]
fn plan_power_estimates_the_sd_from_a_pilot_and_sizes_the_suite() {
    let (_tmp, proj) = init();
    let pfile = proj.join("protocols/demo/protocol.toml");
    let original = fs::read_to_string(&pfile).unwrap();
    fs::write(
        &pfile,
        format!("{original}\n[power.icae]\neffect = 20.0\nsd = 10.0\n"),
    )
    .unwrap();
    let ledger = proj.join("pilot.sqlite");
    pilot_ledger(&ledger, "sha256:pilot", &[0.0, 10.0, 20.0, 30.0, 40.0]);
    let o = eval(
        &proj,
        &[
            "plan",
            "--matrix",
            "demo",
            "--power",
            "--pilot",
            ledger.to_str().unwrap(),
            "--json",
        ],
    );
    assert_eq!(code(&o), 0, "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let r = v["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["gate"] == "icae")
        .unwrap();
    let sd = r["pilot_sd"].as_f64().unwrap();
    assert!((sd - 250f64.sqrt()).abs() < 1e-9, "{r}");
    assert_eq!(r["pilot_tasks"], 5);
    let needed = r["tasks_for_80"].as_u64().unwrap();
    // Normal theory: n ≈ ((1.96 + 0.84) · sd / effect)² ≈ 4.9; the small-n bootstrap is
    // liberal, so no more than that and at least 2.
    assert!((2..=8).contains(&needed), "{r}");
    // The same ledger as the evaluated run's own: refused.
    let o = eval(&proj, &["freeze", "--protocol", "demo"]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    let own = text(&o)
        .split_whitespace()
        .find(|w| w.starts_with("sha256:"))
        .unwrap()
        .trim_end_matches(|c: char| !c.is_ascii_hexdigit())
        .to_owned();
    let own_ledger = proj.join("own.sqlite");
    pilot_ledger(&own_ledger, &own, &[0.0, 10.0, 20.0]);
    let o = eval(
        &proj,
        &[
            "plan",
            "--matrix",
            "demo",
            "--power",
            "--pilot",
            own_ledger.to_str().unwrap(),
        ],
    );
    assert_eq!(code(&o), 2, "{}", text(&o));
    assert!(
        text(&o).contains("never from the evaluated run"),
        "{}",
        text(&o)
    );
}

/// `[sequential]` and `[statistics] false_fail_bound` are checked at freeze (exit 2 naming the
/// field) and, when valid, accepted; absent, they leave the identity as it was.
#[test]
fn sequential_and_false_fail_bound_are_validated_at_freeze() {
    let good = "\n[sequential]\ngate = \"icae\"\nlooks = [0.5, 1.0]\nspending = \"o-brien-fleming\"\nfutility_z = 0.0\n";
    for (edit, field) in [
        (
            "\n[sequential]\ngate = \"integrity\"\nlooks = [0.5, 1.0]\nspending = \"pocock\"\n",
            Some("sequential.gate"),
        ),
        (
            "\n[sequential]\ngate = \"icae\"\nlooks = [0.5, 0.9]\nspending = \"pocock\"\n",
            Some("sequential.looks"),
        ),
        (
            "[statistics]\nfalse_fail_bound = 1.5\n",
            Some("statistics.false_fail_bound"),
        ),
        (good, None),
        ("[statistics]\nfalse_fail_bound = 0.2\n", None),
    ] {
        let (_tmp, proj) = init();
        let pfile = proj.join("protocols/demo/protocol.toml");
        let original = fs::read_to_string(&pfile).unwrap();
        let changed = if edit.starts_with("[statistics]") {
            original.replacen("[statistics]\n", edit, 1)
        } else {
            format!("{original}{edit}")
        };
        fs::write(&pfile, changed).unwrap();
        let o = eval(&proj, &["freeze", "--protocol", "demo"]);
        match field {
            Some(f) => {
                assert_eq!(code(&o), 2, "{}", text(&o));
                assert!(text(&o).contains(f), "{f}: {}", text(&o));
            }
            None => assert_eq!(code(&o), 0, "{}", text(&o)),
        }
    }
}

/// `eval plan --calibrate` reads a pilot only through its replayed run: a ledger without a
/// well-formed `run_started` is refused (exit 2, the file named), and `--calibrate` needs
/// `--pilot`.
#[test]
fn plan_calibrate_refuses_a_pilot_that_is_not_a_run() {
    let (_tmp, proj) = init();
    let ledger = proj.join("pilot.sqlite");
    pilot_ledger(&ledger, "sha256:pilot", &[0.0, 10.0, 20.0]);
    let args = ["plan", "--matrix", "demo", "--calibrate", "--pilot"];
    let o = eval(&proj, &[&args[..], &[ledger.to_str().unwrap()]].concat());
    assert_eq!(code(&o), 2, "{}", text(&o));
    assert!(text(&o).contains("pilot.sqlite"), "{}", text(&o));
    let o = eval(&proj, &["plan", "--matrix", "demo", "--calibrate"]);
    assert_eq!(code(&o), 2, "{}", text(&o));
}

/// A well-formed pilot run of protocol `protocol` (a copy of the demo's `simple` suite, native vs
/// v0.4-auto, six tasks, two repetitions): equal scores, turns and tokens in both arms, and
/// durations of 1 s and 3 s in every pair (the slow one in either arm), so the duration rules fail
/// some no-effect replicates and the score rule none.
fn simple_pilot_ledger(path: &Path, protocol: &str, identity: &str) {
    use eval_evidence::ledger::{LedgerWriter, NewEntry};
    let w = LedgerWriter::open(path).unwrap();
    let put = |kind: &str, v: serde_json::Value| {
        w.append_blocking(NewEntry::new(kind, &v).unwrap()).unwrap();
    };
    let mut slots = Vec::new();
    for t in 1..=6 {
        for arm in ["native", "v0.4-auto"] {
            for rep in 1..=2 {
                slots.push(serde_json::json!({"arm": arm, "id": format!("stat-simple-demo-simple-{t}-{arm}-r{rep}"), "phase": "statistical", "rep": rep, "suite": "simple", "task": format!("demo-simple-{t}")}));
            }
        }
    }
    put(
        "run_started",
        serde_json::json!({"concurrency": 1, "driver": "sha256:0000000000000000000000000000000000000000000000000000000000000000", "fixture_evidence": true, "identity": identity, "matrix": protocol, "max_infra_attempts": 3, "max_reruns": 3, "protocol": protocol, "rerunnable_codes": [], "schema": 1, "session": 1, "slots": slots.clone(), "started_at": "2026-01-01T00:00:00.000Z", "upstream": {"kind": "fixture", "url": "http://127.0.0.1:1/v1"}}),
    );
    for s in &slots {
        let slot = s["id"].as_str().unwrap();
        let t: u32 = s["task"].as_str().unwrap()[12..].parse().unwrap();
        // Noise, not an effect: each (task, repetition) pair has one 1 s and one 3 s attempt,
        // the slow one in either arm.
        let arm = u32::from(s["arm"] == "native");
        let duration = if (t + s["rep"].as_u64().unwrap() as u32 + arm).is_multiple_of(2) {
            1.0
        } else {
            3.0
        };
        put(
            "attempt_started",
            serde_json::json!({"arm": s["arm"], "attempt": format!("{slot}#1"), "number": 1, "phase": "statistical", "rep": s["rep"], "rerun_of": null, "schema": 1, "session": 1, "slot": slot, "started_at": "2026-01-01T00:00:01.000Z", "suite": "simple", "task": s["task"]}),
        );
        put(
            "attempt_outcome",
            serde_json::json!({"accounting": "matched", "arm": s["arm"], "artifacts": {}, "attempt": format!("{slot}#1"), "attestation": null, "clarification_questions": 0, "closed_by_controller": false, "container_seconds": duration, "detail": null, "duration_seconds": duration, "finished_at": "2026-01-01T00:00:02.000Z", "harness": null, "image": null, "infra_fault": null, "metrics": {"score": 60.0}, "model_calls": [], "model_turns": 3, "number": 1, "oracle_calls": 0, "outcome": "completed", "schema": 1, "slot": slot, "tokens": {"cached": 0, "input": 900, "output": 100, "reasoning": 0}, "upstream": "fixture"}),
        );
    }
    w.close();
}

/// `protocols/demo` copied as protocol and matrix `name` (the pilot's own protocol).
fn copy_demo_as(proj: &Path, name: &str) {
    let from = proj.join("protocols/demo");
    let to = proj.join("protocols").join(name);
    for e in walkdir(&from) {
        let rel = e.strip_prefix(&from).unwrap();
        let dst = to.join(rel);
        fs::create_dir_all(dst.parent().unwrap()).unwrap();
        fs::copy(&e, &dst).unwrap();
    }
    let p = to.join("protocol.toml");
    let text = fs::read_to_string(&p)
        .unwrap()
        .replacen("name = \"demo\"", &format!("name = \"{name}\""), 1)
        .replacen("matrix = \"demo\"", &format!("matrix = \"{name}\""), 1);
    fs::write(&p, text).unwrap();
    let m = fs::read_to_string(proj.join("matrix/demo.toml"))
        .unwrap()
        .replacen("name = \"demo\"", &format!("name = \"{name}\""), 1)
        .replacen("protocol = \"demo\"", &format!("protocol = \"{name}\""), 1);
    fs::write(proj.join("matrix").join(format!("{name}.toml")), m).unwrap();
}

fn walkdir(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walkdir(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// `eval freeze --pilot LEDGER`: beside the calibration lines, each suite gate's false-fail rate
/// on the pilot's noise — exactly the lines `eval plan --calibrate` prints for the same pilot and
/// replicates (one computation) — and a missing pilot or a run of the protocol being frozen is
/// refused (exit 2, the file named) with nothing frozen.
#[test]
fn freeze_prints_a_pilots_false_fail_rates_and_refuses_its_own_runs() {
    let (_tmp, proj) = init();
    let frozen = proj.join("runs/freezes/demo.json");
    // A missing pilot: named, exit 2, nothing frozen.
    let o = eval(
        &proj,
        &["freeze", "--protocol", "demo", "--pilot", "nope.sqlite"],
    );
    assert_eq!(code(&o), 2, "{}", text(&o));
    assert!(text(&o).contains("nope.sqlite"), "{}", text(&o));
    assert!(!frozen.exists());
    // A run of the protocol being frozen: refused, nothing frozen.
    let own = proj.join("own.sqlite");
    simple_pilot_ledger(&own, "demo", "sha256:own");
    let o = eval(
        &proj,
        &[
            "freeze",
            "--protocol",
            "demo",
            "--pilot",
            own.to_str().unwrap(),
        ],
    );
    assert_eq!(code(&o), 2, "{}", text(&o));
    assert!(
        text(&o).contains("own.sqlite") && text(&o).contains("the protocol being frozen"),
        "{}",
        text(&o)
    );
    assert!(!frozen.exists());
    // A pilot of another protocol: frozen, with the false-fail lines after the calibration ones.
    copy_demo_as(&proj, "pilot");
    let pilot = proj.join("pilot.sqlite");
    simple_pilot_ledger(&pilot, "pilot", "sha256:pilot");
    let p = pilot.to_str().unwrap();
    let o = eval(
        &proj,
        &[
            "freeze",
            "--protocol",
            "demo",
            "--pilot",
            p,
            "--replicates",
            "40",
        ],
    );
    assert_eq!(code(&o), 0, "{}", text(&o));
    assert!(frozen.exists());
    let out = String::from_utf8(o.stdout).unwrap();
    let lines: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("false-fail: "))
        .collect();
    let last_calibration = out.rfind("calibration: ").unwrap();
    assert!(
        out.find("false-fail: ").unwrap() > last_calibration,
        "{out}"
    );
    let rule = |id: &str| {
        lines
            .iter()
            .find(|l| l.contains(id))
            .unwrap_or_else(|| panic!("{id}: {out}"))
            .to_string()
    };
    assert!(
        rule("rule score_noninferiority ").contains("(0 of 40 replicates)"),
        "{out}"
    );
    // Durations of 1 s and 3 s paired at random: the P95 overhead fails some replicates.
    assert!(
        !rule("rule duration_overhead_p95 ").contains("(0 of 40 replicates)"),
        "{out}"
    );
    // The same computation as `eval plan --calibrate`.
    let o = eval(
        &proj,
        &[
            "plan",
            "--matrix",
            "demo",
            "--calibrate",
            "--pilot",
            p,
            "--replicates",
            "40",
        ],
    );
    assert_eq!(code(&o), 0, "{}", text(&o));
    let plan = String::from_utf8(o.stdout).unwrap();
    let plan_lines: Vec<&str> = plan
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("false-fail: "))
        .collect();
    assert_eq!(lines, plan_lines);
}
