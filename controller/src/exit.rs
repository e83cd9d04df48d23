//! The one place where failures become exit statuses.
//!
//! 0 success · 1 gate not passed · 2 usage or input error · 3 integrity failure.

use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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

    /// Exit 3 when the library says the evidence itself is at fault, else exit 2.
    fn classified(integrity: bool, message: String) -> Self {
        Self {
            status: if integrity {
                Status::Integrity
            } else {
                Status::Usage
            },
            message,
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<eval_evidence::signing::SigningError> for Failure {
    fn from(e: eval_evidence::signing::SigningError) -> Self {
        Self::classified(e.is_integrity(), e.to_string())
    }
}

impl From<eval_evidence::LedgerError> for Failure {
    fn from(e: eval_evidence::LedgerError) -> Self {
        Self::classified(e.is_integrity(), e.to_string())
    }
}

impl From<eval_protocols::ProtocolError> for Failure {
    fn from(e: eval_protocols::ProtocolError) -> Self {
        Self::classified(e.is_integrity(), e.to_string())
    }
}

pub type CmdResult = Result<Status, Failure>;

impl From<eval_evidence::stats::StatsError> for Failure {
    fn from(e: eval_evidence::stats::StatsError) -> Self {
        Self::usage(e.to_string())
    }
}

impl From<eval_runtimes::RuntimeError> for Failure {
    fn from(e: eval_runtimes::RuntimeError) -> Self {
        use eval_core::fault::FaultCode;
        // Bytes that differ from what was frozen, or a container that differs from the policy,
        // are integrity failures; an engine that is down or a missing static binary is not.
        let status = match e.fault() {
            Some(FaultCode::AttestationMismatch | FaultCode::PolicyViolation) => Status::Integrity,
            _ => Status::Usage,
        };
        Self {
            status,
            message: e.to_string(),
        }
    }
}
