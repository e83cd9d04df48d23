//! `eval-evidence` owns everything that is *evidence*: the hash-chained ledger (SQLite through
//! `rusqlite`, plus its JSONL export), canonical JSON, the content-addressed artifact store, the
//! signatures over the ledger (Ed25519 checkpoints, Merkle proofs, receipts, the report
//! attestation), the statistics, the release gates and the reports.
//!
//! Architecture invariants:
//! - Nothing recorded is ever rewritten or deleted. The only write path to a ledger is the single
//!   writer ([`ledger::LedgerWriter`]); SQLite triggers refuse UPDATE/DELETE and out-of-order
//!   inserts, but those are guard rails — [`ledger::verify`] always recomputes every hash from the
//!   stored bytes.
//! - The payload bytes that are hashed are the bytes stored and exported. Nothing here re-serialises
//!   a stored payload before hashing it.
//! - Every on-disk format carries a version; readers refuse versions newer than they know.
//! - A private signing key is never written, logged or printed by anything here; signatures are
//!   checked against a public key only, and no checkpoint is signed unless it extends the last.
//! - Statistics ([`stats`]) are a pure function of (data, resamples, seed): a fixed generator
//!   (ChaCha8 raw words, our own bounded draw), identical bits on every platform and thread count.
//! - Reports ([`report`]) are computed from a `RunData` value only; this crate never decides what a
//!   run contained by reading side files.
//! - This crate depends on no other crate of the workspace, and never prints: it returns typed
//!   errors ([`LedgerError`]) that the controller maps to exit statuses in one place.
#![deny(missing_docs)]
#![cfg_attr(not(test), warn(clippy::disallowed_methods))] // clippy.toml: production code only

pub mod artifacts;
/// Canonical JSON is eval-core's; re-exported so evidence's callers keep one import path.
pub use eval_core::canonical;
pub mod gates;
pub mod html;
pub mod ledger;
pub mod leftovers;
pub mod report;
pub mod signing;
pub mod stats;

pub use ledger::{LedgerError, LedgerWriter};
