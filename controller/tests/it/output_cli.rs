//! Output into a closed pipe (`eval … | head -1` after head has exited): the commands stop
//! quietly with status 0 instead of panicking with a backtrace.

use eval_evidence::ledger::{LedgerWriter, NewEntry};
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// Runs `eval` in `dir` with its standard output connected to a pipe whose reading end is
/// already closed, so the very first write fails with EPIPE (deterministic: no race with a
/// reader that might still be reading).
fn into_closed_pipe(dir: &Path, args: &[&str]) -> Output {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    Command::new(env!("CARGO_BIN_EXE_eval"))
        .args(args)
        .current_dir(dir)
        .env_remove("EVAL_SIGNING_KEY_FILE")
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap()
}

fn assert_quiet_success(o: &Output, what: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("panicked"), "{what}: {err}");
    assert!(!err.contains("Broken pipe"), "{what}: {err}");
    assert_eq!(o.status.code(), Some(0), "{what}: {err}");
}

#[test]
fn ledger_show_into_a_closed_pipe_stops_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l.sqlite");
    let w = LedgerWriter::open(&path).unwrap();
    for i in 0..50 {
        w.append_blocking(NewEntry::new("note", &serde_json::json!({ "i": i })).unwrap())
            .unwrap();
    }
    w.close();
    let p = path.to_str().unwrap();
    for args in [
        vec!["ledger", "show", p],
        vec!["ledger", "show", p, "--json"],
        vec!["ledger", "verify", p],
    ] {
        let o = into_closed_pipe(dir.path(), &args);
        assert_quiet_success(&o, &args.join(" "));
    }
}

#[test]
fn init_and_freeze_into_a_closed_pipe_stop_quietly() {
    let tmp = tempfile::tempdir().unwrap();
    let proj = tmp.path().join("proj");
    let o = into_closed_pipe(tmp.path(), &["init", proj.to_str().unwrap()]);
    assert_quiet_success(&o, "init");
    // init stopped at its first line of output; do it again properly for freeze.
    std::fs::remove_dir_all(&proj).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_eval"))
        .args(["init", proj.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = into_closed_pipe(&proj, &["freeze", "--protocol", "demo"]);
    assert_quiet_success(&o, "freeze");
}
