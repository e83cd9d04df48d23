//! What a forger without the signing key can do to a ledger (drop the triggers, rewrite entries,
//! recompute the hash chain), and the scaffold's `[signing]` switch the custody tests turn on.

use eval_evidence::ledger::{Digest, entry_hash};
use std::path::Path;

/// Uncomments the scaffold's `[signing]` example with `public_key = key`.
pub fn name_signing_key(proj: &Path, key: &str) {
    let p = proj.join("protocols/demo/protocol.toml");
    let text = std::fs::read_to_string(&p).unwrap();
    let (before, after) = text.split_once("# [signing]\n").unwrap();
    let (example, rest) = after.split_once('\n').unwrap();
    assert!(example.starts_with("# public_key = "), "{example}");
    std::fs::write(
        &p,
        format!("{before}[signing]\npublic_key = \"{key}\"\n{rest}"),
    )
    .unwrap();
}

/// One stored entry's hashed fields.
pub struct Row {
    pub seq: u64,
    pub kind: String,
    pub payload: Vec<u8>,
}

pub fn rows(ledger: &Path) -> Vec<Row> {
    let c = rusqlite::Connection::open(ledger).unwrap();
    let mut st = c
        .prepare("SELECT seq, kind, payload FROM entries ORDER BY seq")
        .unwrap();
    st.query_map([], |r| {
        Ok(Row {
            seq: r.get::<_, i64>(0)? as u64,
            kind: r.get(1)?,
            payload: r.get(2)?,
        })
    })
    .unwrap()
    .map(Result::unwrap)
    .collect()
}

/// What a forger with write access does: drop the guard-rail triggers, replace every entry by
/// `rows` (renumbered from 1) and recompute the whole hash chain, so plain verification passes.
pub fn rewrite_and_rechain(ledger: &Path, rows: &[Row]) {
    let c = open_without_guards(ledger);
    c.execute("DELETE FROM entries", []).unwrap();
    let mut prev = Digest::ZERO;
    for (i, r) in rows.iter().enumerate() {
        let seq = i as u64 + 1;
        let hash = entry_hash(&prev, seq, &r.kind, &r.payload);
        c.execute(
            "INSERT INTO entries (seq, prev, kind, payload, hash, recorded_at) VALUES (?1, ?2, ?3, ?4, ?5, '2026-01-01T00:00:00.000000Z')",
            rusqlite::params![
                seq as i64,
                prev.0.to_vec(),
                r.kind,
                r.payload,
                hash.0.to_vec()
            ],
        )
        .unwrap();
        prev = hash;
    }
}

/// The ledger opened for writing with its append-only triggers dropped: what anyone with write
/// access to the file can do (no key needed).
pub fn open_without_guards(ledger: &Path) -> rusqlite::Connection {
    let c = rusqlite::Connection::open(ledger).unwrap();
    let triggers: Vec<String> = c
        .prepare("SELECT name FROM sqlite_master WHERE type = 'trigger'")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    for t in &triggers {
        c.execute_batch(&format!("DROP TRIGGER \"{t}\"")).unwrap();
    }
    c
}
