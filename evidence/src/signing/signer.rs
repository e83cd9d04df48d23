//! The signing state the ledger's single writer holds once a [`super::Checkpointer`] is attached:
//! the Merkle tree of exactly the entries the writer's own connection holds, fed with each entry
//! as the writer inserts it, and the last checkpoint. Nothing here reads the ledger by path, so a
//! file renamed over the ledger's path can never be what gets signed.

use super::checkpoint::{SignedCheckpoint, TreeHead, check_origin};
use super::merkle::{MerkleTree, leaf_hash_of};
use super::scan::{ANNOTATION_KINDS, LedgerScan, RecordedCheckpoint};
use super::{SigningError, SigningKeyPair};
use crate::ledger::{Digest, Head, LedgerError, NewEntry, scan_conn};
use rusqlite::Connection;
use std::path::Path;
use std::sync::Arc;

pub(crate) struct Signer {
    key: Arc<SigningKeyPair>,
    origin: String,
    tree: MerkleTree,
    last: Option<RecordedCheckpoint>,
}

/// What a transaction's signing changed, so that a failed commit can undo it.
pub(crate) struct Undo {
    tree_len: u64,
    last: Option<RecordedCheckpoint>,
}

impl Signer {
    /// Reads every entry of the writer's connection once: the chain must verify, every
    /// checkpoint must verify with `key` and carry `origin`, and every evidence entry must be
    /// covered by the last checkpoint. An evidence entry no checkpoint covers was not committed
    /// by a signing controller (a signing controller signs each transaction as it commits it), so
    /// it is refused, never signed: signing it now would vouch for bytes this process never
    /// wrote. Annotations (`note`, a `report` made without the key) may follow.
    pub(crate) fn attach(
        conn: &Connection,
        path: &Path,
        writer_head: Head,
        key: Arc<SigningKeyPair>,
        origin: &str,
    ) -> Result<Signer, SigningError> {
        check_origin(origin)?;
        let mut scan = LedgerScan::new(Some(key.public().clone()), None);
        let mut uncovered: Vec<(u64, String)> = Vec::new();
        scan_conn(conn, path, "", &[], &mut |e| {
            if !ANNOTATION_KINDS.contains(&e.kind.as_str()) {
                uncovered.push((e.seq, e.kind.clone()));
            }
            scan.push(&e)
        })?;
        let scan = scan.into_result()?;
        if scan.head() != writer_head {
            return Err(SigningError::Integrity(format!(
                "{}: the writer's head {writer_head} is not the head its entries give ({})",
                path.display(),
                scan.head()
            )));
        }
        if let Some(last) = &scan.last_checkpoint
            && last.checkpoint.head.origin != origin
        {
            return Err(SigningError::Inconsistent(format!(
                "the ledger's checkpoints are for origin {:?}, not {origin:?}",
                last.checkpoint.head.origin
            )));
        }
        let covered = scan
            .last_checkpoint
            .as_ref()
            .map_or(0, |c| c.checkpoint.head.tree_size);
        uncovered.retain(|(seq, _)| *seq > covered);
        if let (Some((first, kind)), Some((end, _))) = (uncovered.first(), uncovered.last()) {
            return Err(SigningError::Unverified(format!(
                "{}: seq {first} (a {kind}){} {} covered by no signed checkpoint (the last covers 1..{covered}); a signing controller signs every entry in the transaction that records it, so these were appended without the key (by another process, or by a session that did not sign) — refusing to sign them",
                path.display(),
                if end > first {
                    format!(" through seq {end} ({} evidence entries)", uncovered.len())
                } else {
                    String::new()
                },
                if end > first { "are" } else { "is" },
            )));
        }
        Ok(Signer {
            key,
            origin: origin.to_owned(),
            tree: scan.tree,
            last: scan.last_checkpoint,
        })
    }

    pub(crate) fn last(&self) -> Option<&RecordedCheckpoint> {
        self.last.as_ref()
    }

    pub(crate) fn undo_point(&self) -> Undo {
        Undo {
            tree_len: self.tree.len(),
            last: self.last.clone(),
        }
    }

    pub(crate) fn undo(&mut self, u: Undo) {
        self.tree.truncate(u.tree_len);
        self.last = u.last;
    }

    /// Adds the entry the writer is inserting at `seq` after `prev` as the next leaf. The writer
    /// calls this for every entry it inserts, so the tree is always its own committed entries.
    pub(crate) fn push(&mut self, prev: &Digest, seq: u64, kind: &str, payload: &[u8]) {
        self.tree.push(leaf_hash_of(prev, seq, kind, payload));
    }

    /// A signed checkpoint of every leaf so far, as the entry to insert next.
    pub(crate) fn sign(&mut self) -> Result<(SignedCheckpoint, NewEntry), SigningError> {
        let tree_size = self.tree.len();
        if let Some(prev) = &self.last
            && prev.checkpoint.head.tree_size > tree_size
        {
            return Err(SigningError::Rewind(format!(
                "tree size {tree_size} is smaller than the last checkpoint's {}",
                prev.checkpoint.head.tree_size
            )));
        }
        let root = self
            .tree
            .root(tree_size)
            .ok_or_else(|| SigningError::Integrity("the tree lost its root".into()))?;
        let head = TreeHead {
            origin: self.origin.clone(),
            tree_size,
            root,
        };
        let signed = SignedCheckpoint::sign(head, &self.key)?;
        let entry = NewEntry::new(super::CHECKPOINT_KIND, &signed.entry_payload())
            .map_err(LedgerError::from)?;
        Ok((signed, entry))
    }

    pub(crate) fn signed(&mut self, seq: u64, checkpoint: SignedCheckpoint) -> RecordedCheckpoint {
        let r = RecordedCheckpoint { seq, checkpoint };
        self.last = Some(r.clone());
        r
    }
}
