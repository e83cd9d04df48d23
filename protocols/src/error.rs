//! Errors of loading, freezing, verifying and retiring. Input errors name the file and the field;
//! integrity errors say what no longer holds.

use crate::tree::TreeError;
use std::path::PathBuf;

/// Everything that can go wrong in this crate. [`ProtocolError::is_integrity`] separates the
/// integrity failures (exit 3) from input and state errors (exit 2); the message is shown as is.
#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    /// Bad input: exit 2, nothing written.
    #[error("{file}: field `{field}`: {message}")]
    Field {
        /// The file holding the bad value.
        file: PathBuf,
        /// The dotted path of the field inside it (e.g. `registration.supersedes.reason`).
        field: String,
        /// What is wrong with the value and, where it helps, what is accepted.
        message: String,
    },
    /// Bad input without a single field (malformed TOML, unreadable file): exit 2.
    #[error("{file}: {message}")]
    Input {
        /// The file that could not be used.
        file: PathBuf,
        /// Why (the parser's or the file system's message).
        message: String,
    },
    /// A tree that cannot be hashed (escaping path, bad name, case collision): exit 2.
    #[error("{context}: {source}")]
    Tree {
        /// What was being hashed (e.g. `freeze inputs`).
        context: String,
        /// The hashing failure, naming the offending path.
        #[source]
        source: TreeError,
    },
    /// A command that needs state that is not there (not frozen yet …): exit 2.
    #[error("{0}")]
    State(String),
    /// Drift, a reused or retired identity, a broken registry: exit 3.
    #[error("{0}")]
    Integrity(String),
    /// A registry entry that cannot be made (a kind or payload the code got wrong): exit 2.
    #[error("registry entry: {0}")]
    Entry(#[from] eval_core::chain::ChainError),
    /// A file or directory that could not be read or written: exit 2.
    #[error("{path}: {source}")]
    Io {
        /// The path the operation failed on.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
}

impl ProtocolError {
    /// True for the failures that exit 3.
    pub fn is_integrity(&self) -> bool {
        matches!(self, ProtocolError::Integrity(_))
    }

    pub(crate) fn field(
        file: impl Into<PathBuf>,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        ProtocolError::Field {
            file: file.into(),
            field: field.into(),
            message: message.into(),
        }
    }

    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| ProtocolError::Io { path, source }
    }
}

impl From<eval_matrix::MatrixError> for ProtocolError {
    fn from(e: eval_matrix::MatrixError) -> Self {
        match e {
            eval_matrix::MatrixError::Read { file, source } => ProtocolError::Input {
                file,
                message: format!("cannot read: {source}"),
            },
            eval_matrix::MatrixError::Parse { file, message } => {
                ProtocolError::Input { file, message }
            }
            eval_matrix::MatrixError::Field {
                file,
                field,
                message,
            } => ProtocolError::Field {
                file,
                field,
                message,
            },
        }
    }
}
