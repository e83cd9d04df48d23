//! The integration tests of `matrix`, linked as one binary (see "Test layout" in
//! ARCHITECTURE.md): one module per behaviour, shared set-up in `support`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout,
    clippy::print_stderr
)]

mod bounds;
mod v04_order;
