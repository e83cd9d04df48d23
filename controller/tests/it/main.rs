//! The integration tests of `controller`, linked as one binary (see "Test layout" in
//! ARCHITECTURE.md): one module per behaviour, shared set-up in `support`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout,
    clippy::print_stderr
)]

mod support;

mod architecture;
mod custody;
mod dsh_clarify;
mod dsh_faults;
mod dsh_harness;
mod dsh_icae;
mod dsh_rounds;
mod dsh_simple;
mod exit_status;
mod export;
mod freeze_cli;
mod gc;
mod grader_controls;
mod grader_controls_evocode;
mod gvisor;
mod host;
mod hostile;
mod import_evocode;
mod import_icae;
mod import_router;
mod import_v04;
mod import_v04_whole;
mod ledger_cli;
mod model_free;
mod oracle_stateful;
mod output_cli;
mod preflight;
mod preregistered_upstream;
mod real_harness;
mod regrade;
mod rounds;
mod run_admission;
mod run_e2e;
mod run_integrity;
mod run_resume;
mod show;
mod signing_cli;
mod smoke;
mod stats_cli;
mod thin_arms;
mod v04_reduced;
