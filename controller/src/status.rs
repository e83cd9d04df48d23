//! The status vocabulary every command speaks: [`Status`] (the process's exit status),
//! [`Failure`] (a message and its status) and [`CmdResult`]. A leaf: it names no command and no
//! error type. Which status each error type gets is decided above the commands, in `exit.rs`.
//!
//! 0 success · 1 gate not passed · 2 usage or input error · 3 integrity failure.

use std::fmt;

/// The exit status of the `eval` process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Success (for `eval report`: release allowed).
    Ok = 0,
    /// The preregistered gates did not pass.
    GateNotPassed = 1,
    /// A usage or input error, or an environment the user fixes and reruns.
    Usage = 2,
    /// The evidence itself is at fault: drift, a broken chain, a retired or reused identity, a
    /// signature that does not verify.
    Integrity = 3,
}

/// A command's failure: the message the user sees and the status the process exits with.
#[derive(Debug)]
pub struct Failure {
    /// The status the process exits with.
    pub status: Status,
    /// The message `eval` prints after `eval: `.
    pub message: String,
}

impl Failure {
    /// A usage or input error (exit 2).
    pub fn usage(message: impl Into<String>) -> Self {
        Self {
            status: Status::Usage,
            message: message.into(),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// What every command returns: the status to exit with, or the failure to print.
pub type CmdResult = Result<Status, Failure>;
