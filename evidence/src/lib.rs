//! `eval-evidence` owns everything that is *evidence*: the hash-chained ledger (SQLite through
//! `rusqlite`, plus its JSONL export), canonical JSON, and — as later issues land — the
//! content-addressed artifact store, the statistics, the gates and the reports.
//!
//! Architecture invariants:
//! - Nothing recorded is ever rewritten or deleted. The only write path to a ledger is the single
//!   writer ([`ledger::LedgerWriter`]); SQLite triggers refuse UPDATE/DELETE and out-of-order
//!   inserts, but those are guard rails — [`ledger::verify`] always recomputes every hash from the
//!   stored bytes.
//! - The payload bytes that are hashed are the bytes stored and exported. Nothing here re-serialises
//!   a stored payload before hashing it.
//! - Every on-disk format carries a version; readers refuse versions newer than they know.
//! - This crate depends on no other crate of the workspace, and never prints: it returns typed
//!   errors ([`LedgerError`]) that the controller maps to exit statuses in one place.

pub mod canonical;
pub mod gates;
pub mod ledger;

pub use ledger::{LedgerError, LedgerWriter};
