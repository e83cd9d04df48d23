//! Behaviour of the hash-chained ledger against real SQLite files.

use eval_evidence::ledger::{
    self, Digest, Head, LedgerReader, LedgerWriter, NewEntry, VerifyFailure, export_jsonl,
};
use rusqlite::Connection;
use serde_json::json;
use std::io::{BufRead, Write};
use std::path::Path;

fn note(i: u64) -> NewEntry {
    NewEntry::new("note", &json!({"i": i, "text": format!("entry {i}")})).unwrap()
}

fn fill(path: &Path, n: u64) -> LedgerWriter {
    let w = LedgerWriter::open(path).unwrap();
    for i in 1..=n {
        w.append_blocking(note(i)).unwrap();
    }
    w
}

/// Opens the file as a plain SQLite database and drops the guard triggers, as an attacker with
/// file access would.
fn raw_without_guards(path: &Path) -> Connection {
    let c = Connection::open(path).unwrap();
    c.execute_batch(
        "DROP TRIGGER entries_no_update; DROP TRIGGER entries_no_delete; DROP TRIGGER entries_chain;",
    )
    .unwrap();
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_producers_give_one_gap_free_chain() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l.sqlite");
    let w = LedgerWriter::open(&path).unwrap();
    let mut tasks = Vec::new();
    for p in 0..8u64 {
        let w = w.clone();
        tasks.push(tokio::spawn(async move {
            let mut seqs = Vec::new();
            for i in 0..1000u64 {
                let e = NewEntry::new("note", &json!({"producer": p, "i": i})).unwrap();
                seqs.push(w.append(e).await.unwrap().seq);
            }
            seqs
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        let seqs = t.await.unwrap();
        // Each producer sees its own entries in the order it sent them.
        assert!(seqs.windows(2).all(|w| w[0] < w[1]));
        all.extend(seqs);
    }
    all.sort_unstable();
    assert_eq!(all, (1..=8000).collect::<Vec<u64>>());
    assert_eq!(w.head().await.unwrap().seq, 8000);
    w.close();
    let report = ledger::verify(&path, None).unwrap();
    assert!(report.ok, "{:?}", report.error);
    assert_eq!(report.entries, 8000);
    // Every producer's every entry is there exactly once.
    let entries = LedgerReader::open(&path).unwrap().entries().unwrap();
    let mut seen = std::collections::HashSet::new();
    for e in &entries {
        let p = e.payload_json().unwrap();
        assert!(seen.insert((p["producer"].as_u64().unwrap(), p["i"].as_u64().unwrap())));
    }
    assert_eq!(seen.len(), 8000);
}

#[test]
fn batch_is_contiguous_and_atomic() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l.sqlite");
    let w = fill(&path, 3);
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let got = rt
        .block_on(w.append_batch((10..15).map(note).collect()))
        .unwrap();
    assert_eq!(
        got.iter().map(|a| a.seq).collect::<Vec<_>>(),
        vec![4, 5, 6, 7, 8]
    );
    w.close();
    assert!(ledger::verify(&path, None).unwrap().ok);
}

#[test]
fn stored_payload_bytes_are_the_hashed_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l.sqlite");
    let w = LedgerWriter::open(&path).unwrap();
    // Key order and a float that a naive re-serialisation could change.
    let a = w
        .append_blocking(
            NewEntry::new("note", &json!({"z": 0.1, "a": 1e300, "m": [3, 2]})).unwrap(),
        )
        .unwrap();
    w.close();
    let e = &LedgerReader::open(&path).unwrap().entries().unwrap()[0];
    assert_eq!(e.payload, br#"{"a":1e+300,"m":[3,2],"z":0.1}"#);
    assert_eq!(
        a.hash,
        ledger::entry_hash(
            &Digest::ZERO,
            1,
            "note",
            br#"{"a":1e+300,"m":[3,2],"z":0.1}"#
        )
    );
}

#[test]
fn sqlite_refuses_update_delete_and_insert_or_replace() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l.sqlite");
    fill(&path, 3).close();
    let c = Connection::open(&path).unwrap();
    let err = c
        .execute("UPDATE entries SET kind = 'x' WHERE seq = 2", [])
        .unwrap_err();
    assert!(err.to_string().contains("append-only"), "{err}");
    let err = c
        .execute("DELETE FROM entries WHERE seq = 3", [])
        .unwrap_err();
    assert!(err.to_string().contains("append-only"), "{err}");
    let (prev, hash): (Vec<u8>, Vec<u8>) = c
        .query_row("SELECT prev, hash FROM entries WHERE seq = 2", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap();
    let err = c
        .execute(
            "INSERT OR REPLACE INTO entries(seq, prev, kind, payload, hash, recorded_at) VALUES (2, ?1, 'note', X'7B7D', ?2, 'x')",
            (&prev, &hash),
        )
        .unwrap_err();
    assert!(err.to_string().contains("not the next entry"), "{err}");
    // A well-formed but unchained next row is refused too.
    let err = c
        .execute(
            "INSERT INTO entries(seq, prev, kind, payload, hash, recorded_at) VALUES (4, zeroblob(32), 'note', X'7B7D', zeroblob(32), 'x')",
            [],
        )
        .unwrap_err();
    assert!(err.to_string().contains("not the next entry"), "{err}");
    let err = c.execute("DELETE FROM meta", []).unwrap_err();
    assert!(err.to_string().contains("write-once"), "{err}");
    drop(c);
    let r = ledger::verify(&path, None).unwrap();
    assert!(r.ok);
    assert_eq!(r.entries, 3);
}

fn first_failure(path: &Path, expect: Option<Head>) -> VerifyFailure {
    let r = ledger::verify(path, expect).unwrap();
    assert!(!r.ok);
    r.error.unwrap()
}

#[test]
fn a_changed_payload_byte_is_caught_at_its_seq() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l.sqlite");
    fill(&path, 10).close();
    raw_without_guards(&path)
        .execute(
            "UPDATE entries SET payload = CAST(replace(CAST(payload AS TEXT), 'entry 6', 'entry 7') AS BLOB) WHERE seq = 6",
            [],
        )
        .unwrap();
    let f = first_failure(&path, None);
    assert!(
        matches!(f, VerifyFailure::HashMismatch { seq: 6, .. }),
        "{f:?}"
    );
}

#[test]
fn a_changed_byte_in_the_file_itself_is_caught() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l.sqlite");
    let w = fill(&path, 5);
    w.append_blocking(NewEntry::new("note", &json!({"text": "needle-XYZZY"})).unwrap())
        .unwrap();
    for i in 7..=9 {
        w.append_blocking(note(i)).unwrap();
    }
    w.close();
    // Checkpoint the WAL into the main file, then edit the file's bytes directly.
    Connection::open(&path)
        .unwrap()
        .execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")
        .unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    let at = bytes
        .windows(12)
        .position(|w| w == b"needle-XYZZY")
        .expect("payload is in the file");
    bytes[at] = b'N';
    std::fs::write(&path, bytes).unwrap();
    let f = first_failure(&path, None);
    assert!(
        matches!(f, VerifyFailure::HashMismatch { seq: 6, .. }),
        "{f:?}"
    );
}

#[test]
fn swapped_entries_are_caught_at_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l.sqlite");
    fill(&path, 10).close();
    let c = raw_without_guards(&path);
    c.execute_batch(
        "UPDATE entries SET seq = -1 WHERE seq = 4;
         UPDATE entries SET seq = 4 WHERE seq = 7;
         UPDATE entries SET seq = 7 WHERE seq = -1;",
    )
    .unwrap();
    let f = first_failure(&path, None);
    assert_eq!(f.seq(), 4, "{f:?}");
}

#[test]
fn a_deleted_middle_entry_is_a_gap() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l.sqlite");
    fill(&path, 10).close();
    raw_without_guards(&path)
        .execute("DELETE FROM entries WHERE seq = 5", [])
        .unwrap();
    let f = first_failure(&path, None);
    assert_eq!(
        f,
        VerifyFailure::Gap {
            seq: 5,
            expected_seq: 5
        }
    );
}

#[test]
fn a_cut_tail_is_caught_with_the_expected_head() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l.sqlite");
    fill(&path, 10).close();
    let head = ledger::verify(&path, None).unwrap().head;
    assert_eq!(head.seq, 10);
    raw_without_guards(&path)
        .execute("DELETE FROM entries WHERE seq > 7", [])
        .unwrap();
    // Without the expected head a cut chain still verifies: that is why heads are recorded.
    assert!(ledger::verify(&path, None).unwrap().ok);
    let f = first_failure(&path, Some(head));
    assert_eq!(
        f,
        VerifyFailure::Truncated {
            seq: 10,
            last_seq: 7
        }
    );
    // A head that names an existing seq with another hash is a head mismatch.
    let wrong = Head {
        seq: 3,
        hash: Digest::of(b"other"),
    };
    assert!(matches!(
        first_failure(&path, Some(wrong)),
        VerifyFailure::HeadMismatch { seq: 3, .. }
    ));
}

#[test]
fn export_round_trips_and_an_edited_line_is_caught() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l.sqlite");
    fill(&path, 8).close();
    let out = dir.path().join("l.jsonl");
    assert_eq!(export_jsonl(&path, &out).unwrap(), 8);
    let sqlite_report = ledger::verify(&path, None).unwrap();
    let jsonl_report = ledger::verify(&out, None).unwrap();
    assert!(jsonl_report.ok);
    assert_eq!(jsonl_report.head, sqlite_report.head);
    // The exported entries are the stored ones, byte for byte.
    let stored = LedgerReader::open(&path).unwrap().entries().unwrap();
    let exported = ledger::read_jsonl(&out).unwrap();
    assert_eq!(stored, exported);

    let text = std::fs::read_to_string(&out).unwrap();
    let edited = text.replacen("entry 3", "entry 9", 1);
    assert_ne!(text, edited);
    std::fs::write(&out, edited).unwrap();
    let f = first_failure(&out, None);
    assert!(
        matches!(f, VerifyFailure::HashMismatch { seq: 3, .. }),
        "{f:?}"
    );
}

#[test]
fn bad_input_is_a_clear_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty");
    std::fs::write(&empty, b"").unwrap();
    let e = ledger::verify(&empty, None).unwrap_err();
    assert!(e.to_string().contains("empty"), "{e}");
    assert!(!e.is_integrity());

    let text = dir.path().join("notes.txt");
    std::fs::write(&text, b"hello, world\n").unwrap();
    let e = ledger::verify(&text, None).unwrap_err();
    assert!(e.to_string().contains("not a ledger"), "{e}");

    let jsonl = dir.path().join("bad.jsonl");
    std::fs::write(&jsonl, b"{\"v\":1}\n").unwrap();
    let e = ledger::verify(&jsonl, None).unwrap_err();
    assert!(e.to_string().contains("line 1"), "{e}");
    assert!(e.is_integrity());

    std::fs::write(&jsonl, b"{not json at all\n").unwrap();
    let e = ledger::verify(&jsonl, None).unwrap_err();
    assert!(e.to_string().contains("line 1"), "{e}");

    let other_db = dir.path().join("other.sqlite");
    Connection::open(&other_db)
        .unwrap()
        .execute_batch("CREATE TABLE t(x);")
        .unwrap();
    let e = ledger::verify(&other_db, None).unwrap_err();
    assert!(e.to_string().contains("not a ledger"), "{e}");
    // Opening it for writing must not turn somebody else's database into a ledger.
    assert!(LedgerWriter::open(&other_db).is_err());
}

#[test]
fn a_newer_format_version_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l.sqlite");
    fill(&path, 1).close();
    let c = Connection::open(&path).unwrap();
    c.execute_batch(
        "DROP TRIGGER meta_no_update; UPDATE meta SET value = '99' WHERE key = 'version';",
    )
    .unwrap();
    drop(c);
    let e = ledger::verify(&path, None).unwrap_err();
    assert!(e.to_string().contains("version 99 is newer"), "{e}");

    let jsonl = dir.path().join("l.jsonl");
    let line = format!(
        "{{\"hash\":\"{z}\",\"kind\":\"note\",\"payload\":{{}},\"prev\":\"{z}\",\"recorded_at\":\"t\",\"seq\":1,\"v\":2}}\n",
        z = Digest::ZERO
    );
    std::fs::write(&jsonl, line).unwrap();
    let e = ledger::verify(&jsonl, None).unwrap_err();
    assert!(e.to_string().contains("version 2 is newer"), "{e}");
}

/// A file changed under its writer (another process bypassing the lock) makes the chain trigger
/// refuse the writer's next append: a typed integrity error naming the ledger, not a gone writer.
#[test]
fn a_trigger_refusal_is_a_typed_integrity_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l.sqlite");
    let w = fill(&path, 1);
    let c = Connection::open(&path).unwrap();
    let head: Vec<u8> = c
        .query_row("SELECT hash FROM entries WHERE seq = 1", [], |r| r.get(0))
        .unwrap();
    c.execute(
        "INSERT INTO entries(seq, prev, kind, payload, hash, recorded_at) VALUES (2, ?1, 'note', X'7B7D', ?2, 'now')",
        (&head, vec![7u8; 32]),
    )
    .unwrap();
    let err = w.append_blocking(note(2)).unwrap_err();
    assert!(
        matches!(&err, ledger::LedgerError::AppendRefused { path: p, reason }
            if p == &path && reason.contains("not the next entry of the chain")),
        "{err:?}"
    );
    assert!(err.is_integrity(), "{err}");
}

#[test]
fn a_second_writer_is_refused_while_the_first_holds_the_ledger() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l.sqlite");
    let first = fill(&path, 1);
    let second = LedgerWriter::open(&path);
    assert!(second.is_err());
    first.close();
    let again = LedgerWriter::open(&path).unwrap();
    assert_eq!(again.append_blocking(note(2)).unwrap().seq, 2);
}

#[test]
fn jsonl_chain_append_extends_and_refuses_a_broken_chain() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("registry.jsonl");
    let a = ledger::append_jsonl(&path, vec![note(1), note(2)]).unwrap();
    let b = ledger::append_jsonl(&path, vec![note(3)]).unwrap();
    assert_eq!(a[1].seq + 1, b[0].seq);
    let r = ledger::verify(&path, None).unwrap();
    assert!(r.ok);
    assert_eq!(r.head.hash, b[0].hash);
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replacen("entry 2", "entry 5", 1)).unwrap();
    let e = ledger::append_jsonl(&path, vec![note(4)]).unwrap_err();
    assert!(e.to_string().contains("does not verify"), "{e}");
    // Nothing was appended to the broken chain.
    assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 3);
}

/// The child half of the SIGKILL test: appends one entry at a time and prints each
/// acknowledgement. Runs only when re-executed by the parent test.
#[test]
fn sigkill_child_appender() {
    let Ok(path) = std::env::var("EVAL_LEDGER_CHILD_PATH") else {
        return;
    };
    let w = LedgerWriter::open(Path::new(&path)).unwrap();
    let mut out = std::io::stdout().lock();
    for i in 1.. {
        let a = w.append_blocking(note(i)).unwrap();
        writeln!(out, "ACK {} {}", a.seq, a.hash).unwrap();
        out.flush().unwrap();
    }
}

#[test]
fn sigkill_mid_stream_leaves_a_verifying_ledger_ending_at_the_last_ack() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l.sqlite");
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "ledger::sigkill_child_appender",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("EVAL_LEDGER_CHILD_PATH", &path)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut last: Option<(u64, String)> = None;
    let mut killed = false;
    // Read to EOF, also after the kill: the child may have written acknowledgements into the
    // pipe that the parent had not read yet when it killed; the reference is everything the
    // child acknowledged before it died, not the line at which the parent reacted.
    loop {
        let mut line = Vec::new();
        if stdout.read_until(b'\n', &mut line).unwrap() == 0 {
            break;
        }
        // A line cut by the kill has no newline: it was never a complete acknowledgement.
        let Some(line) = line.strip_suffix(b"\n") else {
            break;
        };
        let line = String::from_utf8(line.to_vec()).unwrap();
        if let Some(rest) = line.strip_prefix("ACK ") {
            let (seq, hash) = rest.split_once(' ').unwrap();
            last = Some((seq.parse().unwrap(), hash.to_owned()));
            if !killed && last.as_ref().unwrap().0 >= 300 {
                // SIGKILL: no destructor, no flush, no commit of anything in flight.
                child.kill().unwrap();
                killed = true;
            }
        }
    }
    assert!(killed, "the child ended before it acknowledged 300 entries");
    child.wait().unwrap();
    let (acked_seq, acked_hash) = last.expect("the child acknowledged entries");
    let r = ledger::verify(&path, None).unwrap();
    assert!(r.ok, "{:?}", r.error);
    // Every acknowledged entry survived; at most the one in flight beyond the child's last
    // acknowledgement (committed, not yet printed) was also committed.
    assert!(
        r.head.seq == acked_seq || r.head.seq == acked_seq + 1,
        "head {} vs last ack {acked_seq}",
        r.head.seq
    );
    let entries = LedgerReader::open(&path).unwrap().entries().unwrap();
    assert_eq!(entries[acked_seq as usize - 1].hash.to_string(), acked_hash);
    // And the ledger can be reopened and extended from where it stopped.
    let w = LedgerWriter::open(&path).unwrap();
    assert_eq!(w.append_blocking(note(0)).unwrap().seq, r.head.seq + 1);
}

/// The Python verifier printed in docs/custody.md really verifies an export, and really fails on
/// an edited one: the documented layout is the implemented one.
#[test]
fn the_documented_python_verifier_agrees() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/custody.md"))
        .unwrap();
    let start = doc
        .find("```python\nimport hashlib")
        .expect("script in docs/custody.md")
        + 10;
    let script = &doc[start..start + doc[start..].find("```").unwrap()];
    let dir = tempfile::tempdir().unwrap();
    let py = dir.path().join("verify.py");
    std::fs::write(&py, script).unwrap();
    let path = dir.path().join("l.sqlite");
    let w = fill(&path, 20);
    // A payload that itself contains the bytes the script splits on.
    w.append_blocking(
        NewEntry::new(
            "note",
            &json!({"a": {"prev": 1, "z": ",\"prev\":"}, "w": 0.5}),
        )
        .unwrap(),
    )
    .unwrap();
    w.close();
    let out = dir.path().join("l.jsonl");
    export_jsonl(&path, &out).unwrap();
    let head = ledger::verify(&path, None).unwrap().head;
    let run = |file: &Path| {
        std::process::Command::new("python3")
            .arg(&py)
            .arg(file)
            .output()
            .unwrap()
    };
    let o = run(&out);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        format!("ok 21 {}", head.hash)
    );
    let text = std::fs::read_to_string(&out).unwrap();
    std::fs::write(&out, text.replacen("entry 4", "entry 8", 1)).unwrap();
    let o = run(&out);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("hash mismatch at 4"));

    // A second "payload" after "prev": the first is what is hashed, json.loads would return
    // the second. Both the documented script and `eval ledger verify` must refuse the line.
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let line = &lines[4];
    let at = line.find(",\"recorded_at\":").unwrap();
    lines[4] = format!(
        "{},\"payload\":{{\"text\":\"forged\"}}{}",
        &line[..at],
        &line[at..]
    );
    let forged = dir.path().join("dup.jsonl");
    std::fs::write(&forged, lines.join("\n") + "\n").unwrap();
    let o = run(&forged);
    assert!(
        !o.status.success(),
        "the documented verifier accepted a duplicate key"
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("duplicate key at 5"), "{err}");
    let r = ledger::verify(&forged, None);
    assert!(
        r.as_ref().map_or(true, |r| !r.ok),
        "eval ledger verify accepted a duplicate key: {r:?}"
    );
}
