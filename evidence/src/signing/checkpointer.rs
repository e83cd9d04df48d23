//! Signing checkpoints as a run goes: the controller calls [`Checkpointer::checkpoint`] (or
//! appends through [`LedgerWriter::append_signed`], which signs in the same transaction) at the end
//! of every attempt and at the end of the run.
//!
//! A checkpoint signs the tree of every entry committed *before* it; the `checkpoint` entry that
//! records it is then the next leaf, covered by the following checkpoint. The tree and the key
//! live in the ledger's single writer (`signer.rs`): the writer hashes each entry into the tree as
//! it inserts it and signs inside its own transaction, so what is signed is exactly what the
//! writer committed — never a file re-read by path, which an operator without the key could have
//! renamed over the ledger. A checkpoint costs O(log n) hashes and one Ed25519 signature.

use super::checkpoint::check_origin;
use super::scan::RecordedCheckpoint;
use super::{SigningError, SigningKeyPair};
use crate::ledger::LedgerWriter;
use std::sync::Arc;

/// A handle on the signer attached to one [`LedgerWriter`]. Checkpoints are signed one at a time,
/// in ledger order, by the writer thread; the handle only remembers which writer it signs for.
pub struct Checkpointer {
    origin: String,
    /// The writer's identity token: a handle compares equal only with the writer it attached to.
    writer: std::sync::Weak<()>,
    last: Option<RecordedCheckpoint>,
}

impl std::fmt::Debug for Checkpointer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checkpointer")
            .field("origin", &self.origin)
            .field("last", &self.last.as_ref().map(|c| c.seq))
            .finish()
    }
}

impl Checkpointer {
    /// Attaches a signer for `key` and `origin` (see [`super::origin_for_identity`]) to `writer`.
    /// The writer reads its own file once: its chain must verify, every checkpoint already in it
    /// must verify with `key` and carry the same origin (a resumed run continues the log it
    /// started; another key is refused), and every evidence entry must be covered by the last
    /// checkpoint — an entry no checkpoint covers was not committed by a signing controller, so it
    /// is refused ([`SigningError::Unverified`]), never signed.
    pub fn open(
        key: Arc<SigningKeyPair>,
        origin: &str,
        writer: &LedgerWriter,
    ) -> Result<Checkpointer, SigningError> {
        check_origin(origin)?;
        let last = writer.attach_signer(key, origin)?;
        Ok(Checkpointer {
            origin: origin.to_owned(),
            writer: Arc::downgrade(&writer.signer_token()),
            last,
        })
    }

    /// The last checkpoint signed or found in the ledger.
    pub fn last(&self) -> Option<&RecordedCheckpoint> {
        self.last.as_ref()
    }

    fn check_writer(&self, writer: &LedgerWriter) -> Result<(), SigningError> {
        let ours = self.writer.upgrade();
        if ours.is_none_or(|t| !Arc::ptr_eq(&t, &writer.signer_token())) {
            return Err(SigningError::Integrity(format!(
                "this checkpointer signs for another writer than the one of {}",
                writer.path().display()
            )));
        }
        Ok(())
    }

    fn recorded(
        &mut self,
        cp: Option<RecordedCheckpoint>,
        writer: &LedgerWriter,
    ) -> Result<RecordedCheckpoint, SigningError> {
        let cp = cp.ok_or_else(|| {
            SigningError::Integrity(format!(
                "the writer of {} has no signer attached",
                writer.path().display()
            ))
        })?;
        self.last = Some(cp.clone());
        Ok(cp)
    }

    /// Signs a checkpoint of every entry committed so far and appends it as a `checkpoint` entry.
    pub async fn checkpoint(
        &mut self,
        writer: &LedgerWriter,
    ) -> Result<RecordedCheckpoint, SigningError> {
        self.check_writer(writer)?;
        let (_, cp) = writer.append_signed(Vec::new()).await?;
        self.recorded(cp, writer)
    }

    /// [`Self::checkpoint`] for callers outside an async runtime.
    pub fn checkpoint_blocking(
        &mut self,
        writer: &LedgerWriter,
    ) -> Result<RecordedCheckpoint, SigningError> {
        self.check_writer(writer)?;
        let (_, cp) = writer.append_signed_blocking(Vec::new())?;
        self.recorded(cp, writer)
    }
}
