use crate::ledger::LedgerError;
use std::path::PathBuf;

/// Everything that can go wrong with keys, checkpoints, proofs, receipts and attestations.
///
/// No variant ever carries private key material: key-file errors name the path and what is wrong
/// with its shape, never its contents.
#[derive(Debug, thiserror::Error)]
pub enum SigningError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: not an eval signing key file: {reason}")]
    KeyFile { path: PathBuf, reason: &'static str },
    #[error(
        "{path}: the signing key file is accessible to other users (mode {mode:03o}); run `chmod 600` on it"
    )]
    KeyPermissions { path: PathBuf, mode: u32 },
    #[error("{path}: already exists; refusing to overwrite it")]
    Exists { path: PathBuf },
    #[error("not a public key: {0}")]
    PublicKey(String),
    #[error("could not get randomness from the operating system: {0}")]
    Random(String),
    #[error(
        "the signing key's public half {found} is not the public key the protocol names ({expected})"
    )]
    KeyMismatch { expected: String, found: String },
    #[error(
        "invalid checkpoint origin {0:?}: 1-255 printable ASCII characters without spaces or '+'"
    )]
    Origin(String),
    #[error("not a signed checkpoint: {0}")]
    Note(String),
    #[error("signature check failed: {0}")]
    BadSignature(String),
    #[error("refusing to sign a checkpoint that rewinds the log: {0}")]
    Rewind(String),
    #[error("refusing to sign a checkpoint that is not consistent with the previous one: {0}")]
    Inconsistent(String),
    #[error("proof does not verify: {0}")]
    Proof(String),
    #[error("{path}: {reason}")]
    Document { path: PathBuf, reason: String },
    #[error("{0}")]
    NotCovered(String),
    #[error("the ledger does not match its evidence: {0}")]
    Integrity(String),
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    #[error("JSON: {0}")]
    Json(#[from] serde_json::Error),
}

impl SigningError {
    pub(crate) fn io(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> SigningError {
        let path = path.to_path_buf();
        move |source| SigningError::Io { path, source }
    }

    /// True when the evidence itself fails (exit 3); false for a wrong file, argument or setup
    /// (exit 2).
    pub fn is_integrity(&self) -> bool {
        match self {
            SigningError::BadSignature(_)
            | SigningError::Rewind(_)
            | SigningError::Inconsistent(_)
            | SigningError::Proof(_)
            | SigningError::Integrity(_)
            | SigningError::KeyMismatch { .. } => true,
            SigningError::Ledger(e) => e.is_integrity(),
            _ => false,
        }
    }
}
