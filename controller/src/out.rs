//! Every line the CLI prints goes through here: `main.rs` shadows `print!`/`println!`/
//! `eprint!`/`eprintln!` with macros that call these functions, so no command can panic on a
//! closed pipe (`eval freeze … | head -1`, `eval ledger show … | head -c N`).
//!
//! Why a writer and not the default SIGPIPE disposition: `eval run`, `eval demo` and
//! `eval proxy` serve HTTP on sockets, where a peer that went away must be an `EPIPE` error for
//! one connection, never a signal that kills the controller mid-run. Restoring SIGPIPE per
//! command would make that depend on which command runs; this does not.
//!
//! A closed standard output means the reader has what it wanted: the process stops quietly
//! with status 0. Any other write failure (a full disk behind `>`) is reported and exits 2.
//! A closed standard error is ignored (there is nowhere left to say anything).

use std::fmt;
use std::io::{self, Write};

/// What `println!` and `print!` call.
pub fn stdout(args: fmt::Arguments<'_>) {
    let mut out = io::stdout().lock();
    if let Err(e) = out.write_fmt(args) {
        failed(&e);
    }
}

/// Flushes standard output with the same rules (for the end of a command).
pub fn flush() {
    if let Err(e) = io::stdout().lock().flush() {
        failed(&e);
    }
}

/// What `eprintln!` and `eprint!` call.
pub fn stderr(args: fmt::Arguments<'_>) {
    let _ = io::stderr().lock().write_fmt(args);
}

fn failed(e: &io::Error) -> ! {
    if e.kind() == io::ErrorKind::BrokenPipe {
        std::process::exit(0);
    }
    let _ = writeln!(io::stderr(), "eval: cannot write to standard output: {e}");
    std::process::exit(2);
}
