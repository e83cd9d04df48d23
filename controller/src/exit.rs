//! The one place where failures become exit statuses.
//!
//! 0 success · 1 gate not passed · 2 usage or input error · 3 integrity failure.

use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(dead_code)] // GateNotPassed is produced by `eval report` (statistics issue)
pub enum Status {
    Ok = 0,
    GateNotPassed = 1,
    Usage = 2,
    Integrity = 3,
}

/// A command's failure: the message the user sees and the status the process exits with.
#[derive(Debug)]
pub struct Failure {
    pub status: Status,
    pub message: String,
}

impl Failure {
    pub fn usage(message: impl Into<String>) -> Self {
        Self {
            status: Status::Usage,
            message: message.into(),
        }
    }

    pub fn integrity(message: impl Into<String>) -> Self {
        Self {
            status: Status::Integrity,
            message: message.into(),
        }
    }

    #[allow(dead_code)] // used by `eval report` (statistics issue)
    pub fn gate(message: impl Into<String>) -> Self {
        Self {
            status: Status::GateNotPassed,
            message: message.into(),
        }
    }

    pub fn not_implemented(command: &str) -> Self {
        Self::usage(format!(
            "`eval {command}` is not implemented yet (see the open issues)"
        ))
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<eval_evidence::LedgerError> for Failure {
    fn from(e: eval_evidence::LedgerError) -> Self {
        let status = if e.is_integrity() {
            Status::Integrity
        } else {
            Status::Usage
        };
        Self {
            status,
            message: e.to_string(),
        }
    }
}

pub type CmdResult = Result<Status, Failure>;
