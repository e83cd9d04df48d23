//! The integration tests of `proxy`, linked as one binary (see "Test layout" in
//! ARCHITECTURE.md): one module per behaviour, shared set-up in `support`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout,
    clippy::print_stderr
)]

mod support;

mod hostile;
mod openai_python;
mod proxy;
mod stream_client;
mod tls_pin;
