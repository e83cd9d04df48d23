//! Freeze, verify, retire and the registry, on a copy of the `eval init` template (protocol
//! `demo`) in a temporary project.

use eval_core::Digest;
use eval_protocols::{
    FreezeOutcome, Project, ProtocolError, Registry, RetireOutcome, check_preconditions, freeze,
    record_report, retire, unmet_preconditions, verify,
};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::support::*;

/// A report check that accepts every registered report: for the tests of everything else a
/// precondition needs (the signature check itself is the controller's, tested there).
fn accept_any(
    _: &serde_json::Value,
    _: &Digest,
    _: &eval_core::keys::PublicKey,
) -> Result<(), String> {
    Ok(())
}

fn do_freeze(f: &Fixture) -> Result<FreezeOutcome, ProtocolError> {
    freeze(&Project::open(&f.root), "demo", &f.state, DRIVER, &images)
}

#[test]
fn the_repositorys_v04_protocol_loads_and_validates() {
    let l = Project::open(repo()).load("v0.4").unwrap();
    assert_eq!(l.tasks.len(), 15);
    assert_eq!(l.protocol.arms.len(), 7);
    assert_eq!(l.protocol.models["agent"].model, "deepseek-v4-flash");
    assert_eq!(l.protocol.budgets.attempt.wall_seconds, 3600);
    assert_eq!(l.protocol.reruns.codes.len(), 6);
    assert_eq!(l.protocol.preconditions[0].protocol, "router");
    let rules: usize = l.protocol.gates.iter().map(|g| g.rules.len()).sum();
    assert_eq!(rules, 5 + 7 + 6 + 7);
}

#[test]
fn freeze_is_idempotent_and_the_registry_verifies() {
    let f = fixture();
    let first = do_freeze(&f).unwrap();
    assert!(matches!(first, FreezeOutcome::Frozen { .. }));
    let file = f.state.join("freezes/demo.json");
    let bytes = fs::read(&file).unwrap();
    let again = do_freeze(&f).unwrap();
    assert!(matches!(again, FreezeOutcome::AlreadyFrozen { .. }));
    assert_eq!(identity(&first), identity(&again));
    assert_eq!(
        fs::read(&file).unwrap(),
        bytes,
        "a no-op freeze rewrote the file"
    );
    let reg = Registry::open(&f.state).unwrap();
    assert_eq!(reg.entries.len(), 1);
    assert_eq!(reg.frozen_identity("demo"), Some(identity(&first)));
    // The identity is SHA-256 of the identity text stored in the freeze file.
    let doc: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    let text = doc["identity_text"].as_str().unwrap();
    assert_eq!(Digest::of(text.as_bytes()), identity(&first));
    assert!(text.contains(&format!("driver {DRIVER}")));
    // Grouped by role.
    for role in [
        "protocol", "matrix", "tasks", "runtimes", "profiles", "packages",
    ] {
        assert!(
            doc["roles"][role].as_array().is_some_and(|a| !a.is_empty()),
            "{role}"
        );
    }
    assert_eq!(doc["roles"]["tasks"].as_array().unwrap().len(), 15);
    let v = verify(&Project::open(&f.root), "demo", &f.state, DRIVER, &images).unwrap();
    assert!(v.clean(), "{:?}", v.drift);
}

#[test]
fn a_different_driver_changes_the_identity_and_is_refused() {
    let f = fixture();
    do_freeze(&f).unwrap();
    let e = freeze(
        &Project::open(&f.root),
        "demo",
        &f.state,
        Digest([8; 32]),
        &images,
    )
    .unwrap_err();
    assert!(e.is_integrity(), "{e}");
    assert!(e.to_string().contains("driver"), "{e}");
}

#[test]
fn freeze_is_refused_when_any_one_input_byte_changed() {
    let f = fixture();
    do_freeze(&f).unwrap();
    let files = [
        "protocols/demo/protocol.toml",
        "matrix/demo.toml",
        "protocols/demo/tasks/simple/demo-simple-4/prompt.md",
        "protocols/demo/tasks/icae/demo-icae-2/hidden/oracle.toml",
        "protocols/demo/tasks/evocode/demo-evocode-3/workspace/src/stage1.py",
        "protocols/demo/arms/v0.4-lattice/profile.toml",
        "protocols/demo/arms/v0.3-always/package/index.js",
        "runtimes/fixture/runtime.toml",
    ];
    for rel in files {
        let p = f.root.join(rel);
        let orig = fs::read(&p).unwrap();
        let mut changed = orig.clone();
        // Flip one byte inside a comment/string so the file still parses.
        let i = changed.iter().position(|b| *b == b'e').unwrap();
        changed[i] = b'E';
        fs::write(&p, &changed).unwrap();
        let e = do_freeze(&f).unwrap_err();
        assert!(e.is_integrity(), "{rel}: {e}");
        assert!(e.to_string().contains(rel), "{rel}: {e}");
        assert!(e.to_string().contains("new protocol name"), "{e}");
        let v = verify(&Project::open(&f.root), "demo", &f.state, DRIVER, &images).unwrap();
        assert_eq!(v.drift.len(), 1, "{rel}: {:?}", v.drift);
        assert_eq!(v.drift[0].path, rel);
        assert_eq!(v.drift[0].change, "modified");
        fs::write(&p, &orig).unwrap();
    }
    assert!(matches!(
        do_freeze(&f).unwrap(),
        FreezeOutcome::AlreadyFrozen { .. }
    ));
    assert_eq!(Registry::open(&f.state).unwrap().entries.len(), 1);
}

#[test]
fn verify_names_missing_added_and_mode_changes() {
    let f = fixture();
    do_freeze(&f).unwrap();
    let t = f.root.join("protocols/demo/tasks/simple/demo-simple-1");
    fs::remove_file(t.join("hidden/checks.toml")).unwrap();
    fs::write(t.join("workspace/extra.txt"), b"new").unwrap();
    fs::set_permissions(t.join("prompt.md"), fs::Permissions::from_mode(0o755)).unwrap();
    let v = verify(&Project::open(&f.root), "demo", &f.state, DRIVER, &images).unwrap();
    let got: Vec<(String, String)> = v
        .drift
        .iter()
        .map(|d| (d.change.clone(), d.path.clone()))
        .collect();
    let base = "protocols/demo/tasks/simple/demo-simple-1";
    assert_eq!(
        got,
        [
            ("missing".to_string(), format!("{base}/hidden/checks.toml")),
            ("modified".to_string(), format!("{base}/prompt.md")),
            ("added".to_string(), format!("{base}/workspace/extra.txt")),
        ]
    );
    // A different binary is reported, but it is not drift of the inputs.
    fs::remove_file(t.join("workspace/extra.txt")).unwrap();
    fs::write(
        t.join("hidden/checks.toml"),
        fs::read(repo().join(
            "protocols/init-template/protocols/demo/tasks/simple/demo-simple-1/hidden/checks.toml",
        ))
        .unwrap(),
    )
    .unwrap();
    fs::set_permissions(t.join("prompt.md"), fs::Permissions::from_mode(0o644)).unwrap();
    let v = verify(
        &Project::open(&f.root),
        "demo",
        &f.state,
        Digest([9; 32]),
        &images,
    )
    .unwrap();
    assert!(v.clean() && !v.driver_matches());
}

#[test]
fn registry_chain_detects_edits_and_freeze_file_tampering() {
    let f = fixture();
    do_freeze(&f).unwrap();
    retire("demo", &f.state, "testing").unwrap();
    let reg_path = f.state.join("registry.jsonl");
    let orig = fs::read_to_string(&reg_path).unwrap();
    assert_eq!(orig.lines().count(), 2);
    let edited = orig.replacen("testing", "tasting", 1);
    fs::write(&reg_path, &edited).unwrap();
    let e = Registry::open(&f.state).unwrap_err();
    assert!(e.is_integrity(), "{e}");
    assert!(do_freeze(&f).unwrap_err().is_integrity());
    // Dropping the retire line leaves a valid (shorter) chain: that is why heads are recorded.
    fs::write(&reg_path, orig.lines().next().unwrap().to_owned() + "\n").unwrap();
    Registry::open(&f.state).unwrap();
    fs::write(&reg_path, &orig).unwrap();

    // A hand-edited freeze file no longer matches the digest the registry recorded.
    let ff = f.state.join("freezes/demo.json");
    let text = fs::read_to_string(&ff).unwrap();
    fs::write(&ff, text.replacen("demo-simple-1", "demo-simple-9", 1)).unwrap();
    let e = verify(&Project::open(&f.root), "demo", &f.state, DRIVER, &images).unwrap_err();
    assert!(
        e.is_integrity() && e.to_string().contains("modified"),
        "{e}"
    );
}

#[test]
fn retired_identities_are_refused_and_stay_retired() {
    let f = fixture();
    let e = retire("demo", &f.state, "never frozen").unwrap_err();
    assert!(
        !e.is_integrity() && e.to_string().contains("not frozen"),
        "{e}"
    );
    do_freeze(&f).unwrap();
    assert!(matches!(
        retire("demo", &f.state, "failed its gate").unwrap(),
        RetireOutcome::Retired { .. }
    ));
    assert!(matches!(
        retire("demo", &f.state, "again").unwrap(),
        RetireOutcome::AlreadyRetired { reason, .. } if reason == "failed its gate"
    ));
    let e = do_freeze(&f).unwrap_err();
    assert!(e.is_integrity() && e.to_string().contains("retired"), "{e}");
    let reg = Registry::open(&f.state).unwrap();
    assert!(reg.is_retired("demo"));
    assert_eq!(reg.entries.len(), 2);
    // Its freeze file stays.
    assert!(f.state.join("freezes/demo.json").exists());
}

#[test]
fn preconditions_need_a_passed_report_of_the_pinned_identity() {
    let f = fixture();
    // Make `demo` depend on a `router` protocol, by name only first.
    let p = f.root.join("protocols/demo/protocol.toml");
    let text = fs::read_to_string(&p).unwrap();
    // The key the precondition pins: the router's report attestation must verify with it.
    let key = eval_evidence::signing::SigningKeyPair::generate(eval_evidence::signing::KEY_NAME)
        .unwrap()
        .public()
        .to_string();
    let with_pre = |identity: &str| {
        let pinned = if identity.is_empty() {
            String::new()
        } else {
            format!("{identity}public_key = \"{key}\"\n")
        };
        text.replacen(
            "# Release gates: all must pass.",
            &format!("[[preconditions]]\nprotocol = \"router\"\n{pinned}reason = \"router gate\"\n\n# Release gates: all must pass."),
            1,
        )
    };
    fs::write(&p, with_pre("")).unwrap();
    let proj = Project::open(&f.root);
    let demo = proj.load("demo").unwrap();
    let reg = Registry::open(&f.state).unwrap();
    let unmet = unmet_preconditions(&reg, &demo.protocol, &accept_any);
    assert_eq!(unmet.len(), 1);
    assert!(unmet[0].reason.contains("pins no identity"), "{:?}", unmet);

    // Freeze a `router` protocol (a renamed copy of the demo with its own matrix).
    copy_dir(
        &f.root.join("protocols/demo"),
        &f.root.join("protocols/router"),
    );
    let rp = f.root.join("protocols/router/protocol.toml");
    let rt = fs::read_to_string(&rp)
        .unwrap()
        .replacen("name = \"demo\"", "name = \"router\"", 1)
        .replacen("matrix = \"demo\"", "matrix = \"router\"", 1)
        .replace(
            "[[preconditions]]\nprotocol = \"router\"\nreason = \"router gate\"\n",
            "",
        );
    fs::write(&rp, rt).unwrap();
    let mt = fs::read_to_string(f.root.join("matrix/demo.toml"))
        .unwrap()
        .replacen("name = \"demo\"", "name = \"router\"", 1)
        .replacen("protocol = \"demo\"", "protocol = \"router\"", 1);
    fs::write(f.root.join("matrix/router.toml"), mt).unwrap();
    let router = match freeze(&proj, "router", &f.state, DRIVER, &images).unwrap() {
        FreezeOutcome::Frozen { identity, .. } => identity,
        o => panic!("{o:?}"),
    };
    let report = |allowed: bool| serde_json::json!({"identity": router.to_string(), "release_allowed": allowed, "report_digest": Digest::of(b"r").to_string(), "attestation": {}});
    record_report(&f.state, &report(true)).unwrap();
    // The renamed demo is frozen as `router` and passed, yet the name-only precondition stays
    // unmet: a name unlocks nothing.
    let reg = Registry::open(&f.state).unwrap();
    let (met, unmet) = check_preconditions(&reg, &demo.protocol, &accept_any);
    assert!(met.is_empty(), "{met:?}");
    assert!(unmet[0].reason.contains("pins no identity"), "{unmet:?}");
    assert!(unmet[0].reason.contains(&router.to_string()), "{unmet:?}");

    // Pinned to another identity (the one the team preregistered), the renamed demo does not
    // count either.
    let other = Digest::of(b"the preregistered router evaluation");
    fs::write(&p, with_pre(&format!("identity = \"{other}\"\n"))).unwrap();
    let demo = proj.load("demo").unwrap();
    let unmet = unmet_preconditions(&reg, &demo.protocol, &accept_any);
    assert!(unmet[0].reason.contains("not frozen"), "{unmet:?}");

    // Pinned to an identity frozen under another name: refused.
    let demo_id = match freeze(&proj, "demo", &f.state, DRIVER, &images).unwrap() {
        FreezeOutcome::Frozen { identity, .. } => identity,
        o => panic!("{o:?}"),
    };
    fs::write(&p, with_pre(&format!("identity = \"{demo_id}\"\n"))).unwrap();
    let reg = Registry::open(&f.state).unwrap();
    let unmet = unmet_preconditions(&reg, &proj.load("demo").unwrap().protocol, &accept_any);
    assert!(
        unmet[0].reason.contains("frozen as protocol \"demo\""),
        "{unmet:?}"
    );

    // Pinned to the router's identity: met once a passed report exists, with its evidence.
    fs::write(&p, with_pre(&format!("identity = \"{router}\"\n"))).unwrap();
    let demo = proj.load("demo").unwrap();
    let reg = Registry::open(&f.state).unwrap();
    let (met, unmet) = check_preconditions(&reg, &demo.protocol, &accept_any);
    assert!(unmet.is_empty(), "{unmet:?}");
    assert_eq!(met.len(), 1);
    assert_eq!(met[0].identity, router);
    assert_eq!(met[0].report_digest, Some(Digest::of(b"r").to_string()));
    let entry = reg
        .entries
        .iter()
        .find(|e| e.seq == met[0].report_seq)
        .unwrap();
    assert_eq!(entry.kind, "report");
    assert_eq!(entry.hash, met[0].report_entry_hash);
    // A report check that refuses the entry (its attestation does not verify): unmet, with why.
    let refuse = |_: &serde_json::Value, _: &Digest, _: &eval_core::keys::PublicKey| {
        Err::<(), String>("no signature verifies".into())
    };
    let (met, unmet) = check_preconditions(&reg, &demo.protocol, &refuse);
    assert!(met.is_empty(), "{met:?}");
    assert!(
        unmet[0].reason.contains("no signature verifies"),
        "{unmet:?}"
    );
    assert!(unmet[0].reason.contains("signed attestation"), "{unmet:?}");
    // A passed report without an attestation is not registered at all.
    let unsigned = serde_json::json!({"identity": router.to_string(), "release_allowed": true});
    assert!(record_report(&f.state, &unsigned).is_err());
    // Reports for unknown identities are refused.
    let bogus =
        serde_json::json!({"identity": Digest::of(b"x").to_string(), "release_allowed": true});
    assert!(record_report(&f.state, &bogus).is_err());
    // A retired precondition identity no longer counts.
    retire("router", &f.state, "superseded").unwrap();
    let reg = Registry::open(&f.state).unwrap();
    assert!(
        unmet_preconditions(&reg, &demo.protocol, &accept_any)[0]
            .reason
            .contains("retired")
    );
}

#[test]
fn a_failed_report_does_not_meet_a_pinned_precondition() {
    let f = fixture();
    let proj = Project::open(&f.root);
    let demo_id = match freeze(&proj, "demo", &f.state, DRIVER, &images).unwrap() {
        FreezeOutcome::Frozen { identity, .. } => identity,
        o => panic!("{o:?}"),
    };
    record_report(
        &f.state,
        &serde_json::json!({"identity": demo_id.to_string(), "release_allowed": false}),
    )
    .unwrap();
    let reg = Registry::open(&f.state).unwrap();
    assert!(!reg.has_passed(&demo_id));
    assert!(reg.passed_report(&demo_id).is_none());
}

#[test]
fn a_git_directory_in_a_workspace_is_refused_unless_declared() {
    let f = fixture();
    let t = f.root.join("protocols/demo/tasks/simple/demo-simple-2");
    fs::create_dir_all(t.join("workspace/.git")).unwrap();
    fs::write(t.join("workspace/.git/HEAD"), b"ref: refs/heads/main\n").unwrap();
    let e = do_freeze(&f).unwrap_err();
    assert!(!e.is_integrity(), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("workspace_git") && msg.contains("demo-simple-2/workspace/.git"),
        "{msg}"
    );
    assert!(!f.state.exists(), "something was written");
    let toml = t.join("task.toml");
    let text = fs::read_to_string(&toml).unwrap();
    fs::write(
        &toml,
        text.replacen(
            "stand_in = true",
            "stand_in = true\nworkspace_git = true",
            1,
        ),
    )
    .unwrap();
    do_freeze(&f).unwrap();
}

/// Each bad input: a clear message naming file and field, not an integrity failure, and nothing
/// written to the state directory.
#[test]
fn bad_input_names_file_and_field_and_writes_nothing() {
    type Edit = fn(&Path);
    fn replace(root: &Path, rel: &str, from: &str, to: &str) {
        let p = root.join(rel);
        let t = fs::read_to_string(&p).unwrap();
        assert!(t.contains(from), "{rel} lacks {from:?}");
        fs::write(&p, t.replacen(from, to, 1)).unwrap();
    }
    const P: &str = "protocols/demo/protocol.toml";
    const M: &str = "matrix/demo.toml";
    let cases: Vec<(&str, Edit, &[&str])> = vec![
        (
            "malformed toml",
            |r| replace(r, P, "schema = 1", "schema = = 1"),
            &[P],
        ),
        (
            "unknown field",
            |r| replace(r, P, "schema = 1", "schema = 1\nshcema = 2"),
            &[P, "shcema"],
        ),
        (
            "unknown rerun code",
            |r| replace(r, P, "\"filesystem_capacity\",", "\"disk_full\","),
            &[P, "disk_full", "filesystem_capacity"],
        ),
        (
            "rerun code listed twice",
            |r| {
                replace(
                    r,
                    P,
                    "\"filesystem_capacity\",",
                    "\"container_runtime_failure\",",
                )
            },
            &[P, "reruns.codes[2]", "container_runtime_failure"],
        ),
        (
            "unknown gate field",
            |r| {
                replace(
                    r,
                    P,
                    "id = \"score_noninferiority\"",
                    "id = \"score_noninferiority\"\nthreshhold = 3",
                )
            },
            &[P, "threshhold"],
        ),
        (
            "missing bundle",
            |r| fs::remove_dir_all(r.join("protocols/demo/tasks/icae/demo-icae-5")).unwrap(),
            &[M, "suites[1].tasks", "demo-icae-5"],
        ),
        (
            "missing workspace",
            |r| {
                fs::remove_dir_all(r.join("protocols/demo/tasks/icae/demo-icae-5/workspace"))
                    .unwrap()
            },
            &[M, "suites[1].tasks", "workspace"],
        ),
        (
            "escaping path",
            |r| {
                replace(
                    r,
                    P,
                    "profile = \"protocols/demo/arms/native/profile.toml\"",
                    "profile = \"../../etc/passwd\"",
                )
            },
            &[P, "arms[0].profile", "escapes"],
        ),
        (
            "undefined arm",
            |r| {
                replace(
                    r,
                    M,
                    "arms = [\"native\", \"v0.3-always\", \"v0.4-auto\"]",
                    "arms = [\"native\", \"v0.3-always\", \"v0.4-auto\", \"ghost\"]",
                )
            },
            &[M, "suites[0].arms", "ghost"],
        ),
        (
            "unknown metric",
            |r| {
                replace(
                    r,
                    P,
                    "metric = \"hidden_score\"\nop = \">=\"\nthreshold = 15",
                    "metric = \"hiden_score\"\nop = \">=\"\nthreshold = 15",
                )
            },
            &[P, "gates[2]", "hiden_score"],
        ),
        (
            "unknown statistic",
            |r| {
                replace(
                    r,
                    P,
                    "statistic = \"pair_diff_mean\"",
                    "statistic = \"pair_diff_mode\"",
                )
            },
            &[P, "pair_diff_mode"],
        ),
        (
            "duplicate task id",
            |r| replace(r, M, "\"demo-simple-2\",", "\"demo-simple-1\","),
            &[M, "suites[0].tasks", "demo-simple-1"],
        ),
        (
            "task id mismatch",
            |r| {
                replace(
                    r,
                    "protocols/demo/tasks/simple/demo-simple-3/task.toml",
                    "id = \"demo-simple-3\"",
                    "id = \"demo-simple-33\"",
                )
            },
            &["demo-simple-3/task.toml", "id"],
        ),
        (
            "link escaping a bundle",
            |r| {
                std::os::unix::fs::symlink(
                    "../../../../../../../etc/passwd",
                    r.join("protocols/demo/tasks/simple/demo-simple-3/workspace/pw"),
                )
                .unwrap()
            },
            &["demo-simple-3/workspace/pw", "escapes"],
        ),
        (
            "name mismatch",
            |r| replace(r, P, "name = \"demo\"", "name = \"demo2\""),
            &[P, "name"],
        ),
        (
            "missing agent contract",
            |r| replace(r, P, "[models.agent]", "[models.agant]"),
            &[P, "models"],
        ),
        (
            "credential header in the allow-list",
            |r| {
                replace(
                    r,
                    P,
                    "allowed_headers = [\"accept\",",
                    "allowed_headers = [\"Authorization\", \"accept\",",
                )
            },
            &[
                P,
                "models.agent.allowed_headers",
                "Authorization",
                "never forwards",
            ],
        ),
        (
            "parameter listed twice",
            |r| {
                replace(
                    r,
                    P,
                    "allowed_params = [\"model\",",
                    "allowed_params = [\"temperature\", \"model\",",
                )
            },
            &[P, "models.agent.allowed_params", "temperature", "twice"],
        ),
        (
            "negative cache-write price",
            |r| {
                replace(
                    r,
                    P,
                    "cached_input_usd_per_mtok = 0.07",
                    "cached_input_usd_per_mtok = 0.07\ncache_write_usd_per_mtok = -1.0",
                )
            },
            &[P, "budgets.prices[0]"],
        ),
        (
            "metric not emitted",
            |r| {
                replace(
                    r,
                    P,
                    "metrics = [\"score\", \"model_turns\"",
                    "metrics = [\"scores\", \"model_turns\"",
                )
            },
            &[P, "suites.simple.metrics", "scores"],
        ),
        (
            "bad method",
            |r| {
                replace(
                    r,
                    P,
                    "method = \"v04-percentile\"\nreport_methods",
                    "method = \"bootstrap\"\nreport_methods",
                )
            },
            &[P, "statistics.method"],
        ),
        (
            "controls off without a reason",
            |r| {
                replace(
                    r,
                    P,
                    "[suites.simple.controls]\noff = ",
                    "[suites.simple.controls]\noff = \" \"\n# ",
                )
            },
            &[P, "suites.simple.controls.off", "non-empty reason"],
        ),
        (
            "controls off beside control arms",
            |r| {
                replace(
                    r,
                    P,
                    "[suites.simple.controls]\noff =",
                    "[suites.simple.controls]\narms = [\"nop\"]\nmetric = \"score\"\npass_at_least = 100\noff =",
                )
            },
            &[
                P,
                "suites.simple.controls.off",
                "arms, metric, pass_at_least",
            ],
        ),
        (
            "control arms without a pass mark",
            |r| {
                replace(
                    r,
                    P,
                    "[suites.simple.controls]\noff =",
                    "[suites.simple.controls]\narms = [\"nop\"]\nmetric = \"score\"\n# off =",
                )
            },
            &[P, "suites.simple.controls.pass_at_least"],
        ),
    ];
    for (name, edit, needles) in cases {
        let f = fixture();
        edit(&f.root);
        let e = do_freeze(&f).unwrap_err();
        let msg = e.to_string();
        assert!(!e.is_integrity(), "{name}: {msg}");
        for n in needles {
            assert!(msg.contains(n), "{name}: message lacks {n:?}: {msg}");
        }
        assert!(!f.state.exists(), "{name}: something was written");
    }
}

/// A well-chained `retire` whose payload does not parse must not read as "not retired" (the
/// identity would be runnable again): the registry refuses to open, as an integrity failure.
#[test]
fn a_registry_entry_that_does_not_parse_is_refused_not_skipped() {
    let f = fixture();
    do_freeze(&f).unwrap();
    assert!(!Registry::open(&f.state).unwrap().is_retired("demo"));
    let retire_without_identity = eval_evidence::ledger::NewEntry::new(
        "retire",
        &serde_json::json!({"v": 1, "name": "demo", "reason": "r"}),
    )
    .unwrap();
    eval_evidence::ledger::append_jsonl(
        &f.state.join("registry.jsonl"),
        vec![retire_without_identity],
    )
    .unwrap();
    let e = Registry::open(&f.state).unwrap_err();
    assert!(e.is_integrity(), "{e}");
    let shown = e.to_string();
    assert!(
        shown.contains("registry.jsonl") && shown.contains("seq 2") && shown.contains("retire"),
        "{shown}"
    );
}

/// Every built-in metric may be listed by a suite no task of which emits it, and gated on: the
/// one list in eval-core is what validation accepts (evidence's side: `gates::a_gate_on_each_
/// built_in_metric_is_evaluated_from_the_accounting`).
#[test]
fn a_gate_on_each_built_in_metric_is_accepted() {
    use eval_core::budget::BUILTIN_METRICS;
    let f = fixture();
    let p = f.root.join("protocols/demo/protocol.toml");
    let mut t = fs::read_to_string(&p).unwrap();
    let listed = "metrics = [\"score\", \"model_turns\", \"tokens\", \"duration_seconds\", \"harness_seconds\"]";
    assert!(t.contains(listed));
    let all: Vec<String> = BUILTIN_METRICS.iter().map(|m| format!("{m:?}")).collect();
    t = t.replacen(
        listed,
        &format!("metrics = [\"score\", {}]", all.join(", ")),
        1,
    );
    t.push_str("\n[[gates]]\nid = \"builtins\"\nsuite = \"simple\"\n");
    for m in BUILTIN_METRICS {
        t.push_str(&format!(
            "[[gates.rules]]\nid = \"{m}_mean\"\nstatistic = \"arm_mean\"\nmetric = \"{m}\"\narm = \"candidate\"\nop = \">=\"\nthreshold = 0\n"
        ));
    }
    fs::write(&p, &t).unwrap();
    do_freeze(&f).unwrap();
    let l = Project::open(&f.root).load("demo").unwrap();
    let g = l
        .protocol
        .gates
        .iter()
        .find(|g| g.id == "builtins")
        .unwrap();
    assert_eq!(g.rules.len(), BUILTIN_METRICS.len());

    // The same suite listing a name that is neither built in nor emitted is refused.
    let f = fixture();
    let p = f.root.join("protocols/demo/protocol.toml");
    fs::write(
        &p,
        t.replacen("\"score\", ", "\"score\", \"tokens_total\", ", 1),
    )
    .unwrap();
    let msg = do_freeze(&f).unwrap_err().to_string();
    assert!(msg.contains("tokens_total"), "{msg}");
}

/// Wire metrics are built in for a suite to list; `wire_route_matches` needs every task of the
/// suite to declare what it is compared with, and a `[wire]` table names known values only.
#[test]
fn wire_metrics_and_task_expectations_are_validated() {
    let f = fixture();
    let p = f.root.join("protocols/demo/protocol.toml");
    let text = fs::read_to_string(&p).unwrap();
    fs::write(
        &p,
        text.replacen(
            "metrics = [\"score\", \"model_turns\"",
            "metrics = [\"score\", \"wire_routed\", \"wire_route_matches\", \"model_turns\"",
            1,
        ),
    )
    .unwrap();
    let proj = Project::open(&f.root);
    let e = proj.load("demo").unwrap_err().to_string();
    assert!(
        e.contains("wire_route_matches") && e.contains("[wire] expected_route"),
        "{e}"
    );
    let tasks = f.root.join("protocols/demo/tasks/simple");
    let mut dirs: Vec<_> = fs::read_dir(&tasks)
        .unwrap()
        .map(|d| d.unwrap().path())
        .collect();
    dirs.sort();
    for d in &dirs {
        let t = d.join("task.toml");
        let s = fs::read_to_string(&t).unwrap();
        fs::write(&t, format!("{s}\n[wire]\nexpected_route = \"bypass\"\n")).unwrap();
    }
    let loaded = proj.load("demo").unwrap();
    let t = loaded.tasks.iter().find(|t| t.suite == "simple").unwrap();
    assert_eq!(t.spec.wire.as_ref().unwrap().expected_route, "bypass");
    let t = dirs[0].join("task.toml");
    let s = fs::read_to_string(&t).unwrap();
    fs::write(
        &t,
        s.replace("expected_route = \"bypass\"", "expected_route = \"maybe\""),
    )
    .unwrap();
    let e = proj.load("demo").unwrap_err().to_string();
    assert!(
        e.contains("wire.expected_route") && e.contains("maybe"),
        "{e}"
    );
    fs::write(
        &t,
        s.replace(
            "expected_route = \"bypass\"",
            "expected_route = \"contract\"\nexpected_clarification = \"sometimes\"",
        ),
    )
    .unwrap();
    let e = proj.load("demo").unwrap_err().to_string();
    assert!(e.contains("wire.expected_clarification"), "{e}");
}

/// `isolation = "gvisor"` is read, changes the identity (the freeze records it with the
/// protocol's bytes), and an unknown isolation is refused when the protocol loads.
#[test]
fn isolation_is_part_of_the_frozen_protocol() {
    use eval_protocols::protocol::Isolation;
    let f = fixture();
    let plain = Project::open(&f.root).load("demo").unwrap();
    assert_eq!(plain.protocol.isolation, Isolation::Runc);
    let first = identity(&do_freeze(&f).unwrap());

    let g = fixture();
    let path = g.root.join("protocols/demo/protocol.toml");
    let text = fs::read_to_string(&path).unwrap();
    let at = text.find("\n[").unwrap();
    let (head, tail) = text.split_at(at);
    fs::write(&path, format!("{head}\nisolation = \"gvisor\"\n{tail}")).unwrap();
    let loaded = Project::open(&g.root).load("demo").unwrap();
    assert_eq!(loaded.protocol.isolation, Isolation::Gvisor);
    let second = identity(&do_freeze(&g).unwrap());
    assert_ne!(first, second);

    fs::write(&path, format!("{head}\nisolation = \"chroot\"\n{tail}")).unwrap();
    let e = Project::open(&g.root).load("demo").unwrap_err();
    assert!(
        e.to_string().contains("chroot") || e.to_string().contains("isolation"),
        "{e}"
    );
}

/// `model_free = true` is part of the frozen bytes, and a model-free protocol whose suites list
/// anything but wire metrics (a grader's score, the meter's turns) is refused when it loads — so
/// `eval freeze` refuses it, naming the suite, the metric and the rule.
#[test]
fn a_model_free_protocol_may_list_only_wire_metrics() {
    let f = fixture();
    let first = identity(&do_freeze(&f).unwrap());
    let g = fixture();
    let path = g.root.join("protocols/demo/protocol.toml");
    let text = fs::read_to_string(&path).unwrap();
    let at = text.find("\n[").unwrap();
    let (head, tail) = text.split_at(at);
    fs::write(&path, format!("{head}\nmodel_free = true\n{tail}")).unwrap();
    let e = do_freeze(&g).unwrap_err().to_string();
    assert!(
        e.contains("model_free")
            && e.contains("reads what the upstream answers")
            && e.contains(".metrics"),
        "{e}"
    );
    assert!(e.contains("wire_routed"), "names what is allowed: {e}");
    // Without the flag the same bytes freeze, to another identity than with it would.
    fs::write(&path, format!("{head}\nmodel_free = false\n{tail}")).unwrap();
    let loaded = Project::open(&g.root).load("demo").unwrap();
    assert!(!loaded.protocol.model_free);
    let second = identity(&do_freeze(&g).unwrap());
    assert_ne!(first, second, "the flag's bytes are part of the identity");
}

/// Issue 33 item 9: every slot's artifact quota must fit in the run's budget at once, so that
/// no attempt's share is ever another's. Freeze refuses an explicit quota that does not,
/// naming the field; the default shares `max_bytes` equally.
#[test]
fn freeze_refuses_per_attempt_artifact_quotas_the_run_budget_cannot_hold_naming_the_field() {
    let f = fixture();
    let slots = Project::open(&f.root).load("demo").unwrap().attempt_slots();
    assert!(slots > 1, "{slots}");
    let pfile = f.root.join("protocols/demo/protocol.toml");
    let original = fs::read_to_string(&pfile).unwrap();
    let with = |q: u64| {
        let text = original.replacen(
            "[budgets.run]",
            &format!(
                "[budgets.artifacts]\nmax_bytes = {}\nper_attempt_bytes = {q}\n\n[budgets.run]",
                slots * 1000
            ),
            1,
        );
        assert_ne!(text, original);
        fs::write(&pfile, text).unwrap();
    };
    with(1001);
    let e = do_freeze(&f).unwrap_err().to_string();
    for want in [
        "protocol.toml",
        "budgets.artifacts.per_attempt_bytes",
        "budgets.artifacts.max_bytes",
        &format!("{slots} slots × 1001 bytes"),
    ] {
        assert!(e.contains(want), "{want:?} not in {e}");
    }
    assert!(!f.state.join("freezes/demo.json").exists());
    with(0);
    let e = do_freeze(&f).unwrap_err().to_string();
    assert!(e.contains("budgets.artifacts.per_attempt_bytes"), "{e}");
    // Exactly the budget: frozen, and that is each attempt's quota.
    with(1000);
    do_freeze(&f).unwrap();
    let l = Project::open(&f.root).load("demo").unwrap();
    assert_eq!(l.artifact_quota(), 1000);
    // Absent: max_bytes shared equally by the slots.
    fs::write(&pfile, &original).unwrap();
    let l = Project::open(&f.root).load("demo").unwrap();
    assert_eq!(
        l.artifact_quota(),
        eval_protocols::protocol::DEFAULT_ARTIFACT_BYTES / slots
    );
}
