//! The checkpointer is no signing oracle: it signs only what its own writer committed. A ledger
//! renamed over the path during a run, and entries appended between sessions that no checkpoint
//! covers, are refused — never signed.

use eval_evidence::ledger::{LedgerReader, LedgerWriter, NewEntry};
use eval_evidence::signing::*;
use serde_json::json;
use std::path::Path;
use std::sync::Arc;

const ORIGIN: &str = "eval/sha256:00ff";

fn key() -> Arc<SigningKeyPair> {
    Arc::new(SigningKeyPair::from_seed(KEY_NAME, [7u8; 32]).unwrap())
}

fn add(w: &LedgerWriter, kind: &str, n: u64) -> u64 {
    w.append_blocking(NewEntry::new(kind, &json!({"k": kind, "n": n})).unwrap())
        .unwrap()
        .seq
}

/// A consistent copy of a live (WAL) ledger, the way an operator would take one.
fn copy_live(from: &Path, to: &Path) {
    let c = rusqlite::Connection::open_with_flags(from, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .unwrap();
    c.execute("VACUUM INTO ?1", [to.to_str().unwrap()]).unwrap();
}

/// During a run, a forged copy (the genuine entries plus a forged outcome, chain-valid) is
/// renamed over `ledger.sqlite` with `-wal`/`-shm` moved aside, just before a checkpoint. The
/// writer notices the path no longer holds its file and refuses; nothing about the forged file
/// is ever signed, and the writer stays refused.
#[test]
fn a_ledger_renamed_over_the_path_during_a_run_is_never_signed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.sqlite");
    let key = key();
    let w = LedgerWriter::open(&path).unwrap();
    let mut cp = Checkpointer::open(key.clone(), ORIGIN, &w).unwrap();
    add(&w, "run_started", 0);
    add(&w, "attempt_outcome", 1);
    let genuine = cp.checkpoint_blocking(&w).unwrap();

    let forged = dir.path().join("forged.sqlite");
    copy_live(&path, &forged);
    {
        let f = LedgerWriter::open(&forged).unwrap();
        add(&f, "attempt_outcome", 999);
        f.close();
    }
    for suffix in ["-wal", "-shm"] {
        let from = format!("{}{suffix}", path.display());
        if Path::new(&from).exists() {
            std::fs::rename(&from, format!("{}.aside{suffix}", path.display())).unwrap();
        }
    }
    std::fs::rename(&forged, &path).unwrap();

    let err = cp
        .checkpoint_blocking(&w)
        .expect_err("a checkpoint was signed over a file that is not the writer's");
    assert!(err.is_integrity(), "{err}");
    assert!(err.to_string().contains("replaced"), "{err}");
    // The writer is refused from now on, for plain appends too.
    let again = w
        .append_blocking(NewEntry::new("note", &json!({"after": true})).unwrap())
        .unwrap_err();
    assert!(again.is_integrity(), "{again}");
    w.close();
    // The file at the path holds no checkpoint beyond the genuine one.
    let entries = LedgerReader::open(&path).unwrap().entries().unwrap();
    let checkpoints: Vec<_> = entries
        .iter()
        .filter(|e| e.kind == CHECKPOINT_KIND)
        .collect();
    assert_eq!(checkpoints.len(), 1);
    assert_eq!(checkpoints[0].seq, genuine.seq);
}

/// Between sessions, entries of any evidence kind appended after the last checkpoint (here a
/// `model_call`, which changes a report's spend and turns) are refused when a signing session
/// opens the ledger: they were not committed by a signing controller. Notes may follow.
#[test]
fn entries_appended_between_sessions_are_refused_never_signed() {
    let dir = tempfile::tempdir().unwrap();
    let key = key();
    let build = |name: &str| {
        let path = dir.path().join(name);
        let w = LedgerWriter::open(&path).unwrap();
        let mut cp = Checkpointer::open(key.clone(), ORIGIN, &w).unwrap();
        add(&w, "run_started", 0);
        add(&w, "attempt_outcome", 1);
        cp.checkpoint_blocking(&w).unwrap();
        w.close();
        drop(cp);
        path
    };
    for kind in [
        "model_call",
        "attempt_started",
        "attempt_outcome",
        "run_started",
    ] {
        let path = build(&format!("{kind}.sqlite"));
        let w = LedgerWriter::open(&path).unwrap();
        let forged = add(&w, kind, 42);
        let err = Checkpointer::open(key.clone(), ORIGIN, &w)
            .expect_err(&format!("an uncovered {kind} was accepted for signing"));
        assert!(err.is_integrity(), "{kind}: {err}");
        assert!(err.to_string().contains(&format!("seq {forged}")), "{err}");
        w.close();
    }
    // A note (or a report made without the key) is about the run, not evidence of it.
    let path = build("note.sqlite");
    let w = LedgerWriter::open(&path).unwrap();
    add(&w, "note", 1);
    add(&w, "report", 2);
    let mut cp = Checkpointer::open(key.clone(), ORIGIN, &w).unwrap();
    cp.checkpoint_blocking(&w).unwrap();
    w.close();
    drop(cp);
    assert!(verify_ledger_signatures(&path, key.public()).unwrap().ok);
}

/// A checkpointer signs through its own writer only; another writer on the same path (after the
/// first one closed) is refused.
#[test]
fn a_checkpointer_signs_only_through_its_own_writer() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l.sqlite");
    let w = LedgerWriter::open(&path).unwrap();
    let mut cp = Checkpointer::open(key(), ORIGIN, &w).unwrap();
    add(&w, "note", 1);
    w.close();
    let other = LedgerWriter::open(&path).unwrap();
    let err = cp.checkpoint_blocking(&other).unwrap_err();
    assert!(err.is_integrity(), "{err}");
}

/// `append_signed` records entries and the checkpoint covering them in one transaction.
#[test]
fn an_outcome_is_signed_in_the_transaction_that_records_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l.sqlite");
    let key = key();
    let w = LedgerWriter::open(&path).unwrap();
    let _cp = Checkpointer::open(key.clone(), ORIGIN, &w).unwrap();
    let (appended, cp) = w
        .append_signed_blocking(vec![
            NewEntry::new("attempt_outcome", &json!({"a": 1})).unwrap(),
        ])
        .unwrap();
    let cp = cp.expect("a signer is attached");
    assert_eq!(appended.len(), 1);
    assert_eq!(cp.seq, appended[0].seq + 1);
    assert_eq!(cp.checkpoint.head.tree_size, appended[0].seq);
    w.close();
    let r = verify_ledger_signatures(&path, key.public()).unwrap();
    assert!(r.ok, "{r:?}");
    assert_eq!(r.first_unsigned_evidence, None);
}
