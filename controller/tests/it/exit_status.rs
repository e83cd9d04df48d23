//! One test per documented exit status of the real `eval` binary (ARCHITECTURE.md, "Errors and
//! exit statuses"): 0 success, 1 gate not passed, 2 usage or input error, 3 integrity failure,
//! and the statuses of a run whose environment fails (2) or whose evidence fails (3).

use crate::support::*;
use std::path::Path;

fn ledger_cmd(args: &[&str]) -> std::process::Output {
    eval(Path::new("."), args)
}

fn notes(ledger: &Path, n: usize) {
    for i in 0..n {
        let o = ledger_cmd(&[
            "ledger",
            "note",
            ledger.to_str().unwrap(),
            "--text",
            &format!("remark {i}"),
        ]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    }
}

#[test]
fn exit_0_a_command_that_succeeds() {
    let dir = tempfile::tempdir().unwrap();
    let l = dir.path().join("ledger.sqlite");
    notes(&l, 2);
    let o = ledger_cmd(&["ledger", "verify", l.to_str().unwrap(), "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (v["ok"].as_bool(), v["entries"].as_u64()),
        (Some(true), Some(2))
    );
}

#[test]
fn exit_2_a_bad_flag() {
    let o = ledger_cmd(&["ledger", "verify", "--no-such-flag", "x.sqlite"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("--no-such-flag"), "{}", text(&o));
}

/// Input that cannot be read, or is not what the command takes, is 2 with a message naming the
/// file; no ledger is created for it.
#[test]
fn exit_2_unreadable_or_invalid_input_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("absent-ledger.sqlite");
    let o = ledger_cmd(&["ledger", "verify", missing.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("absent-ledger.sqlite"), "{}", text(&o));
    assert!(!missing.exists());

    let notes_md = dir.path().join("notes-not-a-ledger.md");
    std::fs::write(&notes_md, b"# notes\n").unwrap();
    let o = ledger_cmd(&["ledger", "verify", notes_md.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let t = text(&o);
    assert!(
        t.contains("notes-not-a-ledger.md") && t.contains("not a ledger"),
        "{t}"
    );
}

/// A site is a directory: without `--out` the report refuses before reading anything (exit 2).
#[test]
fn exit_2_a_site_without_out() {
    let dir = tempfile::tempdir().unwrap();
    let o = eval(
        dir.path(),
        &["report", "--matrix", "demo", "--format", "site"],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("--out DIR"), "{}", text(&o));
    assert!(
        std::fs::read_dir(dir.path()).unwrap().next().is_none(),
        "nothing written"
    );
}

/// A ledger whose recorded bytes changed is an integrity failure naming the first bad seq.
#[test]
fn exit_3_a_tampered_ledger() {
    let dir = tempfile::tempdir().unwrap();
    let l = dir.path().join("ledger.sqlite");
    notes(&l, 4);
    let c = rusqlite::Connection::open(&l).unwrap();
    c.execute_batch(
        "DROP TRIGGER entries_no_update;
         UPDATE entries SET payload = CAST(replace(CAST(payload AS TEXT), 'remark 1', 'remark 7') AS BLOB) WHERE seq = 2;",
    )
    .unwrap();
    drop(c);
    let o = ledger_cmd(&["ledger", "verify", l.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(text(&o).contains("seq 2: hash mismatch"), "{}", text(&o));
}
