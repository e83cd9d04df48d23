use crate::ledger::LedgerError;
use std::path::PathBuf;

/// Everything that can go wrong with keys, checkpoints, proofs, receipts and attestations.
///
/// No variant ever carries private key material: key-file errors name the path and what is wrong
/// with its shape, never its contents.
#[derive(Debug, thiserror::Error)]
pub enum SigningError {
    /// A file could not be read or written (exit 2).
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a signing key file of this format (exit 2).
    #[error("{path}: not an eval signing key file: {reason}")]
    KeyFile {
        /// The key file.
        path: PathBuf,
        /// What is wrong with its shape (never its contents).
        reason: &'static str,
    },
    /// The private key file is readable or writable by group or others; refused until fixed.
    #[error(
        "{path}: the signing key file is accessible to other users (mode {mode:03o}); run `chmod 600` on it"
    )]
    KeyPermissions {
        /// The key file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// `keygen` would overwrite an existing file (a key is never replaced silently).
    #[error("{path}: already exists; refusing to overwrite it")]
    Exists {
        /// The existing file.
        path: PathBuf,
    },
    /// Text that does not parse as a public key; the message says why.
    #[error("not a public key: {0}")]
    PublicKey(String),
    /// The operating system's random source failed while generating a key.
    #[error("could not get randomness from the operating system: {0}")]
    Random(String),
    /// The signing key is not the one the protocol froze (exit 3).
    #[error(
        "the signing key's public half {found} is not the public key the protocol names ({expected})"
    )]
    KeyMismatch {
        /// The frozen public key, in text form.
        expected: String,
        /// The public half of the key given, in text form.
        found: String,
    },
    /// A checkpoint origin (the log's name in signed notes) that breaks the note format.
    #[error(
        "invalid checkpoint origin {0:?}: 1-255 printable ASCII characters without spaces or '+'"
    )]
    Origin(String),
    /// Text that is not a signed checkpoint note (exit 2).
    #[error("not a signed checkpoint: {0}")]
    Note(String),
    /// A signature that does not verify under the given public key (exit 3).
    #[error("signature check failed: {0}")]
    BadSignature(String),
    /// A checkpoint smaller than the last signed one: signing it would rewind the log (exit 3).
    #[error("refusing to sign a checkpoint that rewinds the log: {0}")]
    Rewind(String),
    /// A checkpoint whose tree does not extend the last signed one (exit 3).
    #[error("refusing to sign a checkpoint that is not consistent with the previous one: {0}")]
    Inconsistent(String),
    /// An inclusion or consistency proof that does not verify (exit 3).
    #[error("proof does not verify: {0}")]
    Proof(String),
    /// A JSON evidence document (receipt, checkpoint file) that does not have the expected shape.
    #[error("{path}: {reason}")]
    Document {
        /// The document's file.
        path: PathBuf,
        /// What is missing or wrong.
        reason: String,
    },
    /// The entry asked about is not (yet) covered by a signed checkpoint, or does not exist.
    #[error("{0}")]
    NotCovered(String),
    /// Entries that no signed checkpoint covers, found when a signer attaches: they were not
    /// committed by a signing controller and are refused, never signed (exit 3).
    #[error("unverified entries: {0}")]
    Unverified(String),
    /// The ledger disagrees with its own signed evidence (exit 3).
    #[error("the ledger does not match its evidence: {0}")]
    Integrity(String),
    /// Reading the ledger failed; integrity or not as the ledger error says.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    /// A payload or document that is not the expected JSON.
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
            | SigningError::Unverified(_)
            | SigningError::KeyMismatch { .. } => true,
            SigningError::Ledger(e) => e.is_integrity(),
            _ => false,
        }
    }
}
