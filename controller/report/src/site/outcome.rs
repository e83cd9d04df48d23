//! What writing a site returns: what it holds, or why it could not be written.

use eval_evidence::artifacts::ArtifactError;
use std::path::PathBuf;

/// The file that marks a directory as a site `eval` wrote (so `--out` never replaces anything
/// else).
pub const MARKER: &str = "eval-site.json";

/// Why a site could not be written; each kind's exit status is decided in
/// `exit::report_status` (through `ReportCmdError::Site`).
#[derive(Debug, thiserror::Error)]
pub enum SiteError {
    #[error(
        "--out {0}: the directory exists, is not empty and is not a site eval wrote (no {MARKER}); name a new or empty directory"
    )]
    NotASite(PathBuf),
    #[error("--format site needs --out DIR (the site is a directory of pages)")]
    NoOut,
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The ledger could not be re-read for the attempt pages.
    #[error("{0}")]
    Ledger(#[from] eval_evidence::LedgerError),
    /// The ledger the pages would show is not the one the report verified.
    #[error(
        "{path}: the ledger no longer holds the prefix the report verified (head {verified}); no site was written"
    )]
    LedgerChanged { path: PathBuf, verified: String },
    /// A call's wire log does not read back (an artifact missing, altered or malformed).
    #[error("the wire log of {attempt}: {message}; no site was written")]
    WireLog { attempt: String, message: String },
    /// An artifact a page shows is missing or altered.
    #[error("artifact {digest} ({name} of {attempt}): {source}; no site was written")]
    Artifact {
        attempt: String,
        name: String,
        digest: String,
        #[source]
        source: Box<ArtifactError>,
    },
}

/// What a written site holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SiteSummary {
    pub pages: usize,
    pub attempts: usize,
    pub bytes: u64,
}
