//! What `eval ledger verify` and the proof commands (`proofs.rs`) both check on a ledger: the
//! entries one snapshot holds and the artifacts they reference. Its own module so that the two
//! commands share it without importing each other.

use super::error::CommandError;
use crate::cli::LedgerVerifyArgs;
use crate::status::Failure;
use eval_evidence::ledger::{self, LedgerError, LedgerReader, SourceKind};

/// The result of `--artifacts`.
pub(super) enum ArtifactCheck {
    NotAsked,
    Verified(u64),
    Failed { seq: u64, message: String },
}

impl ArtifactCheck {
    pub(super) fn verified(&self) -> Option<u64> {
        match self {
            ArtifactCheck::Verified(n) => Some(*n),
            _ => None,
        }
    }

    pub(super) fn suffix(&self) -> String {
        match self {
            ArtifactCheck::Verified(n) => format!("; {n} artifact references re-hashed"),
            _ => String::new(),
        }
    }

    /// Exit 3 naming the artifact and its entry.
    pub(super) fn to_result(&self, args: &LedgerVerifyArgs) -> Result<(), Failure> {
        match self {
            ArtifactCheck::Failed { message, .. } => Err(CommandError::Artifact {
                path: args.path.clone(),
                message: message.clone(),
            }
            .into()),
            _ => Ok(()),
        }
    }
}

/// `--artifacts [DIR]`: re-hash every artifact the ledger references (default store: the
/// `artifacts/` directory beside the ledger, where `eval run` keeps it).
/// `entries` is the snapshot every other check of the command ran on ([`read_entries`]).
pub(super) fn check_artifacts(
    args: &LedgerVerifyArgs,
    entries: Option<&[ledger::Entry]>,
) -> ArtifactCheck {
    let (Some(dir), Some(entries)) = (&args.artifacts, entries) else {
        return ArtifactCheck::NotAsked;
    };
    let dir = if dir.is_empty() {
        args.path
            .parent()
            .unwrap_or(std::path::Path::new("."))
            .join("artifacts")
    } else {
        std::path::PathBuf::from(dir)
    };
    match eval_report::data::verify_artifacts_at(entries, &dir) {
        Ok(n) => ArtifactCheck::Verified(n),
        Err((seq, message)) => ArtifactCheck::Failed { seq, message },
    }
}

/// Every entry of a SQLite ledger (one SELECT: one read transaction) or a JSONL export.
pub(super) fn read_entries(path: &std::path::Path) -> Result<Vec<ledger::Entry>, LedgerError> {
    match ledger::detect_source(path)? {
        SourceKind::Sqlite => LedgerReader::open(path)?.entries(),
        SourceKind::Jsonl => ledger::JsonlReader::open(path)?.collect(),
    }
}
