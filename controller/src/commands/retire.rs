//! `eval retire --protocol NAME --reason TEXT [--state DIR]`: retire a frozen identity for good.

use crate::cli::RetireArgs;
use crate::status::{CmdResult, Status};
use eval_protocols::RetireOutcome;

pub fn run(args: RetireArgs) -> CmdResult {
    match eval_protocols::retire(&args.protocol, &args.state.state, &args.reason)? {
        RetireOutcome::Retired { identity } => {
            println!(
                "retired protocol {} ({identity}): it can never be run, refrozen or un-retired; its files and results stay",
                args.protocol
            );
        }
        RetireOutcome::AlreadyRetired { identity, reason } => {
            println!(
                "protocol {} ({identity}) was already retired ({reason}); nothing appended",
                args.protocol
            );
        }
    }
    Ok(Status::Ok)
}
