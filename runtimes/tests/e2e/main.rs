//! The integration tests of `runtimes`, linked as one binary (see "Test layout" in
//! ARCHITECTURE.md): one module per behaviour, shared set-up in `support`. Named `e2e`, not
//! `it`, because they need a Docker engine: the quick tests (`--test it`) leave them out.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout,
    clippy::print_stderr
)]

mod support;

mod base_cache;
mod engine;
mod image_config;
mod lang_images;
mod thin_layers;
