//! Admission: each reason `eval run` refuses to start, through the binary (exit 3, saying why,
//! nothing written). The driver-digest rule is tested in `run::admission` (one binary cannot
//! be two drivers).

use crate::support::*;

fn frozen_demo() -> (tempfile::TempDir, std::path::PathBuf) {
    let (tmp, dir) = demo_project();
    let o = eval(&dir, &["freeze", "--protocol", "demo"]);
    assert!(o.status.success(), "{}", text(&o));
    (tmp, dir)
}

fn refused(dir: &std::path::Path, args: &[&str], says: &[&str]) {
    let o = eval(dir, args);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(3), "{t}");
    for s in says {
        assert!(t.contains(s), "expected {s:?} in: {t}");
    }
}

const FIXTURE: &[&str] = &["run", "--matrix", "demo", "--upstream", "fixture"];

#[test]
fn refuses_a_protocol_that_is_not_frozen() {
    let (_tmp, dir) = demo_project();
    refused(
        &dir,
        FIXTURE,
        &["is not frozen", "eval freeze --protocol demo"],
    );
    assert!(!dir.join("runs/demo/ledger.sqlite").exists());
}

#[test]
fn refuses_drift_naming_the_path() {
    let (_tmp, dir) = frozen_demo();
    edit(
        &dir.join("protocols/demo/tasks/simple/demo-simple-1/prompt.md"),
        |s| s + "\none more line\n",
    );
    refused(&dir, FIXTURE, &["drifted", "demo-simple-1/prompt.md"]);
    assert!(!dir.join("runs/demo/ledger.sqlite").exists());
}

#[test]
fn refuses_a_retired_identity() {
    let (_tmp, dir) = frozen_demo();
    let o = eval(
        &dir,
        &["retire", "--protocol", "demo", "--reason", "gate failed"],
    );
    assert!(o.status.success(), "{}", text(&o));
    refused(&dir, FIXTURE, &["retired"]);
}

#[test]
fn refuses_a_ledger_that_does_not_verify() {
    let (_tmp, dir) = frozen_demo();
    let ledger = dir.join("runs/demo/ledger.sqlite");
    std::fs::create_dir_all(ledger.parent().unwrap()).unwrap();
    for text_ in ["one", "two"] {
        let o = eval(
            &dir,
            &["ledger", "note", ledger.to_str().unwrap(), "--text", text_],
        );
        assert!(o.status.success(), "{}", text(&o));
    }
    // Edit a stored payload behind SQLite's back (as an editor of the file could).
    let conn = rusqlite::Connection::open(&ledger).unwrap();
    conn.execute_batch(
        "DROP TRIGGER entries_no_update; UPDATE entries SET payload = CAST('{\"text\":\"TWO\"}' AS BLOB) WHERE seq = 2;",
    )
    .unwrap();
    drop(conn);
    refused(&dir, FIXTURE, &["does not verify", "seq 2"]);
}

#[test]
fn refuses_a_paid_run_without_a_key() {
    let (_tmp, dir) = frozen_demo();
    refused(
        &dir,
        &[
            "run",
            "--matrix",
            "demo",
            "--upstream",
            "http://127.0.0.1:9/v1",
        ],
        &["no API key", "--api-key-env"],
    );
    // An empty variable is no key either.
    let o = std::process::Command::new(eval_bin())
        .args([
            "run",
            "--matrix",
            "demo",
            "--upstream",
            "http://127.0.0.1:9/v1",
            "--api-key-env",
            "EVAL_TEST_EMPTY_KEY",
        ])
        .env("EVAL_TEST_EMPTY_KEY", "")
        .current_dir(&dir)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(!dir.join("runs/demo/ledger.sqlite").exists());
}

#[test]
fn a_paid_v04_run_refuses_because_the_router_gate_has_not_passed() {
    let state = tempfile::tempdir().unwrap();
    let root = repo_root();
    let s = state.path().to_str().unwrap();
    let o = eval(&root, &["freeze", "--protocol", "v0.4", "--state", s]);
    assert!(o.status.success(), "{}", text(&o));
    let o = std::process::Command::new(eval_bin())
        .args([
            "run",
            "--matrix",
            "v0.4",
            "--state",
            s,
            "--upstream",
            "http://127.0.0.1:9/v1",
            "--api-key-env",
            "EVAL_TEST_PAID_KEY",
        ])
        .env("EVAL_TEST_PAID_KEY", "sk-test-never-used")
        .current_dir(&root)
        .output()
        .unwrap();
    let t = text(&o);
    assert_eq!(o.status.code(), Some(3), "{t}");
    assert!(t.contains("precondition"), "{t}");
    assert!(t.contains("has not passed"), "{t}");
    assert!(!t.contains("sk-test-never-used"), "the key leaked: {t}");
    assert!(!state.path().join("v0.4/ledger.sqlite").exists());
}

/// The loophole the pinned precondition closes: a renamed demo, frozen as `router` and with a
/// passed report in the same state directory, met v0.4's name-only precondition. Now a name
/// unlocks nothing; the refusal says so and names the identity one could pin.
#[test]
fn a_renamed_demo_no_longer_unlocks_v04() {
    let (_tmp, dir) = demo_project();
    let state = tempfile::tempdir().unwrap();
    let s = state.path().to_str().unwrap();
    let demo = dir.join("protocols/demo");
    let router = dir.join("protocols/router");
    let o = std::process::Command::new("cp")
        .args(["-a", demo.to_str().unwrap(), router.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let rp = router.join("protocol.toml");
    let rt = std::fs::read_to_string(&rp)
        .unwrap()
        .replacen("name = \"demo\"", "name = \"router\"", 1)
        .replacen("matrix = \"demo\"", "matrix = \"router\"", 1);
    std::fs::write(&rp, rt).unwrap();
    let mt = std::fs::read_to_string(dir.join("matrix/demo.toml"))
        .unwrap()
        .replacen("name = \"demo\"", "name = \"router\"", 1)
        .replacen("protocol = \"demo\"", "protocol = \"router\"", 1);
    std::fs::write(dir.join("matrix/router.toml"), mt).unwrap();
    let o = eval(&dir, &["freeze", "--protocol", "router", "--state", s]);
    assert!(o.status.success(), "{}", text(&o));
    let reg = eval_protocols::Registry::open(state.path()).unwrap();
    let renamed = reg.frozen_identity("router").unwrap();
    eval_protocols::record_report(
        state.path(),
        &serde_json::json!({"identity": renamed.to_string(), "release_allowed": true, "attestation": {}}),
    )
    .unwrap();

    let root = repo_root();
    let o = eval(&root, &["freeze", "--protocol", "v0.4", "--state", s]);
    assert!(o.status.success(), "{}", text(&o));
    let o = std::process::Command::new(eval_bin())
        .args([
            "run",
            "--matrix",
            "v0.4",
            "--state",
            s,
            "--upstream",
            "http://127.0.0.1:9/v1",
            "--api-key-env",
            "EVAL_TEST_PAID_KEY",
        ])
        .env("EVAL_TEST_PAID_KEY", "sk-test-never-used")
        .current_dir(&root)
        .output()
        .unwrap();
    let t = text(&o);
    assert_eq!(o.status.code(), Some(3), "{t}");
    assert!(t.contains("precondition \"router\""), "{t}");
    assert!(t.contains("pins no identity"), "{t}");
    assert!(t.contains(&renamed.to_string()), "{t}");
    assert!(!t.contains("sk-test-never-used"), "the key leaked: {t}");
    assert!(!state.path().join("v0.4/ledger.sqlite").exists());
}

/// The attack on the router gate: an operator without the key appends chain-valid `report` lines
/// to `STATE/registry.jsonl` by hand — one bare, one carrying an attestation signed with a key of
/// their own — for the pinned identity. Neither unlocks the dependent protocol: a precondition is
/// met only by an attestation the preregistered key verifies, and the refusal says so.
#[test]
fn a_hand_appended_registry_line_does_not_unlock_a_dependent_run() {
    use eval_evidence::signing::{
        KEY_NAME, RecordedCheckpoint, SignedCheckpoint, SigningKeyPair, TreeHead, attest_report,
    };
    let (_tmp, dir) = demo_project();
    // A `router` protocol (a renamed copy of the demo), frozen.
    let o = std::process::Command::new("cp")
        .args([
            "-a",
            dir.join("protocols/demo").to_str().unwrap(),
            dir.join("protocols/router").to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    edit(&dir.join("protocols/router/protocol.toml"), |s| {
        s.replacen("name = \"demo\"", "name = \"router\"", 1)
            .replacen("matrix = \"demo\"", "matrix = \"router\"", 1)
    });
    let mt = std::fs::read_to_string(dir.join("matrix/demo.toml"))
        .unwrap()
        .replacen("name = \"demo\"", "name = \"router\"", 1)
        .replacen("protocol = \"demo\"", "protocol = \"router\"", 1);
    std::fs::write(dir.join("matrix/router.toml"), mt).unwrap();
    let o = eval(&dir, &["freeze", "--protocol", "router"]);
    assert!(o.status.success(), "{}", text(&o));
    let state = dir.join("runs");
    let router = eval_protocols::Registry::open(&state)
        .unwrap()
        .frozen_identity("router")
        .unwrap();
    // The demo depends on that identity and preregisters its signing key.
    let key = SigningKeyPair::generate(KEY_NAME).unwrap();
    edit(&dir.join("protocols/demo/protocol.toml"), |s| {
        s.replacen(
            "# Release gates: all must pass.",
            &format!(
                "[signing]\npublic_key = \"{}\"\n\n[[preconditions]]\nprotocol = \"router\"\nidentity = \"{router}\"\nreason = \"router gate\"\n\n# Release gates: all must pass.",
                key.public()
            ),
            1,
        )
    });
    let o = eval(&dir, &["freeze", "--protocol", "demo"]);
    assert!(o.status.success(), "{}", text(&o));

    // The forged lines, appended as the chain rule says (no eval code involved).
    let own = SigningKeyPair::generate(KEY_NAME).unwrap();
    let report = br#"{"forged":true}"#;
    let checkpoint = RecordedCheckpoint {
        seq: 2,
        checkpoint: SignedCheckpoint::sign(
            TreeHead {
                origin: format!("eval/{router}"),
                tree_size: 1,
                root: eval_core::Digest::of(b"root"),
            },
            &own,
        )
        .unwrap(),
    };
    let envelope = attest_report(
        report,
        &router.to_string(),
        &eval_core::Digest::of(b"driver"),
        &checkpoint,
        &serde_json::json!({"release_allowed": true}),
        &own,
    )
    .unwrap();
    let digest = eval_core::Digest::of(report).to_string();
    let lines = [
        serde_json::json!({"identity": router.to_string(), "release_allowed": true, "report_digest": eval_core::Digest::ZERO.to_string()}),
        serde_json::json!({"identity": router.to_string(), "release_allowed": true, "report_digest": digest, "attestation": serde_json::from_slice::<serde_json::Value>(&envelope).unwrap()}),
    ];
    let path = state.join("registry.jsonl");
    for payload in lines {
        let head = eval_protocols::Registry::open(&state).unwrap().head;
        let mut line = eval_core::chain::jsonl_line(
            &eval_core::chain::NewEntry::new("report", &payload)
                .unwrap()
                .chained(&head, "2026-01-01T00:00:00Z".into()),
        );
        line.push(b'\n');
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        std::io::Write::write_all(&mut f, &line).unwrap();
    }
    // The chain verifies and both lines say "passed".
    let reg = eval_protocols::Registry::open(&state).unwrap();
    assert_eq!(reg.passed_reports(&router).count(), 2);

    // No API key either: admission lists every refusal at once, so a met precondition would
    // simply be absent from it.
    refused(
        &dir,
        &[
            "run",
            "--matrix",
            "demo",
            "--upstream",
            "http://127.0.0.1:9/v1",
        ],
        &[
            "precondition \"router\"",
            "no signed report attestation",
            "no signature in the envelope verifies",
        ],
    );
    assert!(!dir.join("runs/demo/ledger.sqlite").exists());
}
