//! The shared vocabulary of `eval` (issue 14): the types every other crate speaks, defined once.
//!
//! This crate owns plain data and its text forms (parse, display, canonical JSON). It must never
//! depend on another workspace crate, do I/O, spawn tasks, or know about Docker, HTTP or SQLite:
//! it is the leaf every arrow of the code map ends in, and the static shim links it too.
#![deny(missing_docs)]
#![cfg_attr(not(test), warn(clippy::disallowed_methods))] // clippy.toml: production code only

pub mod headers;

pub mod attest;
pub mod budget;
pub mod canonical;
pub mod chain;
pub mod contract;
pub mod controls;
pub mod digest;
pub mod gates;
pub mod keys;
pub mod mulberry32;

pub use digest::Digest;

pub mod attempt;
pub mod fault;
pub mod name;
pub mod outcome;
pub mod phase;
pub mod round_metrics;
pub mod sequential;
pub mod tokens;
