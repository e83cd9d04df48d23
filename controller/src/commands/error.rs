//! The failures commands share (a named path, an encoding, a ledger that does not verify); each
//! kind's exit status is decided in `exit::command_status`.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    /// A file or directory the command was told to read or write.
    #[error("{path}: {source}")]
    Path {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}: exists and is not empty; `eval init` only writes into a new or empty directory")]
    NotEmpty(PathBuf),
    /// Serialising the command's own output (`what` says which, e.g. "encode the schedule").
    #[error("cannot {what}: {source}")]
    Encode {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
    #[error("no run of matrix {matrix:?} in {state} (no {path})")]
    NoRun {
        matrix: String,
        state: PathBuf,
        path: PathBuf,
    },
    #[error("{path}: the ledger does not verify: {why}")]
    LedgerDoesNotVerify { path: PathBuf, why: String },
    #[error("--expect-head {0:?}: expected SEQ:sha256:HEX, e.g. 42:sha256:ab12…")]
    ExpectHead(String),
    #[error("--text: a note needs some text")]
    EmptyNote,
    #[error("--verify needs --public-key KEY")]
    VerifyNeedsKey,
    /// `report --verify FILE` without the `report.json` the attestation is about beside it.
    #[error(
        "{0}: not found next to the attestation; without the report its attested digest and verdict cannot be checked"
    )]
    AttestedReportMissing(PathBuf),
    /// A ledger that does not verify, naming the first bad entry.
    #[error("{path}: {failure} ({verified} entries verified before it)")]
    LedgerBroken {
        path: PathBuf,
        failure: eval_evidence::ledger::VerifyFailure,
        verified: u64,
    },
    /// An artifact the ledger references is missing or was altered.
    #[error("{path}: {message}")]
    Artifact { path: PathBuf, message: String },
    /// A report attestation that does not verify (signature, statement, checkpoint, digest).
    #[error("{path}: {source}")]
    Attestation {
        path: PathBuf,
        #[source]
        source: eval_evidence::signing::SigningError,
    },
    /// `eval plan --power --pilot`: a pilot ledger that cannot give a variance.
    #[error("--pilot {path}: {why}")]
    Pilot { path: PathBuf, why: String },
    #[error("{path}: {source}")]
    Replay {
        path: PathBuf,
        #[source]
        source: eval_runlog::replay::ReplayError,
    },
}

impl CommandError {
    /// `map_err(CommandError::path(p))` for an I/O failure on `p`.
    pub fn path(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> CommandError {
        let path = path.to_path_buf();
        move |source| CommandError::Path { path, source }
    }

    pub fn encode(what: &'static str) -> impl FnOnce(serde_json::Error) -> CommandError {
        move |source| CommandError::Encode { what, source }
    }
}
