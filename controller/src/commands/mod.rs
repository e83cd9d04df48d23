//! One module per command. Each turns its parsed arguments into a validated configuration, calls
//! the libraries, prints, and returns a status. The commands speak only the vocabulary in
//! `status.rs`; which status each error type gets is decided in `exit.rs`, above them.
#![allow(clippy::print_stdout)] // the CLI layer is where output reaches the user

pub mod attest;
pub(crate) mod demo;
pub(crate) mod error;
mod export;
pub mod freeze;
mod gc;
pub(crate) mod import;
pub(crate) mod init;
pub mod keygen;
mod ledger;
mod ledger_checks;
mod plan;
mod plan_calibrate;
mod plan_cost;
mod plan_power;
mod preconditions;
pub(crate) mod preflight;
pub(crate) mod proofs;
pub(crate) mod proxy;
mod regrade;
pub mod report;
pub mod report_look;
mod retire;
pub(crate) mod run;
pub(crate) mod show;
pub(crate) mod stats;
mod status;
mod verify;

use crate::cli::Command;
use crate::status::CmdResult;

pub fn dispatch(command: Command) -> CmdResult {
    match command {
        Command::Ledger(cmd) => ledger::run(cmd),
        Command::Demo(args) => demo::run(args),
        Command::Init(args) => init::run(args),
        Command::Plan(args) => plan::run(args),
        Command::Freeze(args) => freeze::run(args),
        Command::Verify(args) => verify::run(args),
        Command::Retire(args) => retire::run(args),
        Command::Preflight(args) => preflight::run(args),
        Command::Run(args) => run::run(args),
        Command::Status(args) => status::run(args),
        Command::Report(args) => report::run(args),
        Command::Show(args) => show::run(args),
        Command::Regrade(args) => regrade::run(args),
        Command::Gc(args) => gc::run(args),
        Command::Stats(cmd) => stats::run(cmd),
        Command::Proxy(args) => proxy::run(args),
        Command::Keygen(args) => keygen::run(args),
        Command::Import(cmd) => import::run(cmd),
        Command::Export(cmd) => export::run(cmd),
    }
}
