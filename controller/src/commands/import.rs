//! `eval import`: each importer in its own module, the pieces they share in `common.rs`. The
//! command face only dispatches.

mod common;
mod evocode;
mod harbor;
mod harbor_reader;
mod icae;
mod router;
mod simple;
mod solutions;
mod v04;

pub use common::ImportError;

use crate::cli::ImportCommand;
use crate::status::CmdResult;

pub fn run(cmd: ImportCommand) -> CmdResult {
    match cmd {
        ImportCommand::V04Simple(args) => simple::v04_simple(&args),
        ImportCommand::V04Router(args) => router::run(&args),
        ImportCommand::V04Evocode(args) => evocode::run(&args),
        ImportCommand::V04Icae(args) => icae::run(&args),
        ImportCommand::V04(args) => v04::run(&args),
        ImportCommand::Harbor(args) => harbor::run(&args),
    }
}
