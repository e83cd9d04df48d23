//! One module per command. Each turns its parsed arguments into a validated configuration, calls
//! the libraries, prints, and returns a status; library errors become exit statuses in `exit.rs`.
#![allow(clippy::print_stdout)] // the CLI layer is where output reaches the user

mod ledger;

use crate::cli::Command;
use crate::exit::{CmdResult, Failure};

pub fn dispatch(command: Command) -> CmdResult {
    match command {
        Command::Ledger(cmd) => ledger::run(cmd),
        Command::Demo(_) => Err(Failure::not_implemented("demo")),
        Command::Init(_) => Err(Failure::not_implemented("init")),
        Command::Plan(_) => Err(Failure::not_implemented("plan")),
        Command::Freeze(_) => Err(Failure::not_implemented("freeze")),
        Command::Verify(_) => Err(Failure::not_implemented("verify")),
        Command::Retire(_) => Err(Failure::not_implemented("retire")),
        Command::Run(_) => Err(Failure::not_implemented("run")),
        Command::Status(_) => Err(Failure::not_implemented("status")),
        Command::Report(_) => Err(Failure::not_implemented("report")),
        Command::Stats(_) => Err(Failure::not_implemented("stats")),
        Command::Proxy(_) => Err(Failure::not_implemented("proxy")),
        Command::Keygen(_) => Err(Failure::not_implemented("keygen")),
    }
}
