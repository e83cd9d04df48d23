use std::path::PathBuf;

/// Everything that can go wrong opening, reading or appending to a ledger. Verification failures
/// are not errors: they are data in a [`super::VerifyReport`].
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error("{path}: not a ledger: {reason}")]
    NotALedger { path: PathBuf, reason: String },
    #[error(
        "{path}: ledger format version {found} is newer than this eval understands (up to {known}); upgrade eval"
    )]
    NewerFormat {
        path: PathBuf,
        found: u64,
        known: u64,
    },
    #[error("{path}: line {line}: {reason}")]
    MalformedLine {
        path: PathBuf,
        line: u64,
        reason: String,
    },
    #[error("{path}: {source}")]
    Sqlite {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid entry kind {0:?}: kinds are 1-64 characters of a-z, 0-9, '_' and '.'")]
    InvalidKind(String),
    #[error("payload is not JSON: {0}")]
    Payload(#[from] serde_json::Error),
    /// A trigger of the append-only schema refused an append (an insert that is not the next
    /// link of the chain as the file has it): the file changed under its single writer.
    #[error("{path}: the ledger refused the append: {reason}")]
    AppendRefused { path: PathBuf, reason: String },
    /// SQLite could not commit an append (disk full, an I/O error, a damaged file); nothing of
    /// the batch was written. Shared because one failed transaction answers every producer in it.
    #[error("{path}: append failed: {source}")]
    AppendFailed {
        path: PathBuf,
        #[source]
        source: std::sync::Arc<rusqlite::Error>,
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
        )
    }
}
