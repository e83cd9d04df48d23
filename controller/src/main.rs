//! `eval`: the command-line entry point. Parsing lives in `cli`, each command in
//! `commands/<name>.rs`, the status vocabulary the commands return in `status`, and the mapping
//! of every error type to its exit status in `exit`.
#![deny(missing_docs)]
#![cfg_attr(not(test), warn(clippy::disallowed_methods))] // clippy.toml: production code only

// Shadow the standard print macros for every module below (macros are scoped by text order):
// each print goes through `out`, which treats a closed pipe as "stop quietly". See `out.rs`.
#[allow(unused_macros)]
macro_rules! println {
    () => {
        $crate::out::stdout(::std::format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::out::stdout(::std::format_args!("{}\n", ::std::format_args!($($arg)*)))
    };
}
#[allow(unused_macros)]
macro_rules! print {
    ($($arg:tt)*) => {
        $crate::out::stdout(::std::format_args!($($arg)*))
    };
}
#[allow(unused_macros)]
macro_rules! eprintln {
    () => {
        $crate::out::stderr(::std::format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::out::stderr(::std::format_args!("{}\n", ::std::format_args!($($arg)*)))
    };
}
#[allow(unused_macros)]
macro_rules! eprint {
    ($($arg:tt)*) => {
        $crate::out::stderr(::std::format_args!($($arg)*))
    };
}

mod out;

mod cli;
mod commands;
mod driver;
mod exit;
#[cfg(test)]
mod report_tests;
mod status;

use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = match cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // clap prints help/version to stdout (exit 0) and usage errors to stderr (exit 2).
            let _ = e.print();
            return std::process::ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("EVAL_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let status = match commands::dispatch(cli.command) {
        Ok(status) => status,
        Err(failure) => {
            eprintln!("eval: {}", failure.message);
            failure.status
        }
    };
    // A closed pipe must end the process here with status 0 rather than surface at exit.
    out::flush();
    std::process::ExitCode::from(status as u8)
}
