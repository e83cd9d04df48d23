//! The integration tests of `evidence`, linked as one binary (see "Test layout" in
//! ARCHITECTURE.md): one module per behaviour, shared set-up in `support`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout,
    clippy::print_stderr
)]

mod support;

mod controls;
mod custody;
mod duration;
mod false_fail;
mod gates;
mod ledger;
mod looks;
mod power;
mod reliability;
mod report_html;
mod sequential;
mod signing;
mod stats;
