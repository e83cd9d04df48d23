//! The integration tests of `controller` that need no Docker engine, linked as one binary (see
//! "Tests and CI" in ARCHITECTURE.md): one module per behaviour, shared set-up in `../support`
//! (shared with the Docker-bound tests of `../e2e`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout,
    clippy::print_stderr
)]

#[path = "../support/mod.rs"]
mod support;

mod architecture;
mod exit_status;
mod freeze_cli;
mod grader_controls;
mod import_evocode;
mod import_harbor;
mod import_icae;
mod import_router;
mod import_v04;
mod import_v04_whole;
mod ledger_cli;
mod output_cli;
mod plan_cost;
mod preflight;
mod run_admission;
mod signing_cli;
mod stats_cli;
mod thin_arms;
