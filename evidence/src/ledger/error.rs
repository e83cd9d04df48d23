use std::path::PathBuf;

/// Everything that can go wrong opening, reading or appending to a ledger. Verification failures
/// are not errors: they are data in a [`super::VerifyReport`].
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// The file is not a ledger (empty, neither SQLite nor JSONL, or the wrong kind for the
    /// operation): the user named the wrong file (exit 2).
    #[error("{path}: not a ledger: {reason}")]
    NotALedger {
        /// The file opened.
        path: PathBuf,
        /// What is missing or different.
        reason: String,
    },
    /// The ledger was written by a newer eval; reading it could misread the evidence.
    #[error(
        "{path}: ledger format version {found} is newer than this eval understands (up to {known}); upgrade eval"
    )]
    NewerFormat {
        /// The ledger file.
        path: PathBuf,
        /// The format version the file declares.
        found: u64,
        /// The newest version this code reads.
        known: u64,
    },
    /// A line of a JSONL export that is not an entry: the export is damaged (exit 3).
    #[error("{path}: line {line}: {reason}")]
    MalformedLine {
        /// The export file.
        path: PathBuf,
        /// 1-based line number.
        line: u64,
        /// What is wrong with the line.
        reason: String,
    },
    /// SQLite failed reading or opening the ledger (a damaged or locked file): exit 3.
    #[error("{path}: {source}")]
    Sqlite {
        /// The ledger file.
        path: PathBuf,
        /// SQLite's error.
        #[source]
        source: rusqlite::Error,
    },
    /// A file could not be read or written (exit 2).
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// The caller asked to append an entry whose kind breaks the naming rule (a bug, not input).
    #[error("invalid entry kind {0:?}: kinds are 1-64 characters of a-z, 0-9, '_' and '.'")]
    InvalidKind(String),
    /// A payload the caller gave that does not serialise to JSON.
    #[error("payload is not JSON: {0}")]
    Payload(#[from] serde_json::Error),
    /// A trigger of the append-only schema refused an append (an insert that is not the next
    /// link of the chain as the file has it): the file changed under its single writer.
    #[error("{path}: the ledger refused the append: {reason}")]
    AppendRefused {
        /// The ledger file.
        path: PathBuf,
        /// The trigger's message.
        reason: String,
    },
    /// SQLite could not commit an append (disk full, an I/O error, a damaged file); nothing of
    /// the batch was written. Shared because one failed transaction answers every producer in it.
    #[error("{path}: append failed: {source}")]
    AppendFailed {
        /// The ledger file.
        path: PathBuf,
        /// SQLite's error, shared by every append of the failed batch.
        #[source]
        source: std::sync::Arc<rusqlite::Error>,
    },
    /// The ledger's path no longer names the file its writer holds (renamed over, removed): the
    /// writer refuses this and every later append, so nothing lands in, or is signed for, a file
    /// that is not the ledger (exit 3).
    #[error("{path}: {reason}")]
    Replaced {
        /// The ledger file.
        path: PathBuf,
        /// Which file the writer holds and what the path names now.
        reason: String,
    },
    /// The checkpoint of a signed append could not be made; nothing of the batch was committed.
    #[error("{path}: signing the checkpoint of an append failed: {reason}")]
    CheckpointFailed {
        /// The ledger file.
        path: PathBuf,
        /// The signing error.
        reason: String,
    },
    /// The writer thread is gone (it ended or panicked); only a dead thread gives this.
    #[error("the ledger writer has stopped: {0}")]
    WriterGone(String),
}

impl From<eval_core::chain::ChainError> for LedgerError {
    fn from(e: eval_core::chain::ChainError) -> Self {
        match e {
            eval_core::chain::ChainError::InvalidKind(kind) => LedgerError::InvalidKind(kind),
            eval_core::chain::ChainError::Payload(e) => LedgerError::Payload(e),
        }
    }
}

impl LedgerError {
    pub(crate) fn sqlite(path: &std::path::Path) -> impl FnOnce(rusqlite::Error) -> LedgerError {
        let path = path.to_path_buf();
        move |source| LedgerError::Sqlite { path, source }
    }

    pub(crate) fn io(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> LedgerError {
        let path = path.to_path_buf();
        move |source| LedgerError::Io { path, source }
    }

    /// True when the error means the evidence itself is damaged or untrustworthy (exit 3), as
    /// opposed to the user naming the wrong file or a bad value (exit 2).
    pub fn is_integrity(&self) -> bool {
        matches!(
            self,
            LedgerError::MalformedLine { .. }
                | LedgerError::Sqlite { .. }
                | LedgerError::AppendRefused { .. }
                | LedgerError::AppendFailed { .. }
                | LedgerError::Replaced { .. }
                | LedgerError::CheckpointFailed { .. }
        )
    }
}
