//! `eval import`'s importers: each turns someone else's benchmark files into an evaluation
//! project's protocol, matrix, tasks and runtimes. One module each (`simple`, `v04`, `evocode`,
//! `icae`, `router`, `harbor`), the pieces they share in `common` (a leaf), Harbor's task model
//! in `harbor_reader` (shared by `harbor` and `evocode`). Each importer is a function of its own
//! `Options` returning a summary of what it wrote; the controller's command converts its
//! arguments into those options and prints the summary.
//!
//! Architecture Invariant: importers never print and never start a container (Harbor's
//! environment images are built by a function the caller hands in); nothing is written unless
//! every input checks out and no target exists.

#![cfg_attr(not(test), warn(clippy::disallowed_methods))] // clippy.toml: production code only

mod common;
pub mod evocode;
pub mod harbor;
mod harbor_reader;
pub mod icae;
pub mod router;
pub mod simple;
mod solutions;
pub mod v04;

pub use common::{ImportError, SuiteOptions, Summary};
