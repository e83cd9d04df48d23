//! `eval`: the command-line entry point. Parsing lives in `cli`, exit statuses in `exit`, and each
//! command in `commands/<name>.rs`.

mod cli;
mod commands;
mod driver;
mod exit;
mod fixture_upstream;
mod run;

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
            #[allow(clippy::print_stderr)] // the CLI layer is where messages reach the user
            {
                eprintln!("eval: {}", failure.message);
            }
            failure.status
        }
    };
    std::process::ExitCode::from(status as u8)
}
