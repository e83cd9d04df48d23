//! `eval ledger …` as a user runs it: exit statuses and messages.

use std::path::Path;
use std::process::{Command, Output};

fn eval(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_eval"))
        .args(args)
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn notes(path: &Path, n: usize) {
    for i in 0..n {
        let o = eval(&[
            "ledger",
            "note",
            path.to_str().unwrap(),
            "--text",
            &format!("remark {i}"),
        ]);
        assert!(o.status.success(), "{}", text(&o));
    }
}

#[test]
fn note_then_verify_json_reports_the_head() {
    let dir = tempfile::tempdir().unwrap();
    let l = dir.path().join("ledger.sqlite");
    notes(&l, 3);
    let o = eval(&["ledger", "verify", l.to_str().unwrap(), "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["ok"], true);
    assert_eq!(v["entries"], 3);
    assert_eq!(v["head"]["seq"], 3);
    assert!(v["head"]["hash"].as_str().unwrap().starts_with("sha256:"));
    assert!(v["error"].is_null());

    // The head it printed is accepted as --expect-head, and a wrong one is an integrity failure.
    let head = format!("3:{}", v["head"]["hash"].as_str().unwrap());
    let o = eval(&[
        "ledger",
        "verify",
        l.to_str().unwrap(),
        "--expect-head",
        &head,
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = eval(&[
        "ledger",
        "verify",
        l.to_str().unwrap(),
        "--expect-head",
        "5:sha256:00",
    ]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "a malformed head is a usage error: {}",
        text(&o)
    );
    let far = format!("9:{}", v["head"]["hash"].as_str().unwrap());
    let o = eval(&[
        "ledger",
        "verify",
        l.to_str().unwrap(),
        "--expect-head",
        &far,
    ]);
    assert_eq!(o.status.code(), Some(3));
    assert!(text(&o).contains("seq 9: truncated"), "{}", text(&o));
}

#[test]
fn a_tampered_ledger_exits_3_naming_the_seq() {
    let dir = tempfile::tempdir().unwrap();
    let l = dir.path().join("ledger.sqlite");
    notes(&l, 5);
    let c = rusqlite::Connection::open(&l).unwrap();
    c.execute_batch(
        "DROP TRIGGER entries_no_update;
         UPDATE entries SET payload = CAST(replace(CAST(payload AS TEXT), 'remark 2', 'remark 9') AS BLOB) WHERE seq = 3;",
    )
    .unwrap();
    drop(c);
    let o = eval(&["ledger", "verify", l.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(3));
    assert!(text(&o).contains("seq 3: hash mismatch"), "{}", text(&o));
    let o = eval(&["ledger", "verify", l.to_str().unwrap(), "--json"]);
    assert_eq!(o.status.code(), Some(3));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["ok"], false);
    assert_eq!(v["entries"], 2);
    assert_eq!(v["error"]["reason"], "hash_mismatch");
    assert_eq!(v["error"]["seq"], 3);
}

#[test]
fn export_verifies_and_show_filters() {
    let dir = tempfile::tempdir().unwrap();
    let l = dir.path().join("ledger.sqlite");
    notes(&l, 4);
    let out = dir.path().join("ledger.jsonl");
    let o = eval(&[
        "ledger",
        "export",
        l.to_str().unwrap(),
        "--jsonl",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(std::fs::read_to_string(&out).unwrap().lines().count(), 4);
    let o = eval(&["ledger", "verify", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));

    let o = eval(&[
        "ledger",
        "show",
        l.to_str().unwrap(),
        "--kind",
        "note",
        "--json",
    ]);
    assert!(o.status.success());
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 4);
    assert_eq!(lines[2]["payload"]["text"], "remark 2");
    let o = eval(&["ledger", "show", l.to_str().unwrap(), "--kind", "outcome"]);
    assert!(o.status.success());
    assert!(o.stdout.is_empty());
}

#[test]
fn bad_paths_get_clear_messages_and_documented_statuses() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.sqlite");
    std::fs::write(&empty, b"").unwrap();
    let o = eval(&["ledger", "verify", empty.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("empty"), "{}", text(&o));

    let missing = dir.path().join("nope.sqlite");
    let o = eval(&["ledger", "verify", missing.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("nope.sqlite"), "{}", text(&o));

    let readme = dir.path().join("README.md");
    std::fs::write(&readme, b"# hello\n").unwrap();
    let o = eval(&["ledger", "verify", readme.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("not a ledger"), "{}", text(&o));

    let jsonl = dir.path().join("broken.jsonl");
    std::fs::write(&jsonl, b"{\"seq\": 1, oops\n").unwrap();
    let o = eval(&["ledger", "verify", jsonl.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(3));
    assert!(text(&o).contains("broken.jsonl: line 1"), "{}", text(&o));
    assert!(!text(&o).contains("panicked"));

    // An export cannot be appended to: only the SQLite ledger has a writer.
    let o = eval(&["ledger", "note", jsonl.to_str().unwrap(), "--text", "x"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let o = eval(&["ledger", "note", missing.to_str().unwrap(), "--text", "  "]);
    assert_eq!(o.status.code(), Some(2));
    assert!(!missing.exists(), "a refused note must not create a ledger");
}

#[test]
fn unimplemented_and_unknown_commands_exit_2() {
    let o = eval(&["no-such-command"]);
    assert_eq!(o.status.code(), Some(2));
    let o = eval(&["--help"]);
    assert_eq!(o.status.code(), Some(0));
    let help = text(&o);
    for cmd in [
        "demo", "init", "plan", "freeze", "verify", "retire", "run", "status", "report", "stats",
        "proxy", "ledger", "keygen",
    ] {
        assert!(
            help.contains(&format!("  {cmd} ")),
            "--help lists {cmd}: {help}"
        );
    }
}

/// `--artifacts [DIR]` re-hashes what the ledger references: the store beside the ledger by
/// default, or DIR; an altered or missing object exits 3 naming its digest and the entry, in
/// text and JSON, for a SQLite ledger and for its export.
#[test]
fn verify_artifacts_rehashes_every_referenced_object() {
    use eval_evidence::artifacts::ArtifactStore;
    use eval_evidence::ledger::{LedgerWriter, NewEntry};
    let dir = tempfile::tempdir().unwrap();
    let l = dir.path().join("ledger.sqlite");
    let store = ArtifactStore::open(&dir.path().join("artifacts")).unwrap();
    let a = store.put_bytes(b"grader output").unwrap();
    let b = store.put_bytes(b"agent log").unwrap();
    let w = LedgerWriter::open(&l).unwrap();
    w.append_blocking(NewEntry::new("note", &serde_json::json!({"text": "x"})).unwrap())
        .unwrap();
    w.append_blocking(
        NewEntry::new(
            "attempt_outcome",
            &serde_json::json!({"attempt": "s#1", "artifacts": {
                "grader_output": a.to_string(), "agent_log": b.to_string(), "workspace": null}}),
        )
        .unwrap(),
    )
    .unwrap();
    w.close();
    let lp = l.to_str().unwrap();
    let export = dir.path().join("l.jsonl");
    let o = eval(&["ledger", "export", lp, "--jsonl", export.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));

    let o = eval(&["ledger", "verify", lp, "--artifacts"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        text(&o).contains("2 artifact references re-hashed"),
        "{}",
        text(&o)
    );
    // Without --artifacts nothing is re-hashed (and an export has no store beside it by default).
    let store_dir = dir.path().join("artifacts");
    let o = eval(&[
        "ledger",
        "verify",
        export.to_str().unwrap(),
        "--artifacts",
        store_dir.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));

    // Altered.
    let obj = store.path_of(&a);
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&obj, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::write(&obj, b"better grader output").unwrap();
    let o = eval(&["ledger", "verify", lp]);
    assert_eq!(o.status.code(), Some(0), "the chain alone still verifies");
    let o = eval(&["ledger", "verify", lp, "--artifacts"]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(3), "{t}");
    assert!(
        t.contains(&a.to_string()) && t.contains("seq 2") && t.contains("s#1"),
        "{t}"
    );
    assert!(t.contains("altered"), "{t}");
    let o = eval(&["ledger", "verify", lp, "--artifacts", "--json"]);
    assert_eq!(o.status.code(), Some(3));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["ok"], false);
    assert_eq!(v["error"]["reason"], "artifact");
    assert_eq!(v["error"]["seq"], 2);

    // Missing, looked up in an explicit DIR.
    std::fs::remove_file(&obj).unwrap();
    let o = eval(&[
        "ledger",
        "verify",
        export.to_str().unwrap(),
        "--artifacts",
        store_dir.to_str().unwrap(),
    ]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(3), "{t}");
    assert!(t.contains(&a.to_string()) && t.contains("missing"), "{t}");
}
