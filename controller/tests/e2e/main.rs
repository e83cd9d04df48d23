//! The integration tests of `controller` that need a Docker engine (and the harness images),
//! linked as one binary apart from the quick `it` (see "Tests and CI" in ARCHITECTURE.md): one
//! module per behaviour, shared set-up in `../support` (shared with `../it`). A module of the
//! same name in `it` holds the same behaviour's tests that need no engine.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout,
    clippy::print_stderr
)]

#[path = "../support/mod.rs"]
mod support;

mod aa;
mod custody;
mod dsh_clarify;
mod dsh_faults;
mod dsh_harness;
mod dsh_icae;
mod dsh_rounds;
mod dsh_simple;
mod dsh_toolchains;
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
mod import_harbor;
mod import_icae;
mod import_router;
mod import_v04;
mod import_v04_whole;
mod model_free;
mod oracle_stateful;
mod plan_cost;
mod preregistered_upstream;
mod real_harness;
mod regrade;
mod rounds;
mod run_e2e;
mod run_integrity;
mod run_resume;
mod show;
mod smoke;
mod thin_arms;
mod v04_reduced;
