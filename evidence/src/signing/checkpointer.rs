//! Signing checkpoints as a run goes: the controller calls [`Checkpointer::checkpoint`] at the end
//! of every attempt and at the end of the run.
//!
//! A checkpoint signs the tree of every entry committed *before* it; the `checkpoint` entry that
//! records it is then the next leaf, covered by the following checkpoint. The tree is kept in
//! memory and extended with only the entries committed since the last call (each one's chain link
//! and hash re-verified as it is read), so a checkpoint costs O(new entries + log n) hashes and
//! one Ed25519 signature, whatever the ledger's length.

use super::checkpoint::{CHECKPOINT_KIND, SignedCheckpoint, TreeHead, check_origin};
use super::merkle::verify_consistency;
use super::scan::{LedgerScan, RecordedCheckpoint};
use super::{SigningError, SigningKeyPair};
use crate::ledger::{Digest, Entry, LedgerError, LedgerReader, LedgerWriter, NewEntry};
use rusqlite::{Connection, OpenFlags, OptionalExtension};
use std::path::PathBuf;
use std::sync::Arc;

/// Signs checkpoints of one ledger. Not `Sync`-shared: wrap it in a mutex when several attempts
/// finish concurrently (checkpoints are signed one at a time, in ledger order).
pub struct Checkpointer {
    key: Arc<SigningKeyPair>,
    origin: String,
    scan: LedgerScan,
    path: PathBuf,
    /// A read-only connection and the file identity (device, inode) it was opened on; reopened
    /// whenever the path holds another file, so a replaced ledger is what gets checked.
    reader: Option<(Connection, (u64, u64))>,
}

impl std::fmt::Debug for Checkpointer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checkpointer")
            .field("origin", &self.origin)
            .field("path", &self.path)
            .field("tree_size", &self.scan.tree.len())
            .finish()
    }
}

impl Checkpointer {
    /// Prepares to sign checkpoints of the ledger `writer` appends to, under `origin` (see
    /// [`super::origin_for_identity`]). Reads the ledger once: its chain must verify, and every
    /// checkpoint already in it must verify with `key` and carry the same origin — a resumed
    /// run continues the log it started, and a ledger signed by another key is refused.
    pub fn open(
        key: Arc<SigningKeyPair>,
        origin: &str,
        writer: &LedgerWriter,
    ) -> Result<Checkpointer, SigningError> {
        check_origin(origin)?;
        let path = writer.path().to_path_buf();
        let reader = LedgerReader::open(&path)?;
        let mut scan = LedgerScan::new(Some(key.public().clone()), None);
        reader.for_each(|e| scan.push(&e))?;
        drop(reader);
        let scan = scan.into_result()?;
        if let Some(last) = &scan.last_checkpoint
            && last.checkpoint.head.origin != origin
        {
            return Err(SigningError::Inconsistent(format!(
                "the ledger's checkpoints are for origin {:?}, not {origin:?}",
                last.checkpoint.head.origin
            )));
        }
        Ok(Checkpointer {
            key,
            origin: origin.to_owned(),
            scan,
            path,
            reader: None,
        })
    }

    /// The last checkpoint signed or found in the ledger.
    pub fn last(&self) -> Option<&RecordedCheckpoint> {
        self.scan.last_checkpoint.as_ref()
    }

    /// Signs a checkpoint of every entry committed so far and appends it as a `checkpoint` entry.
    pub async fn checkpoint(
        &mut self,
        writer: &LedgerWriter,
    ) -> Result<RecordedCheckpoint, SigningError> {
        let (signed, entry) = self.prepare(writer)?;
        let appended = writer.append(entry).await?;
        Ok(self.record(appended.seq, signed))
    }

    /// [`Self::checkpoint`] for callers outside an async runtime.
    pub fn checkpoint_blocking(
        &mut self,
        writer: &LedgerWriter,
    ) -> Result<RecordedCheckpoint, SigningError> {
        let (signed, entry) = self.prepare(writer)?;
        let appended = writer.append_blocking(entry)?;
        Ok(self.record(appended.seq, signed))
    }

    fn prepare(
        &mut self,
        writer: &LedgerWriter,
    ) -> Result<(SignedCheckpoint, NewEntry), SigningError> {
        if writer.path() != self.path {
            return Err(SigningError::Inconsistent(format!(
                "this checkpointer signs {}, not {}",
                self.path.display(),
                writer.path().display()
            )));
        }
        self.catch_up()?;
        let tree_size = self.scan.tree.len();
        let root = self
            .scan
            .tree
            .root(tree_size)
            .ok_or_else(|| SigningError::Integrity("the tree lost its root".into()))?;
        let head = TreeHead {
            origin: self.origin.clone(),
            tree_size,
            root,
        };
        if let Some(prev) = &self.scan.last_checkpoint {
            let p = &prev.checkpoint.head;
            ensure_extends(p, &head, &self.scan.tree)?;
        }
        let signed = SignedCheckpoint::sign(head, &self.key)?;
        let entry =
            NewEntry::new(CHECKPOINT_KIND, &signed.entry_payload()).map_err(LedgerError::from)?;
        Ok((signed, entry))
    }

    /// The entry is read back, re-checked and added as a leaf by the next call, not here: the
    /// tree only ever holds entries read from the committed ledger.
    fn record(&mut self, seq: u64, checkpoint: SignedCheckpoint) -> RecordedCheckpoint {
        RecordedCheckpoint { seq, checkpoint }
    }

    /// Reads every entry committed after the tree's last leaf, verifying that the ledger still
    /// begins with the entries already in the tree.
    fn catch_up(&mut self) -> Result<(), SigningError> {
        let known = self.scan.head();
        let sql_err =
            |e: rusqlite::Error| SigningError::Integrity(format!("reading the ledger: {e}"));
        let identity = file_identity(&self.path)?;
        if self.reader.as_ref().map(|r| r.1) != Some(identity) {
            let conn = Connection::open_with_flags(
                &self.path,
                OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )
            .map_err(sql_err)?;
            self.reader = Some((conn, identity));
        }
        let Some((conn, _)) = &self.reader else {
            return Err(SigningError::Integrity("no ledger connection".into()));
        };
        let max: i64 = conn
            .query_row("SELECT COALESCE(MAX(seq), 0) FROM entries", [], |r| {
                r.get(0)
            })
            .map_err(sql_err)?;
        if u64::try_from(max).unwrap_or(0) < known.seq {
            return Err(SigningError::Rewind(format!(
                "{} now ends at seq {max}, but entries up to seq {} were already read{}",
                self.path.display(),
                known.seq,
                self.scan
                    .last_checkpoint
                    .as_ref()
                    .map(|c| format!(
                        " and checkpoint seq {} signed tree size {}",
                        c.seq, c.checkpoint.head.tree_size
                    ))
                    .unwrap_or_default()
            )));
        }
        if known.seq > 0 {
            let stored: Option<Vec<u8>> = conn
                .query_row(
                    "SELECT hash FROM entries WHERE seq = ?1",
                    [known.seq as i64],
                    |r| r.get(0),
                )
                .optional()
                .map_err(sql_err)?;
            if stored.as_deref() != Some(&known.hash.0[..]) {
                return Err(SigningError::Inconsistent(format!(
                    "entry {} of {} is no longer the entry already signed over",
                    known.seq,
                    self.path.display()
                )));
            }
        }
        let mut stmt = conn
            .prepare_cached(
                "SELECT seq, prev, kind, payload, hash, recorded_at FROM entries WHERE seq > ?1 ORDER BY seq",
            )
            .map_err(sql_err)?;
        let mut rows = stmt.query([known.seq as i64]).map_err(sql_err)?;
        while let Some(row) = rows.next().map_err(sql_err)? {
            let entry = row_to_entry(row)
                .ok_or_else(|| SigningError::Integrity("a ledger row is malformed".into()))?;
            if self.scan.push(&entry).is_break() {
                break;
            }
        }
        drop(rows);
        drop(stmt);
        if let Some(f) = &self.scan.failure {
            return Err(match f.reason {
                "rewind" => SigningError::Rewind(f.message.clone()),
                "chain" => SigningError::Inconsistent(f.message.clone()),
                _ => SigningError::Integrity(f.message.clone()),
            });
        }
        Ok(())
    }
}

/// Refuses a tree head that does not extend `prev` (smaller, another origin, or a root that no
/// consistency proof connects).
fn ensure_extends(
    prev: &TreeHead,
    next: &TreeHead,
    tree: &super::MerkleTree,
) -> Result<(), SigningError> {
    if next.tree_size < prev.tree_size {
        return Err(SigningError::Rewind(format!(
            "tree size {} is smaller than the last checkpoint's {}",
            next.tree_size, prev.tree_size
        )));
    }
    if next.origin != prev.origin {
        return Err(SigningError::Inconsistent(format!(
            "origin {:?} is not the last checkpoint's {:?}",
            next.origin, prev.origin
        )));
    }
    let proof = tree
        .consistency_proof(prev.tree_size, next.tree_size)
        .ok_or_else(|| SigningError::Inconsistent("no consistency proof can be made".into()))?;
    verify_consistency(
        prev.tree_size,
        next.tree_size,
        &prev.root,
        &next.root,
        &proof,
    )
    .map_err(SigningError::Inconsistent)
}

fn file_identity(path: &std::path::Path) -> Result<(u64, u64), SigningError> {
    let meta = std::fs::metadata(path).map_err(SigningError::io(path))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt as _;
        Ok((meta.dev(), meta.ino()))
    }
    #[cfg(not(unix))]
    {
        Ok((0, meta.len()))
    }
}

fn row_to_entry(row: &rusqlite::Row<'_>) -> Option<Entry> {
    let seq: i64 = row.get(0).ok()?;
    let prev: Vec<u8> = row.get(1).ok()?;
    let kind: String = row.get(2).ok()?;
    let payload: Vec<u8> = row.get(3).ok()?;
    let hash: Vec<u8> = row.get(4).ok()?;
    let recorded_at: String = row.get(5).ok()?;
    Some(Entry {
        seq: u64::try_from(seq).ok()?,
        prev: Digest::from_slice(&prev)?,
        kind,
        payload,
        hash: Digest::from_slice(&hash)?,
        recorded_at,
    })
}
