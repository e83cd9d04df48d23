//! `eval-protocols` owns protocol identity: the protocol schema (`protocols/<name>/protocol.toml`),
//! the task-bundle schema (`task.toml`), loading and cross-validating a protocol with its matrix
//! and tasks ([`Project`]), tree hashing and its versioned manifest ([`tree`]), freeze manifests
//! (`STATE/freezes/NAME.json`), verification, retirement, and the hash-chained identity registry
//! (`STATE/registry.jsonl`, [`Registry`]).
//!
//! It must never write into the project's sources (only into the state directory it is given),
//! never follow a symbolic link while hashing, never record anything after an input error (every
//! check runs before the first write), never rewrite or delete a registry entry, and never print
//! — callers get typed errors ([`ProtocolError`]) and map them to exit statuses.
#![deny(missing_docs)]
#![cfg_attr(not(test), warn(clippy::disallowed_methods))] // clippy.toml: production code only

pub mod aa;
pub mod error;
pub mod freeze;
pub mod project;
pub mod protocol;
pub mod registry;
pub mod statefs;
pub mod task;
pub mod tree;

pub use error::ProtocolError;
pub use freeze::{
    Drift, FreezeDoc, FreezeOutcome, ImageRecord, ImageResolver, RetireOutcome, VerifyReport,
    freeze, frozen_public_key, pinned_image, retire, verify,
};
pub use project::{Loaded, Project};
pub use protocol::{Protocol, Signing};
pub use registry::{
    Met, Registry, ReportCheck, Unmet, check_preconditions, record_report, unmet_preconditions,
};
pub use task::{TaskBundle, TaskSpec};
pub use tree::{Manifest, TreeError, hash_paths, hash_tree};
